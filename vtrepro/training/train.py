"""Train SPLADE models from a YAML recipe, on one CPU, one GPU or many processes (torchrun, DDP).

``python -m vtrepro train --config regressions/recipes/splade_tiny_nfcorpus.yaml`` runs the recipe's
pipeline stages (vocabulary transfer, MLM adaptation, calibration), then trains, writing to
``runs/train/<recipe name>/``::

    01-transfer/ 02-mlm/ ...         finished pipeline stages (HF folders), skipped on a rerun
    checkpoint-000500/              HF folder + trainer_state.pt (optimizer, scheduler, step, RNG states, CPU threads)
    final/                          the trained model (HF folder, idf.json for inference-free models)
    train_log.jsonl, curves.png     per-step loss, FLOPS, active terms, learning rate
    data/                           mined BM25 negatives, IDF table

``torchrun --standalone --nproc_per_node N -m vtrepro train --config ...`` runs the same recipe with
DDP (gloo on CPU, nccl on GPU). The recipe's batch size is global: each process encodes its slice,
representations are gathered so in-batch negatives, FLOPS and the loss cover the whole batch, and
the loss trajectory matches a single process. Rerunning an interrupted command resumes from the
latest checkpoint with the same data order and losses. docs/training.md describes the recipe format.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from torch import Tensor, nn

from vtrepro.core.cli import cli_entry, command_parser, positive_float
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, read_jsonl, write_json
from vtrepro.core.progress import Progress
from vtrepro.core.schema import BOOLEAN_FIX, bounds_text, is_boolean, read_yaml, within
from vtrepro.training import losses
from vtrepro.training.schedule import lr_factor
from vtrepro.vocabulary.transfer import INITS, SIMILARITIES

RECIPES_DIR = Path(__file__).resolve().parents[2] / "regressions" / "recipes"
STATE_NAME = "trainer_state.pt"
LOG_NAME = "train_log.jsonl"
PLOT_NAME = "curves.png"
REPORT_NAME = "training_report.json"
FAILED_NAME = ".rank0-failed"
PREPARED_NAME = ".prepared"
POLL_SECONDS = 5.0
HUB_TIMEOUT_S = 10.0
DEFAULT_GPU_TFLOPS = 150.0
# Offline stand-ins for the cost estimate of Hub models that are not local: transformers' default
# configs of these model types are documented as those checkpoints' architectures.
KNOWN_ARCHITECTURES = {"answerdotai/ModernBERT-base": "modernbert", "bert-base-uncased": "bert",
                       "google-bert/bert-base-uncased": "bert"}

# ---------------------------------------------------------------------------- recipe schema

_REQUIRED = object()


@dataclass(frozen=True)
class Field:
    """One recipe key: its type, default, allowed values and bounds (``minimum``/``maximum`` inclusive,
    ``above``/``below`` exclusive)."""

    kind: type | str
    default: Any = _REQUIRED
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    below: float | None = None
    nullable: bool = False

    @property
    def bounds(self) -> tuple[float | None, float | None, float | None, float | None]:
        return self.minimum, self.maximum, self.above, self.below


_TOP = {
    "description": Field(str, ""), "model": Field(str), "trust_remote_code": Field(bool, False),
    "query_encoder": Field(str, "splade", ("splade", "idf")), "idf_corpus": Field(str, None, nullable=True),
    "stages": Field("list", []), "data": Field("mapping"), "loss": Field("mapping", {}),
    "training": Field("mapping"),
}
_DATA_COMMON = {
    "format": Field(str, choices=("beir", "triples", "msmarco")), "negatives": Field(int, 1, minimum=0),
    "teacher": Field(str, None, nullable=True),
}
_DATA_FORMATS = {
    "beir": {"dataset": Field(str), "split": Field(str, "train"), "min_relevance": Field(int, 1, minimum=1),
             "mining": Field(str, "bm25", ("bm25", "none")), "depth": Field(int, 100, minimum=1)},
    "triples": {"path": Field(str)},
    "msmarco": {"hard_negatives": Field(str), "collection": Field(str), "queries": Field(str),
                "systems": Field("str_list", None, nullable=True),
                "per_system": Field(int, None, minimum=1, nullable=True)},
}
_LOSS = {
    "ranking": Field(str, "infonce", ("infonce", "margin_mse", "kl")), "temperature": Field(float, 1.0, above=0),
    "in_batch_negatives": Field(bool, True), "lambda_q": Field(float, 0.0, minimum=0),
    "lambda_d": Field(float, 0.0, minimum=0), "flops_warmup_steps": Field(int, 0, minimum=0),
    "query_regularizer": Field(str, "flops", ("flops", "l1")), "doc_regularizer": Field(str, "flops", ("flops", "l1")),
    "doc_active_threshold": Field(int, None, minimum=0, nullable=True),
}
_TRAINING = {
    "steps": Field(int, minimum=1), "batch_size": Field(int, 32, minimum=1), "lr": Field(float, 2e-5, above=0),
    "lr_warmup_steps": Field(int, 0, minimum=0), "schedule": Field(str, "linear", ("linear", "constant")),
    "weight_decay": Field(float, 0.01, minimum=0), "max_grad_norm": Field(float, 1.0, above=0, nullable=True),
    "max_length_query": Field(int, 32, minimum=1), "max_length_doc": Field(int, 256, minimum=1),
    "dropout": Field(float, None, minimum=0, maximum=1, nullable=True),
    "precision": Field(str, "fp32", ("fp32", "bf16")), "save_every": Field(int, 500, minimum=1),
    "keep_checkpoints": Field(int, 2, minimum=1), "seed": Field(int, 42, minimum=0),
    "cpu_threads": Field(int, None, minimum=1, nullable=True),
}
_LEAVEOUT = {"fraction": Field(float, 0.1, above=0, below=1), "seed": Field(int, 0, minimum=0)}
_CORPUS = {"dataset": Field(str, None, nullable=True), "corpus": Field(str, None, nullable=True)}
_STAGES = {
    "transfer": {"target_tokenizer": Field(str, "bert-base-uncased"), "reference": Field(str, None, nullable=True),
                 "init": Field(str, "topology", INITS), "temperature": Field(float, 1.0, above=0),
                 "similarity": Field(str, "cosine", SIMILARITIES),
                 "target_norm": Field(bool, False), "seed": Field(int, 0, minimum=0),
                 "leaveout": Field("mapping", None, nullable=True)},
    "mlm": {**_CORPUS, "steps": Field(int, minimum=1), "mask_rate": Field(float, 0.15, above=0, maximum=1),
            "max_length": Field(int, 128, minimum=8), "lr": Field(float, 5e-5, above=0),
            "batch_size": Field(int, 32, minimum=1), "warmup_steps": Field(int, 0, minimum=0),
            "precision": Field(str, "fp32", ("fp32", "bf16")), "seed": Field(int, 0, minimum=0)},
    "calibrate": {**_CORPUS, "docs": Field(int, 20_000, minimum=1),
                  "cut_percent": Field(float, None, above=0, below=100, nullable=True),
                  "target_terms": Field(float, None, above=0, nullable=True), "max_length": Field(int, 512, minimum=1),
                  "max_sample": Field(int, 10_000, minimum=1), "batch_size": Field(int, 32, minimum=1),
                  "seed": Field(int, 0, minimum=0)},
}
# Settings that do not change the trained weights: a resumed run may differ in them.
_NOT_FINGERPRINTED = {"description", "save_every", "keep_checkpoints", "cpu_threads"}


@dataclass(frozen=True)
class Stage:
    name: str
    options: dict[str, Any]


@dataclass(frozen=True)
class Recipe:
    path: Path
    name: str
    model: str
    data: dict[str, Any]
    loss: dict[str, Any]
    training: dict[str, Any]
    description: str = ""
    trust_remote_code: bool = False
    query_encoder: str = "splade"
    idf_corpus: str | None = None
    stages: tuple[Stage, ...] = ()

    def fingerprint(self) -> str:
        """SHA-256 of every setting that shapes the trained weights."""
        settings = {key: value for key, value in asdict(self).items() if key not in ("path", "name", "description")}
        settings["training"] = {key: value for key, value in self.training.items() if key not in _NOT_FINGERPRINTED}
        return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def group_size(self) -> int:
        """Documents per query in a batch: the positive and its hard negatives."""
        return 1 + self.data["negatives"]


class _Checker:
    """Typed reading of recipe mappings; every problem names the file, line and key."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, node: Any, key: Any, message: str) -> VtreproError:
        line = None
        if isinstance(node, CommentedMap) and key is not None and key in node:
            line = node.lc.key(key)[0]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and key < len(node):
            line = node.lc.item(key)[0]
        elif hasattr(node, "lc"):
            line = node.lc.line
        return VtreproError(f"{self.path}{'' if line is None else f':{line + 1}'}: {message}")

    def read(self, node: Any, schema: dict[str, Field], where: str) -> dict[str, Any]:
        """Validate ``node`` against ``schema``: unknown keys, missing required keys, types and bounds."""
        if node is None:
            node = CommentedMap()
        if not isinstance(node, CommentedMap):
            raise self.error(node, None, f"{where} must be a mapping of keys to values")
        for key in node:
            if key not in schema:
                raise self.error(node, key, f"unknown key '{key}' in {where}; "
                                            f"expected one of {', '.join(sorted(schema))}")
        values = {}
        for key, spec in schema.items():
            if key in node:
                values[key] = self.value(node, key, spec, f"{where}.{key}" if where != "the recipe" else key)
            elif spec.default is _REQUIRED:
                raise self.error(node, None, f"{where} needs '{key}'")
            else:
                values[key] = spec.default
        return values

    def value(self, node: CommentedMap, key: str, spec: Field, where: str) -> Any:
        value = node[key]
        if value is None:
            if spec.nullable:
                return None
            raise self.error(node, key, f"{where} must not be empty")
        if spec.kind in ("mapping", "list"):
            expected = CommentedMap if spec.kind == "mapping" else CommentedSeq
            if not isinstance(value, expected):
                raise self.error(node, key, f"{where} must be a {spec.kind}")
            return value
        if spec.kind == "str_list":
            if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
                raise self.error(node, key, f"{where} must be a non-empty list of strings")
            return tuple(value)
        if spec.kind is bool:
            if not is_boolean(value):
                raise self.error(node, key, f"{where} must be true or false, got {value!r}; {BOOLEAN_FIX}")
            return bool(value)
        if spec.kind is float and isinstance(value, int) and not is_boolean(value):
            value = float(value)
        if not isinstance(value, spec.kind) or is_boolean(value):
            raise self.error(node, key, f"{where} must be {_KIND_NAMES[spec.kind]}, got {value!r}")
        if spec.kind is str:
            value = str(value)
        if spec.choices and value not in spec.choices:
            raise self.error(node, key, f"{where} must be one of {', '.join(spec.choices)}, got {value!r}")
        if spec.kind in (int, float) and not within(value, *spec.bounds):
            raise self.error(node, key, f"{where} must be {_KIND_NAMES[spec.kind]} {bounds_text(*spec.bounds)}, "
                                        f"got {value!r}")
        return value


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string"}


