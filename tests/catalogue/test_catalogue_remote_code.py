"""A spec or recipe may ask for model code to run (``trust_remote_code: true``); only ``--trust-remote-code``
on the command line grants it (docs/security.md). Without the flag the run stops before any work."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_catalogue import run_command, snapshot
from test_catalogue_specs import RECIPE, SPEC, edited

from conftest import assert_one_error_line
from vtrepro.regress.runner import main as regress_main
from vtrepro.training.train import main as train_main


@pytest.fixture
def model_with_code(tmp_path: Path, splade_tiny: Path) -> Path:
    """splade-tiny's files beside a config that names a local model class whose import writes a marker."""
    folder = tmp_path / "models" / "coded"
    folder.mkdir(parents=True)
    for item in splade_tiny.iterdir():
        if item.name != "config.json":
            shutil.copy(item, folder / item.name)  # copies: a model folder's files lie inside it
    config = json.loads((splade_tiny / "config.json").read_text())
    config["auto_map"] = {"AutoModelForMaskedLM": "modeling_coded.CodedForMaskedLM"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_coded.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
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
