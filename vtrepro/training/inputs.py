"""The inputs a recipe reads (models, BEIR datasets, data files): where each comes from (local, the
Hugging Face Hub, a BEIR download) and the one-line failure naming a missing one before any work starts."""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.data.availability import dataset_availability, file_availability, hub_dataset_availability
from vtrepro.model.loading import model_availability
from vtrepro.training.mlm import MlmOptions
from vtrepro.training.recipe import BeirData, PairsData, Recipe
from vtrepro.training.run_folder import latest_checkpoint, stage_dir
from vtrepro.vocabulary.calibrate import CalibrationOptions
from vtrepro.vocabulary.transfer import TransferOptions


def required_inputs(recipe: Recipe, output: Path) -> list[tuple[str, str, str]]:
    """(label, kind, value) of every input the unfinished part of the recipe reads; kind is model,
    dataset, hub dataset or file."""
    inputs: list[tuple[str, str, str]] = []
    training_done = (output / "final").is_dir()
    resume_from = None if training_done else latest_checkpoint(output)  # refuses a checkpoint it cannot resume
    pending = [index for index, stage in enumerate(recipe.stages) if not stage_dir(output, index, stage).is_dir()]
    if not recipe.stages and not training_done and resume_from is None:
        inputs.append(("model", "model", recipe.model))
    for index in pending:
        stage, label = recipe.stages[index], f"stage {index + 1} ({recipe.stages[index].name})"
        if index == 0:
            inputs.append((label, "model", recipe.model))
        options = stage.options
        if isinstance(options, TransferOptions):
            inputs.append((label, "model", options.target_tokenizer))
            if options.reference:
                inputs.append((label, "model", options.reference))
        elif isinstance(options, (MlmOptions, CalibrationOptions)):
            corpus = options.dataset or options.corpus
            inputs.append((label, "dataset" if options.dataset else "file", str(corpus)))
    if training_done:
        return inputs
    data = recipe.data
    if isinstance(data, BeirData):
        inputs.append(("data", "dataset", data.dataset))
    if isinstance(data, PairsData) and data.hub:
        inputs.append(("data.hub", "hub dataset", data.hub))
    for key in ("path", "hard_negatives", "collection", "queries", "teacher"):
        if getattr(data, key, None):
            inputs.append((f"data.{key}", "file", getattr(data, key)))
    if recipe.idf_corpus:
        kind = "file" if Path(recipe.idf_corpus).suffix in (".jsonl", ".gz", ".tsv") else "dataset"
        inputs.append(("idf_corpus", kind, recipe.idf_corpus))
    return list(dict.fromkeys(inputs))


def availability(kind: str, value: str, data_dir, model_dir) -> tuple[str, str | None]:
    if kind == "model":
        return model_availability(value, model_dir)
    if kind == "dataset":
        return dataset_availability(value, data_dir)
    if kind == "hub dataset":
        return hub_dataset_availability(value)
    return file_availability(value, data_dir)


def check_inputs(recipe: Recipe, output: Path, data_dir, model_dir) -> None:
    """Fail with one line naming the first missing input (and how many more) before any work starts."""
    problems = []
    for label, kind, value in required_inputs(recipe, output):
        _, problem = availability(kind, value, data_dir, model_dir)
        if problem:
            problems.append(f"{label}: {problem}")
    if problems:
        more = f" ({len(problems) - 1} more missing input(s); --dry-run lists them)" if len(problems) > 1 else ""
        raise VtreproError(f"{recipe.path}: cannot run: {problems[0]}{more}")