def find_recipe(recipe: str) -> Path:
    """A recipe file path, or a name (with or without .yaml) in ./regressions/recipes or the repo's."""
    candidates = [Path(recipe)]
    for folder in (Path.cwd() / "regressions" / "recipes", RECIPES_DIR):
        candidates += [folder / recipe, folder / f"{recipe}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise VtreproError(f"recipe '{recipe}' not found: give a YAML file path or a name in {RECIPES_DIR}")


def load_recipe(recipe: str | Path) -> Recipe:
    """Load and fully validate a training recipe; the first problem is a one-line ``file:line:`` error."""
    path = find_recipe(str(recipe))
    document = read_yaml(path)
    check = _Checker(path)
    if not isinstance(document, CommentedMap):
        raise VtreproError(f"{path}:1: a recipe must be a YAML mapping with 'model', 'data' and 'training'")
    top = check.read(document, _TOP, "the recipe")
    data_node = document["data"]
    if not isinstance(data_node.get("format"), str) or data_node["format"] not in _DATA_FORMATS:
        raise check.error(data_node, "format" if "format" in data_node else None,
                          f"data.format must be one of {', '.join(_DATA_FORMATS)}")
    data = check.read(data_node, {**_DATA_COMMON, **_DATA_FORMATS[data_node["format"]]}, "data")
    loss = check.read(document.get("loss"), _LOSS, "loss")
    training = check.read(document["training"], _TRAINING, "training")
    stages = tuple(_read_stage(check, top["stages"], index) for index in range(len(top["stages"])))
    recipe = Recipe(path=path, name=path.stem, model=top["model"], data=data, loss=loss, training=training,
                    description=top["description"], trust_remote_code=top["trust_remote_code"],
                    query_encoder=top["query_encoder"], idf_corpus=top["idf_corpus"], stages=stages)
    _check_consistency(check, document, recipe)
    return recipe


def _read_stage(check: _Checker, stages: CommentedSeq, index: int) -> Stage:
    node = stages[index]
    where = f"stages[{index}]"
    if not isinstance(node, CommentedMap) or len(node) != 1 or next(iter(node)) not in _STAGES:
        raise check.error(stages, index, f"{where} must be one of '- transfer: {{...}}', '- mlm: {{...}}', "
                                         "'- calibrate: {...}'")
    name = next(iter(node))
    options = check.read(node[name], _STAGES[name], f"{where}.{name}")
    if name == "transfer" and options["leaveout"] is not None:
        options["leaveout"] = check.read(options["leaveout"], _LEAVEOUT, f"{where}.transfer.leaveout")
    if name in ("mlm", "calibrate") and (options["dataset"] is None) == (options["corpus"] is None):
        raise check.error(node, name, f"{where}.{name} needs exactly one of 'dataset' (BEIR name) and 'corpus' (JSONL)")
    if name == "calibrate" and options["cut_percent"] is not None and options["target_terms"] is not None:
        raise check.error(node, name, f"{where}.calibrate takes one of 'cut_percent' and 'target_terms'")
    return Stage(name, options)


def _check_consistency(check: _Checker, document: CommentedMap, recipe: Recipe) -> None:
    """Rules that span keys: teacher scores for distillation, batch shapes, the IDF query encoder."""
    data, loss, training = document["data"], document.get("loss") or CommentedMap(), document["training"]
    if recipe.loss["ranking"] in ("margin_mse", "kl"):
        if recipe.data["teacher"] is None:
            raise check.error(loss, "ranking", f"loss.ranking {recipe.loss['ranking']} needs teacher scores: "
                                               "set data.teacher (JSONL {qid, docid, score} or a pickled dict)")
        if recipe.data["negatives"] < 1:
            raise check.error(data, "negatives", f"loss.ranking {recipe.loss['ranking']} needs data.negatives >= 1")
    if recipe.data["format"] == "triples":
        if recipe.data["negatives"] != 1:
            raise check.error(data, "negatives", "data.format triples has exactly one negative per line: "
                                                 "set data.negatives to 1")
        if recipe.data["teacher"] is not None:
            raise check.error(data, "teacher", "data.format triples has no query or document ids for teacher scores; "
                                               "use format beir or msmarco")
    if recipe.data["format"] == "beir" and recipe.data["mining"] == "none" and recipe.data["negatives"]:
        raise check.error(data, "negatives", "data.mining none gives no hard negatives: set data.negatives to 0")
    if recipe.query_encoder == "idf":
        if recipe.loss["lambda_q"] > 0:
            raise check.error(loss, "lambda_q", "query_encoder idf has no trained query side: set loss.lambda_q to 0")
        if recipe.idf_corpus is None and recipe.data["format"] == "triples":
            raise check.error(document, "query_encoder", "query_encoder idf with triples needs idf_corpus "
                                                         "(a BEIR dataset or a corpus file)")
    elif recipe.idf_corpus is not None:
        raise check.error(document, "idf_corpus", "idf_corpus is only used with query_encoder: idf")
    if recipe.training["lr_warmup_steps"] >= recipe.training["steps"]:
        raise check.error(training, "lr_warmup_steps", "training.lr_warmup_steps must be below training.steps")


# ---------------------------------------------------------------------------- inputs and plan


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


def stage_dir(output: Path, index: int, stage: Stage) -> Path:
    return output / f"{index + 1:02d}-{stage.name}"


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


def _architecture(name: str, model_dir) -> Any | None:
    """The config of a local model, or transformers' default config for a known Hub architecture."""
    from transformers import AutoConfig

    from vtrepro.model.loading import resolve_model

    source = resolve_model(name, model_dir)
    if Path(source).is_dir():
        try:
            return AutoConfig.from_pretrained(source)
        except (OSError, ValueError):
            return None
    if name in KNOWN_ARCHITECTURES:
        return AutoConfig.for_model(KNOWN_ARCHITECTURES[name])
    return None


def flops_per_token(config: Any) -> tuple[float, int]:
    """(training FLOPs per token, parameters): 6 x the parameters used in matrix products, i.e. all but
    the input embedding table, whose rows are looked up (a tied decoder still multiplies by it)."""
    from transformers import AutoModelForMaskedLM

    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    embeddings = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is embeddings
    return 6.0 * (parameters - (0 if tied else embeddings.numel())), parameters


def estimate_cost(recipe: Recipe, model_dir, gpu_tflops: float) -> list[str]:
    """Lines estimating parameters, FLOPs and GPU hours of the MLM stage and SPLADE training."""
    config = _architecture(recipe.model, model_dir)
    if config is None:
        return [f"cost: unknown (no local config for {recipe.model}; put it under --model-dir for an estimate)"]
    for stage in recipe.stages:
        if stage.name == "transfer":
            target = _architecture(stage.options["target_tokenizer"], model_dir)
            if target is None:
                return [f"cost: unknown (vocabulary size of {stage.options['target_tokenizer']} not known offline)"]
            config.vocab_size, config.pad_token_id = target.vocab_size, target.pad_token_id
    per_token, parameters = flops_per_token(config)
    lines = [f"model: {config.model_type}, {parameters / 1e6:.1f}M parameters (vocabulary {config.vocab_size}, "
             f"hidden {config.hidden_size}); ~{per_token / 1e9:.2f} GFLOP per training token"]
    total = 0.0
    for stage in recipe.stages:
        if stage.name == "mlm":
            options = stage.options
            flop = per_token * options["steps"] * options["batch_size"] * options["max_length"]
            lines.append(f"  mlm: {options['steps']} steps x {options['batch_size']} x {options['max_length']} tokens "
                         f"= {_flops(flop)}")
            total += flop
        elif stage.name == "calibrate":
            options = stage.options
            flop = per_token / 3 * min(options["docs"], options["max_sample"]) * options["max_length"]
            lines.append(f"  calibrate: {min(options['docs'], options['max_sample'])} documents = "
                         f"{_flops(flop)}")
            total += flop
    training = recipe.training
    query_tokens = training["max_length_query"] if recipe.query_encoder == "splade" else 0
    tokens = training["batch_size"] * (query_tokens + recipe.group_size * training["max_length_doc"])
    flop = per_token * training["steps"] * tokens
    lines.append(f"  splade: {training['steps']} steps x {training['batch_size']} queries x "
                 f"({query_tokens} + {recipe.group_size} x {training['max_length_doc']}) tokens = {_flops(flop)}")
    total += flop
    hours = total / (gpu_tflops * 1e12) / 3600
    duration = f"{hours:.1f} GPU-hours" if hours >= 1 else f"{hours * 60:.1f} GPU-minutes"
    lines.append(f"  total ~{_flops(total)} (upper bound: every text at its max length; attention not counted): ~{duration} "
                 f"at {gpu_tflops:g} TFLOP/s sustained (an assumption; --gpu-tflops)")
    return lines


def _flops(value: float) -> str:
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1e9:.1f} GFLOP"


