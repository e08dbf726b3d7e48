"""Regression specs: which conditions run on which datasets, and the scores each must reproduce.

A spec is YAML (documented in docs/regression-specs.md). Loading validates it completely and
reports the first problem as ``file:line: what is wrong; how to fix it``. ``record_observed``
writes observed values back as the expected ones, keeping the file's comments and order.

One module of ~450 lines on purpose: the schema of a spec reads top to bottom as the document it
checks (defaults, conditions, datasets, their blocks), each loader beside the dataclass it fills.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, unsafe_character
from vtrepro.core.schema import BOOLEAN_FIX, bounds_text, is_boolean, read_yaml, round_trip_yaml, within
from vtrepro.encode.vectors import ROUNDINGS, Quantization
from vtrepro.evaluate.trec import DEFAULT_METRICS, parse_metric
from vtrepro.vocabulary.transfer import INITS, SIMILARITIES

REGRESSIONS_DIR = Path(__file__).resolve().parents[2] / "regressions"
INDEX_STATS = ("documents", "total_terms")

_SPEC_KEYS = {"description", "defaults", "conditions"}
_DEFAULT_KEYS = {"split", "k", "metrics", "tolerance"}
_CONDITION_KEYS = {
    "description", "retrieval", "model", "trust_remote_code", "bm25", "encoder", "quantization",
    "reference_source", "reference_tolerance", "reference_average", "datasets", "transfer", "calibrate",
    "query_encoder", "train", "tolerance",
}
_TRANSFER_KEYS = {
    "source", "target_tokenizer", "reference", "init", "temperature", "similarity", "target_norm", "seed", "leaveout",
}
_LEAVEOUT_KEYS = {"fraction", "seed"}
_CALIBRATE_KEYS = {"dataset", "docs", "cut_percent", "target_terms", "max_length"}
_DATASET_KEYS = {"split", "scores", "reference", "index", "vectors", "encoded"}
_VECTOR_KEYS = ("corpus", "queries")
_TOLERANCE_KEYS = {"total_terms", "scores"}
_ENCODER_KEYS = {"max_length_doc", "max_length_query", "batch_size"}


@dataclass(frozen=True)
class EncoderSettings:
    max_length_doc: int = 512
    max_length_query: int = 64
    batch_size: int = 32


@dataclass(frozen=True)
class Tolerance:
    """How far figures may move when the vectors were encoded here and differ from the pinned ones.

    Defaults cover every CPU arithmetic path measured in docs/regression-specs.md (envelope table):
    ``total_terms`` is relative to the pinned index total, ``scores`` absolute on 4-decimal scores.
    Where the fingerprints match, every figure is exact and no tolerance applies.
    """

    total_terms: float = 1e-6
    scores: float = 0.0005


@dataclass(frozen=True)
class EncodedVectors:
    """Already-encoded vectors to use instead of encoding: a JSON-vector folder and a queries file."""

    corpus: Path
    queries: Path


@dataclass
class DatasetRun:
    """One dataset of a condition with its pinned values (None = not yet recorded)."""

    name: str
    split: str
    scores: dict[str, float | None]
    reference: dict[str, float]
    index: dict[str, int | None]
    vectors: dict[str, str | None] = field(default_factory=dict)  # "corpus"/"queries" -> pinned sha256
    encoded: EncodedVectors | None = None


@dataclass
class Condition:
    name: str
    retrieval: str  # "bm25" or "impact"
    datasets: list[DatasetRun]
    model: str | None = None
    trust_remote_code: bool = False
    bm25: dict[str, float] = field(default_factory=lambda: {"k1": 0.9, "b": 0.4})
    encoder: EncoderSettings = EncoderSettings()
    quantization: Quantization = Quantization()
    reference_source: str | None = None
    reference_tolerance: float = 0.0
    reference_average: dict[str, float] = field(default_factory=dict)
    description: str = ""
    transfer: dict[str, Any] | None = None
    calibrate: dict[str, Any] | None = None
    train: str | None = None  # training recipe (file or name in regressions/recipes/) whose final model is used
    query_encoder: str = "model"  # "model" (SPLADE queries) or "idf" (inference-free: idf.json beside the model)
    tolerance: Tolerance = Tolerance()


@dataclass
class Spec:
    path: Path
    name: str
    description: str
    k: int
    metrics: tuple[str, ...]
    conditions: list[Condition]


def find_spec(spec: str) -> Path:
    """A spec file path, or a name (with or without .yaml) in ./regressions or the repo's regressions/."""
    candidates = [Path(spec)]
    for folder in (Path.cwd() / "regressions", REGRESSIONS_DIR):
        candidates += [folder / spec, folder / f"{spec}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise VtreproError(f"spec '{spec}' not found: give a YAML file path or a name in {REGRESSIONS_DIR}")


def _read_document(path: Path) -> CommentedMap:
    document = read_yaml(path)
    if not isinstance(document, CommentedMap):
        raise VtreproError(f"{path}:1: a spec must be a YAML mapping with a 'conditions' key")
    return document


def metric_problem(metric: Any) -> str | None:
    """What is wrong with a metric name such as ``ndcg@10``, or None."""
    if not isinstance(metric, str):
        return f"metric {metric!r} must be a name@k string such as ndcg@10"
    try:
        parse_metric(metric)
    except VtreproError as error:
        return str(error)
    return None


class _Checker:
    """Validation helpers that name the file and line of the offending node."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, node: Any, key: Any, message: str) -> VtreproError:
        """An error at ``node[key]``'s line (a mapping key or a list index), else at ``node``'s."""
        line = getattr(getattr(node, "lc", None), "line", None)
        if isinstance(node, CommentedMap) and key in node.lc.data:  # keys merged from an anchor have no line here
            line = node.lc.key(key)[0]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and key < len(node):
            line = node.lc.item(key)[0]
        return VtreproError(f"{self.path}{'' if line is None else f':{line + 1}'}: {message}")

    def mapping(self, parent: Any, key: Any, allowed: set[str], where: str) -> CommentedMap:
        """``parent[key]`` (or ``parent`` itself for key None) as a mapping of ``allowed`` keys; empty for null."""
        node = parent[key] if key is not None else parent
        if node is None:
            return CommentedMap()
        if not isinstance(node, CommentedMap):
            raise self.fail(parent, key, f"{where} must be a mapping")
        for name in node:
            if name not in allowed:
                raise self.fail(node, name, f"unknown key '{name}' in {where}; expected one of {', '.join(sorted(allowed))}")
        return node

    def number(self, node: CommentedMap, key: str, where: str, kind: type = float, allow_none: bool = False,
               minimum: float | None = None, maximum: float | None = None,
               above: float | None = None, below: float | None = None) -> float | int | None:
        """``node[key]`` as an int or float within the bounds (None when allowed and empty)."""
        value = node.get(key)
        if value is None and allow_none:
            return None
        numeric = isinstance(value, int if kind is int else (int, float)) and not is_boolean(value)
        if not numeric or not within(value, minimum, maximum, above, below):
            bounds = bounds_text(minimum, maximum, above, below)
            expected = ("an integer" if kind is int else "a number") + (f" {bounds}" if bounds else "")
            raise self.fail(node, key, f"{where}.{key} must be {expected}, got {value!r}")
        return kind(value)

    def integer(self, node: CommentedMap, key: str, where: str, minimum: int | None = None,
                allow_none: bool = False) -> int | None:
        return self.number(node, key, where, int, allow_none, minimum=minimum)

    def boolean(self, node: CommentedMap, key: str, where: str) -> bool:
        value = node[key]
        if not is_boolean(value):
            raise self.fail(node, key, f"{where}.{key} must be true or false, got {value!r}; {BOOLEAN_FIX}")
        return bool(value)

    def choice(self, node: CommentedMap, key: str, where: str, choices: Sequence[str]) -> str:
        value = node[key]
        if value not in choices:
            raise self.fail(node, key, f"{where}.{key} must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    def text(self, node: CommentedMap, key: str, where: str, allow_none: bool = False) -> str | None:
        value = node[key]
        if value is None and allow_none:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(node, key, f"{where}.{key} must be a non-empty string, got {value!r}")
        return str(value)

    def metric_values(self, parent: CommentedMap, key: str, metrics: tuple[str, ...], where: str,
                      allow_none: bool) -> dict[str, float | None]:
        """Metric -> value in [0, 1] (None when allowed), for the spec's metrics only."""
        node = self.mapping(parent, key, set(metrics), where) if key in parent else CommentedMap()
        return {metric: self.number(node, metric, where, allow_none=allow_none, minimum=0, maximum=1)
                for metric in node}


def load_spec(spec: str | Path) -> Spec:
    """Load and fully validate a regression spec."""
    path = find_spec(str(spec))
    document = _read_document(path)
    check = _Checker(path)
    check.mapping(document, None, _SPEC_KEYS, "the spec")
    defaults = check.mapping(document, "defaults", _DEFAULT_KEYS, "defaults") if "defaults" in document else CommentedMap()
    metrics = _load_metrics(check, defaults)
    k = check.integer(defaults, "k", "defaults", minimum=1) if "k" in defaults else 1000
    deepest = max(metrics, key=lambda metric: parse_metric(metric)[1])
    if parse_metric(deepest)[1] > k:
        raise check.fail(defaults, "k" if "k" in defaults else "metrics",
                         f"defaults.k is {k} but {deepest} needs {parse_metric(deepest)[1]} hits per query; "
                         "raise k or lower the cutoff")
    split = check.text(defaults, "split", "defaults") if "split" in defaults else "test"
    tolerance = _load_tolerance(check, defaults, "defaults", Tolerance())
    if not isinstance(document.get("conditions"), CommentedMap) or not document["conditions"]:
        raise check.fail(document, "conditions", "'conditions' must map condition names to their settings")
    conditions = [
        _load_condition(check, document["conditions"], name, metrics, split, tolerance)
        for name in document["conditions"]
    ]
    return Spec(path, path.stem, str(document.get("description", "")), k, metrics, conditions)


def _load_metrics(check: _Checker, defaults: CommentedMap) -> tuple[str, ...]:
    if "metrics" not in defaults:
        return DEFAULT_METRICS
    node = defaults["metrics"]
    if not isinstance(node, CommentedSeq) or not node:
        raise check.fail(defaults, "metrics", "defaults.metrics must be a non-empty list, e.g. [ndcg@10, recall@100]")
    for index, metric in enumerate(node):
        problem = metric_problem(metric)
        if problem is None and metric in node[:index]:
            problem = f"metric '{metric}' is listed twice; remove one"
        if problem is not None:
            raise check.fail(node, index, f"defaults.metrics: {problem}")
    return tuple(str(metric) for metric in node)


def _load_condition(check: _Checker, parent: CommentedMap, name: str, metrics, split: str,
                    tolerance: Tolerance) -> Condition:
    where = f"condition '{name}'"
    if not isinstance(name, str) or not name or unsafe_character(name) or "/" in name:
        raise check.fail(parent, name, f"{where}: a condition name must be a non-empty string without whitespace, "
                                       "control characters or '/' (it names a folder and the run's tag); rename it")
    node = check.mapping(parent, name, _CONDITION_KEYS, where)
    sources = [key for key in ("model", "transfer", "train") if key in node]
    datasets_node = node.get("datasets")
    all_encoded = isinstance(datasets_node, CommentedMap) and bool(datasets_node) and all(
        isinstance(entry, CommentedMap) and "encoded" in entry for entry in datasets_node.values())
    retrieval = node.get("retrieval", "impact" if sources or all_encoded else None)
    if retrieval not in ("bm25", "impact"):
        raise check.fail(parent, name, f"{where} needs 'retrieval: bm25', a 'model', a 'transfer' block or a 'train' recipe")
    if retrieval == "impact" and not (node.get("model") or "transfer" in node or node.get("train") or all_encoded):
        raise check.fail(parent, name, f"{where} uses impact retrieval but names no 'model', 'transfer' or 'train' "
                                       "(or 'encoded' vectors for every dataset)")
    if len(sources) > 1:
        raise check.fail(node, sources[1], f"{where} takes one of 'model', 'transfer' and 'train', not {' and '.join(sources)}")
    if "train" in node and "calibrate" in node:
        raise check.fail(node, "calibrate", f"{where}: a 'train' recipe calibrates in its own stages; remove 'calibrate'")
    condition = Condition(name=name, retrieval=retrieval, datasets=[], description=str(node.get("description", "")),
                          tolerance=_load_tolerance(check, node, where, tolerance))
    if "model" in node:
        condition.model = check.text(node, "model", where)
    if "train" in node:
        if not isinstance(node["train"], str):
            raise check.fail(node, "train", f"{where}.train must be a recipe file or a name in regressions/recipes/")
        condition.train = node["train"]
    if "trust_remote_code" in node:
        condition.trust_remote_code = check.boolean(node, "trust_remote_code", where)
    if "query_encoder" in node:
        condition.query_encoder = check.choice(node, "query_encoder", where, ("model", "idf"))
    if "bm25" in node:
        bm25 = check.mapping(node, "bm25", {"k1", "b"}, f"{where}.bm25")
        bounds = {"k1": {"minimum": 0}, "b": {"minimum": 0, "maximum": 1}}
        condition.bm25 = {**condition.bm25, **{key: check.number(bm25, key, f"{where}.bm25", **bounds[key])
                                               for key in bm25}}
    if "encoder" in node:
        encoder = check.mapping(node, "encoder", _ENCODER_KEYS, f"{where}.encoder")
        condition.encoder = EncoderSettings(**{key: check.integer(encoder, key, f"{where}.encoder", minimum=1)
                                               for key in encoder})
    if "quantization" in node:
        quantization = check.mapping(node, "quantization", {"scale", "rounding"}, f"{where}.quantization")
        condition.quantization = Quantization(
            scale=check.number(quantization, "scale", f"{where}.quantization", above=0)
            if "scale" in quantization else 100.0,
            rounding=check.choice(quantization, "rounding", f"{where}.quantization", ROUNDINGS)
            if "rounding" in quantization else "half-even",
        )
    if "transfer" in node:
        condition.transfer = _load_transfer(check, node, f"{where}.transfer")
    if "calibrate" in node:
        condition.calibrate = _load_calibrate(check, node, f"{where}.calibrate")
    if "reference_source" in node:
        condition.reference_source = check.text(node, "reference_source", where)
    if "reference_tolerance" in node:
        condition.reference_tolerance = check.number(node, "reference_tolerance", where, minimum=0)
    condition.reference_average = check.metric_values(node, "reference_average", metrics, f"{where}.reference_average", False)
    datasets = node.get("datasets")
    if not isinstance(datasets, CommentedMap) or not datasets:
        raise check.fail(parent, name, f"{where} needs 'datasets:' mapping dataset names to expected scores")
    for dataset in datasets:
        dataset_where = f"{where}, dataset '{dataset}'"
        entry = check.mapping(datasets, dataset, _DATASET_KEYS, dataset_where)
        index = check.mapping(entry, "index", set(INDEX_STATS), f"{dataset_where}.index") if "index" in entry else {}
        if retrieval == "bm25" and ("vectors" in entry or "encoded" in entry):
            raise check.fail(entry, "vectors" if "vectors" in entry else "encoded",
                             f"{dataset_where}: BM25 runs have no vectors; remove 'vectors'/'encoded'")
        condition.datasets.append(
            DatasetRun(
                name=str(dataset),
                split=check.text(entry, "split", dataset_where) if "split" in entry else split,
                scores=check.metric_values(entry, "scores", metrics, f"{dataset_where}.scores", True),
                reference=check.metric_values(entry, "reference", metrics, f"{dataset_where}.reference", False),
                index={key: check.integer(index, key, f"{dataset_where}.index", minimum=0, allow_none=True)
                       for key in index},
                vectors=_load_fingerprints(check, entry, f"{dataset_where}.vectors"),
                encoded=_load_encoded(check, entry, f"{dataset_where}.encoded"),
            )
        )
    return condition


def _load_tolerance(check: _Checker, parent: CommentedMap, where: str, inherited: Tolerance) -> Tolerance:
    if "tolerance" not in parent:
        return inherited
    node = check.mapping(parent, "tolerance", _TOLERANCE_KEYS, f"{where}.tolerance")
    return replace(inherited, **{key: check.number(node, key, f"{where}.tolerance", minimum=0) for key in node})


def _load_fingerprints(check: _Checker, parent: CommentedMap, where: str) -> dict[str, str | None]:
    if "vectors" not in parent:
        return {}
    node = check.mapping(parent, "vectors", set(_VECTOR_KEYS), where)
    fingerprints = {}
    for key in node:
        value = node[key]
        if value is not None and not (isinstance(value, str) and len(value) == 64
                                      and all(char in "0123456789abcdef" for char in value)):
            raise check.fail(node, key, f"{where}.{key} must be a 64-digit lowercase hex sha256 "
                                        "(written by 'regress --record') or null")
        fingerprints[key] = value
    return fingerprints


def _load_encoded(check: _Checker, parent: CommentedMap, where: str) -> EncodedVectors | None:
    """Paths of already-encoded vectors, relative to the spec file; both must exist."""
    if "encoded" not in parent:
        return None
    node = check.mapping(parent, "encoded", set(_VECTOR_KEYS), where)
    paths = {}
    for key in _VECTOR_KEYS:
        if not isinstance(node.get(key), str):
            raise check.fail(parent, "encoded", f"{where} needs '{key}': a path relative to the spec file")
        path = (check.path.parent / node[key]).resolve()
        if not path.exists():
            raise check.fail(node, key, f"{where}.{key}: {path} does not exist; encode it or fix the path")
        paths[key] = path
    return EncodedVectors(**paths)


def _load_transfer(check: _Checker, parent: CommentedMap, where: str) -> dict[str, Any]:
    """The transfer settings given (``python -m vtrepro transfer`` keywords), each checked."""
    node = check.mapping(parent, "transfer", _TRANSFER_KEYS, where)
    if not node.get("source"):
        raise check.fail(parent, "transfer", f"{where} needs 'source': the masked-LM checkpoint to transfer")
    readers = {
        "source": lambda key: check.text(node, key, where),
        "target_tokenizer": lambda key: check.text(node, key, where),
        "reference": lambda key: check.text(node, key, where, allow_none=True),
        "init": lambda key: check.choice(node, key, where, INITS),
        "temperature": lambda key: check.number(node, key, where, above=0),
        "similarity": lambda key: check.choice(node, key, where, SIMILARITIES),
        "target_norm": lambda key: check.boolean(node, key, where),
        "seed": lambda key: check.integer(node, key, where, minimum=0),
        "leaveout": lambda key: _load_leaveout(check, node, f"{where}.leaveout"),
    }
    return {key: readers[key](key) for key in node}


def _load_leaveout(check: _Checker, parent: CommentedMap, where: str) -> dict[str, Any]:
    node = check.mapping(parent, "leaveout", _LEAVEOUT_KEYS, where)
    return {
        "fraction": check.number(node, "fraction", where, above=0, below=1) if "fraction" in node else 0.1,
        "seed": check.integer(node, "seed", where, minimum=0) if "seed" in node else 0,
    }


def _load_calibrate(check: _Checker, parent: CommentedMap, where: str) -> dict[str, Any]:
    """The calibration settings given (``python -m vtrepro calibrate`` keywords), each checked."""
    node = check.mapping(parent, "calibrate", _CALIBRATE_KEYS, where)
    if not node.get("dataset"):
        raise check.fail(parent, "calibrate", f"{where} needs 'dataset': the calibration corpus")
    if "cut_percent" in node and "target_terms" in node:
        raise check.fail(node, "target_terms", f"{where}: give cut_percent or target_terms, not both")
    readers = {
        "dataset": lambda key: check.text(node, key, where),
        "docs": lambda key: check.integer(node, key, where, minimum=1),
        "cut_percent": lambda key: check.number(node, key, where, above=0, below=100),
        "target_terms": lambda key: check.number(node, key, where, above=0),
        "max_length": lambda key: check.integer(node, key, where, minimum=1),
    }
    return {key: readers[key](key) for key in node}


def record_observed(path: Path, observed: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Write observed scores and index stats as the spec's expected values, keeping comments and order.

    ``observed`` maps (condition, dataset) to ``{"scores": {metric: value}, "index": {stat: value},
    "vectors": {"corpus": sha256, "queries": sha256}}`` (no "vectors" for BM25).
    """
    document = _read_document(path)
    for (condition, dataset), values in observed.items():
        entry = document["conditions"][condition]["datasets"][dataset]
        if entry is None:
            entry = document["conditions"][condition]["datasets"][dataset] = CommentedMap()
        for section in ("vectors", "index", "scores"):
            if not values.get(section):
                continue
            if entry.get(section) is None:
                values_map = CommentedMap()
                values_map.fa.set_flow_style()
                entry.insert(len(entry) if section != "vectors" else 0, section, values_map)
            for key, value in values[section].items():
                entry[section][key] = value
    buffer = io.StringIO()
    round_trip_yaml().dump(document, buffer)
    with atomic_write(path) as handle:
        handle.write(buffer.getvalue())
