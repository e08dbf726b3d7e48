"""The bad-input catalogue, issue 31 classes 2-4 (docs/input-validation.md 6.9): model folders read by name
only (no FIFO, device or link out of the folder; sizes from config.json bounded before transformers
allocates), numbers that would silently stop being exact (Lucene's float32 scores past 2^24, IDF values,
optimizer states), and exit 2 (never 3) for every malformed JSON a user can hand over.

A FIFO is never opened (the check is a ``stat`` before any open), so no case here can block.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_command
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import MAX_JSON_DEPTH, parse_json, read_jsonl
from vtrepro.encode.command import encode_main
from vtrepro.regress.command import export_main
from vtrepro.regress.command import main as regress_main

ADDRESS_SPACE = 2 * 1024**3
DEEP = "[" * 100_000


def run(main, argv: list, capsys) -> tuple[int, str]:
    """A command in process (:func:`helpers.run_command`): (status, stderr)."""
    code, _, err = run_command(main, argv, capsys)
    return code, err


@pytest.fixture
def model(tmp_path: Path, splade_tiny: Path) -> Path:
    """A copy of splade-tiny (copies: links out of a model folder are refused)."""
    folder = tmp_path / "model"
    shutil.copytree(splade_tiny, folder)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"_id": "d1", "text": "heart attack"}) + "\n")
    return path


def encode(model: Path, corpus: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    return run(encode_main, ["--model", model, "--corpus", corpus, "--output", tmp_path / "enc"], capsys)


# -- class 2: model folders opened by name, each a regular file inside the folder -------------------------

def fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO, not a regular file"


def dev_zero(path: Path) -> str:
    path.symlink_to("/dev/zero")
    return "outside the folder"


def outside(path: Path) -> str:
    secret = path.parent.parent / "secret.json"
    secret.write_text('{"password": "hunter2"}')
    path.symlink_to(secret)
    return "outside the folder"


@pytest.mark.parametrize("name", ["tokenizer_config.json", "special_tokens_map.json", "transfer_report.json"])
@pytest.mark.parametrize("plant", [fifo, dev_zero, outside])
def test_a_model_file_that_is_not_a_regular_file_inside_the_folder_is_refused_unopened(
        name, plant, model, corpus, tmp_path, capsys):
    """Before: a FIFO hung encode and export model, /dev/zero ended in MemoryError (exit 3), a report linked
    outside was copied into the export."""
    (model / name).unlink(missing_ok=True)
    expected = plant(model / name)
    code, stderr = encode(model, corpus, tmp_path, capsys)
    assert_one_error_line(code, stderr, f"{model / name}:", expected)
    assert not (tmp_path / "enc").exists()


@pytest.mark.slow  # imports sentence-transformers: about 1.7 s
def test_export_model_copies_no_report_from_outside_and_reads_no_other_json(model, tmp_path, capsys):
    outside(model / "training_report.json")
    code, stderr = run(export_main, ["model", "--model", model, "--output", tmp_path / "out"], capsys)
    assert_one_error_line(code, stderr, "training_report.json", "outside the folder")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a real encode of one document: about 5 s
def test_json_files_a_model_format_does_not_define_are_never_read(model, corpus, tmp_path, capsys):
    """Any other *.json (here a FIFO that would block and a deep nest) is not opened: encode runs."""
    os.mkfifo(model / "notes.json")
    (model / "stray_report.json").write_text(DEEP)
    code, stderr = encode(model, corpus, tmp_path, capsys)
    assert code == 0, stderr


def edit_config(model: Path, **changes) -> Path:
    path = model / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return path


@pytest.mark.parametrize("changes, expected", [
    ({"intermediate_size": 3_000_000}, "but its weights hold 4,"),
    ({"num_hidden_layers": 20_000}, "20000 layers, more than the 512"),
    ({"hidden_size": 10**12}, "more than this machine's memory"),
    ({"hidden_size": "128"}, "hidden_size '128' is not a size"),
])
def test_config_sizes_are_bounded_before_transformers_allocates(changes, expected, model, corpus, tmp_path, capsys):
    """Before: intermediate_size 3000000 allocated 6.3 GB before the refusal, 20000 layers never finished."""
    path = edit_config(model, **changes)
    code, stderr = encode(model, corpus, tmp_path, capsys)
    assert_one_error_line(code, stderr, f"{path}:", expected)


def test_a_huge_config_is_refused_under_2_gib_by_the_memory_bound(model, corpus, tmp_path):
    """Under ulimit -v 2 GiB the bound is the address-space limit: 5.7 GiB of float32 parameters are refused
    by the estimate, before any weight is read."""
    path = edit_config(model, intermediate_size=3_000_000)
    (model / "model.safetensors").unlink()  # no weights to compare with: the memory bound alone

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    code = ("import sys; from pathlib import Path; from vtrepro.core.cli import cli_entry; "
            "from vtrepro.model.folder_checks import check_model_size, read_model_json\n"
            "def main(argv=None):\n"
            "    check_model_size(read_model_json(Path(sys.argv[1])), Path(sys.argv[1])); return 0\n"
            "sys.exit(cli_entry(main)([]))")
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                            preexec_fn=limit, timeout=120)
    assert_one_error_line(result.returncode, result.stderr, "1,540,103,424 parameters", "5.7 GiB as float32",
                          "this process's address-space limit (ulimit -v)")


# -- class 3: numbers that would silently stop being exact --------------------------------------------

@pytest.fixture(scope="module")
def tie_index(tmp_path_factory) -> Path:
    """d1 holds a twice and b once, d2 holds a twice: for q = {a: 2^23, b: 1} they score 2^24 + 1 and 2^24,
    which float32 both writes 16777216."""
    from vtrepro.index.lucene import build_impact_index

    root = tmp_path_factory.mktemp("tie")
    (root / "vectors").mkdir()
    (root / "vectors" / "part-00000.jsonl").write_text(
        "".join(json.dumps({"id": key, "contents": "", "vector": vector}) + "\n"
                for key, vector in {"d1": {"a": 2, "b": 1}, "d2": {"a": 2}, "d3": {"c": 1}}.items()))
    build_impact_index(root / "vectors", root / "index")
    return root / "index"


@pytest.mark.slow  # a JVM, an index build and a search: 4-11 s on a shared machine
@pytest.mark.parametrize("query, expected", [
    ({"a": 2**24 + 1}, "could score 16777217 (its summed weights), at or beyond 2^24 = 16777216"),
    ({"a": 2**31 - 1}, "could score 2147483647"),
    ({"a": 2**23, "b": 1}, "scored a document 16777216, at or beyond 2^24"),
])
def test_lucene_scores_that_float32_cannot_hold_exactly_are_refused(query, expected, tie_index, capsys):
    """Before: d1 (2^24 + 1) and d2 (2^24) came back tied at 16777216; a weight of 2^31 - 1 ran Java out of memory."""
    from vtrepro.search.lucene import search_impact

    with pytest.raises(VtreproError) as error:
        search_impact(tie_index, {"q1": query}, k=10)
    assert expected in str(error.value)
    assert search_impact(tie_index, {"q1": {"a": 2**22, "b": 1}}, k=10)["q1"] == {"d1": 2.0**23 + 1, "d2": 2.0**23}


@pytest.mark.parametrize("value", [1e300, -1.0, 101, True, "2"])
def test_idf_values_must_be_finite_and_in_range(value, tmp_path):
    """Before: 1e300 was written as Infinity into an exported idf.json; -1 was clamped to 0 without a word."""
    from vtrepro.model.idf import read_idf_table

    path = tmp_path / "idf.json"
    path.write_text(json.dumps({"paris": 2.5, "heart": value}))
    with pytest.raises(VtreproError, match=r"token 'heart' has IDF .*a number in \[0, 100\]"):
        read_idf_table(path)


def test_an_idf_table_that_is_not_finite_is_never_written(tmp_path):
    import numpy as np

    from vtrepro.model.idf import IdfQueryEncoder

    encoder = IdfQueryEncoder.__new__(IdfQueryEncoder)
    encoder.vocabulary, encoder.weights = ["paris", "heart"], np.array([1.0, np.inf], dtype=np.float32)
    with pytest.raises(VtreproError, match="'heart' has IDF inf"):
        encoder.save(tmp_path)
    assert not (tmp_path / "idf.json").exists()


STATE = {"format": "vtrepro.trainer-state/1", "step": 5, "fingerprint": "f", "world": 1, "examples_seen": 10,
         "cpu_threads": None, "optimizer": {"param_groups": []}, "scheduler": {}, "rng": [{}]}


@pytest.mark.parametrize("text, expected", [
    (json.dumps({**STATE, "step": 10**18}), "step 1000000000000000000, beyond the recipe's 100 training steps"),
    (json.dumps(STATE).replace('"param_groups": []', '"param_groups": [{"lr": NaN}]'), "holds NaN"),
    (json.dumps(STATE).replace('"scheduler": {}', '"scheduler": {"x": 1e999}'), "1e999"),
    (json.dumps({**STATE, "examples_seen": -1}), "examples_seen or cpu_threads out of range"),
    (DEEP, f"nested deeper than {MAX_JSON_DEPTH} levels"),
])
def test_a_trainer_state_with_numbers_that_cannot_be_resumed_is_refused(text, expected, tmp_path):
    """Before: lr NaN trained on NaN losses; step 10^18 wrote a 'final' model without training."""
    from vtrepro.training.run_folder import read_trainer_fields

    checkpoint = tmp_path / "checkpoint-5"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(text)
    with pytest.raises(VtreproError, match="trainer_state.json") as error:
        read_trainer_fields(checkpoint, steps=100)
    assert expected in str(error.value)


def test_resumed_optimizer_settings_must_be_finite_and_non_negative(tmp_path):
    import torch

    from vtrepro.training.run_folder import read_trainer_state

    parameter = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([parameter], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    groups = json.loads(json.dumps(optimizer.state_dict()["param_groups"]))
    groups[0]["lr"] = -1.0
    with pytest.raises(VtreproError, match=r"param_groups\[0\].lr is -1.0, not a number in \[0, 1000\]"):
        read_trainer_state(tmp_path, {"optimizer": {"param_groups": groups}}, optimizer, scheduler)


# -- class 4: exit 2, never 3, for malformed JSON ------------------------------------------------------

@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json"])
def test_deep_json_in_a_model_folder_is_one_line(name, model, corpus, tmp_path, capsys):
    (model / name).write_text(DEEP)
    code, stderr = encode(model, corpus, tmp_path, capsys)
    assert_one_error_line(code, stderr, f"{model / name}: JSON nested deeper than {MAX_JSON_DEPTH} levels")


def test_deep_json_in_a_report_is_one_line(model, tmp_path, capsys):
    (model / "mlm_report.json").write_text(DEEP)
    code, stderr = run(export_main, ["model", "--model", model, "--output", tmp_path / "out"], capsys)
    assert_one_error_line(code, stderr, "mlm_report.json: JSON nested deeper")


@pytest.mark.parametrize("line, expected", [
    (DEEP, "JSON nested deeper than 64 levels"),
    ('{"id": "q1", "vector": {"a": 1' + "0" * 5000 + "}}", "holds an integer of 5001 digits"),
    ('{"id": "q1", "vector": {"a": Infinity}}', "holds Infinity"),
])
def test_a_queries_line_that_would_exhaust_the_parser_is_one_line(line, expected, tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"id": "q0", "vector": {"a": 1}}\n' + line + "\n")
    with pytest.raises(VtreproError, match=f"{path}:2: {expected}"):
        list(read_jsonl(path))


@pytest.mark.parametrize("data, expected", [
    (b"[" + DEEP.encode(), "JSON nested deeper"),
    (b'[{"query": "a", "positive": "b\xff"}]', "not valid UTF-8"),
    (b'{"query": "a", "positive": "b\xff"}\n', "not valid UTF-8"),
    (b'{"query": "a", "positive": "b"}\n' + DEEP.encode() + b"\n", ":2: JSON nested deeper"),
    (b'{"query": 1}', 'expected {"query": text, "positive": text}'),
])
def test_a_pairs_file_that_would_exhaust_or_misread_is_one_line(data, expected, tmp_path):
    """Before: invalid UTF-8 in the first 4 KB and deep nests ended in exit 3."""
    from vtrepro.training.examples import PairsSource, _read_pairs

    path = tmp_path / "pairs.json"
    path.write_bytes(data)
    source = PairsSource(path=path, hub=None, split="train", fields=("query", "positive"))
    with pytest.raises(VtreproError) as error:
        _read_pairs(source)
    assert expected in str(error.value) and str(path) in str(error.value)


def test_a_pairs_fifo_never_blocks(tmp_path):
    from vtrepro.training.examples import PairsSource, _read_pairs

    os.mkfifo(tmp_path / "pairs.jsonl")
    source = PairsSource(path=tmp_path / "pairs.jsonl", hub=None, split="train", fields=("query", "positive"))
    with pytest.raises(VtreproError, match="is a FIFO"):
        _read_pairs(source)


@pytest.mark.parametrize("header, expected", [
    (DEEP, "JSON nested deeper"),
    ({"format": "vtrepro.prebuilt-index/1", "files": {"x": 7}}, "files['x'] has the wrong type"),
    ({"format": "vtrepro.prebuilt-index/1", "files": {}, "statistics": {"documents": "3"}},
     "statistics.documents has the wrong type"),
    ({"format": "vtrepro.prebuilt-index/1", "files": {}, "name": ["x"]}, "name has the wrong type"),
])
def test_a_prebuilt_header_of_the_wrong_shape_is_one_line(header, expected, tmp_path):
    from vtrepro.index.prebuilt import HEADER_NAME, PREBUILT_FORMAT, read_header

    text = header if isinstance(header, str) else json.dumps(header).replace("vtrepro.prebuilt-index/1",
                                                                             PREBUILT_FORMAT)
    (tmp_path / HEADER_NAME).write_text(text)
    with pytest.raises(VtreproError, match="index.tar.gz") as error:
        read_header(tmp_path, tmp_path / "index.tar.gz")
    assert expected in str(error.value)


def test_a_garbage_line_in_the_training_log_is_one_line(tmp_path):
    from vtrepro.training.run_folder import truncate_log

    log = tmp_path / "train_log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\nnot json\n')
    with pytest.raises(VtreproError, match=f"{log}:2: not valid JSON"):
        truncate_log(log, 1)
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2}\n[3]\n')
    with pytest.raises(VtreproError, match=f"{log}:3: not a training log record"):
        truncate_log(log, 1)
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2}\n')
    truncate_log(log, 1)
    assert log.read_text() == '{"step": 1, "loss": 2.0}\n'


@pytest.mark.parametrize("name", ["a b", "x/y/z", "--x", "a..b", "x" * 97])
def test_a_spec_model_that_is_neither_a_path_nor_a_hub_id_is_refused_at_load(name, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"defaults: {{k: 10, metrics: [ndcg@10]}}\nconditions:\n  tiny:\n    model: {json.dumps(name)}\n"
                    "    datasets:\n      scifact:\n")
    code, stderr = run(regress_main, ["--spec", spec, "--dry-run", "--runs", tmp_path / "runs"], capsys)
    assert_one_error_line(code, stderr, f"{spec}:4:", "is neither a folder path", "nor a Hugging Face model id")


def test_the_depth_bound_counts_nesting_not_brackets_in_strings():
    assert parse_json('{"a": "' + "[" * 1000 + '"}', "x", "fix") == {"a": "[" * 1000}
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x", "fix") is not None
    with pytest.raises(VtreproError, match="nested deeper"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "x", "fix")