def describe_plan(recipe: Recipe, output: Path, data_dir, model_dir, gpu_tflops: float = DEFAULT_GPU_TFLOPS) -> str:
    """The recipe's stages, training setup, input availability and estimated cost."""
    lines = [f"{recipe.path}: {recipe.description}".rstrip(": "), f"output: {output}"]
    current = recipe.model
    for index, stage in enumerate(recipe.stages):
        out = stage_dir(output, index, stage)
        done = " (done)" if out.is_dir() else ""
        lines.append(f"{index + 1}. {stage.name} {current} -> {out}{done}")
        lines.append(f"   {_stage_command(stage, current, out)}")
        current = str(out)
    data, loss, training = recipe.data, recipe.loss, recipe.training
    if data["format"] == "beir":
        mined = f"BM25 negatives from the top {data['depth']}" if data["mining"] == "bm25" else "no mined negatives"
        source = f"BEIR {data['dataset']} {data['split']} qrels, {mined}"
    elif data["format"] == "triples":
        source = f"triples {data['path']}"
    else:
        source = (f"MS MARCO hard negatives {data['hard_negatives']} "
                  f"(systems: {', '.join(data['systems']) if data['systems'] else 'all'})")
    teacher = f", teacher {data['teacher']}" if data["teacher"] else ""
    lines.append(f"{len(recipe.stages) + 1}. train SPLADE from {current} -> {output / 'final'}")
    lines.append(f"   data: {source}; {data['negatives']} negative(s) per query{teacher}")
    lines.append(f"   queries: {'IDF (inference-free)' if recipe.query_encoder == 'idf' else 'SPLADE encoder'}; "
                 f"loss {loss['ranking']}, {loss['query_regularizer']} q {loss['lambda_q']:g}, "
                 f"{loss['doc_regularizer']} d {loss['lambda_d']:g}, warm-up {loss['flops_warmup_steps']} steps")
    lines.append(f"   {training['steps']} steps x {training['batch_size']} queries, lr {training['lr']:g} "
                 f"({training['schedule']}, warm-up {training['lr_warmup_steps']}), max length q {training['max_length_query']} "
                 f"/ d {training['max_length_doc']}, {training['precision']}, checkpoint every {training['save_every']}")
    lines.append("inputs:")
    for label, kind, value in required_inputs(recipe, output):
        where, problem = availability(kind, value, data_dir, model_dir)
        lines.append(f"  {label}: {kind} {value}: {where}" + (f" ({problem})" if problem else ""))
    return "\n".join(lines + estimate_cost(recipe, model_dir, gpu_tflops))


