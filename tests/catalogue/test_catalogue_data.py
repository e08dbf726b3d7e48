"""Catalogue of bad data (docs/input-validation.md, section 6): qrels headers and relevance grades, text
that is not Unicode, metric cutoffs, dataset names in specs, and the data checks a dry run shares with
the real run.

Every case runs the real command in-process (``evaluate``, ``encode``, ``regress``) on a crafted BEIR
folder, qrels file or spec, and asserts the exit status, the one ``error:`` line (file and line), and
that nothing was written and no input changed (hash snapshots).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_catalogue import run_command, snapshot

from helpers import assert_one_error_line, write_mini_beir
from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import MAX_RELEVANCE, MIN_RELEVANCE, QRELS_HEADER, load_dataset
from vtrepro.data.texts import corpus_texts
from vtrepro.encode.command import encode_main
from vtrepro.evaluate.command import main as evaluate_main
from vtrepro.evaluate.trec import MAX_CUTOFF
from vtrepro.regress.command import main as regress_main
from vtrepro.regress.spec import load_spec

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

# q1 judges d1 and d2, q2 judges d3; the run ranks d2, an unjudged d9, then d1 for q1.
RUN = "q1 Q0 d2 1 3.0 t\nq1 Q0 d9 2 2.0 t\nq1 Q0 d1 3 1.0 t\nq2 Q0 d3 1 1.0 t\n"
JUDGMENTS = "q1\td1\t1\nq1\td2\t1\nq2\td3\t1\n"
REST = JUDGMENTS.split("\n", 1)[1]  # every judgment but the first
ALL_JUDGED = 0.9599  # nDCG@10 of RUN with all three judgments; losing the first line gives 1.0


def evaluate(tmp_path: Path, qrels: str | bytes, capsys, metrics: str = "ndcg@10") -> tuple[int, str, str]:
    """``evaluate --run RUN --qrels <qrels>`` in ``tmp_path``; the folder must be unchanged afterwards."""
    (tmp_path / "run.trec").write_text(RUN)
    (tmp_path / "qrels.tsv").write_bytes(qrels if isinstance(qrels, bytes) else qrels.encode())
    before = snapshot(tmp_path)
    result = run_command(evaluate_main, ["--run", tmp_path / "run.trec", "--qrels", tmp_path / "qrels.tsv",
                                         "--metrics", metrics], capsys)
    assert snapshot(tmp_path) == before
    return result


# -- qrels: the one header, and relevance grades ------------------------------------------------------

QRELS_READ = {
    "BEIR header": f"{QRELS_HEADER}\n{JUDGMENTS}",
    "BEIR header, CRLF": f"{QRELS_HEADER}\n{JUDGMENTS}".replace("\n", "\r\n"),
    "no header": JUDGMENTS,
    "TREC, no header": "q1 0 d1 1\nq1 0 d2 1\nq2 0 d3 1\n",
}


@pytest.mark.parametrize("case", QRELS_READ, ids=list(QRELS_READ))
def test_every_judgment_is_read(case, tmp_path, capsys):
    """Only BEIR's exact header line is skipped: a headerless first judgment counts (it was taken for a
    header when its score was not an integer)."""
    code, out, stderr = evaluate(tmp_path, QRELS_READ[case], capsys)
    assert code == 0, stderr
    assert json.loads(out) == {"ndcg@10": ALL_JUDGED}


QRELS_REFUSED = {
    "first judgment 1.0, no header": ("q1\td1\t1.0\n" + REST, 1, "relevance '1.0' is not an integer"),
    "TREC first judgment 1.0": ("q1 0 d1 1.0\nq1 0 d2 1\nq2 0 d3 1\n", 1, "relevance '1.0' is not an integer"),
    "another header": ("qid\tdocid\trel\n" + JUDGMENTS, 1,
                       "the one header skipped is a first line 'query-id<TAB>corpus-id<TAB>score'"),
    "header with spaces": ("query-id corpus-id score\n" + JUDGMENTS, 1, "expected 'query-id<TAB>corpus-id<TAB>score'"),
    "header after a blank line": ("\n" + QRELS_HEADER + "\n" + JUDGMENTS, 2, "relevance 'score'"),
    "relevance 2_0": ("q1\td1\t2_0\n" + REST, 1, "relevance '2_0' is not an integer written in plain digits"),
    "relevance +1": ("q1\td1\t+1\n" + REST, 1, "relevance '+1'"),
    "relevance 1e20": ("q1\td1\t1e20\n" + REST, 1, "relevance '1e20'"),
    "relevance in Arabic-Indic digits": ("q1\td1\t\u0661\n" + REST, 1, "relevance '\u0661'"),
    "relevance 1001": ("q1\td1\t1001\n" + REST, 1, f"relevance 1001 is outside {MIN_RELEVANCE}..{MAX_RELEVANCE}"),
    "relevance 10^20": (f"q1\td1\t{10**20}\n" + REST, 1, f"relevance {10**20} is outside"),
    "relevance -2^31 - 1": (f"q1\td1\t{-2**31 - 1}\n" + REST, 1, f"relevance {-2**31 - 1} is outside"),
    "relevance of 5000 digits": ("q1\td1\t" + "9" * 5000 + "\n" + REST, 1, "is outside"),
    "only a header": (QRELS_HEADER + "\n\n", None, "holds no judgments"),
}


@pytest.mark.parametrize("case", QRELS_REFUSED, ids=list(QRELS_REFUSED))
def test_qrels_that_would_be_misread_are_refused(case, tmp_path, capsys):
    qrels, line, fragment = QRELS_REFUSED[case]
    code, out, stderr = evaluate(tmp_path, qrels, capsys)
    assert_one_error_line(code, stderr, f"qrels.tsv:{line}: " if line else "qrels.tsv: ", fragment)
    assert out == ""


@pytest.mark.parametrize("relevance", [MAX_RELEVANCE, MIN_RELEVANCE, 0, -1])
def test_relevance_bounds_are_accepted(relevance, tmp_path, capsys):
    code, out, stderr = evaluate(tmp_path, f"q1\td1\t{relevance}\n" + REST, capsys)
    assert code == 0, stderr
    assert 0 <= json.loads(out)["ndcg@10"] <= 1


def test_a_split_is_a_name(data_root, tmp_path, capsys):
    """``--split ../../x`` read any ``.tsv`` file as the dataset's qrels; a split is a name, like a dataset's."""
    (data_root / "beir" / "judgments.tsv").write_text(JUDGMENTS)
    (tmp_path / "run.trec").write_text(RUN)
    code, out, stderr = run_command(evaluate_main, ["--run", tmp_path / "run.trec", "--dataset", "mini", "--data-dir",
                                                    data_root, "--split", "../../judgments"], capsys)
    assert_one_error_line(code, stderr, "beir/mini: split '../../judgments' is not a split name", "use one of: test")
    assert out == ""


@pytest.mark.slow  # reads nfcorpus's 110575 training judgments
def test_real_qrels_read_the_same_judgments(data_dir: Path):
    """The shipped BEIR qrels have BEIR's exact header: every split reads the judgments it did before this
    reader was tightened (pinned scores depend on them)."""
    judgments = {(name, split): sum(len(docs) for docs in load_dataset(name, data_dir).qrels(split).values())
                 for name, splits in (("scifact", ("test", "train")), ("nfcorpus", ("dev", "test", "train")))
                 for split in splits}
    assert judgments == {("scifact", "test"): 339, ("scifact", "train"): 919, ("nfcorpus", "dev"): 11385,
                         ("nfcorpus", "test"): 12334, ("nfcorpus", "train"): 110575}


# -- metric cutoffs --------------------------------------------------------------------------------

CUTOFFS_REFUSED = {
    "ndcg@100000000000000000000": f"has a cutoff above {MAX_CUTOFF}",
    f"ndcg@{MAX_CUTOFF + 1}": f"the cutoff must be in 1..{MAX_CUTOFF}",
    "mrr@99999999999999999999": f"has a cutoff above {MAX_CUTOFF}",
    "recall@" + "9" * 5000: f"has a cutoff above {MAX_CUTOFF}",
    "ndcg@0010": "write the cutoff without leading zeros: ndcg@10",
    "ndcg@1e20": "unknown metric 'ndcg@1e20'",
}


@pytest.mark.parametrize("metric", CUTOFFS_REFUSED, ids=[metric[:30] for metric in CUTOFFS_REFUSED])
def test_evaluate_refuses_cutoffs_that_are_not_plain_bounded_integers(metric, tmp_path, capsys):
    code, out, stderr = evaluate(tmp_path, JUDGMENTS, capsys, metrics=f"ndcg@10,{metric}")
    assert_one_error_line(code, stderr, CUTOFFS_REFUSED[metric])
    assert out == ""


def test_the_deepest_cutoff_is_accepted(tmp_path, capsys):
    code, out, stderr = evaluate(tmp_path, JUDGMENTS, capsys, metrics=f"recall@{MAX_CUTOFF}")
    assert code == 0, stderr
    assert json.loads(out) == {f"recall@{MAX_CUTOFF}": 1.0}


# -- regress: specs on a tiny BEIR folder ---------------------------------------------------------------

BM25_SPEC = "defaults:\n  metrics: [ndcg@10]\nconditions:\n  bm:\n    retrieval: bm25\n    datasets:\n      {dataset}:\n"
IMPACT_SPEC = ("defaults:\n  metrics: [ndcg@10]\nconditions:\n  tiny:\n    model: splade-tiny\n"
               "    encoder: {{max_length_doc: 64}}\n    datasets:\n      {dataset}:\n")


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """A data root holding beir/mini (conftest's three documents and one judged query)."""
    return write_mini_beir(tmp_path / "data")


def regress(spec_text: str, data_root: Path, capsys, *options: str, models: Path | None = None) -> tuple[int, str, str]:
    """``regress`` on a spec written beside ``data_root``, output in ``<tmp>/out``."""
    spec = data_root.parent / "spec.yaml"
    spec.write_text(spec_text)
    argv = ["--spec", spec, "--data-dir", data_root, "--output", data_root.parent / "out", *options]
    return run_command(regress_main, [*argv, "--model-dir", models] if models else argv, capsys)


def real_and_dry_run(spec_text: str, data_root: Path, capsys, models: Path | None = None) -> list[str]:
    """The error line of ``regress --dry-run`` and of the real run (both must fail the same way, before
    any work: nothing written, no input changed)."""
    before = snapshot(data_root)
    lines = []
    for options in (["--dry-run"], []):
        code, _, stderr = regress(spec_text, data_root, capsys, *options, models=models)
        lines.append(assert_one_error_line(code, stderr))
        assert snapshot(data_root) == before
        assert not (data_root.parent / "out").exists()
    return lines


DATASET_KEYS_REFUSED = {
    "absolute path": "'{root}/beir/mini'",
    "parent folder": "../data/beir/mini",
    "dot": "'.'",
    "home": "'~/mini'",
    "three parts": "a/b/mini",
    "trailing slash": "'mini/'",
}


@pytest.mark.parametrize("case", DATASET_KEYS_REFUSED, ids=list(DATASET_KEYS_REFUSED))
def test_a_dataset_key_is_a_name_never_a_path(case, data_root, capsys, models_dir):
    """A path as dataset key made regress write its index, vectors and encoded queries into the dataset
    folder (its queries.jsonl overwritten): now refused at load, by the dry run too, the folder unchanged."""
    key = DATASET_KEYS_REFUSED[case].format(root=data_root)
    dry, real = real_and_dry_run(IMPACT_SPEC.format(dataset=key), data_root, capsys, models=models_dir)
    assert dry == real
    assert "spec.yaml:8: condition 'tiny': dataset" in real and "is not a dataset name" in real and "never a path" in real


def test_a_dataset_key_must_be_a_string(data_root, capsys):
    """YAML reads ``2024:`` as an integer (and ``0x10`` as 16): refused, with the fix; quoted, it is a name."""
    dry, real = real_and_dry_run(BM25_SPEC.format(dataset="2024"), data_root, capsys)
    assert dry == real
    assert "spec.yaml:7: condition 'bm': dataset key 2024 is a YAML int, not a dataset name; quote the name" in real
    write_mini_beir(data_root / "named").joinpath("beir", "mini").rename(data_root / "beir" / "2024")
    code, out, stderr = regress(BM25_SPEC.format(dataset="'2024'"), data_root, capsys, "--dry-run")
    assert code == 0, stderr
    assert "bm / 2024 [test]: BM25" in out and "data local" in out


def test_grouped_dataset_names_stay_accepted(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(BM25_SPEC.format(dataset="cqadupstack/android"))
    assert [dataset.name for dataset in load_spec(spec).conditions[0].datasets] == ["cqadupstack/android"]


def test_dry_run_refuses_a_missing_split_like_the_real_run(data_root, capsys):
    spec = BM25_SPEC.format(dataset="mini") + "        split: dev\n"
    dry, real = real_and_dry_run(spec, data_root, capsys)
    assert dry == real
    assert "beir/mini/qrels/dev.tsv: qrels file not found for split 'dev'; available splits: test" in real


def test_dry_run_refuses_an_unknown_dataset_like_the_real_run(data_root, capsys):
    dry, real = real_and_dry_run(BM25_SPEC.format(dataset="no-such-set"), data_root, capsys)
    assert dry == real
    assert "unknown dataset 'no-such-set'" in real


def test_dry_run_reads_the_split_it_would_run(data_root, capsys):
    """The dry run reads the qrels and queries the real run reads before any work."""
    (data_root / "beir" / "mini" / "qrels" / "test.tsv").write_text(f"{QRELS_HEADER}\nq1\td1\t2_0\n")
    dry, real = real_and_dry_run(BM25_SPEC.format(dataset="mini"), data_root, capsys)
    assert dry == real
    assert "qrels/test.tsv:2: relevance '2_0'" in real


def test_spec_metrics_with_huge_cutoffs_are_refused_at_load(data_root, capsys):
    spec = BM25_SPEC.replace("[ndcg@10]", "[ndcg@10, recall@100000000000000000000]").format(dataset="mini")
    dry, real = real_and_dry_run(spec, data_root, capsys)
    assert dry == real
    assert f"spec.yaml:2: defaults.metrics: metric 'recall@100000000000000000000' has a cutoff above {MAX_CUTOFF}" in real


# -- text that is not Unicode: lone surrogates ----------------------------------------------------------

SURROGATES = {  # file, the JSON line with a lone surrogate escape, its line, the error's fragment
    "query text": ("queries.jsonl", '{"_id": "q1", "text": "what causes \\ud800 attacks"}', 1,
                   "'text' holds a lone surrogate '\\ud800' at character 13"),
    "document text": ("corpus.jsonl", '{"_id": "d2", "text": "protein \\udc80 folding"}', 2,
                      "'text' holds a lone surrogate '\\udc80'"),
    "document title": ("corpus.jsonl", '{"_id": "d2", "title": "\\udfff", "text": "protein"}', 2,
                       "'title' holds a lone surrogate"),
    "document contents": ("corpus.jsonl", '{"id": "d2", "contents": "x\\ud83d"}', 2, "'contents' holds a lone surrogate"),
}


def put_line(path: Path, number: int, text: str) -> None:
    """Replace line ``number`` (1-based) of a text file."""
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("case", SURROGATES, ids=list(SURROGATES))
def test_encode_refuses_text_that_is_not_unicode_before_encoding(case, data_root, tmp_path, capsys, models_dir):
    """Before: the corpus was encoded and written, then the queries failed with an internal error (exit 3).
    Now: the reader names the line, before the model loads; nothing is written."""
    name, text, line, fragment = SURROGATES[case]
    put_line(data_root / "beir" / "mini" / name, line, text)
    before = snapshot(data_root)
    code, _, stderr = run_command(encode_main, ["--model", "splade-tiny", "--model-dir", models_dir, "--dataset", "mini",
                                                "--data-dir", data_root, "--output", tmp_path / "encoded"], capsys)
    assert_one_error_line(code, stderr, f"beir/mini/{name}:{line}: ", fragment, "fix or remove that escape")
    assert snapshot(data_root) == before
    assert not (tmp_path / "encoded").exists()


def test_regress_checks_every_dataset_s_queries_before_any_encoding(data_root, capsys, models_dir):
    """Two datasets, the second with a query that is not Unicode: refused before the first is encoded."""
    second = write_mini_beir(data_root / "other").joinpath("beir", "mini").rename(data_root / "beir" / "second")
    put_line(second / "queries.jsonl", 1, SURROGATES["query text"][1])
    spec = IMPACT_SPEC.format(dataset="mini") + "      second:\n"
    before = snapshot(data_root)
    code, _, stderr = regress(spec, data_root, capsys, models=models_dir)
    assert_one_error_line(code, stderr, "beir/second/queries.jsonl:1: 'text' holds a lone surrogate")
    assert snapshot(data_root) == before
    assert not (data_root.parent / "out").exists()


@pytest.mark.slow  # starts the JVM and writes the report
def test_regress_reads_the_corpus_before_the_model_loads(data_root, capsys, models_dir):
    """A document that is not Unicode fails its run before the model loads or anything is encoded: the
    run is an ERROR row of the report, and no vectors exist."""
    put_line(data_root / "beir" / "mini" / "corpus.jsonl", 2, SURROGATES["document text"][1])
    code, _, stderr = regress(IMPACT_SPEC.format(dataset="mini"), data_root, capsys, models=models_dir)
    assert_one_error_line(code, stderr, "tiny/mini: ", "beir/mini/corpus.jsonl:2: 'text' holds a lone surrogate")
    run_folder = data_root.parent / "out" / "spec" / "tiny" / "mini"
    assert not run_folder.exists() or not any(run_folder.iterdir())
    assert "ERROR" in (data_root.parent / "out" / "spec" / "report.md").read_text()


def test_text_sources_refuse_text_that_is_not_unicode(tmp_path):
    """The text loader of MLM adaptation, calibration and training reads records as the corpus reader does."""
    corpus = tmp_path / "texts.jsonl"
    corpus.write_text('{"text": "fine"}\n' + SURROGATES["document title"][1] + "\n")
    with pytest.raises(VtreproError, match=rf"^{corpus}:2: 'title' holds a lone surrogate '\\udfff' at character 1"):
        list(corpus_texts(corpus))
    assert list(corpus_texts(corpus, titles=False)) == ["fine", "protein"]
