"""The inputs a recipe reads (models, BEIR datasets, data files): where each comes from (local, the
Hugging Face Hub, a BEIR download) and the one-line failure naming a missing one before any work starts."""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.training.recipe import Recipe
from vtrepro.training.run_folder import latest_checkpoint, stage_dir

HUB_TIMEOUT_S = 10.0


def data_path(value: str, data_dir: str | Path | None) -> Path:
    """A recipe file path: absolute, or relative to the data root (--data-dir / $VTREPRO_DATA) when set,
    else to the working directory."""
    from vtrepro.data.beir import data_root

    path = Path(value).expanduser()
    root = data_root(data_dir)
    if path.is_absolute() or root is None:
        return path
    return path if path.exists() and not (root / path).exists() else root / path


def hub_problem(name: str) -> str | None:
    """Why the Hugging Face Hub cannot serve ``name`` here, or None when it can (or may, for gated repos)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        with urllib.request.urlopen(f"{endpoint}/api/models/{name}", timeout=HUB_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as error:
        return f"the Hub has no model {name}" if error.code == 404 else None
    except OSError as error:
        reason = " ".join(str(getattr(error, "reason", error)).split())[:120]
        return f"the Hugging Face Hub is unreachable ({reason})"


def model_availability(name: str, model_dir: str | Path | None) -> tuple[str, str | None]:
    """(where the model comes from, the problem if it cannot be had)."""
    from vtrepro.model.loading import MODELS_ENV, resolve_model

    source = resolve_model(name, model_dir)
    if Path(source).is_dir() or Path(name).expanduser().is_file():
        return f"local {source}", None
    if name.startswith(("/", ".", "~")):
        return "missing", f"model folder {name} does not exist"
    problem = hub_problem(name)
    if problem is None:
        return "from the Hugging Face Hub", None
    root = model_dir or os.environ.get(MODELS_ENV)
    where = f"no folder {name} or {Path(name).name} under {root}" if root else f"--model-dir / ${MODELS_ENV} not set"
    return "missing", (f"model {name} is not local ({where}) and {problem}; put a copy under --model-dir / "
                       f"${MODELS_ENV} or run where the Hub is reachable")


def dataset_availability(name: str, data_dir: str | Path | None) -> tuple[str, str | None]:
    """A BEIR dataset name/folder or a corpus file: local, downloadable, or missing (with the problem)."""
    from vtrepro.data.beir import BEIR_DATASETS, BEIR_URL, load_dataset

    if Path(name).expanduser().is_file():
        return f"local {name}", None
    try:
        return f"local {load_dataset(name, data_dir, download=False).path}", None
    except VtreproError as error:
        if name not in BEIR_DATASETS:
            return "missing", str(error)
    url = BEIR_URL.format(name.split("/")[0])
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=HUB_TIMEOUT_S):
            return "to download from BEIR", None
    except OSError as error:
        reason = " ".join(str(getattr(error, "reason", error)).split())[:120]
        return "missing", (f"dataset {name} is not under the data root (--data-dir / $VTREPRO_DATA) and BEIR's "
                           f"download server is unreachable ({reason})")


def file_availability(value: str, data_dir: str | Path | None) -> tuple[str, str | None]:
    path = data_path(value, data_dir)
    if path.is_file():
        return f"local {path}", None
    return "missing", f"file {path} not found (relative paths are under --data-dir / $VTREPRO_DATA when set)"


def required_inputs(recipe: Recipe, output: Path) -> list[tuple[str, str, str]]:
    """(label, kind, value) of every input the unfinished part of the recipe reads; kind is model,
    dataset or file."""
    inputs: list[tuple[str, str, str]] = []
    training_done = (output / "final").is_dir()
    pending = [index for index, stage in enumerate(recipe.stages) if not stage_dir(output, index, stage).is_dir()]
    if not recipe.stages and not training_done and latest_checkpoint(output) is None:
        inputs.append(("model", "model", recipe.model))
    for index in pending:
        stage, label = recipe.stages[index], f"stage {index + 1} ({recipe.stages[index].name})"
        if index == 0:
            inputs.append((label, "model", recipe.model))
        if stage.name == "transfer":
            inputs.append((label, "model", stage.options["target_tokenizer"]))
            if stage.options["reference"]:
                inputs.append((label, "model", stage.options["reference"]))
        else:
            corpus = stage.options["dataset"] or stage.options["corpus"]
            inputs.append((label, "dataset" if stage.options["dataset"] else "file", corpus))
    if training_done:
        return inputs
    data = recipe.data
    if data["format"] == "beir":
        inputs.append(("data", "dataset", data["dataset"]))
    for key in ("path", "hard_negatives", "collection", "queries", "teacher"):
        if data.get(key):
            inputs.append((f"data.{key}", "file", data[key]))
    if recipe.idf_corpus:
        kind = "file" if Path(recipe.idf_corpus).suffix in (".jsonl", ".gz", ".tsv") else "dataset"
        inputs.append(("idf_corpus", kind, recipe.idf_corpus))
    return list(dict.fromkeys(inputs))


def availability(kind: str, value: str, data_dir, model_dir) -> tuple[str, str | None]:
    if kind == "model":
        return model_availability(value, model_dir)
    if kind == "dataset":
        return dataset_availability(value, data_dir)
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