def _stage_command(stage: Stage, model: str, out: Path) -> str:
    options = stage.options
    if stage.name == "transfer":
        reference = f" --reference {options['reference']}" if options["reference"] else ""
        leaveout = options["leaveout"]
        leaveout = f" --leaveout {leaveout['fraction']} --leaveout-seed {leaveout['seed']}" if leaveout else ""
        return (f"python -m vtrepro transfer --source {model} --target-tokenizer {options['target_tokenizer']}{reference} "
                f"--init {options['init']} --temperature {options['temperature']} --similarity {options['similarity']}"
                f"{leaveout} --out {out}")
    corpus = f"--dataset {options['dataset']}" if options["dataset"] else f"--corpus {options['corpus']}"
    if stage.name == "mlm":
        return (f"python -m vtrepro mlm --model {model} {corpus} --steps {options['steps']} --mask-rate "
                f"{options['mask_rate']} --max-length {options['max_length']} --lr {options['lr']} "
                f"--batch-size {options['batch_size']} --warmup-steps {options['warmup_steps']} "
                f"--precision {options['precision']} --seed {options['seed']} --out {out}")
    target = (f"--target-terms {options['target_terms']}" if options["target_terms"] is not None
              else f"--cut-percent {options['cut_percent'] or 60}")
    return f"python -m vtrepro calibrate --model {model} {corpus} --docs {options['docs']} {target} --out {out}"


# ---------------------------------------------------------------------------- processes


