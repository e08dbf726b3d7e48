"""Training recipes: the schema of every key (type, default and bounds, read by the engine in
:mod:`vtrepro.core.schema`), the :class:`Recipe` it is read into, and :func:`load_recipe`, which
validates a recipe completely and reports the first problem as one ``file:line:`` line. Stage options
come from the modules that run them (:mod:`vtrepro.training.stages`). docs/training.md describes
the format."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vtrepro.core.options import accept_aliases, modernize
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Checker, Field, read_mapping_file
from vtrepro.core.shipped import RECIPES_DIR, find_shipped
from vtrepro.model.options import EncoderOptions
from vtrepro.search.runs import MAX_K
from vtrepro.training.mlm import DTYPES, OLD_DTYPES
from vtrepro.training.stages import STAGE_OPTIONS, Stage, read_stage

MAX_NEGATIVES = 255
"""Most hard negatives per query: a batch encodes batch_size x (1 + negatives) documents at once."""


_TOP = {
    "description": Field(str, ""), "model": Field(str), "trust_remote_code": Field(bool, False),
    "query_encoder": Field(str, "splade", ("splade", "idf")), "idf_corpus": Field(str, None, nullable=True),
    "stages": Field("list", []), "data": Field("mapping"), "loss": Field("mapping", {}),
    "training": Field("mapping"),
    "activation": EncoderOptions.schema()["activation"],
}
_DATA_COMMON = {
    "format": Field(str, choices=("beir", "triples", "msmarco", "pairs")),
    "negatives": Field(int, 1, minimum=0, maximum=MAX_NEGATIVES),
    "teacher": Field(str, None, nullable=True),
}
_DATA_FORMATS = {
    "beir": {"dataset": Field(str), "split": Field(str, "train"), "min_relevance": Field(int, 1, minimum=1),
             "mining": Field(str, "bm25", ("bm25", "none")), "depth": Field(int, 100, minimum=1, maximum=MAX_K)},
    "triples": {"path": Field(str)},
    "msmarco": {"hard_negatives": Field(str), "collection": Field(str), "queries": Field(str),
                "systems": Field("str_list", None, nullable=True),
                "per_system": Field(int, None, minimum=1, nullable=True)},
    "pairs": {"path": Field(str, None, nullable=True, what="a JSONL or JSON file of pairs"),
              "hub": Field(str, None, nullable=True, what="a Hugging Face dataset id"),
              "split": Field(str, "train"), "query_field": Field(str, "query"),
              "document_field": Field(str, "positive"),
              "max_examples": Field(int, None, minimum=1, nullable=True), "held_out": Field(int, 0, minimum=0)},
}
_LOSS = {
    "ranking": Field(str, "infonce", ("infonce", "margin_mse", "kl")), "temperature": Field(float, 1.0, above=0),
    "in_batch_negatives": Field(bool, True), "lambda_q": Field(float, 0.0, minimum=0),
    "lambda_d": Field(float, 0.0, minimum=0), "flops_warmup_steps": Field(int, 0, minimum=0),
    "query_regularizer": Field(str, "flops", ("flops", "l1")), "doc_regularizer": Field(str, "flops", ("flops", "l1")),
    "doc_active_threshold": Field(int, None, minimum=0, nullable=True),
    "doc_flops_by_position": Field(bool, False),
}
_LOSS_ALIASES = {"flops_threshold": "doc_active_threshold"}
"""The authors' keys (scripts/args.py of zhichao-aws/opensearch-sparse-model-tuning-sample) for the same
options: valid spellings, read without a notice; giving both is an error."""
_LOSS_VALUE_ALIASES = {"ranking": {"kldiv": "kl", "marginmse": "margin_mse"}}
"""The authors' loss names (LOSS_CLS_MAP in their scripts/train/loss.py) for the same losses."""
_TRAINING = {
    "steps": Field(int, minimum=1), "batch_size": Field(int, 32, minimum=1, maximum=MAX_BATCH_SIZE),
    "lr": Field(float, 2e-5, above=0),
    "lr_warmup_steps": Field(int, 0, minimum=0), "schedule": Field(str, "linear", ("linear", "constant")),
    "weight_decay": Field(float, 0.01, minimum=0), "max_grad_norm": Field(float, 1.0, above=0, nullable=True),
    "max_length_query": Field(int, 32, minimum=1, maximum=MAX_TEXT_TOKENS),
    "max_length_doc": Field(int, 256, minimum=1, maximum=MAX_TEXT_TOKENS),
    "dropout": Field(float, None, minimum=0, maximum=1, nullable=True),
    "dtype": Field(str, "float32", DTYPES), "save_every": Field(int, 500, minimum=1),
    "keep_checkpoints": Field(int, 2, minimum=1), "seed": Field(int, 42, minimum=0),
    "cpu_threads": Field(int, None, minimum=1, nullable=True),
}
_TRAINING_RENAMED = {"precision": "dtype"}
"""Old training keys, read with a deprecation notice (``dtype`` is spelled so in specs and the mlm stage too)."""
# Settings that do not change the trained weights: a resumed run may differ in them.
_NOT_FINGERPRINTED = {"description", "save_every", "keep_checkpoints", "cpu_threads"}
# Options added after runs were trained, with the default those runs had: left out of the fingerprint at
# that default, so the runs already trained keep theirs (they resume and regress finds them).
_ADDED_LATER: dict[str, dict[str, Any]] = {
    "top": {"activation": "log1p"}, "loss": {"doc_flops_by_position": False}, "mlm": {"train_only_embeddings": False},
}


