"""Every shipped spec and recipe rehearses end to end (``--rehearse``): every stage, condition and dataset at
miniature size on stand-in models and data, so the code path a GPU run takes has run before anyone pays for it.

All rehearsals share one output root, as a user's would: stand-in models are built once, and a recipe a spec
trains is rehearsed once (by the first spec that names it) and reused. Recipes no spec trains are rehearsed
through ``train --rehearse``. A new spec or recipe is picked up by name; one that cannot be rehearsed fails here.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers import run_command
from vtrepro.core.shipped import RECIPES_DIR, SHIPPED_DIR
from vtrepro.regress.command import main as regress
from vtrepro.regress.spec import load_spec
from vtrepro.training.command import train_main as train
from vtrepro.training.rehearsal import REHEARSAL_NAME

pytestmark = pytest.mark.slow

SPECS = sorted(path.stem for path in SHIPPED_DIR.glob("*.yaml"))
RECIPES = sorted(path.stem for path in RECIPES_DIR.glob("*.yaml"))
SECONDS: dict[str, float] = {}


@pytest.fixture(scope="module")
def rehearsals(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rehearse")


TRAINED_BY_SPECS = {condition.train for spec in SPECS for condition in load_spec(spec).conditions if condition.train}
"""The recipes a shipped spec trains (each spec loaded once, at collection)."""


@pytest.mark.parametrize("spec", SPECS)
def test_every_shipped_spec_rehearses(spec: str, rehearsals: Path, capsys) -> None:
    started = time.perf_counter()
    code, out, err = run_command(regress, ["--spec", spec, "--rehearse", "--trust-remote-code",
                                           "--runs", str(rehearsals)], capsys)
    SECONDS[f"spec {spec}"] = time.perf_counter() - started
    assert code == 0, err[-2000:]
    assert out.startswith("REHEARSAL:") and " 0 not OK" in out  # nothing judged, nothing failed
    results = json.loads((rehearsals / spec / "results.json").read_text())
    assert results["description"].startswith("REHEARSAL")
    ran = {(row["condition"], row["dataset"]) for row in results["rows"] if row["kind"] == "score"}
    every = {(condition.name, dataset.name) for condition in load_spec(spec).conditions
             for dataset in condition.datasets}
    assert ran == every  # every condition on every dataset produced its scores
    assert (rehearsals / spec / REHEARSAL_NAME).is_file()


@pytest.mark.parametrize("recipe", [name for name in RECIPES if name not in TRAINED_BY_SPECS])
def test_every_recipe_no_spec_trains_rehearses(recipe: str, rehearsals: Path, capsys) -> None:
    started = time.perf_counter()
    output = rehearsals / "train" / recipe  # where a spec rehearsal would train it: the same stand-ins
    code, out, err = run_command(train, ["--recipe", recipe, "--rehearse", "--trust-remote-code",
                                         "--output", str(output)], capsys)
    SECONDS[f"recipe {recipe}"] = time.perf_counter() - started
    assert code == 0, err[-2000:]
    assert (output / "final" / "model.safetensors").is_file()
    record = json.loads((output / REHEARSAL_NAME).read_text())
    assert record["rehearsal"] and record["substitutions"] and record["real_run_cost"]


def test_every_recipe_was_rehearsed(rehearsals: Path) -> None:
    """Run last in this module: every shipped recipe has a rehearsed final model, from a spec or the command."""
    finals = {path.parent.name for path in rehearsals.glob("*/*/final")}
    assert set(RECIPES) <= finals, sorted(set(RECIPES) - finals)
    print("\nrehearsal seconds: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in sorted(SECONDS.items())))