@dataclass
class Processes:
    """This process's place in a torchrun job (or a lone process) and its device."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def start(cls) -> Processes:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if world > 1:
            import torch.distributed as dist

            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(minutes=30))
            return cls(dist.get_rank(), world, device)
        return cls(0, 1, device)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()

    def gather(self, tensor: Tensor) -> Tensor:
        """Every process's rows, in rank order; this process's rows keep their gradient."""
        if self.world == 1:
            return tensor
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(self.world)]
        dist.all_gather(parts, tensor.detach().contiguous())
        parts[self.rank] = tensor
        return torch.cat(parts)

    def gather_objects(self, value: Any) -> list[Any]:
        if self.world == 1:
            return [value]
        import torch.distributed as dist

        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def main_first(self, output: Path, done: Path, work: Callable[[], None]) -> None:
        """Run ``work`` on rank 0 while the others poll for ``done`` (no collective, so no timeout on
        long stages); a failure on rank 0 is reported by every process."""
        failed = output / FAILED_NAME
        if self.main:
            try:
                work()
            except BaseException as error:
                output.mkdir(parents=True, exist_ok=True)
                failed.write_text(f"{type(error).__name__}: {error}", encoding="utf-8")
                raise
            return
        while not done.exists():
            if failed.exists():
                raise VtreproError(f"rank 0 failed: {failed.read_text(encoding='utf-8')}")
            time.sleep(POLL_SECONDS)


# ---------------------------------------------------------------------------- model


class MaxPooledProjection(torch.autograd.Function):
    """Per text, the max over its rows of ``rows @ weight.T + bias``, with a sparse backward.

    ``rows`` are the texts' token rows concatenated (``lengths`` per text). Only each (text, term)'s
    maximal row gets gradient, and only where the incoming gradient is non-zero (SPLADE's relu zeroes
    it for inactive terms), so the backward costs O(active terms x hidden) instead of another pass over
    the tokens x vocabulary logits, which are never stored: the forward keeps one text's logits at a time.
    """

    @staticmethod
    def forward(ctx, rows: Tensor, weight: Tensor, bias: Tensor | None, lengths: list[int]) -> Tensor:
        values = rows.new_empty(len(lengths), weight.shape[0])
        argmax = torch.empty(len(lengths), weight.shape[0], dtype=torch.long, device=rows.device)
        start = 0
        for text, length in enumerate(lengths):
            torch.max(rows[start:start + length] @ weight.T, dim=0, out=(values[text], argmax[text]))
            argmax[text] += start
            start += length
        ctx.save_for_backward(rows, weight, argmax)
        ctx.has_bias = bias is not None
        return values + bias if bias is not None else values

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor | None, None]:
        rows, weight, argmax = ctx.saved_tensors
        texts, terms = grad.nonzero(as_tuple=True)
        scale = grad[texts, terms].unsqueeze(1).float()
        source = argmax[texts, terms]
        grad_rows = torch.zeros_like(rows).index_add_(0, source, (scale * weight[terms].float()).to(rows.dtype))
        grad_weight = torch.zeros_like(weight).index_add_(0, terms, (scale * rows[source].float()).to(weight.dtype))
        return grad_rows, grad_weight, grad.sum(dim=0) if ctx.has_bias else None, None


class SpladeModel(nn.Module):
    """A masked LM as a SPLADE encoder: (texts) -> (n, V) weights log(1 + relu(max over real tokens of
    the MLM logits)), special-token terms zeroed. ``forward`` takes several tokenized batches at once so
    DDP sees one forward per step."""

    def __init__(self, name: str, mlm: nn.Module, tokenizer: Any):
        from vtrepro.model.splade import mlm_head_transform

        super().__init__()
        self.mlm = mlm
        self.head = mlm_head_transform(name, mlm.eval(), tokenizer)  # shares the MLM head's parameters
        self.decoder = mlm.get_output_embeddings()
        keep = torch.ones(self.decoder.out_features)
        keep[sorted(set(tokenizer.all_special_ids) | set(range(len(tokenizer), len(keep))))] = 0.0
        self.register_buffer("keep", keep, persistent=False)

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        from vtrepro.model.splade import splade_activation

        hidden = self.mlm.base_model(**batch)[0]
        mask = batch["attention_mask"].bool()
        pooled = MaxPooledProjection.apply(self.head(hidden[mask]), self.decoder.weight, self.decoder.bias,
                                           mask.sum(dim=1).tolist())
        return splade_activation(pooled.float()) * self.keep

    def forward(self, *batches: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return tuple(self.encode(batch) for batch in batches)


def set_dropout(model: nn.Module, probability: float) -> None:
    """Set every dropout of the model (modules and attention-dropout attributes) to ``probability``."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = probability
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, probability)


# ---------------------------------------------------------------------------- checkpoints


def latest_checkpoint(output: Path) -> Path | None:
    """The finished checkpoint with the highest step (checkpoints are renamed into place when complete)."""
    found = sorted(output.glob("checkpoint-*"), key=lambda path: path.name)
    return found[-1] if found else None


