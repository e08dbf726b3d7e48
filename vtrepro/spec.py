"""Regression specs: which conditions run on which datasets, and the scores each must reproduce.

A spec is YAML (documented in docs/regression-specs.md). Loading validates it completely and
reports the first problem as ``file:line: what is wrong; how to fix it``. ``record_observed``
writes observed values back as the expected ones, keeping the file's comments and order.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from vtrepro.errors import VtreproError
from vtrepro.evaluate import DEFAULT_METRICS, _parse_metric
from vtrepro.io import atomic_write
from vtrepro.vectors import Quantization

REGRESSIONS_DIR = Path(__file__).resolve().parent.parent / "regressions"
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


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def read_yaml(path: Path) -> Any:
    """Round-trip YAML (comments and line numbers kept); a syntax error names the file and line."""
    try:
        return _yaml().load(path.read_text(encoding="utf-8"))
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise VtreproError(f"{path}{line}: malformed YAML ({error.problem or error.context}); fix the syntax") from None
    except YAMLError as error:
        raise VtreproError(f"{path}: malformed YAML ({error}); fix the syntax") from None


def _read_document(path: Path) -> CommentedMap:
    document = read_yaml(path)
    if not isinstance(document, CommentedMap):
        raise VtreproError(f"{path}:1: a spec must be a YAML mapping with a 'conditions' key")
    return document


class _Checker:
    """Validation helpers that name the file and line of the offending node."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, node: Any, key: Any, message: str) -> VtreproError:
        line = ""
        if isinstance(node, CommentedMap) and key in node:
            line = f":{node.lc.key(key)[0] + 1}"
        elif hasattr(node, "lc"):
            line = f":{node.lc.line + 1}"
        return VtreproError(f"{self.path}{line}: {message}")

    def mapping(self, parent: Any, key: Any, allowed: set[str], where: str) -> CommentedMap:
        node = parent[key] if key is not None else parent
        if node is None:
            return CommentedMap()
        if not isinstance(node, CommentedMap):
            raise self.fail(parent, key, f"{where} must be a mapping")
        for name in node:
            if name not in allowed:
                raise self.fail(node, name, f"unknown key '{name}' in {where}; expected one of {', '.join(sorted(allowed))}")
        return node

    def number(self, node: CommentedMap, key: str, where: str, kind: type = float, allow_none: bool = False):
        value = node.get(key)
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
            raise self.fail(node, key, f"{where}.{key} must be a{'n integer' if kind is int else ' number'}, got {value!r}")
        return kind(value)

    def metric_values(self, parent: CommentedMap, key: str, metrics: tuple[str, ...], where: str, allow_none: bool):
        node = self.mapping(parent, key, set(metrics), where) if key in parent else CommentedMap()
        return {metric: self.number(node, metric, where, allow_none=allow_none) for metric in node}


def load_spec(spec: str | Path) -> Spec:
    """Load and fully validate a regression spec."""
    path = find_spec(str(spec))
    document = _read_document(path)
    check = _Checker(path)
    check.mapping(document, None, _SPEC_KEYS, "the spec")
    defaults = check.mapping(document, "defaults", _DEFAULT_KEYS, "defaults") if "defaults" in document else CommentedMap()
    metrics = tuple(defaults.get("metrics") or DEFAULT_METRICS)
    for metric in metrics:
        try:
            _parse_metric(metric)
        except VtreproError as error:
            raise check.fail(defaults, "metrics", str(error)) from None
    k = check.number(defaults, "k", "defaults", int) if "k" in defaults else 1000
    split = str(defaults.get("split", "test"))
    tolerance = _load_tolerance(check, defaults, "defaults", Tolerance())
    if not isinstance(document.get("conditions"), CommentedMap) or not document["conditions"]:
        raise check.fail(document, "conditions", "'conditions' must map condition names to their settings")
    conditions = [
        _load_condition(check, document["conditions"], name, metrics, split, tolerance)
        for name in document["conditions"]
    ]
    return Spec(path, path.stem, str(document.get("description", "")), k, metrics, conditions)


