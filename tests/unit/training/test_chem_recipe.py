"""The authors' chemistry recipe (chem_splade) and the pairs training-data format it reads."""
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

from vtrepro.core.errors import VtreproError
from vtrepro.core.shipped import RECIPES_DIR
from vtrepro.training.command import train_main as train
from vtrepro.training.examples import PairsSource, batch_examples, pairs_training_set
from vtrepro.training.recipe import load_recipe

CHEM = RECIPES_DIR / "chem_splade.yaml"


def test_chem_recipe_holds_the_authors_values() -> None:
    recipe = load_recipe("chem_splade")
    assert recipe.model == "mlm_model-1000-b3" and recipe.query_encoder == "splade" and not recipe.stages
    assert recipe.data.to_dict() == {
        "format": "pairs", "hub": "BASF-AI/dolma-chem-only-query-generated", "path": None, "split": "train",
        "query_field": "generated_query", "document_field": "paragraph", "max_examples": 200_000,
        "held_out": 5_000, "negatives": 0, "teacher": None}
    loss = recipe.loss
    assert (loss.ranking, loss.temperature, loss.in_batch_negatives) == ("infonce", 1.0, True)
    assert (loss.lambda_q, loss.lambda_d) == (0.0, 3e-3)
    assert loss.query_regularizer == loss.doc_regularizer == "flops"
    training = recipe.training
    # one epoch of 200,000 pairs at 16 per device x 8 processes; sentence-transformers' regularizer warm-up is a third
    assert training.steps == -(-200_000 // (16 * 8)) == 1563 and training.batch_size == 128
    assert training.lr_warmup_steps == int(np.ceil(0.1 * 1563)) and loss.flops_warmup_steps == 1563 // 3
    assert (training.lr, training.seed, training.schedule, training.weight_decay) == (2e-5, 12, "linear", 0.0)
    assert training.max_length_query == training.max_length_doc == 512


def test_every_chem_value_cites_its_source() -> None:
    """Each value under data, loss and training names its file (and line, for the authors' script)."""
    lines = CHEM.read_text().splitlines()
    body = [line for line in lines[lines.index("data:"):] if line.startswith("  ")]
    assert body and all(re.search(r"# \[(C\]:\d+|ST\]|HF\]|R\])", line) for line in body), body
    assert "chem/train_chem.py @6addf32bcc6cb69a4c20481715b85eb84b505060" in CHEM.read_text()


@pytest.mark.slow  # ~10 s; test_train's every-shipped-recipe dry run covers its exit status in the fast run
def test_chem_recipe_dry_run_prints_plan_and_cost(models_dir: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert train(["--recipe", "chem_splade", "--dry-run", "--model-dir", str(models_dir)]) == 0
    plan = capsys.readouterr().out
    for expected in ("pairs (generated_query, paragraph) from BASF-AI/dolma-chem-only-query-generated, 200000 kept",
                     "1563 steps x 128 queries", "flops d 0.003", "max length q 512 / d 512", "GPU-", "PFLOP"):
        assert expected in plan, expected
    assert "cost: unknown" not in plan


def _pairs_file(path: Path, rows: int) -> Path:
    path.write_text("".join(json.dumps({"generated_query": f"what is compound {i}?", "paragraph": f"compound {i} is "
                                         f"a salt of acid {i % 7}.", "other": i}) + "\n" for i in range(rows)))
    return path


def test_pairs_keep_the_rows_the_authors_script_keeps(tmp_path: Path) -> None:
    """train_chem.py @6addf32 lines 150-158, written out: shuffle(seed) -> first max + held_out rows ->
    train_test_split(min(held_out, n // 20), seed)'s train rows; numpy's default_rng is what `datasets` draws from."""
    source = PairsSource(_pairs_file(tmp_path / "pairs.jsonl", 1000), None, fields=("generated_query", "paragraph"),
                         max_examples=100, held_out=10)
    data = pairs_training_set(source, seed=12)
    shuffled = np.random.default_rng(12).permutation(1000)[:110]
    split = np.random.default_rng(12).permutation(110)
    kept = [str(row) for row in shuffled[split[min(10, 110 // 20):]]]
    assert [qid for qid, _ in data.pairs] == kept and len(data) == 105
    example = data.example(0, random.Random(0))
    assert example.query == f"what is compound {kept[0]}?"
    assert example.documents == [f"compound {kept[0]} is a salt of acid {int(kept[0]) % 7}."]
    every = pairs_training_set(PairsSource(tmp_path / "pairs.jsonl", None, fields=("generated_query", "paragraph")), 12)
    assert len(every) == 1000 and len(batch_examples(every, 0, 4, 12)) == 4


def test_pairs_read_a_json_array_and_name_a_bad_row(tmp_path: Path) -> None:
    array = tmp_path / "pairs.json"
    array.write_text(json.dumps([{"query": "q1", "positive": "d1"}, {"query": "q2", "positive": "d2"}]))
    assert len(pairs_training_set(PairsSource(array, None), seed=0)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q1", "positive": "d1"}\n{"query": "q2"}\n')
    with pytest.raises(VtreproError, match=r"bad.jsonl: line 2: expected \{\"query\": text, \"positive\": text\}"):
        pairs_training_set(PairsSource(bad, None), seed=0)


@pytest.mark.slow  # imports `datasets` and asks the Hub
def test_pairs_from_the_hub_fail_with_one_line_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(VtreproError, match="could not be loaded .*set data.path"):
        pairs_training_set(PairsSource(None, "BASF-AI/dolma-chem-only-query-generated"), seed=12)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r["data"].update(path="pairs.jsonl"), "reads one source: set data.path .* or data.hub"),
    (lambda r: r["data"].update(negatives=1), "data.format pairs has no hard negatives"),
    (lambda r: r["data"].update(teacher="scores.jsonl"), "pairs has no ids for teacher scores"),
    (lambda r: r["loss"].update(in_batch_negatives=False), "trains with in-batch negatives only"),
    (lambda r: r["data"].update(held_out=-1), "data.held_out must be"),
])
def test_pairs_recipe_errors_name_the_line(tmp_path: Path, edit, message: str) -> None:
    yaml = YAML()
    document = yaml.load(CHEM.read_text())
    edit(document)
    path = tmp_path / "recipe.yaml"
    with open(path, "w") as handle:
        yaml.dump(document, handle)
    with pytest.raises(VtreproError, match=rf"recipe.yaml:\d+: .*{message}"):
        load_recipe(path)


@pytest.mark.slow
def test_pairs_train_a_few_steps_on_splade_tiny(tmp_path: Path, splade_tiny: Path) -> None:
    """The chem recipe's data and loss on a local pairs file, splade-tiny, three steps on CPU."""
    yaml = YAML()
    recipe = yaml.load(CHEM.read_text())
    recipe["model"] = str(splade_tiny)
    recipe["data"].update(hub=None, path=str(_pairs_file(tmp_path / "pairs.jsonl", 40)), max_examples=24, held_out=4)
    recipe["loss"]["flops_warmup_steps"] = 2
    recipe["training"].update(steps=3, batch_size=4, lr_warmup_steps=1, max_length_query=16, max_length_doc=32,
                              dtype="float32", save_every=2, cpu_threads=2)
    path = tmp_path / "chem_tiny.yaml"
    with open(path, "w") as handle:
        yaml.dump(recipe, handle)
    assert train(["--recipe", str(path), "--output", str(tmp_path / "run")]) == 0
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [1, 2, 3] and all(np.isfinite(entry["loss"]) for entry in log)
    assert (tmp_path / "run" / "final" / "config.json").is_file()