def _without_later_defaults(options: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in options.items() if key not in added or value != added[key]}


def _fingerprint_spelling(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``dtype: float32|bfloat16`` written as before the rename (``precision: fp32|bf16``):
    fingerprints stay those of the runs already trained, which resume and are found by regress."""
    if "dtype" not in options:
        return options
    old_values = {new: old for old, new in OLD_DTYPES.items()}
    renamed = {key: value for key, value in options.items() if key != "dtype"}
    return {**renamed, "precision": old_values[options["dtype"]]}


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
    activation: str = "log1p"

    def fingerprint(self) -> str:
        """SHA-256 of every setting that shapes the trained weights."""
        settings = _without_later_defaults(
            {key: value for key, value in asdict(self).items() if key not in ("path", "name", "description")},
            _ADDED_LATER["top"])
        settings["loss"] = _without_later_defaults(self.loss, _ADDED_LATER["loss"])
        settings["training"] = _fingerprint_spelling(
            {key: value for key, value in self.training.items() if key not in _NOT_FINGERPRINTED})
        settings["stages"] = [{**stage, "options": _fingerprint_spelling(
            _without_later_defaults(stage["options"], _ADDED_LATER.get(stage["name"], {})))}
                              for stage in settings["stages"]]
        return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def group_size(self) -> int:
        """Documents per query in a batch: the positive and its hard negatives."""
        return 1 + self.data["negatives"]


def find_recipe(recipe: str) -> Path:
    """A recipe file path, or a name (with or without .yaml) in ./regressions/recipes or the installed package's."""
    return find_shipped(recipe, RECIPES_DIR, "recipe")


def load_recipe(recipe: str | Path) -> Recipe:
    """Load and fully validate a training recipe; the first problem is a one-line ``file:line:`` error."""
    path = find_recipe(str(recipe))
    document, check = read_mapping_file(path, "recipe", "'model', 'data' and 'training'")
    top = check.read(document, None, _TOP, "")
    data_node = document["data"]
    if not isinstance(data_node.get("format"), str) or data_node["format"] not in _DATA_FORMATS:
        raise check.fail(data_node, "format" if "format" in data_node else None,
                         f"data.format must be one of {', '.join(_DATA_FORMATS)}")
    data = check.read(document, "data", {**_DATA_COMMON, **_DATA_FORMATS[data_node["format"]]}, "data")
    if isinstance(document.get("loss"), CommentedMap):
        accept_aliases(check, document["loss"], "loss", _LOSS_ALIASES, _LOSS_VALUE_ALIASES)
    loss = check.read(document, "loss", _LOSS, "loss")
    if isinstance(document.get("training"), CommentedMap):
        modernize(check, document["training"], "training", _TRAINING_RENAMED, {"dtype": OLD_DTYPES})
    training = check.read(document, "training", _TRAINING, "training")
    stages = tuple(_read_stage(check, top["stages"], index) for index in range(len(top["stages"])))
    loaded = Recipe(path=path, name=path.stem, model=top["model"], data=data, loss=loss, training=training,
                    description=top["description"], trust_remote_code=top["trust_remote_code"],
                    query_encoder=top["query_encoder"], idf_corpus=top["idf_corpus"], stages=stages,
                    activation=top["activation"])
    _check_consistency(check, document, loaded)
    return loaded


def _read_stage(check: Checker, stages: CommentedSeq, index: int) -> Stage:
    node = stages[index]
    where = f"stages[{index}]"
    if not isinstance(node, CommentedMap) or len(node) != 1 or next(iter(node)) not in STAGE_OPTIONS:
        raise check.fail(stages, index, f"{where} must be one of "
                                        f"{', '.join(repr(f'- {name}: {{...}}') for name in STAGE_OPTIONS)}")
    name = next(iter(node))
    return read_stage(check, node, name, name, f"{where}.{name}")


def _check_consistency(check: Checker, document: CommentedMap, recipe: Recipe) -> None:
    """Rules that span keys: teacher scores for distillation, batch shapes, the IDF query encoder."""
    data, loss, training = document["data"], document.get("loss") or CommentedMap(), document["training"]
    if recipe.loss["ranking"] in ("margin_mse", "kl"):
        if recipe.data["teacher"] is None:
            raise check.fail(loss, "ranking", f"loss.ranking {recipe.loss['ranking']} needs teacher scores: "
                                               "set data.teacher (JSONL {qid, docid, score}, or the published pickled dict)")
        if recipe.data["negatives"] < 1:
            raise check.fail(data, "negatives", f"loss.ranking {recipe.loss['ranking']} needs data.negatives >= 1")
    if recipe.data["format"] == "triples":
        if recipe.data["negatives"] != 1:
            raise check.fail(data, "negatives", "data.format triples has exactly one negative per line: "
                                                 "set data.negatives to 1")
        if recipe.data["teacher"] is not None:
            raise check.fail(data, "teacher", "data.format triples has no query or document ids for teacher scores; "
                                               "use format beir or msmarco")
    if recipe.data["format"] == "pairs":
        _check_pairs(check, data, recipe)
    if recipe.data["format"] == "beir" and recipe.data["mining"] == "none" and recipe.data["negatives"]:
        raise check.fail(data, "negatives", "data.mining none gives no hard negatives: set data.negatives to 0")
    if recipe.query_encoder == "idf":
        if recipe.loss["lambda_q"] > 0:
            raise check.fail(loss, "lambda_q", "query_encoder idf has no trained query side: set loss.lambda_q to 0")
        if recipe.idf_corpus is None and recipe.data["format"] in ("triples", "pairs"):
            raise check.fail(document, "query_encoder", f"query_encoder idf with {recipe.data['format']} needs idf_corpus "
                                                         "(a BEIR dataset or a corpus file)")
    elif recipe.idf_corpus is not None:
        raise check.fail(document, "idf_corpus", "idf_corpus is only used with query_encoder: idf")
    if recipe.loss["doc_flops_by_position"] and recipe.loss["doc_regularizer"] != "flops":
        raise check.fail(loss, "doc_flops_by_position", "loss.doc_flops_by_position sums the FLOPS term over group "
                                                        "positions: set loss.doc_regularizer to flops")
    if recipe.training["lr_warmup_steps"] >= recipe.training["steps"]:
        raise check.fail(training, "lr_warmup_steps", "training.lr_warmup_steps must be below training.steps")


def _check_pairs(check: Checker, data: CommentedMap, recipe: Recipe) -> None:
    """Pairs have one source, no mined negatives and no teacher: the other queries' positives are the negatives."""
    if (recipe.data["path"] is None) == (recipe.data["hub"] is None):
        raise check.fail(data, "format", "data.format pairs reads one source: set data.path (a local JSONL or JSON "
                                         "file) or data.hub (a Hugging Face dataset id), not both")
    if recipe.data["negatives"] != 0:
        raise check.fail(data, "negatives", "data.format pairs has no hard negatives (the batch's other positives "
                                             "are the negatives): set data.negatives to 0")
    if recipe.data["teacher"] is not None:
        raise check.fail(data, "teacher", "data.format pairs has no ids for teacher scores; use format beir or msmarco")
    if recipe.loss["ranking"] != "infonce" or not recipe.loss["in_batch_negatives"]:
        raise check.fail(data, "format", "data.format pairs trains with in-batch negatives only: set loss.ranking "
                                         "infonce and loss.in_batch_negatives true")
