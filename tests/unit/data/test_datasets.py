"""BEIR loading: real scifact/nfcorpus from the shared data root, synthetic folders for error cases."""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import socket
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Iterator

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import BeirDataset, Document, data_root, load_dataset
from vtrepro.data.download import BEIR_DATASETS

QRELS_HEADER = "query-id\tcorpus-id\tscore\n"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ambient data root, a throwaway home cache, and no real network in any test."""
    monkeypatch.delenv("VTREPRO_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    def no_network(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", no_network)


def write_beir(
    folder: Path,
    corpus: list[dict] | str | None = None,
    queries: list[dict] | str | None = None,
    qrels: dict[str, str] | None = None,
    gz: bool = False,
) -> Path:
    """Write a tiny BEIR folder; lists are written as JSONL, strings verbatim."""
    corpus = [{"_id": "d1", "title": "T1", "text": "one"}, {"_id": "d2", "title": "", "text": "two"}] \
        if corpus is None else corpus
    queries = [{"_id": "q1", "text": "first"}, {"_id": "q2", "text": "second"}] if queries is None else queries
    qrels = {"test": QRELS_HEADER + "q1\td1\t1\nq2\td2\t2\n"} if qrels is None else qrels
    folder.mkdir(parents=True)
    for stem, content in (("corpus", corpus), ("queries", queries)):
        text = content if isinstance(content, str) else "".join(json.dumps(row) + "\n" for row in content)
        if gz:
            with gzip.open(folder / f"{stem}.jsonl.gz", "wt", encoding="utf-8") as handle:
                handle.write(text)
        else:
            (folder / f"{stem}.jsonl").write_text(text, encoding="utf-8")
    (folder / "qrels").mkdir()
    for split, text in qrels.items():
        (folder / "qrels" / f"{split}.tsv").write_bytes(text.encode("utf-8"))
    return folder


@contextlib.contextmanager
def raises_one_line(match: str) -> Iterator[pytest.ExceptionInfo[VtreproError]]:
    """``pytest.raises(VtreproError, match=...)`` that also requires a single-line message."""
    with pytest.raises(VtreproError, match=match) as info:
        yield info
    assert "\n" not in str(info.value), str(info.value)


# Real collections -------------------------------------------------------------------------------


def test_scifact_counts_and_contents(data_dir: Path) -> None:
    dataset = load_dataset("scifact", data_dir=data_dir)
    assert dataset.name == "scifact"
    assert dataset.path == data_dir / "beir" / "scifact"
    assert dataset.splits() == ["test", "train"]
    corpus = dataset.corpus()
    assert len(corpus) == 5183
    assert len({doc.doc_id for doc in corpus}) == 5183
    first = corpus[0]
    assert first.doc_id == "4983"
    assert first.title.startswith("Microstructural development of human newborn")
    assert first.contents == first.title + " " + first.text
    queries = dataset.queries("test")
    qrels = dataset.qrels("test")
    assert len(queries) == 300
    assert list(queries)[:3] == ["1", "3", "5"]
    assert set(queries) == set(qrels)
    assert sum(len(docs) for docs in qrels.values()) == 339
    assert qrels["1"] == {"31715818": 1}
    assert {score for docs in qrels.values() for score in docs.values()} == {1}
    assert len(dataset.queries("train")) == 809
    assert sum(len(docs) for docs in dataset.qrels("train").values()) == 919


def test_nfcorpus_counts(data_dir: Path) -> None:
    dataset = load_dataset("nfcorpus", data_dir=data_dir)
    assert dataset.splits() == ["dev", "test", "train"]
    corpus = dataset.corpus()
    assert len(corpus) == 3633
    assert corpus[0].doc_id == "MED-10"
    assert corpus[0].contents.startswith("Statin Use and Breast Cancer Survival: A Nationwide Cohort Study from Finland Recent")
    assert len(dataset.queries()) == 323
    qrels = dataset.qrels()
    assert sum(len(docs) for docs in qrels.values()) == 12334
    assert {score for docs in qrels.values() for score in docs.values()} == {1, 2}
    assert qrels["PLAIN-2"]["MED-2427"] == 2


def test_lookup_by_env_path_and_folder(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTREPRO_DATA", str(data_dir))
    assert load_dataset("scifact").path == data_dir / "beir" / "scifact"
    folder = data_dir / "beir" / "scifact"
    for spec in (folder, str(folder)):
        dataset = load_dataset(spec, download=False)
        assert (dataset.name, dataset.path) == ("scifact", folder)


# Lookup and roots -------------------------------------------------------------------------------


def test_data_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert data_root() is None
    monkeypatch.setenv("VTREPRO_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "flag") == tmp_path / "flag"
    assert data_root(str(tmp_path / "flag")) == tmp_path / "flag"


def test_lookup_order_and_nested_names(tmp_path: Path) -> None:
    write_beir(tmp_path / "beir" / "mine")
    write_beir(tmp_path / "other")
    write_beir(tmp_path / "beir" / "cqadupstack" / "android")
    assert load_dataset("mine", data_dir=tmp_path).path == tmp_path / "beir" / "mine"
    assert load_dataset("other", data_dir=tmp_path).path == tmp_path / "other"
    forest = load_dataset("cqadupstack/android", data_dir=tmp_path)
    assert (forest.name, forest.path) == ("cqadupstack/android", tmp_path / "beir" / "cqadupstack" / "android")
    assert load_dataset(forest.path).name == "cqadupstack/android"
    with raises_one_line(r"cqadupstack is split into forests; use one of cqadupstack/android"):
        load_dataset("cqadupstack", data_dir=tmp_path)


def test_default_cache_without_root(tmp_path: Path) -> None:
    write_beir(tmp_path / "home" / ".cache" / "vtrepro" / "beir" / "scifact")
    assert load_dataset("scifact").path == tmp_path / "home" / ".cache" / "vtrepro" / "beir" / "scifact"


def test_unknown_dataset(tmp_path: Path) -> None:
    with raises_one_line(r"unknown dataset 'no-such-set': .*known: trec-covid, .*scifact, msmarco, cqadupstack/\{android"):
        load_dataset("no-such-set", data_dir=tmp_path)


def test_known_names() -> None:
    assert len(BEIR_DATASETS) == len(set(BEIR_DATASETS)) == 17 + 12 + 1
    assert {"scifact", "nfcorpus", "webis-touche2020", "cqadupstack/wordpress", "msmarco"} <= set(BEIR_DATASETS)


def test_missing_known_dataset_without_download(tmp_path: Path) -> None:
    target = tmp_path / "beir" / "fiqa"
    expected = (
        rf"dataset 'fiqa' not found under {tmp_path}/beir or {tmp_path} and could not be downloaded "
        rf"\(download is disabled\): create {target}/ with corpus\.jsonl\[\.gz\], queries\.jsonl\[\.gz\], "
        r"qrels/test\.tsv, or set VTREPRO_DATA / --data-dir"
    )
    with raises_one_line(expected):
        load_dataset("fiqa", data_dir=tmp_path, download=False)
    assert not target.exists()


def test_missing_known_dataset_offline(tmp_path: Path) -> None:
    with raises_one_line(rf"'fiqa' not found .*\(no network\): create {tmp_path}/beir/fiqa/ with"):
        load_dataset("fiqa", data_dir=tmp_path)
    assert list((tmp_path / "beir").iterdir()) == []


def test_not_redistributed_dataset_is_not_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("no download should be attempted")

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    with raises_one_line(r"'robust04' not found .*may not redistribute.*create .*/beir/robust04/"):
        load_dataset("robust04", data_dir=tmp_path)


def test_incomplete_download_target(tmp_path: Path) -> None:
    (tmp_path / "beir" / "fiqa").mkdir(parents=True)
    with raises_one_line(r"beir/fiqa exists but has no corpus\.jsonl\[\.gz\]"):
        load_dataset("fiqa", data_dir=tmp_path)


def test_zip_download_unpacks_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = write_beir(tmp_path / "src" / "fiqa")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for path in sorted(source.rglob("*")):
            bundle.write(path, path.relative_to(source.parent).as_posix())
    urls: list[str] = []

    def fake_urlopen(url: str, timeout: float) -> io.BytesIO:
        urls.append(url)
        return io.BytesIO(buffer.getvalue())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    dataset = load_dataset("fiqa", data_dir=tmp_path / "root")
    assert urls == ["https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/fiqa.zip"]
    assert dataset.path == tmp_path / "root" / "beir" / "fiqa"
    assert [entry.name for entry in (tmp_path / "root" / "beir").iterdir()] == ["fiqa"]
    assert dataset.qrels() == {"q1": {"d1": 1}, "q2": {"d2": 2}}


def test_bad_zip_reports_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_urlopen(url: str, timeout: float) -> io.BytesIO:
        calls.append(url)
        if "huggingface.co" in url:
            raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))
        return io.BytesIO(b"not a zip")

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    with raises_one_line(r"could not be downloaded \(https://\S+/fiqa\.zip: File is not a zip file; Hugging Face"):
        load_dataset("fiqa", data_dir=tmp_path)
    assert calls[1] == "https://huggingface.co/api/datasets/BeIR/fiqa"
    assert list((tmp_path / "beir").iterdir()) == []


# Parsing ----------------------------------------------------------------------------------------


def test_synthetic_roundtrip_gz_and_numeric_ids(tmp_path: Path) -> None:
    folder = write_beir(
        tmp_path / "set",
        corpus=[{"_id": 7, "title": "Title", "text": "body"}, {"_id": "8", "text": "untitled"}],
        queries=[{"_id": 2, "text": "second"}, {"_id": 1, "text": "first"}, {"_id": 3, "text": "unjudged"}],
        qrels={"test": QRELS_HEADER + "1\t7\t1\n2\t8\t0\n"},
        gz=True,
    )
    dataset = load_dataset(folder)
    assert dataset.corpus() == [Document("7", "Title", "body"), Document("8", "", "untitled")]
    assert [doc.contents for doc in dataset.corpus()] == ["Title body", "untitled"]
    assert dataset.queries() == {"2": "second", "1": "first"}
    assert list(dataset.queries()) == ["2", "1"]
    assert dataset.qrels() == {"1": {"7": 1}, "2": {"8": 0}}


def test_crlf_and_headerless_qrels(tmp_path: Path) -> None:
    dataset = BeirDataset(
        "set",
        write_beir(
            tmp_path / "set",
            qrels={"test": "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq2\td2\t2\r\n", "dev": "q1\td2\t1\n\n"},
        ),
    )
    assert dataset.qrels("test") == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    assert dataset.qrels("dev") == {"q1": {"d2": 1}}
    assert dataset.splits() == ["dev", "test"]


def test_duplicate_document_id(tmp_path: Path) -> None:
    corpus = [{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"}, {"_id": "a", "text": "z"}]
    folder = write_beir(tmp_path / "set", corpus=corpus)
    with raises_one_line(
        rf"^{folder}/corpus\.jsonl:3: duplicate document id 'a' \(first seen on line 1\); remove one$"
    ):
        load_dataset(folder).corpus()


def test_corrupt_jsonl_line(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "set", corpus='{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n')
    with raises_one_line(rf"{folder}/corpus\.jsonl:2: not valid JSON"):
        load_dataset(folder).corpus()


def test_bad_document_fields(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "set", corpus=[{"_id": "a", "text": "x"}, {"title": "t", "text": "y"}])
    with raises_one_line(rf"{folder}/corpus\.jsonl:2: '_id' \(or 'id'\) must be a non-empty string or integer"):
        load_dataset(folder).corpus()
    folder = write_beir(tmp_path / "set2", corpus=[{"_id": "a", "title": "t"}])
    with raises_one_line(rf"{folder}/corpus\.jsonl:1: 'text' must be a string"):
        load_dataset(folder).corpus()


def test_missing_split(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "set")
    with raises_one_line(rf"{folder}/qrels/dev\.tsv: qrels file not found for split 'dev'; available splits: test"):
        load_dataset(folder).qrels("dev")
    with raises_one_line(r"qrels/dev\.tsv: qrels file not found"):
        load_dataset(folder).queries("dev")


def test_malformed_qrels_row(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "set", qrels={"test": QRELS_HEADER + "q1\td1\t1\nq2 d2 2\n"})
    with raises_one_line(rf"{folder}/qrels/test\.tsv:3: expected 'query-id<TAB>corpus-id<TAB>score'.*fix or remove"):
        load_dataset(folder).qrels()
    folder = write_beir(tmp_path / "set2", qrels={"test": QRELS_HEADER + "q1\td1\thigh\n"})
    with raises_one_line(r"test\.tsv:2: relevance 'high' is not an integer written in plain digits"):
        load_dataset(folder).qrels()


def test_qrels_query_missing_from_queries(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "set", qrels={"test": QRELS_HEADER + "q1\td1\t1\nq9\td2\t1\n"})
    with raises_one_line(rf"{folder}/qrels/test\.tsv:3: query id 'q9' has no entry in {folder}/queries\.jsonl"):
        load_dataset(folder).queries()


def test_missing_files_in_folder(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "set")
    (folder / "queries.jsonl").unlink()
    with raises_one_line(r"set: no queries\.jsonl or queries\.jsonl\.gz; a BEIR folder needs"):
        load_dataset(folder).queries()
    with raises_one_line(r"nowhere: no such dataset folder"):
        load_dataset(tmp_path / "nowhere")
