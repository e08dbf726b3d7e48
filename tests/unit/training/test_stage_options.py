"""Stage options are declared once: specs, recipes, command lines and the run functions agree."""
from __future__ import annotations

import functools
import inspect
from pathlib import Path

import pytest

from vtrepro.core.cli import options_from_args
from vtrepro.core.errors import VtreproError
from vtrepro.index import lucene
from vtrepro.regress.spec import load_spec
from vtrepro.training import command as training_command
from vtrepro.training import examples, mlm
from vtrepro.training.recipe import load_recipe
from vtrepro.training.stages import STAGE_OPTIONS
from vtrepro.vocabulary import calibrate, initialize, transfer
from vtrepro.vocabulary import command as vocabulary_command

PARSERS = {"transfer": vocabulary_command.build_transfer_parser, "mlm": training_command.build_mlm_parser,
           "calibrate": vocabulary_command.build_calibrate_parser}
STAGE_READERS = {"transfer": vocabulary_command.transfer_options, "calibrate": vocabulary_command.calibration_options,
                 "mlm": functools.partial(options_from_args, mlm.MlmOptions)}
"""Each stage's options from its command line, as its command module reads them."""
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
OLD_SPELLING = """model: splade-tiny
stages:
  - transfer: {init: mean, temperature: 0.5, leaveout: {fraction: 0.2}}
  - mlm: {dataset: scifact, steps: 5, precision: bf16}
  - calibrate: {dataset: scifact, target_terms: 100}
data: {format: triples, path: triples.tsv}
training: {steps: 2, precision: bf16}
"""
OLD_SPELLING_FINGERPRINT = "24d05aa53c2f0b2e632039e4acf8c941ad395656274b49c0f2ed1880cde9c9d5"
"""What vtrepro computed for OLD_SPELLING before ``precision: fp32|bf16`` became ``dtype: float32|bfloat16``."""


@pytest.mark.parametrize("function", [
    transfer.run_transfer, transfer.transfer_vocabulary, initialize.initialize_new, calibrate.run_calibration,
    calibrate.calibrate_bias, mlm.run_mlm, mlm.train_mlm, examples.beir_training_set, lucene._run_indexer,
])
def test_no_run_function_takes_more_than_eight_parameters(function) -> None:
    assert len(inspect.signature(function).parameters) <= 8


@pytest.mark.parametrize("name", STAGE_OPTIONS)
def test_command_line_defaults_are_the_option_defaults(name: str) -> None:
    args = PARSERS[name]().parse_args(REQUIRED_ARGS[name])
    options = STAGE_READERS[name](args, **({} if name == "transfer" else {"dataset": "d"}))
    defaults = {key: field.default for key, field in STAGE_OPTIONS[name].schema().items()}
    assert options.to_dict() == {**defaults, **({} if name == "transfer" else {"dataset": "d"})}


def test_a_transfer_command_line_round_trips_through_to_argv() -> None:
    options = transfer.TransferOptions(init="mean", keep_norm=False, preset="authors",
                                       leaveout={"fraction": 0.2, "seed": 3})
    args = vocabulary_command.build_transfer_parser().parse_args(["--model", "m", "--output", "o", *options.to_argv()])
    assert vocabulary_command.transfer_options(args) == options


def test_a_spec_block_and_a_recipe_stage_read_the_same(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    condition = load_spec(tmp_path / "spec.yaml").conditions[0]
    recipe = load_recipe(tmp_path / "recipe.yaml")
    assert condition.stages == recipe.stages
    assert condition.stages[0].options.to_dict()["leaveout"] == {"fraction": 0.2, "seed": 0}


def test_old_spellings_read_with_a_notice_and_keep_the_fingerprint(tmp_path: Path, caplog) -> None:
    (tmp_path / "old.yaml").write_text(OLD_SPELLING)
    (tmp_path / "new.yaml").write_text(OLD_SPELLING.replace("precision: bf16", "dtype: bfloat16"))
    old = load_recipe(tmp_path / "old.yaml")
    assert "old.yaml:4: 'precision: bf16' is deprecated; write 'dtype: bfloat16'" in caplog.text
    assert "old.yaml:7: 'precision: bf16' is deprecated; write 'dtype: bfloat16'" in caplog.text
    new = load_recipe(tmp_path / "new.yaml")
    assert old.training.dtype == old.stages[1].options.to_dict()["dtype"] == "bfloat16"
    assert old.fingerprint() == new.fingerprint() == OLD_SPELLING_FINGERPRINT


@pytest.mark.parametrize(("old", "new", "message"), [
    ("init: mean", "init: topolgy", "transfer.init must be one of topology, subword-mean, mean, random, got 'topolgy'"),
    ("temperature: 0.5", "temperature: 0", "transfer.temperature must be a number > 0, got 0"),
    ("fraction: 0.2", "fraction: 1", "transfer.leaveout.fraction must be a number in (0, 1), got 1"),
    ("target_terms: 100", "target_terms: 100, cut_percent: 60", "calibrate takes one of 'cut_percent' and 'target_terms'"),
    ("dataset: scifact, ", "", "calibrate needs exactly one of 'dataset' (BEIR name) and 'corpus' (a file)"),
    ("dataset: scifact, ", "preset: authors, dataset: scifact, ", "calibrate with preset authors calibrates by 'cut_percent'"),
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


def test_options_refuse_what_their_fields_and_rules_refuse() -> None:
    with pytest.raises(VtreproError, match="TransferOptions.temperature must be a number > 0"):
        transfer.TransferOptions(temperature=0)
    with pytest.raises(VtreproError, match="CalibrationOptions takes one of 'cut_percent' and 'target_terms'"):
        calibrate.CalibrationOptions(dataset="scifact", cut_percent=60, target_terms=40)
    with pytest.raises(VtreproError, match="MlmOptions needs exactly one of 'dataset'"):
        mlm.MlmOptions()
