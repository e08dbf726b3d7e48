"""Issue 9 catalogue, encode side: visible progress, no third-party noise, one-line model and output errors.

Every case runs a real command (``python -m vtrepro.<stage>``) on crafted tiny inputs with splade-tiny,
its stderr captured as a log would (not a terminal).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_one_error_line, write_jsonl
from vtrepro.core.java import java_version

DOCUMENTS = ["heart attack causes and risk factors", "protein folding in yeast cells", "heart rate variability",
             "vitamin d and bone density", "cells divide by mitosis"] * 4
QUERIES = {"q1": "what causes heart attacks", "q2": "yeast proteins"}
NOISE = re.compile(
    r"^(INFO|WARNING|SEVERE):|SLF4J|org\.apache\.lucene|log4j|sun\.misc\.Unsafe|Loading weights|it/s\]|Retrying|huggingface",
    re.MULTILINE,
)
"""Lines from Lucene/Anserini logging, the JVM, transformers or huggingface_hub."""
HUB_SAFETY_NET_S = 20
"""Offline Hub failures must not take the retry path (half a minute or more); this only stops a hang."""


def run(module: str, *args, env: dict[str, str] | None = None, timeout: float | None = None):
    full_env = {**os.environ, **(env or {})}
    result = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                            env=full_env, timeout=timeout)
    return result.returncode, result.stdout, result.stderr


def assert_one_line_error(result, *fragments: str) -> str:
    code, _, stderr = result
    return assert_one_error_line(code, stderr, *fragments)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    write_jsonl(folder / "corpus.jsonl", [{"_id": f"d{i}", "text": text} for i, text in enumerate(DOCUMENTS)])
    write_jsonl(folder / "queries.jsonl", [{"_id": qid, "text": text} for qid, text in QUERIES.items()])
    return folder


@pytest.fixture(scope="module")
def encoded(inputs: Path, splade_tiny: Path, tmp_path_factory):
    """One quiet encode of the crafted corpus and queries: (folder, exit code, stdout, stderr)."""
    output = tmp_path_factory.mktemp("encoded") / "enc"
    result = run("vtrepro", "encode", "--model", splade_tiny, "--corpus", inputs / "corpus.jsonl",
                 "--queries", inputs / "queries.jsonl", "--output", output)
    assert result[0] == 0, result[2]
    return output, *result


def broken_model(tmp_path: Path, splade_tiny: Path) -> Path:
    """A private copy of splade-tiny (real files, never links into the shared folder) to break."""
    folder = tmp_path / "model"
    folder.mkdir()
    for source in splade_tiny.iterdir():
        shutil.copyfile(source, folder / source.name)
    return folder


def java_homes() -> dict[str, str | None]:
    """The default Java, and a newer one (22+, where Lucene and the JVM warn more) when this machine has it."""
    homes: dict[str, str | None] = {"default-java": None}
    for release in sorted(Path("/usr/lib/jvm").glob("*/release")):
        version = java_version(release.parent)
        if version and version >= 22:
            homes[f"java-{version}"] = str(release.parent)
            break
    return homes


# (a) progress --------------------------------------------------------------------------------------------

@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_encode_prints_one_progress_line_per_stage_with_count_and_rate(encoded):
    _, _, stdout, stderr = encoded
    lines = stderr.splitlines()
    documents = [line for line in lines if line.startswith("encode documents:")]
    queries = [line for line in lines if line.startswith("encode queries:")]
    assert len(documents) == 1 and re.search(rf"\b{len(DOCUMENTS)} doc in [\d.]+ s \([\d.]+ doc/s\)", documents[0]), stderr
    assert len(queries) == 1 and re.search(rf"\b{len(QUERIES)} query in [\d.]+ s \([\d.]+ query/s\)", queries[0]), stderr
    assert "\r" not in stderr  # no bar redrawn in a log
    assert f"{len(DOCUMENTS)} documents" in stdout and f"{len(QUERIES)} queries" in stdout


@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_resumed_encode_reports_what_it_did_not_redo(encoded, inputs, splade_tiny):
    folder, *_ = encoded
    code, _, stderr = run("vtrepro", "encode", "--model", splade_tiny, "--corpus", inputs / "corpus.jsonl",
                          "--output", folder)
    assert code == 0, stderr
    assert re.search(rf"encode documents: {len(DOCUMENTS)} doc, resumed at {len(DOCUMENTS)} in", stderr), stderr


# (b) third-party noise ------------------------------------------------------------------------------------

@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_encode_is_quiet_unless_verbose(encoded, inputs, splade_tiny, tmp_path):
    _, _, _, quiet = encoded
    assert not NOISE.search(quiet), quiet
    code, _, verbose = run("vtrepro", "encode", "--model", splade_tiny, "--corpus", inputs / "corpus.jsonl",
                           "--output", tmp_path / "enc", "--verbose")
    assert code == 0, verbose
    assert "Loading weights" in verbose  # transformers' own bar, shown again


@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
@pytest.mark.parametrize("java_home", list(java_homes().values()), ids=list(java_homes()))
def test_index_and_search_are_quiet_unless_verbose(encoded, tmp_path, java_home):
    folder, *_ = encoded
    env = {"JAVA_HOME": java_home} if java_home else {}
    for flags in ([], ["--verbose"]):
        index = tmp_path / f"index{len(flags)}"
        indexed = run("vtrepro", "index", "--vectors", folder, "--output", index, *flags, env=env)
        searched = run("vtrepro", "search", "--index", index, "--queries", folder / "queries.jsonl",
                       "--output", tmp_path / f"run{len(flags)}.trec", *flags, env=env)
        for code, stdout, stderr in (indexed, searched):
            assert code == 0, stderr
            assert not NOISE.search(stdout), stdout  # Anserini's log4j2 writes to stdout
            if flags:
                assert "org.apache.lucene" in stderr, stderr  # Lucene's own notes, shown again
            else:
                assert not NOISE.search(stderr), stderr


# (c) unknown Hub id offline --------------------------------------------------------------------------------

@pytest.mark.parametrize("offline_env", [{"HF_HUB_OFFLINE": "1"}, {}], ids=["HF_HUB_OFFLINE", "probe"])
def test_unknown_hub_id_offline_fails_at_once_naming_the_folder_to_create(inputs, tmp_path, offline_env):
    if not offline_env:
        from vtrepro.model.hub import hub_reachable

        if hub_reachable():
            pytest.skip("the Hub is reachable here: the offline path is not taken")
    env = {**offline_env, "VTREPRO_MODELS": str(tmp_path / "models")}
    result = run("vtrepro", "encode", "--model", "some-org/unknown-model", "--corpus", inputs / "corpus.jsonl",
                 "--output", tmp_path / "enc", env=env, timeout=HUB_SAFETY_NET_S)
    assert_one_line_error(result, "some-org/unknown-model", "offline", str(tmp_path / "models" / "some-org" / "unknown-model"))
    assert "Retrying" not in result[2]
    assert not (tmp_path / "enc").exists()


def test_unknown_hub_id_without_models_root_says_to_set_it(inputs, tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "VTREPRO_MODELS": ""}
    result = run("vtrepro", "encode", "--model", "some-org/unknown-model", "--corpus", inputs / "corpus.jsonl",
                 "--output", tmp_path / "enc", env=env, timeout=HUB_SAFETY_NET_S)
    assert_one_line_error(result, "ROOT/some-org/unknown-model", "VTREPRO_MODELS=ROOT")


@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_hub_id_in_the_hugging_face_cache_still_loads_offline(inputs, splade_tiny, tmp_path):
    snapshot = tmp_path / "hub" / "models--some-org--cached-model" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abc")
    blobs = snapshot.parents[1] / "blobs"
    blobs.mkdir()
    for source in splade_tiny.iterdir():  # as the Hub cache: each file a link to ../../blobs/<hash>
        shutil.copy(source, blobs / source.name)
        (snapshot / source.name).symlink_to(Path("../../blobs") / source.name)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "VTREPRO_MODELS": ""}
    code, stdout, stderr = run("vtrepro", "encode", "--model", "some-org/cached-model", "--corpus", inputs / "corpus.jsonl",
                               "--output", tmp_path / "enc", env=env, timeout=60)
    assert code == 0, stderr
    assert f"{len(DOCUMENTS)} documents" in stdout


# (d) truncated or corrupt model files ---------------------------------------------------------------------

def truncate_weights(folder: Path) -> str:
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    return "truncated or corrupt safetensors"


def corrupt_config(folder: Path) -> str:
    (folder / "config.json").write_text('{"model_type": "bert", ')
    return "not valid JSON"


def remove_tokenizer(folder: Path) -> str:
    for name in ("tokenizer.json", "vocab.txt"):
        (folder / name).unlink(missing_ok=True)
    return "no tokenizer files"


def corrupt_tokenizer(folder: Path) -> str:
    (folder / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes()[:1000])
    return "not valid JSON"


BREAKAGES = {
    "model.safetensors": truncate_weights,
    "config.json": corrupt_config,
    "": remove_tokenizer,  # the folder itself is named
    "tokenizer.json": corrupt_tokenizer,
}


@pytest.mark.parametrize("broken_file", list(BREAKAGES), ids=[f.__name__ for f in BREAKAGES.values()])
def test_broken_model_folder_is_one_line_naming_the_file(broken_file, inputs, splade_tiny, tmp_path):
    model = broken_model(tmp_path, splade_tiny)
    problem = BREAKAGES[broken_file](model)
    result = run("vtrepro", "encode", "--model", model, "--corpus", inputs / "corpus.jsonl", "--output", tmp_path / "enc")
    named = str(model / broken_file) if broken_file else f"{model}:"
    assert_one_line_error(result, named, problem, "again" if broken_file else "copy")
    assert not (tmp_path / "enc").exists()


# (e) unusable output, found before the model loads ----------------------------------------------------------

def test_output_that_is_a_file_is_refused_before_the_model_loads(inputs, tmp_path):
    output = tmp_path / "encoded"
    output.write_text("my notes\n")
    result = run("vtrepro", "encode", "--model", tmp_path / "no-such-model", "--corpus", inputs / "corpus.jsonl",
                 "--output", output)
    assert_one_line_error(result, str(output), "is a file")  # not the missing model: the output is checked first
    assert output.read_text() == "my notes\n"


def test_read_only_output_folder_is_refused_before_the_model_loads(inputs, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = run("vtrepro", "encode", "--model", tmp_path / "no-such-model", "--corpus", inputs / "corpus.jsonl",
                     "--output", folder / "enc")
    finally:
        folder.chmod(0o755)
    assert_one_line_error(result, str(folder), "cannot write here")
    assert not any(folder.iterdir())


def test_output_on_a_read_only_file_system_is_refused(inputs, tmp_path):
    read_only = Path("/proc/sys")  # read-only even for root
    if not read_only.is_dir() or os.access(read_only, os.W_OK):
        pytest.skip("no read-only file system to write to")
    result = run("vtrepro", "encode", "--model", tmp_path / "no-such-model", "--corpus", inputs / "corpus.jsonl",
                 "--output", read_only / "vtrepro-encoded")
    assert_one_line_error(result, str(read_only), "cannot write here")


def test_foreign_vector_files_are_never_overwritten(inputs, tmp_path):
    vectors = tmp_path / "enc" / "vectors"
    vectors.mkdir(parents=True)
    (vectors / "part-00000.jsonl").write_text('{"id": "mine", "vector": {"a": 1}}\n')
    result = run("vtrepro", "encode", "--model", tmp_path / "no-such-model", "--corpus", inputs / "corpus.jsonl",
                 "--output", tmp_path / "enc")
    assert_one_line_error(result, str(vectors), "no manifest.json")
    assert (vectors / "part-00000.jsonl").read_text() == '{"id": "mine", "vector": {"a": 1}}\n'


@pytest.mark.parametrize("option", ["--shard-size", "--batch-size", "--max-length-doc", "--max-length-query", "--scale"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_out_of_range_options_are_refused_by_the_parser(option, value, inputs, tmp_path):
    code, _, stderr = run("vtrepro", "encode", "--model", "m", "--corpus", inputs / "corpus.jsonl",
                          "--output", tmp_path / "enc", option, value)
    assert code == 2 and "Traceback" not in stderr
    expected = {"--scale": "a number in [1, 10000]", "--shard-size": "an integer in [1, 100000]",
                "--batch-size": "an integer in [1, 4096]"}.get(option, "an integer in [1, 8192]")
    assert stderr.splitlines()[-1].endswith(f"error: argument {option}: expected {expected}, got '{value}'")
    assert not (tmp_path / "enc").exists()
