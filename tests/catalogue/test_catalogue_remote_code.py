"""A spec or recipe may ask for model code to run (``trust_remote_code: true``); only ``--trust-remote-code``
on the command line grants it (docs/security.md). Without the flag the run stops before any work."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_catalogue import run_command, snapshot
from test_catalogue_specs import RECIPE, SPEC, edited

from helpers import assert_one_error_line
from vtrepro.core.errors import VtreproError
from vtrepro.core.launch import Job, Shared, command_line, launch
from vtrepro.encode.command import build_encode_parser as encode_parser
from vtrepro.encode.command import encode_main
from vtrepro.regress.command import main as regress_main
from vtrepro.regress.conditions import ConditionRunner
from vtrepro.regress.context import RunContext
from vtrepro.regress.spec import load_spec
from vtrepro.training.command import train_main


@pytest.fixture
def model_with_code(tmp_path: Path, splade_tiny: Path) -> Path:
    """splade-tiny's weights and tokenizer as a model type of its own, whose config and model classes are the
    code it ships (``auto_map``): it loads only by running that code, whose import writes a marker."""
    folder = tmp_path / "models" / "coded"
    folder.mkdir(parents=True)
    for item in splade_tiny.iterdir():
        if item.name != "config.json":
            shutil.copy(item, folder / item.name)  # copies: a model folder's files lie inside it
    config = json.loads((splade_tiny / "config.json").read_text())
    config["model_type"] = "coded"
    config["auto_map"] = {"AutoConfig": "configuration_coded.CodedConfig",
                          "AutoModelForMaskedLM": "modeling_coded.CodedForMaskedLM"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_coded.py").write_text(
        "from transformers import BertConfig\n\n\nclass CodedConfig(BertConfig):\n    model_type = 'coded'\n")
    (folder / "modeling_coded.py").write_text(
        "from transformers import BertForMaskedLM\n\nfrom .configuration_coded import CodedConfig\n\n"
        f"open({str(tmp_path / 'ran')!r}, 'w').close()\n\n\n"
        "class CodedForMaskedLM(BertForMaskedLM):\n    config_class = CodedConfig\n")
    return folder


def test_a_spec_cannot_grant_remote_code(tmp_path: Path, model_with_code: Path, data_dir: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(edited(edited(SPEC, "trust_remote_code: false", "trust_remote_code: true"),
                           "model: splade-tiny", "model: coded"))
    before = snapshot(tmp_path)
    for extra in ([], ["--dry-run"]):
        code, _, err = run_command(regress_main, ["--spec", spec, "--runs", tmp_path / "runs", "--data-dir", data_dir,
                                                  "--model-dir", tmp_path / "models", *extra], capsys)
        assert_one_error_line(code, err, str(spec), "condition 'tiny'", "rerun with --trust-remote-code")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "runs").exists()
    assert snapshot(tmp_path) == before


def test_the_flag_grants_what_the_spec_asks(tmp_path: Path, data_dir: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(edited(SPEC, "trust_remote_code: false", "trust_remote_code: true"))
    code, out, err = run_command(regress_main, ["--spec", spec, "--runs", tmp_path / "runs", "--data-dir", data_dir,
                                                "--dry-run", "--trust-remote-code"], capsys)
    assert code == 0, err
    assert "tiny" in out


def test_a_recipe_cannot_grant_remote_code(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(edited(RECIPE, "trust_remote_code: false", "trust_remote_code: true"))
    code, _, err = run_command(train_main, ["--recipe", recipe, "--output", tmp_path / "run", "--dry-run"], capsys)
    assert_one_error_line(code, err, str(recipe), "the recipe set trust_remote_code: true", "--trust-remote-code")
    assert not (tmp_path / "run").exists()


def encode_job(tmp_path: Path) -> Job:
    """Encoding one document with the model that ships code."""
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "code that runs"}\n')
    return Job("encode", ("--model", "coded", "--corpus", str(tmp_path / "corpus.jsonl"),
                          "--output", str(tmp_path / "encoded")))


def test_encode_runs_model_code_only_with_the_flag(tmp_path: Path, model_with_code: Path, capsys) -> None:
    command = [*encode_job(tmp_path).argv(Shared(model_dir=tmp_path / "models"))[1:]]
    code, _, err = run_command(encode_main, command, capsys)
    assert_one_error_line(code, err, "model coded", "ships Python code", "rerun with --trust-remote-code")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "encoded" / "manifest.json").exists()
    code, out, err = run_command(encode_main, [*command, "--trust-remote-code"], capsys)
    assert code == 0, err
    assert (tmp_path / "ran").exists() and "1 documents" in out


@pytest.mark.parametrize("asked", [True, False])
def test_torchrun_encoding_in_a_regression_carries_the_condition_grant(tmp_path: Path, asked: bool) -> None:
    """regress --encode-procs launches encode under torchrun with the condition's grant as --trust-remote-code
    (granted by regress's own flag before any run), which encode's parser reads."""
    (tmp_path / "spec.yaml").write_text(SPEC.replace("trust_remote_code: false", f"trust_remote_code: {str(asked).lower()}"))
    spec = load_spec(tmp_path / "spec.yaml")
    condition = next(condition for condition in spec.conditions if condition.name == "tiny")
    runner = ConditionRunner(condition, spec, tmp_path / "runs", RunContext(tmp_path / "runs", encode_processes=2))
    command = command_line(runner.encode_job(tmp_path / "scifact", tmp_path / "encoded"), runner.shared, "torchrun", 2)
    assert command[1:5] == ["-m", "vtrepro.core.torchrun", "2", "encode"]
    assert encode_parser().parse_args(command[5:]).trust_remote_code is asked


@pytest.mark.slow
def test_torchrun_encoding_runs_model_code_only_with_the_flag(tmp_path: Path, model_with_code: Path, capfd) -> None:
    """Two torchrun processes (gloo on CPU) encode with the model that ships code: refused without the grant,
    each process that prints with one error line, and run with it."""
    job = encode_job(tmp_path)
    with pytest.raises(VtreproError, match="failed"):
        launch(job, Shared(model_dir=tmp_path / "models"), "torchrun", 2)
    # One line from each process that got as far as its error: torchrun stops the group at the first failure,
    # so on a loaded machine the other may be stopped before it prints (as in test_launch).
    errors = [line for line in capfd.readouterr().err.splitlines() if "error" in line.lower()]
    assert 1 <= len(errors) <= 2 and all(line.startswith("error: ") and "ships Python code" in line
                                         for line in errors), errors
    assert not (tmp_path / "ran").exists()
    launch(job, Shared(model_dir=tmp_path / "models", trust_remote_code=True), "torchrun", 2)
    assert (tmp_path / "ran").exists() and (tmp_path / "encoded" / "manifest.json").is_file()
