"""Training recipes: the YAML schema (every key's type, default and bounds), the :class:`Recipe` it is
read into, and :func:`load_recipe`, which validates a recipe completely and reports the first problem
as one ``file:line:`` line. docs/training.md describes the format."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import BOOLEAN_FIX, bounds_text, is_boolean, read_yaml, within
from vtrepro.vocabulary.transfer import INITS, SIMILARITIES

RECIPES_DIR = Path(__file__).resolve().parents[2] / "regressions" / "recipes"


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
