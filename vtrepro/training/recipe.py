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

from vtrepro.core.options import Options, option
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Checker, Field, read_mapping_file
from vtrepro.core.shipped import RECIPES_DIR, find_shipped
from vtrepro.model.encoder_options import EncoderOptions
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
"""The recipe's own keys; its ``data``, ``loss`` and ``training`` blocks are the options classes below."""


@dataclass(frozen=True, kw_only=True)
class DataOptions(Options):
    """A recipe's ``data:`` block, the keys of every format; each format's class adds its own."""

    format: str = option(Field(str, choices=("beir", "triples", "msmarco", "pairs")))
    negatives: int = option(Field(int, 1, minimum=0, maximum=MAX_NEGATIVES))
    teacher: str | None = option(Field(str, None, nullable=True))


@dataclass(frozen=True, kw_only=True)
class BeirData(DataOptions):
    """Queries, qrels and corpus of a BEIR dataset, hard negatives mined with BM25."""

    dataset: str = option(Field(str))
    split: str = option(Field(str, "train"))
    min_relevance: int = option(Field(int, 1, minimum=1))
    mining: str = option(Field(str, "bm25", ("bm25", "none")))
    depth: int = option(Field(int, 100, minimum=1, maximum=MAX_K))


@dataclass(frozen=True, kw_only=True)
class TriplesData(DataOptions):
    """A file of (query, positive, negative) text triples."""

    path: str = option(Field(str))


@dataclass(frozen=True, kw_only=True)
class MsmarcoData(DataOptions):
    """MS MARCO's published hard negatives, collection and queries."""

    hard_negatives: str = option(Field(str))
    collection: str = option(Field(str))
    queries: str = option(Field(str))
    systems: tuple[str, ...] | None = option(Field("str_list", None, nullable=True))
    per_system: int | None = option(Field(int, None, minimum=1, nullable=True))


@dataclass(frozen=True, kw_only=True)
class PairsData(DataOptions):
    """(query, positive) pairs from a local file or a Hugging Face dataset; in-batch negatives only."""

    path: str | None = option(Field(str, None, nullable=True, what="a JSONL or JSON file of pairs"))
    hub: str | None = option(Field(str, None, nullable=True, what="a Hugging Face dataset id"))
    split: str = option(Field(str, "train"))
    query_field: str = option(Field(str, "query"))
    document_field: str = option(Field(str, "positive"))
    max_examples: int | None = option(Field(int, None, minimum=1, nullable=True))
    held_out: int = option(Field(int, 0, minimum=0))


DATA_FORMATS: dict[str, type[DataOptions]] = {
    "beir": BeirData, "triples": TriplesData, "msmarco": MsmarcoData, "pairs": PairsData,
}
"""Each ``data.format`` and the options its block takes."""


@dataclass(frozen=True)
class LossOptions(Options):
    """A recipe's ``loss:`` block: the ranking loss and the sparsity regularizers."""

    ALIASES = {"flops_threshold": "doc_active_threshold"}
    """The authors' keys (scripts/args.py of zhichao-aws/opensearch-sparse-model-tuning-sample) for the same
    options: valid spellings, read without a notice; giving both is an error."""
    VALUE_ALIASES = {"ranking": {"kldiv": "kl", "marginmse": "margin_mse"}}
    """The authors' loss names (LOSS_CLS_MAP in their scripts/train/loss.py) for the same losses."""

    ranking: str = option(Field(str, "infonce", ("infonce", "margin_mse", "kl")))
    temperature: float = option(Field(float, 1.0, above=0))
    in_batch_negatives: bool = option(Field(bool, True))
    lambda_q: float = option(Field(float, 0.0, minimum=0))
    lambda_d: float = option(Field(float, 0.0, minimum=0))
    flops_warmup_steps: int = option(Field(int, 0, minimum=0))
    query_regularizer: str = option(Field(str, "flops", ("flops", "l1")))
    doc_regularizer: str = option(Field(str, "flops", ("flops", "l1")))
    doc_active_threshold: int | None = option(Field(int, None, minimum=0, nullable=True))
    doc_flops_by_position: bool = option(Field(bool, False))


@dataclass(frozen=True, kw_only=True)
class TrainingOptions(Options):
    """A recipe's ``training:`` block: steps, batches, optimizer, text lengths, precision, checkpoints."""

    RENAMED = {"precision": "dtype"}
    """Old keys, read with a deprecation notice (``dtype`` is spelled so in specs and the mlm stage too)."""
    RENAMED_VALUES = {"dtype": OLD_DTYPES}

    steps: int = option(Field(int, minimum=1))
    batch_size: int = option(Field(int, 32, minimum=1, maximum=MAX_BATCH_SIZE))
    lr: float = option(Field(float, 2e-5, above=0))
    lr_warmup_steps: int = option(Field(int, 0, minimum=0))
    schedule: str = option(Field(str, "linear", ("linear", "constant")))
    weight_decay: float = option(Field(float, 0.01, minimum=0))
    max_grad_norm: float | None = option(Field(float, 1.0, above=0, nullable=True))
    max_length_query: int = option(Field(int, 32, minimum=1, maximum=MAX_TEXT_TOKENS))
    """Tokens per training query (encoding's own default is :attr:`EncoderOptions.max_length_query`)."""
    max_length_doc: int = option(Field(int, 256, minimum=1, maximum=MAX_TEXT_TOKENS))
    """Tokens per training document (encoding's own default is :attr:`EncoderOptions.max_length_doc`)."""
    dropout: float | None = option(Field(float, None, minimum=0, maximum=1, nullable=True))
    dtype: str = option(Field(str, "float32", DTYPES))
    save_every: int = option(Field(int, 500, minimum=1))
    keep_checkpoints: int = option(Field(int, 2, minimum=1))
    seed: int = option(Field(int, 42, minimum=0))
    cpu_threads: int | None = option(Field(int, None, minimum=1, nullable=True))


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
    data: DataOptions
    loss: LossOptions
    training: TrainingOptions
    description: str
    trust_remote_code: bool
    query_encoder: str
    idf_corpus: str | None
    stages: tuple[Stage, ...]
    activation: str

    def fingerprint(self) -> str:
        """SHA-256 of every setting that shapes the trained weights."""
        settings = _without_later_defaults(
            {key: value for key, value in asdict(self).items() if key not in ("path", "name", "description")},
            _ADDED_LATER["top"])
        settings["loss"] = _without_later_defaults(self.loss.to_dict(), _ADDED_LATER["loss"])
        settings["training"] = _fingerprint_spelling(
            {key: value for key, value in self.training.to_dict().items() if key not in _NOT_FINGERPRINTED})
        settings["stages"] = [{**stage, "options": _fingerprint_spelling(
            _without_later_defaults(stage["options"], _ADDED_LATER.get(stage["name"], {})))}
                              for stage in settings["stages"]]
        return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def group_size(self) -> int:
        """Documents per query in a batch: the positive and its hard negatives."""
        return 1 + self.data.negatives


