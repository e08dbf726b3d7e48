"""The chemistry condition's spec (chemteb_retrieval) and its datasets, ChemHotpotQA and ChemNQ (ChemTEB),
on a small local fixture in BEIR layout: the Hub is not reachable here."""
import io
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from vtrepro.core.errors import VtreproError
from vtrepro.core.shipped import SHIPPED_DIR
from vtrepro.data.availability import check_dataset_split, dataset_availability
from vtrepro.data.beir import load_dataset
from vtrepro.data.download import HUB_DATASETS
from vtrepro.regress.command import main as regress
from vtrepro.regress.spec import load_spec

SPEC = SHIPPED_DIR / "chemteb_retrieval.yaml"
CORPUS = [
    {"_id": "c1", "title": "Sodium chloride", "text": "Sodium chloride is an ionic compound, the salt of sodium and chlorine."},
    {"_id": "c2", "title": "Benzene", "text": "Benzene is an aromatic hydrocarbon with a six-carbon ring."},
    {"_id": "c3", "title": "Ethanol", "text": "Ethanol is an alcohol made by fermentation of sugars."},
    {"_id": "c4", "title": "", "text": "Chlorine is a yellow-green halogen gas."},
]
QUERIES = [{"_id": "q1", "text": "which salt is made of sodium and chlorine"},
           {"_id": "q2", "text": "aromatic ring hydrocarbon"}, {"_id": "q3", "text": "alcohol from fermentation"}]
QRELS = {"q1": "c1", "q2": "c2", "q3": "c3"}


def write_chem_fixture(root: Path, name: str) -> Path:
    """A few chemistry documents and queries in BEIR layout at <root>/beir/<name>, as a download leaves them."""
    folder = root / "beir" / name
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in CORPUS))
    (folder / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in QUERIES))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{qid}\t{doc}\t1\n" for qid, doc in QRELS.items()))
    return folder


@pytest.fixture
def no_network(monkeypatch):
    monkeypatch.delenv("VTREPRO_DATA", raising=False)

    def unreachable(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)


def test_chem_spec_names_the_recipe_and_both_datasets() -> None:
    spec = load_spec("chemteb_retrieval")
    assert [condition.name for condition in spec.conditions] == ["bm25-flat", "chem-splade"]
    bm25, splade = spec.conditions
    assert bm25.retrieval == "bm25" and splade.train == "chem_splade" and splade.encoder.max_length_doc == 512
    for condition in spec.conditions:
        assert [(run.name, run.split) for run in condition.datasets] == [("chemhotpotqa", "test"), ("chemnq", "test")]
    assert {name: (source.repo, source.revision[:7]) for name, source in HUB_DATASETS.items()} == {
        "chemhotpotqa": ("BASF-AI/ChemHotpotQARetrieval", "1840e8a"), "chemnq": ("BASF-AI/ChemNQRetrieval", "5d958fb")}


def test_chem_fixture_loads_through_vtrepro_datasets(tmp_path: Path, no_network) -> None:
    write_chem_fixture(tmp_path, "chemhotpotqa")
    dataset = load_dataset("chemhotpotqa", tmp_path)
    assert [document.contents for document in dataset.corpus()][3] == "Chlorine is a yellow-green halogen gas."
    assert dataset.queries("test")["q2"] == "aromatic ring hydrocarbon" and dataset.qrels("test")["q1"] == {"c1": 1}
    assert check_dataset_split("chemhotpotqa", "test", tmp_path)
    assert dataset_availability("chemhotpotqa", tmp_path)[1] is None
    # ChemNQ is not here: a run may download it (the dry run says so), and the download names the Hub and fails
    assert not check_dataset_split("chemnq", "test", tmp_path)
    where, problem = dataset_availability("chemnq", tmp_path)
    assert where == "missing" and "the Hugging Face Hub (BASF-AI/ChemNQRetrieval)'s download server" in str(problem)
    with pytest.raises(VtreproError, match=r"dataset 'chemnq' not found under .* could not be downloaded \(no network\)"):
        load_dataset("chemnq", tmp_path)
    assert not (tmp_path / "beir" / "chemnq").exists()


def test_chem_download_reads_mteb_layout_at_the_pinned_revision(tmp_path: Path, monkeypatch) -> None:
    """The writer of a Hub download, with the Hub's answer built here: mteb's configs corpus, queries and default
    (qrels splits) at the revision mteb pins become the BEIR folder the fixture above imitates."""
    import datasets  # heavy: imported by the one test that needs it, as vtrepro does

    asked: list[tuple] = []
    tables = {"corpus": datasets.DatasetDict({"corpus": datasets.Dataset.from_list(CORPUS)}),
              "queries": datasets.DatasetDict({"queries": datasets.Dataset.from_list(QUERIES)}),
              "default": datasets.DatasetDict({"test": datasets.Dataset.from_list(
                  [{"query-id": qid, "corpus-id": doc, "score": 1} for qid, doc in QRELS.items()])})}

    def hub(repo, config, revision=None):
        asked.append((repo, config, revision))
        return tables[config]

    monkeypatch.setattr(urllib.request, "urlopen", lambda *args, **kwargs: io.BytesIO(b"{}"))
    monkeypatch.setattr(datasets, "load_dataset", hub)
    dataset = load_dataset("chemnq", tmp_path)
    revision = HUB_DATASETS["chemnq"].revision
    assert asked == [("BASF-AI/ChemNQRetrieval", config, revision) for config in ("corpus", "queries", "default")]
    fixture = load_dataset(str(write_chem_fixture(tmp_path / "fixture", "chemnq")))
    assert dataset.corpus() == fixture.corpus() and dataset.queries() == fixture.queries()
    assert dataset.qrels() == fixture.qrels()


def test_chem_spec_dry_run_prints_the_plan(tmp_path: Path, models_dir: Path, capsys, no_network, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_chem_fixture(tmp_path, "chemhotpotqa")
    assert regress(["--spec", "chemteb_retrieval", "--dry-run", "--data-dir", str(tmp_path),
                    "--model-dir", str(models_dir), "--output", str(tmp_path / "runs")]) == 0
    plan = capsys.readouterr().out
    assert "4 run(s), metrics ndcg@10, recall@100, recall@1000" in plan
    assert "bm25-flat / chemhotpotqa [test]: BM25 k1=0.9 b=0.4; data local" in plan
    assert "chem-splade / chemnq [test]: model " in plan and "(to train first: 1563 steps); data to download" in plan
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_chem_bm25_condition_runs_on_the_fixture(tmp_path: Path, no_network) -> None:
    """The spec's BM25 condition, as shipped, end to end on the fixture: Lucene index, search, pytrec_eval."""
    yaml = YAML()
    spec = yaml.load(SPEC.read_text())
    del spec["conditions"]["chem-splade"]
    spec["conditions"]["bm25-flat"]["datasets"] = {"chemhotpotqa": None}
    path = tmp_path / "chem_bm25.yaml"
    with open(path, "w") as handle:
        yaml.dump(spec, handle)
    write_chem_fixture(tmp_path / "data", "chemhotpotqa")
    run = ["--spec", str(path), "--data-dir", str(tmp_path / "data"), "--output", str(tmp_path / "runs")]
    assert regress(run) == 1  # nothing pinned yet: UNPINNED is not a pass
    assert regress([*run, "--record"]) == 0
    pinned = yaml.load(path.read_text())["conditions"]["bm25-flat"]["datasets"]["chemhotpotqa"]
    # each query finds its one judged document first
    assert pinned["index"]["documents"] == len(CORPUS) and pinned["scores"]["ndcg@10"] == 1.0
    assert regress(run) == 0
