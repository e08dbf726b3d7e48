"""Released checkpoints as conditions: the OpenSearch v3 table, the beir_released_models spec and its cost."""
import gzip
import json
import shutil

import pytest
from transformers import AutoTokenizer

from vtrepro.core.errors import VtreproError
from vtrepro.model.idf import IdfQueryEncoder
from vtrepro.regress.command import main as regress
from vtrepro.regress.cost import BEIR_CORPUS_DOCUMENTS, encoding_cost, forward_flops_per_token
from vtrepro.regress.runner import selected_runs
from vtrepro.regress.spec import load_spec
from vtrepro.report.published import load_system

BEIR_13 = ["trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020", "dbpedia-entity",
           "scidocs", "fever", "climate-fever", "scifact", "quora"]


def test_the_v3_table_loads_with_13_datasets_consistent_with_its_stated_averages():
    for system, average in (("opensearch-doc-v3-distill", 0.517), ("opensearch-doc-v3-gte", 0.546)):
        published = load_system(f"opensearch_neural_sparse_v3/{system}")
        assert sorted(published.datasets) == sorted(BEIR_13) and list(published.average_datasets) == BEIR_13
        assert published.average == {"ndcg@10": average} and "opensearch.org/blog" in published.citation
        mean = sum(values["ndcg@10"] for values in published.datasets.values()) / 13
        assert abs(mean - average) < 0.0005  # the published per-dataset values round to the stated average
    assert load_system("opensearch_neural_sparse_v3/opensearch-doc-v3-gte").datasets["webis-touche2020"] == {
        "ndcg@10": 0.389}


def test_every_released_condition_is_inference_free_on_beir_13_with_its_published_system():
    spec = load_spec("beir_released_models")
    assert [condition.name for condition in spec.conditions] == [
        "opensearch-doc-v3-distill", "opensearch-doc-v3-gte", "opensearch-doc-v2-distill", "opensearch-doc-v2-mini",
        "opensearch-doc-v1"]
    for condition in spec.conditions:
        assert condition.query_encoder == "idf" and condition.published is not None
        assert condition.published.name == condition.name  # the table's system is this very model
        released = condition.name.replace("opensearch-", "opensearch-neural-sparse-encoding-")
        assert condition.model == f"opensearch-project/{released}"
        assert [dataset.name for dataset in condition.datasets] == BEIR_13
        assert all(set(dataset.reference) == {"ndcg@10"} for dataset in condition.datasets)
        assert set(condition.reference_average) == {"ndcg@10"}  # the stated average is checked too
    assert [c.trust_remote_code for c in spec.conditions] == [False, True, False, False, False]


@pytest.mark.slow  # 1.5 s on the AVX2 EPYC: three dry runs of the released-models spec
def test_dry_run_prints_the_plan_and_gpu_hours_and_refuses_remote_code_unless_granted(tmp_path, data_dir, capsys):
    output = tmp_path / "runs"
    command = ["--spec", "beir_released_models", "--data-dir", str(data_dir), "--model-dir", str(tmp_path / "none"),
               "--runs", str(output), "--dry-run"]
    assert regress(command) == 2
    assert "condition 'opensearch-doc-v3-gte' set trust_remote_code: true" in capsys.readouterr().err
    assert regress([*command, "--trust-remote-code"]) == 0
    plan = capsys.readouterr().out
    assert "beir_released_models.yaml: 65 run(s)" in plan
    assert "opensearch-doc-v3-gte / scifact [test]: model opensearch-project/opensearch-neural-sparse-encoding-doc-v3-gte" in plan
    assert "data local; 0 pinned score(s), 1 published" in plan  # scifact and nfcorpus are here
    hours = 2 * 67e6 * 24_561_473 * 512 / 150e12 / 3600  # the card's 67M parameters, 2 FLOPs each per token
    assert (f"opensearch-doc-v3-distill: 24,561,473 documents x <= 512 tokens x 0.13 GFLOP/token = 1.7 EFLOP, "
            f"~{hours:.2f} GPU-hours") in plan
    assert plan.rstrip().splitlines()[-1].endswith("GPU-hours") and "total ~" in plan.splitlines()[-1]
    assert not output.exists()  # a plan: nothing written


def _corpus_lines(folder):
    path = next(folder.glob("corpus.jsonl*"))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def test_corpus_sizes_match_the_real_corpora_and_the_cost_is_documents_times_length(data_dir, models_dir, splade_tiny,
                                                                                    tmp_path):
    for name in ("scifact", "nfcorpus"):
        assert BEIR_CORPUS_DOCUMENTS[name] == _corpus_lines(data_dir / "beir" / name)
    assert sum(BEIR_CORPUS_DOCUMENTS.values()) == 24_561_473  # docs/scale.md's "about 24.6M passages"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(f"conditions:\n  tiny:\n    model: {splade_tiny}\n    encoder: {{max_length_doc: 256}}\n"
                         "    datasets: {scifact: , nfcorpus: }\n  bm25:\n    retrieval: bm25\n"
                         "    datasets: {scifact: }\n")
    spec = load_spec(spec_file)
    lines = encoding_cost(spec, list(selected_runs(spec, None)), str(models_dir))
    per_token = forward_flops_per_token(str(splade_tiny), str(models_dir))
    assert per_token is not None and 0 < per_token < 2 * 4.4e6 * 1.01  # splade-tiny: 4.4M parameters
    flop = per_token * (5_183 + 3_633) * 256
    assert lines[1].startswith("  tiny: 8,816 documents x <= 256 tokens") and len(lines) == 3  # BM25 costs nothing
    assert lines[1].endswith(f"= {flop / 1e12:.1f} TFLOP, under 0.01 GPU-hours")
    assert encoding_cost(spec, [(spec.conditions[1], spec.conditions[1].datasets[0])], None) == []
    assert forward_flops_per_token("someone/unknown-model", None) is None


@pytest.fixture
def released_layout(tmp_path, splade_tiny):
    """A model folder laid out as OpenSearch releases inference-free models: weights, tokenizer, idf.json."""
    folder = tmp_path / "released"
    shutil.copytree(splade_tiny, folder)
    idf = {"[CLS]": 9.0, "[SEP]": 9.0, "heart": 4.25, "attack": 3.5, "the": 0.125, "##pathy": 1.0}
    (folder / "idf.json").write_text(json.dumps(idf))
    return folder


def test_a_released_idf_json_is_the_query_side_as_written(released_layout):
    encoder = IdfQueryEncoder.load(released_layout, max_length_query=512)
    tokenizer = AutoTokenizer.from_pretrained(released_layout)
    [(ids, weights)] = encoder.encode(["the heart attack of the cardiomyopathy heart"])
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    # distinct tokens once each, weighted as the file says; tokens it lacks and special tokens weigh nothing
    assert dict(zip(tokens, weights.tolist())) == {"the": 0.125, "heart": 4.25, "attack": 3.5, "##pathy": 1.0}


def test_a_released_idf_json_for_another_tokenizer_is_refused(released_layout):
    (released_layout / "idf.json").write_text(json.dumps({"Ġheart": 2.0}))
    with pytest.raises(VtreproError, match=r"token 'Ġheart' is not in the tokenizer's vocabulary"):
        IdfQueryEncoder.load(released_layout)