def find_recipe(recipe: str) -> Path:
    """A recipe file path, or a name (with or without .yaml) in ./regressions/recipes or the installed package's."""
    return find_shipped(recipe, RECIPES_DIR, "recipe")


def load_recipe(recipe: str | Path) -> Recipe:
    """Load and fully validate a training recipe; the first problem is a one-line ``file:line:`` error."""
    path = find_recipe(str(recipe))
    document, check = read_mapping_file(path, "recipe", "'model', 'data' and 'training'")
    top = check.read(document, None, _TOP, "")
    data_node = document["data"]
    if not isinstance(data_node.get("format"), str) or data_node["format"] not in DATA_FORMATS:
        raise check.fail(data_node, "format" if "format" in data_node else None,
                         f"data.format must be one of {', '.join(DATA_FORMATS)}")
    data = DATA_FORMATS[data_node["format"]].read(check, document, "data", "data")
    loss = LossOptions.read(check, document, "loss", "loss")
    training = TrainingOptions.read(check, document, "training", "training")
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
    if recipe.loss.ranking in ("margin_mse", "kl"):
        if recipe.data.teacher is None:
            raise check.fail(loss, "ranking", f"loss.ranking {recipe.loss.ranking} needs teacher scores: "
                                               "set data.teacher (JSONL {qid, docid, score}, or the published pickled dict)")
        if recipe.data.negatives < 1:
            raise check.fail(data, "negatives", f"loss.ranking {recipe.loss.ranking} needs data.negatives >= 1")
    if recipe.data.format == "triples":
        if recipe.data.negatives != 1:
            raise check.fail(data, "negatives", "data.format triples has exactly one negative per line: "
                                                 "set data.negatives to 1")
        if recipe.data.teacher is not None:
            raise check.fail(data, "teacher", "data.format triples has no query or document ids for teacher scores; "
                                               "use format beir or msmarco")
    if isinstance(recipe.data, PairsData):
        _check_pairs(check, data, recipe.data, recipe.loss)
    if isinstance(recipe.data, BeirData) and recipe.data.mining == "none" and recipe.data.negatives:
        raise check.fail(data, "negatives", "data.mining none gives no hard negatives: set data.negatives to 0")
    if recipe.query_encoder == "idf":
        if recipe.loss.lambda_q > 0:
            raise check.fail(loss, "lambda_q", "query_encoder idf has no trained query side: set loss.lambda_q to 0")
        if recipe.idf_corpus is None and recipe.data.format in ("triples", "pairs"):
            raise check.fail(document, "query_encoder", f"query_encoder idf with {recipe.data.format} needs idf_corpus "
                                                         "(a BEIR dataset or a corpus file)")
    elif recipe.idf_corpus is not None:
        raise check.fail(document, "idf_corpus", "idf_corpus is only used with query_encoder: idf")
    if recipe.loss.doc_flops_by_position and recipe.loss.doc_regularizer != "flops":
        raise check.fail(loss, "doc_flops_by_position", "loss.doc_flops_by_position sums the FLOPS term over group "
                                                        "positions: set loss.doc_regularizer to flops")
    if recipe.training.lr_warmup_steps >= recipe.training.steps:
        raise check.fail(training, "lr_warmup_steps", "training.lr_warmup_steps must be below training.steps")


def _check_pairs(check: Checker, data: CommentedMap, pairs: PairsData, loss: LossOptions) -> None:
    """Pairs have one source, no mined negatives and no teacher: the other queries' positives are the negatives."""
    if (pairs.path is None) == (pairs.hub is None):
        raise check.fail(data, "format", "data.format pairs reads one source: set data.path (a local JSONL or JSON "
                                         "file) or data.hub (a Hugging Face dataset id), not both")
    if pairs.negatives != 0:
        raise check.fail(data, "negatives", "data.format pairs has no hard negatives (the batch's other positives "
                                             "are the negatives): set data.negatives to 0")
    if pairs.teacher is not None:
        raise check.fail(data, "teacher", "data.format pairs has no ids for teacher scores; use format beir or msmarco")
    if loss.ranking != "infonce" or not loss.in_batch_negatives:
        raise check.fail(data, "format", "data.format pairs trains with in-batch negatives only: set loss.ranking "
                                         "infonce and loss.in_batch_negatives true")
