"""`train: <recipe>` in a spec: regress trains the recipe's model once, then evaluates its final model."""
import json
import re

import pytest

from helpers import triples_recipe, write_recipe
from vtrepro.regress.command import main as regress

TRIPLES = [("what causes heart attacks", "heart attack causes and risk factors", "protein folding in yeast cells"),
           ("yeast protein folding", "protein folding in yeast cells", "heart rate")]


@pytest.mark.slow
def test_train_condition_trains_once_then_evaluates(tmp_path, splade_tiny, mini_beir, capfd) -> None:
    triples = tmp_path / "triples.tsv"
    triples.write_text("".join("\t".join(triple) + "\n" for triple in TRIPLES))
    recipe = tmp_path / "mini_ft.yaml"
    write_recipe(recipe, triples_recipe(splade_tiny, triples, steps=2, cpu_threads=1))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"conditions:\n  ft:\n    train: {recipe}\n    datasets:\n      mini:\n")
    arguments = ["--spec", str(spec), "--data-dir", str(mini_beir), "--output", str(tmp_path / "runs")]

    regress(arguments)
    final = tmp_path / "runs" / "train" / "mini_ft" / "final"
    report = json.loads((final / "training_report.json").read_text())
    assert report["steps"] == 2 and report["cpu_threads"] == 1
    assert "training " in capfd.readouterr().err
    run = tmp_path / "runs" / "spec" / "ft" / "mini" / "run.trec"
    assert run.read_text().splitlines()[0].split()[2] == "d1"

    regress(arguments)  # the trained model is reused, not retrained
    assert "training " not in capfd.readouterr().err

    # the recipe changed: the old model is refused
    write_recipe(recipe, triples_recipe(splade_tiny, triples, steps=2, cpu_threads=1, lr=1.0e-4))
    assert regress(arguments) == 2
    assert re.search(r"error: ft/mini: .*was not trained from the current .*mini_ft.yaml; remove", capfd.readouterr().err)
