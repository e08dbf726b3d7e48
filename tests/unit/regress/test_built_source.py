"""A spec can declare its transfer source built (``source: {build: round_trip, from: MODEL}``): the run
builds it once, under its own folder, for every condition that transfers from it; no script runs first."""
from pathlib import Path

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.core.shipped import SHIPPED_DIR
from vtrepro.regress.command import main as regress
from vtrepro.regress.conditions import SOURCES_DIRNAME, build_model, describe_source
from vtrepro.regress.spec import load_spec

BUILT = """\
conditions:
  vt:
    transfer:
      source: {build: round_trip, from: splade-tiny}
      target_tokenizer: splade-tiny
      reference: splade-tiny
    datasets:
      scifact:
"""


@pytest.mark.slow  # 1.9 s on the AVX2 EPYC
def test_the_round_trip_ablation_dry_run_names_the_build_and_needs_no_script(tmp_path, data_dir, models_dir, capsys):
    output = tmp_path / "runs"
    assert regress(["--spec", "vt_round_trip_ablation", "--data-dir", str(data_dir), "--model-dir", str(models_dir),
                    "--runs", str(output), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    folder = output / "vt_round_trip_ablation" / SOURCES_DIRNAME / "round_trip-splade-tiny"
    assert f"moved onto GPT-2's BPE vocabulary (round_trip source, to build once in {folder})" in plan
    assert "missing:" not in plan and not output.exists()  # a plan: nothing built, nothing written


def test_the_shipped_ablation_builds_its_source_from_splade_tiny():
    ablation = load_spec(SHIPPED_DIR / "vt_round_trip_ablation.yaml")
    transferred = [condition for condition in ablation.conditions if condition.stages]
    assert transferred and {(condition.model, condition.source_build) for condition in transferred} == {
        ("splade-tiny", "round_trip")}


@pytest.mark.parametrize("source, message", [
    ("{build: nothing, from: splade-tiny}", r"spec\.yaml:4: .*source\.build must be one of round_trip"),
    ("{build: round_trip}", r"spec\.yaml:4: condition 'vt'\.transfer\.source needs 'from'"),
    ("[splade-tiny]", r"spec\.yaml:4: .*transfer\.source must be a checkpoint folder or Hub id, or \{build"),
])
def test_a_bad_built_source_names_file_and_line(tmp_path, source, message):
    path = tmp_path / "spec.yaml"
    path.write_text(BUILT.replace("{build: round_trip, from: splade-tiny}", source))
    with pytest.raises(VtreproError, match=message):
        load_spec(path)


def test_the_source_is_built_once_for_every_condition(tmp_path, monkeypatch):
    built: list[Path] = []

    def write_source(model, folder, model_dir=None):
        built.append(Path(folder))
        Path(folder).mkdir(parents=True)

    monkeypatch.setattr("vtrepro.vocabulary.gpt2.write_round_trip_source", write_source)
    monkeypatch.setattr("vtrepro.training.stages.run_stage", lambda stage, model, out, **_: Path(out).mkdir(parents=True))
    spec = tmp_path / "spec.yaml"
    spec.write_text(BUILT + BUILT.replace("conditions:\n  vt:", "  again:"))
    run_dir = tmp_path / "runs" / "spec"
    first, again = load_spec(spec).conditions
    assert "to build once in" in describe_source(first, run_dir)
    for condition in (first, again, first):
        build_model(condition, run_dir / condition.name, None, None, tmp_path / "train")
    assert built == [run_dir / SOURCES_DIRNAME / "round_trip-splade-tiny"]
    assert "built in" in describe_source(again, run_dir)