def save_folder(folder: Path, mlm: nn.Module, tokenizer: Any, extra: Callable[[Path], None]) -> None:
    """Write an HF folder (model, tokenizer, plus ``extra``) beside ``folder`` and rename it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    try:
        mlm.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        extra(staging)
        if folder.exists():
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


# ---------------------------------------------------------------------------- stages


def run_stage(stage: Stage, model: str, out: Path, data_dir, model_dir, trust_remote_code: bool) -> None:
    """Run one pipeline stage from ``model`` into ``out`` (an HF folder written atomically)."""
    options = stage.options
    print(f"stage {stage.name}: {model} -> {out}", file=sys.stderr)
    if stage.name == "transfer":
        from vtrepro.vocabulary.transfer import run_transfer

        run_transfer(model, options["target_tokenizer"], options["reference"], options["init"], out,
                     temperature=options["temperature"], similarity=options["similarity"],
                     target_norm=options["target_norm"], seed=options["seed"], model_dir=model_dir,
                     leaveout=options["leaveout"])
    elif stage.name == "mlm":
        from vtrepro.training.mlm import run_mlm

        run_mlm(model, out, dataset=options["dataset"], corpus=_corpus_path(options["corpus"], data_dir),
                data_dir=data_dir, steps=options["steps"], mask_rate=options["mask_rate"],
                max_length=options["max_length"], lr=options["lr"], batch_size=options["batch_size"],
                warmup_steps=options["warmup_steps"], precision=options["precision"], seed=options["seed"],
                model_dir=model_dir, trust_remote_code=trust_remote_code)
    else:
        from vtrepro.vocabulary.calibrate import run_calibration

        run_calibration(model, out, dataset=options["dataset"], corpus=_corpus_path(options["corpus"], data_dir),
                        data_dir=data_dir, docs=options["docs"], cut_percent=options["cut_percent"],
                        target_terms=options["target_terms"], max_length=options["max_length"],
                        max_sample=options["max_sample"], batch_size=options["batch_size"], seed=options["seed"],
                        model_dir=model_dir)


def _corpus_path(value: str | None, data_dir) -> Path | None:
    return None if value is None else data_path(value, data_dir)


def run_stages(recipe: Recipe, output: Path, data_dir, model_dir, processes: Processes) -> str:
    """Run the unfinished stages (on rank 0) and return the model training starts from."""
    current = recipe.model
    for index, stage in enumerate(recipe.stages):
        out = stage_dir(output, index, stage)
        if not out.is_dir():
            processes.main_first(output, out, functools.partial(run_stage, stage, current, out, data_dir, model_dir,
                                                                recipe.trust_remote_code))
        current = str(out)
    return current


# ---------------------------------------------------------------------------- training


def build_training_set(recipe: Recipe, data_dir, cache_dir: Path):
    """The recipe's training examples (BM25 negatives mined into ``cache_dir`` once)."""
    from vtrepro.training import data as training_data

    data = recipe.data
    if data["format"] == "triples":
        return training_data.TriplesTrainingSet(data_path(data["path"], data_dir))
    if data["format"] == "beir":
        examples = training_data.beir_training_set(data["dataset"], data_dir, data["split"], data["negatives"],
                                                   data["mining"], data["depth"], cache_dir, data["min_relevance"])
    else:
        examples = training_data.msmarco_training_set(
            data_path(data["hard_negatives"], data_dir), data_path(data["collection"], data_dir),
            data_path(data["queries"], data_dir), data["negatives"], data["systems"], data["per_system"])
    if data["teacher"]:
        examples = training_data.with_teacher(examples, data_path(data["teacher"], data_dir))
    return examples


def idf_texts(recipe: Recipe, data_dir):
    """The corpus the IDF query weights are computed on: idf_corpus, else the training corpus."""
    from vtrepro.training.data import dataset_or_file_texts

    if recipe.idf_corpus is not None:
        source = recipe.idf_corpus
        path = data_path(source, data_dir)
        return dataset_or_file_texts(str(path) if path.is_file() else source, data_dir)
    if recipe.data["format"] == "beir":
        return dataset_or_file_texts(recipe.data["dataset"], data_dir)
    return dataset_or_file_texts(str(data_path(recipe.data["collection"], data_dir)), data_dir)


