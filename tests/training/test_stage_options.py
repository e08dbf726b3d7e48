"""Stage options are declared once: specs, recipes, command lines and the run functions agree."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import REQUIRED
from vtrepro.regress.spec import load_spec
from vtrepro.training import mlm
from vtrepro.training.recipe import load_recipe
from vtrepro.training.stages import STAGE_OPTIONS
from vtrepro.vocabulary import calibrate, transfer

RUNNERS = {"transfer": transfer.run_transfer, "mlm": mlm.run_mlm, "calibrate": calibrate.run_calibration}
PARSERS = {"transfer": transfer.build_parser, "mlm": mlm.build_parser, "calibrate": calibrate.build_parser}
REQUIRED_ARGS = {"transfer": ["--model", "m", "--output", "o"],
                 "mlm": ["--model", "m", "--dataset", "d", "--output", "o"],
                 "calibrate": ["--model", "m", "--dataset", "d", "--output", "o"]}

SPEC = """conditions:
  vt:
    transfer: {source: splade-tiny, init: mean, temperature: 0.5, leaveout: {fraction: 0.2}}
    calibrate: {dataset: scifact, target_terms: 100}
    datasets: {scifact: {}}
"""
RECIPE = """model: splade-tiny
stages:
  - transfer: {init: mean, temperature: 0.5, leaveout: {fraction: 0.2}}
  - calibrate: {dataset: scifact, target_terms: 100}
data: {format: triples, path: triples.tsv}
training: {steps: 2}
"""


@pytest.mark.parametrize("name", STAGE_OPTIONS)
def test_run_function_defaults_are_the_schema_defaults(name: str) -> None:
    parameters = inspect.signature(RUNNERS[name]).parameters
    for key, field in STAGE_OPTIONS[name].items():
        assert key in parameters, f"{name}: run function lacks '{key}'"
        if field.default is not REQUIRED and parameters[key].default is not inspect.Parameter.empty:
            assert parameters[key].default == field.default, f"{name}.{key}"


@pytest.mark.parametrize("name", STAGE_OPTIONS)
def test_command_line_defaults_are_the_schema_defaults(name: str) -> None:
    args = vars(PARSERS[name]().parse_args(REQUIRED_ARGS[name]))
    for key, field in STAGE_OPTIONS[name].items():
        if key in args and key not in ("dataset", "corpus"):
            assert args[key] == field.default, f"--{key.replace('_', '-')} of {name}"


def test_a_spec_block_and_a_recipe_stage_read_the_same(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    condition = load_spec(tmp_path / "spec.yaml").conditions[0]
    recipe = load_recipe(tmp_path / "recipe.yaml")
    assert condition.stages == recipe.stages
    assert condition.stages[0].options["leaveout"] == {"fraction": 0.2, "seed": 0}


@pytest.mark.parametrize(("old", "new", "message"), [
    ("init: mean", "init: topolgy", "transfer.init must be one of topology, subword-mean, mean, random, got 'topolgy'"),
    ("temperature: 0.5", "temperature: 0", "transfer.temperature must be a number > 0, got 0"),
    ("fraction: 0.2", "fraction: 1", "transfer.leaveout.fraction must be a number in (0, 1), got 1"),
    ("target_terms: 100", "target_terms: 100, cut_percent: 60", "calibrate takes one of 'cut_percent' and 'target_terms'"),
    ("dataset: scifact, ", "", "calibrate needs exactly one of 'dataset' (BEIR name) and 'corpus' (a file)"),
    ("init: mean", "init: mean, tempreature: 2", "unknown key 'tempreature'"),
])
def test_a_bad_option_fails_the_same_way_in_a_spec_and_a_recipe(tmp_path: Path, old: str, new: str, message: str) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC.replace(old, new))
    (tmp_path / "recipe.yaml").write_text(RECIPE.replace(old, new))
    with pytest.raises(VtreproError, match=r"spec\.yaml:\d+: ") as from_spec:
        load_spec(tmp_path / "spec.yaml")
    with pytest.raises(VtreproError, match=r"recipe\.yaml:\d+: ") as from_recipe:
        load_recipe(tmp_path / "recipe.yaml")
    assert message in str(from_spec.value) and message in str(from_recipe.value)