def _load_condition(check: _Checker, parent: CommentedMap, name: str, metrics, split: str,
                    tolerance: Tolerance) -> Condition:
    where = f"condition '{name}'"
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
    condition.model = node.get("model")
    if "train" in node:
        if not isinstance(node["train"], str):
            raise check.fail(node, "train", f"{where}.train must be a recipe file or a name in regressions/recipes/")
        condition.train = node["train"]
    condition.trust_remote_code = bool(node.get("trust_remote_code", False))
    condition.query_encoder = str(node.get("query_encoder", "model"))
    if condition.query_encoder not in ("model", "idf"):
        raise check.fail(node, "query_encoder", f"{where}.query_encoder must be 'model' or 'idf', got {condition.query_encoder!r}")
    if "bm25" in node:
        bm25 = check.mapping(node, "bm25", {"k1", "b"}, f"{where}.bm25")
        condition.bm25 = {key: check.number(bm25, key, f"{where}.bm25") for key in ("k1", "b") if key in bm25} | {
            key: value for key, value in condition.bm25.items() if key not in bm25
        }
    if "encoder" in node:
        encoder = check.mapping(node, "encoder", _ENCODER_KEYS, f"{where}.encoder")
        condition.encoder = EncoderSettings(**{key: check.number(encoder, key, f"{where}.encoder", int) for key in encoder})
    if "quantization" in node:
        quantization = check.mapping(node, "quantization", {"scale", "rounding"}, f"{where}.quantization")
        try:
            condition.quantization = Quantization(
                scale=check.number(quantization, "scale", f"{where}.quantization") if "scale" in quantization else 100.0,
                rounding=str(quantization.get("rounding", "half-even")),
            )
        except VtreproError as error:
            raise check.fail(node, "quantization", str(error)) from None
    if "transfer" in node:
        condition.transfer = _load_transfer(check, node, f"{where}.transfer")
    if "calibrate" in node:
        condition.calibrate = _load_calibrate(check, node, f"{where}.calibrate")
    condition.reference_source = node.get("reference_source")
    if "reference_tolerance" in node:
        condition.reference_tolerance = check.number(node, "reference_tolerance", where)
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
                split=str(entry.get("split", split)),
                scores=check.metric_values(entry, "scores", metrics, f"{dataset_where}.scores", True),
                reference=check.metric_values(entry, "reference", metrics, f"{dataset_where}.reference", False),
                index={key: check.number(index, key, f"{dataset_where}.index", int, allow_none=True) for key in index},
                vectors=_load_fingerprints(check, entry, f"{dataset_where}.vectors"),
                encoded=_load_encoded(check, entry, f"{dataset_where}.encoded"),
            )
        )
    return condition


def _load_tolerance(check: _Checker, parent: CommentedMap, where: str, inherited: Tolerance) -> Tolerance:
    if "tolerance" not in parent:
        return inherited
    node = check.mapping(parent, "tolerance", _TOLERANCE_KEYS, f"{where}.tolerance")
    values = {key: check.number(node, key, f"{where}.tolerance") for key in node}
    for key, value in values.items():
        if value < 0:
            raise check.fail(node, key, f"{where}.tolerance.{key} must be >= 0, got {value}")
    return replace(inherited, **values)


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
    node = check.mapping(parent, "transfer", _TRANSFER_KEYS, where)
    if not node.get("source"):
        raise check.fail(parent, "transfer", f"{where} needs 'source': the masked-LM checkpoint to transfer")
    settings: dict[str, Any] = {key: node[key] for key in node if key != "leaveout"}
    for key in ("temperature",):
        if key in node:
            settings[key] = check.number(node, key, where)
    if "seed" in node:
        settings["seed"] = check.number(node, "seed", where, int)
    if "leaveout" in node:
        leaveout = check.mapping(node, "leaveout", _LEAVEOUT_KEYS, f"{where}.leaveout")
        settings["leaveout"] = {
            "fraction": check.number(leaveout, "fraction", f"{where}.leaveout") if "fraction" in leaveout else 0.1,
            "seed": check.number(leaveout, "seed", f"{where}.leaveout", int) if "seed" in leaveout else 0,
        }
    return settings


def _load_calibrate(check: _Checker, parent: CommentedMap, where: str) -> dict[str, Any]:
    node = check.mapping(parent, "calibrate", _CALIBRATE_KEYS, where)
    if not node.get("dataset"):
        raise check.fail(parent, "calibrate", f"{where} needs 'dataset': the calibration corpus")
    if "cut_percent" in node and "target_terms" in node:
        raise check.fail(node, "target_terms", f"{where}: give cut_percent or target_terms, not both")
    settings: dict[str, Any] = {"dataset": str(node["dataset"])}
    for key, kind in (("docs", int), ("cut_percent", float), ("target_terms", float), ("max_length", int)):
        if key in node:
            settings[key] = check.number(node, key, where, kind)
    return settings


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
    _yaml().dump(document, buffer)
    with atomic_write(path) as handle:
        handle.write(buffer.getvalue())