class Trainer:
    """The training loop of one process: batches, loss, optimizer, checkpoints, logs."""

    def __init__(self, recipe: Recipe, start: str, output: Path, data_dir, model_dir, processes: Processes):
        self.recipe, self.output, self.processes = recipe, output, processes
        self.training, self.loss_config = recipe.training, recipe.loss
        if self.training["batch_size"] % processes.world:
            raise VtreproError(f"{recipe.path}: training.batch_size {self.training['batch_size']} is the global batch "
                               f"and must be divisible by the {processes.world} processes")
        self.checkpoint = latest_checkpoint(output)
        self.state: dict[str, Any] = {}
        if self.checkpoint is not None:
            self.state = torch.load(self.checkpoint / STATE_NAME, weights_only=False)
            if self.state["fingerprint"] != recipe.fingerprint():
                raise VtreproError(f"{output}: holds checkpoints of a different recipe (or older settings); "
                                   "choose another --output or remove it to start over")
        self._load_model(start, model_dir)
        self._prepare_data(data_dir)
        params = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        decay = [parameter for parameter in params if parameter.ndim > 1]
        no_decay = [parameter for parameter in params if parameter.ndim <= 1]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": self.training["weight_decay"]},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=self.training["lr"])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(
            self.training["schedule"], self.training["lr_warmup_steps"], self.training["steps"]))
        self.step = 0
        torch.manual_seed(self.training["seed"] + processes.rank)
        if processes.device.type == "cpu":
            self._pin_cpu_threads()
        if self.state:
            self.optimizer.load_state_dict(self.state["optimizer"])
            self.scheduler.load_state_dict(self.state["scheduler"])
            self.step = self.state["step"]
            if processes.main:
                print(f"resuming from {self.checkpoint} (step {self.step})", file=sys.stderr)
            if self.state["world"] == processes.world:
                set_rng_state(self.state["rng"][processes.rank])
            elif processes.main:
                print(f"resuming a {self.state['world']}-process run with {processes.world}: same data order, "
                      "new dropout random streams", file=sys.stderr)
        self.ddp = self.model
        if processes.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            devices = [processes.device] if processes.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=devices)

    def _pin_cpu_threads(self) -> None:
        """Fix the CPU thread count for the whole run: the recipe's, else the resumed checkpoint's, else this
        process's default. Float sums (so the last bits of every update) depend on it, and a fresh process's
        default (cores, affinity, OMP_NUM_THREADS) need not be the interrupted run's; pinning also turns off
        MKL's dynamic thread choice."""
        saved = self.state.get("cpu_threads")
        threads = self.training["cpu_threads"] or saved or torch.get_num_threads()
        if saved and threads != saved and self.processes.main:
            print(f"resuming a run trained with {saved} CPU threads with {threads} (training.cpu_threads): "
                  "later steps will differ in their last bits", file=sys.stderr)
        torch.set_num_threads(threads)

    def _load_model(self, start: str, model_dir) -> None:
        from vtrepro.model.loading import load_masked_lm

        source = str(self.checkpoint) if self.checkpoint is not None else start
        mlm, self.tokenizer = load_masked_lm(source, model_dir, self.recipe.trust_remote_code)
        for name, value in (("max_length_query", self.training["max_length_query"]),
                            ("max_length_doc", self.training["max_length_doc"])):
            limit = getattr(mlm.config, "max_position_embeddings", None)
            if limit is not None and value > limit:
                raise VtreproError(f"{self.recipe.path}: training.{name} {value} exceeds the model's limit "
                                   f"of {limit} tokens")
        self.model = SpladeModel(source, mlm, self.tokenizer).to(self.processes.device)
        if self.training["dropout"] is not None:
            set_dropout(self.model, self.training["dropout"])
        self.model.train()

    def _prepare_data(self, data_dir) -> None:
        """Mine negatives / compute IDF on rank 0, then load the (cached) data everywhere."""
        from vtrepro.model.idf import IDF_NAME, IdfQueryEncoder

        cache = self.output / "data"
        prepared = cache / PREPARED_NAME

        built = {}

        def prepare() -> None:
            cache.mkdir(parents=True, exist_ok=True)
            built["data"] = build_training_set(self.recipe, data_dir, cache)
            if self.recipe.query_encoder == "idf" and not (cache / IDF_NAME).is_file():
                IdfQueryEncoder.from_corpus(self.tokenizer, idf_texts(self.recipe, data_dir)).save(cache)
            prepared.touch()

        self.processes.main_first(self.output, prepared, prepare)
        self.data = built["data"] if built else build_training_set(self.recipe, data_dir, cache)
        self.idf = None
        if self.recipe.query_encoder == "idf":
            self.idf = IdfQueryEncoder(self.tokenizer, json.loads((cache / IDF_NAME).read_text(encoding="utf-8")),
                                       self.training["max_length_query"])

    def _tokenize(self, texts: list[str], max_length: int) -> dict[str, Tensor]:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return {key: value.to(self.processes.device) for key, value in batch.items()}

    def compute(self, step: int) -> tuple[Tensor, dict[str, float]]:
        """Loss of 0-based ``step`` over the global batch, and its metrics."""
        from vtrepro.training.data import batch_examples

        training, config, processes = self.training, self.loss_config, self.processes
        examples = batch_examples(self.data, step, training["batch_size"], training["seed"],
                                  (processes.rank, processes.world))
        queries = [example.query for example in examples]
        documents = [self._tokenize([text for example in examples for text in example.documents],
                                    training["max_length_doc"])]
        with torch.autocast(processes.device.type, dtype=torch.bfloat16, enabled=training["precision"] == "bf16"):
            if self.idf is None:
                query_reps, doc_reps = self.ddp(self._tokenize(queries, training["max_length_query"]), *documents)
            else:
                (doc_reps,) = self.ddp(*documents)
                query_reps = self.idf.dense(queries, doc_reps.shape[1]).to(processes.device)
        query_reps, doc_reps = processes.gather(query_reps), processes.gather(doc_reps)
        if config["ranking"] == "infonce":
            ranking = losses.info_nce(query_reps, doc_reps, config["temperature"], config["in_batch_negatives"])
        else:
            teacher = processes.gather(torch.tensor([example.teacher for example in examples], device=processes.device))
            student = losses.group_scores(query_reps, doc_reps)
            ranking = (losses.margin_mse(student, teacher) if config["ranking"] == "margin_mse"
                       else losses.kl_distillation(student, teacher, config["temperature"]))
        regularizers = {"flops": losses.flops, "l1": losses.l1}
        lambda_q = losses.warmup_weight(config["lambda_q"], step + 1, config["flops_warmup_steps"])
        lambda_d = losses.warmup_weight(config["lambda_d"], step + 1, config["flops_warmup_steps"])
        regularization = lambda_d * regularizers[config["doc_regularizer"]](
            losses.above_length(doc_reps, config["doc_active_threshold"]))
        if self.idf is None:
            regularization = regularization + lambda_q * regularizers[config["query_regularizer"]](query_reps)
        loss = ranking + regularization
        with torch.no_grad():
            metrics = {"loss": loss.item(), "ranking_loss": ranking.item(), "regularization": float(regularization),
                       "flops_q": losses.flops(query_reps).item(), "flops_d": losses.flops(doc_reps).item(),
                       "active_q": losses.active_terms(query_reps).float().mean().item(),
                       "active_d": losses.active_terms(doc_reps).float().mean().item(),
                       "lambda_q": lambda_q, "lambda_d": lambda_d}
        return loss, metrics

    def train(self) -> Path:
        """Train from the current step to the recipe's last, checkpointing; returns the final folder."""
        training, processes = self.training, self.processes
        log_path = self.output / LOG_NAME
        if processes.main:
            truncate_log(log_path, self.step)
        progress = Progress(training["steps"], "train", "step", initial=self.step, enabled=processes.main)
        with open(log_path, "a", encoding="utf-8") if processes.main else open(os.devnull, "w") as log:
            while self.step < training["steps"]:
                started = time.perf_counter()
                loss, metrics = self.compute(self.step)
                self.optimizer.zero_grad(set_to_none=True)
                (loss * processes.world).backward()  # DDP averages gradients; the loss is already global
                if training["max_grad_norm"] is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), training["max_grad_norm"])
                metrics["lr"] = self.scheduler.get_last_lr()[0]
                self.optimizer.step()
                self.scheduler.step()
                self.step += 1
                metrics = {"step": self.step, **metrics, "seconds": round(time.perf_counter() - started, 4)}
                log.write(json.dumps(metrics) + "\n")
                log.flush()
                progress.set_postfix(loss=f"{metrics['loss']:.3f}", flops_d=f"{metrics['flops_d']:.2f}",
                                     active_d=f"{metrics['active_d']:.0f}", active_q=f"{metrics['active_q']:.0f}")
                progress.update()
                if self.step % training["save_every"] == 0 and self.step < training["steps"]:
                    self.save_checkpoint()
        progress.close()
        return self.save_final()

    def _extra_files(self, folder: Path) -> None:
        if self.idf is not None:
            self.idf.save(folder)

    def save_checkpoint(self) -> None:
        """checkpoint-<step>/: HF folder + trainer_state.pt; older checkpoints beyond keep_checkpoints removed."""
        rng = self.processes.gather_objects(rng_state())
        if self.processes.main:
            state = {"step": self.step, "fingerprint": self.recipe.fingerprint(), "world": self.processes.world,
                     "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "rng": rng,
                     "examples_seen": self.step * self.training["batch_size"], "cpu_threads": torch.get_num_threads()}

            def extra(folder: Path) -> None:
                self._extra_files(folder)
                torch.save(state, folder / STATE_NAME)

            save_folder(self.output / f"checkpoint-{self.step:06d}", self.model.mlm, self.tokenizer, extra)
            for old in sorted(self.output.glob("checkpoint-*"))[:-self.training["keep_checkpoints"]]:
                shutil.rmtree(old)
            plot_curves(self.output / LOG_NAME, self.output / PLOT_NAME)
        self.processes.barrier()

    def save_final(self) -> Path:
        final = self.output / "final"
        if self.processes.main:
            log = [record for _, record in read_jsonl(self.output / LOG_NAME)]
            tail = log[-max(1, len(log) // 10):]
            report = {
                "recipe": str(self.recipe.path), "fingerprint": self.recipe.fingerprint(), "steps": self.step,
                "processes": self.processes.world, "device": str(self.processes.device),
                "cpu_threads": torch.get_num_threads(),
                "train_seconds": round(sum(record["seconds"] for record in log), 1),
                "data": getattr(self.data, "summary", {}),
                "last_10_percent": {key: round(sum(record[key] for record in tail) / len(tail), 4)
                                    for key in ("loss", "ranking_loss", "flops_q", "flops_d", "active_q", "active_d")},
            }

            def extra(folder: Path) -> None:
                self._extra_files(folder)
                write_json(folder / REPORT_NAME, report)

            save_folder(final, self.model.mlm, self.tokenizer, extra)
            plot_curves(self.output / LOG_NAME, self.output / PLOT_NAME)
            for old in self.output.glob("checkpoint-*"):
                shutil.rmtree(old)
        self.processes.barrier()
        return final


def truncate_log(path: Path, step: int) -> None:
    """Keep the log's records up to ``step`` (those after the resumed checkpoint are redone)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= step]
    with atomic_write(path) as handle:
        handle.write("".join(line + "\n" for line in kept))


def plot_curves(log_path: Path, out: Path) -> None:
    """curves.png: loss, FLOPS, active terms and learning rate per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = [record for _, record in read_jsonl(log_path)]
    if not log:
        return
    steps = [record["step"] for record in log]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [("loss", ("loss", "ranking_loss"), "linear"), ("FLOPS", ("flops_q", "flops_d"), "log"),
              ("active terms", ("active_q", "active_d"), "log"), ("learning rate", ("lr",), "linear")]
    window = max(1, len(log) // 50)
    for axis, (title, keys, scale) in zip(axes.flat, panels):
        smoothed = window > 1 and keys != ("lr",)
        for key in keys:
            values = np.array([max(record[key], 1e-6) if scale == "log" else record[key] for record in log])
            line, = axis.plot(steps, values, alpha=0.3 if smoothed else 1.0, label="_raw" if smoothed else key)
            if smoothed:
                axis.plot(steps[window - 1:], np.convolve(values, np.ones(window) / window, mode="valid"),
                          color=line.get_color(), label=key)
        axis.set_title(f"{title} (lines: mean of {window} steps)" if smoothed else title)
        axis.set_yscale(scale)
        axis.legend()
    for axis in axes[1]:
        axis.set_xlabel("step")
    figure.tight_layout()
    with atomic_write(out, "wb") as handle:
        figure.savefig(handle, format="png", dpi=90)
    plt.close(figure)


def run_recipe(recipe: Recipe, output: Path, data_dir=None, model_dir=None) -> Path:
    """Stages then training, in this process (one of a torchrun job, or alone); returns the final folder."""
    processes = Processes.start()
    if processes.device.type == "cpu" and recipe.training["cpu_threads"]:
        torch.set_num_threads(recipe.training["cpu_threads"])  # CPU float sums depend on the thread count
    try:
        check_inputs(recipe, output, data_dir, model_dir)
        if processes.main:
            for stale in (output / FAILED_NAME, output / "data" / PREPARED_NAME):
                stale.unlink(missing_ok=True)
        processes.barrier()
        final = output / "final"
        if final.is_dir():
            if processes.main:
                print(f"{final} exists: training is complete (remove it, or choose another --output, to retrain)",
                      file=sys.stderr)
            return final
        start = run_stages(recipe, output, data_dir, model_dir, processes)
        return Trainer(recipe, start, output, data_dir, model_dir, processes).train()
    finally:
        processes.close()


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("train", __doc__)
    parser.add_argument("--config", required=True, help="recipe YAML file, or a name in regressions/recipes/")
    parser.add_argument("--output", type=Path, help="run folder (default: runs/train/<recipe name>)")
    parser.add_argument("--data-dir", help="data root holding beir/<dataset> and data files (default: $VTREPRO_DATA)")
    parser.add_argument("--model-dir", help="folder of local model copies by hub id (default: $VTREPRO_MODELS)")
    parser.add_argument("--dry-run", action="store_true", help="validate the recipe, print the plan and cost, run nothing")
    parser.add_argument("--gpu-tflops", type=positive_float, default=DEFAULT_GPU_TFLOPS,
                        help="sustained TFLOP/s assumed by the --dry-run cost estimate (default: %(default)s)")
    args = parser.parse_args(argv)
    recipe = load_recipe(args.config)
    output = args.output or Path("runs") / "train" / recipe.name
    if args.dry_run:
        print(describe_plan(recipe, output, args.data_dir, args.model_dir, args.gpu_tflops))
        return 0
    final = run_recipe(recipe, output, args.data_dir, args.model_dir)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"trained model: {final}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
