"""Regression specs: which conditions run on which datasets, and the scores each must reproduce.

A spec is YAML (documented in docs/regression-specs.md). Loading validates it completely and
reports the first problem as ``file:line: what is wrong; how to fix it``. ``record_observed``
writes observed values back as the expected ones, keeping the file's comments and order.

One module of ~450 lines on purpose: the schema of a spec reads top to bottom as the document it
checks (defaults, conditions, datasets, their blocks), each loader beside the dataclass it fills.
"""
from __future__ import annotations

import copy
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, rewritten_in_place, unsafe_character
from vtrepro.core.options import Options, option
from vtrepro.core.schema import Checker, Field, read_yaml, round_trip_yaml
from vtrepro.core.shipped import SHIPPED_DIR, find_shipped
from vtrepro.data.beir import DATASET_NAME, TEST_SPLIT
from vtrepro.encode.vectors import Quantization
from vtrepro.evaluate.trec import DEFAULT_METRICS, parse_metric
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.hub import model_name_problem
from vtrepro.regress.gap import MODEL_PINNED, GapBlock, load_gap_block
from vtrepro.report.published import PublishedSystem, load_system
from vtrepro.search.runs import Bm25Options, SearchOptions
from vtrepro.training.stages import Stage, read_stage
from vtrepro.vocabulary.transfer import TransferOptions

INDEX_STATS = ("documents", "total_terms")

_SPEC_KEYS = {"description", "defaults", "conditions", "gap"}
_VECTOR_KEYS = ("corpus", "queries")
# The keys a transfer block holds beside TransferOptions' (read as its ``extra`` keys; ``from`` is no Python name).
_TRANSFER_SOURCE = {"source": Field(str, what="a checkpoint folder or Hub id, or {build: round_trip, from: MODEL}")}
SOURCE_BUILDS = ("round_trip",)
"""Transfer sources a spec may declare built rather than name: ``source: {build: round_trip, from: MODEL}`` is
MODEL moved onto GPT-2's BPE vocabulary (:mod:`vtrepro.vocabulary.gpt2`), built once by the run itself."""
_BUILT_SOURCE = {"build": Field(str, choices=SOURCE_BUILDS), "from": Field(str)}
_INDEX = {key: Field(int, None, minimum=0, nullable=True) for key in INDEX_STATS}


@dataclass(frozen=True)
class Tolerance(Options):
    """How far figures may move when the vectors were encoded here and differ from the pinned ones: a spec's
    ``defaults.tolerance`` and a condition's ``tolerance`` (which starts from the spec's).

    Defaults cover every CPU arithmetic path measured in docs/regression-specs.md (envelope table):
    ``total_terms`` is relative to the pinned index total, ``scores`` absolute on 4-decimal scores.
    Where the fingerprints match, every figure is exact and no tolerance applies.
    """

    total_terms: float = option(Field(float, 1e-6, minimum=0))
    scores: float = option(Field(float, 0.0005, minimum=0))


@dataclass(frozen=True)
class SpecDefaults(Options):
    """A spec's ``defaults:`` block (beside ``metrics``, a list read by :func:`_load_metrics`)."""

    split: str = option(Field(str, TEST_SPLIT))
    k: int = option(SearchOptions.schema()["k"])
    tolerance: Tolerance = option(Field("mapping", Tolerance()), nested=Tolerance)


@dataclass(frozen=True)
class ConditionOptions(Options):
    """A condition's own keys. Its blocks are mappings here, each read by its own options where the condition
    is built (:func:`_load_condition`); None marks a key the condition does not give."""

    RENAMED_VALUES = {"query_encoder": {"model": "splade"}}
    """The old spelling of ``query_encoder`` (recipes always said splade), read with a notice."""

    description: str | None = option(Field(str, None))
    retrieval: str | None = option(Field(str, None, ("bm25", "impact")))
    model: str | None = option(Field(str, None))
    train: str | None = option(Field(str, None, what="a recipe file or a name in regressions/recipes/"))
    trust_remote_code: bool = option(Field(bool, False))
    query_encoder: str = option(Field(str, "splade", ("splade", "idf")))
    reference_source: str | None = option(Field(str, None))
    reference_tolerance: float = option(Field(float, 0.0, minimum=0))
    published: str | None = option(Field(str, None, what="<table>/<system> of a table in regressions/published/"))
    agrees_with: str | None = option(Field(str, None, what="the name of an impact condition earlier in this spec"))
    gap: bool = option(Field(bool, False))
    bm25: Any = option(Field("mapping", None))
    encoder: Any = option(Field("mapping", None))
    quantization: Any = option(Field("mapping", None))
    reference_average: Any = option(Field("mapping", None))
    datasets: Any = option(Field("mapping", None))
    transfer: Any = option(Field("mapping", None))
    calibrate: Any = option(Field("mapping", None))
    tolerance: Any = option(Field("mapping", None))


@dataclass(frozen=True)
class DatasetOptions(Options):
    """A condition's dataset entry: its split (the spec's by default) and its pinned values' mappings."""

    split: str = option(SpecDefaults.schema()["split"])
    scores: Any = option(Field("mapping", None))
    reference: Any = option(Field("mapping", None))
    index: Any = option(Field("mapping", None))
    vectors: Any = option(Field("mapping", None))
    encoded: Any = option(Field("mapping", None))
    gap: Any = option(Field("mapping", None))


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
    gap: dict[str, float | None] = field(default_factory=dict)  # the vocabulary gap in its vectors (vtrepro.regress.gap)


@dataclass
class Condition:
    name: str
    retrieval: str  # "bm25" or "impact"
    datasets: list[DatasetRun]
    model: str | None = None
    trust_remote_code: bool = False
    bm25: Bm25Options = Bm25Options()
    encoder: EncoderOptions = EncoderOptions()
    quantization: Quantization = Quantization()
    reference_source: str | None = None
    reference_tolerance: float = ConditionOptions.reference_tolerance
    reference_average: dict[str, float] = field(default_factory=dict)
    description: str = ""
    train: str | None = None  # training recipe (file or name in regressions/recipes/) whose final model is used
    query_encoder: str = ConditionOptions.query_encoder  # "splade" (SPLADE queries) or "idf" (idf.json beside the model)
    stages: tuple[Stage, ...] = ()  # from the 'transfer' and 'calibrate' blocks, applied to ``model`` in order
    tolerance: Tolerance = Tolerance()
    published: PublishedSystem | None = None  # the published system its references come from
    agrees_with: str | None = None  # an earlier condition whose vectors these are measured against
    source_build: str | None = None  # one of SOURCE_BUILDS: the transfer source (or the model) is built from ``model``
    gap: bool = False  # measure the vocabulary gap in its vectors (duplicate activation, dead terms, density)


@dataclass
class Spec:
    path: Path
    name: str
    description: str
    k: int
    metrics: tuple[str, ...]
    conditions: list[Condition]
    gap: GapBlock | None = None  # the vocabulary-gap study the spec runs (vtrepro.regress.gap)


def find_spec(spec: str) -> Path:
    """A spec file path, or a name (with or without .yaml) in ./regressions or the installed package's."""
    return find_shipped(spec, SHIPPED_DIR, "spec")


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


def load_spec(spec: str | Path) -> Spec:
    """Load and fully validate a regression spec."""
    path = find_spec(str(spec))
    document = _read_document(path)
    check = Checker(path, "the spec")
    check.mapping(document, None, _SPEC_KEYS, "")
    defaults = check.mapping(document, "defaults", {"metrics", *SpecDefaults.schema()}, "defaults")
    metrics = _load_metrics(check, defaults)
    spec_defaults = SpecDefaults.read_with(check, document, "defaults", "defaults", {"metrics": Field("list", None)})[0]
    k, split, tolerance = spec_defaults.k, spec_defaults.split, spec_defaults.tolerance
    deepest = max(metrics, key=lambda metric: parse_metric(metric)[1])
    if parse_metric(deepest)[1] > k:
        raise check.fail(defaults, "k" if "k" in defaults else "metrics",
                         f"defaults.k is {k} but {deepest} needs {parse_metric(deepest)[1]} hits per query; "
                         "raise k or lower the cutoff")
    gap = load_gap_block(check, document)
    if (gap is None or "conditions" in document) and (not isinstance(document.get("conditions"), CommentedMap)
                                                       or not document["conditions"]):
        raise check.fail(document, "conditions", "'conditions' must map condition names to their settings "
                                                     "(or give a 'gap' block alone)")
    conditions: list[Condition] = []
    for name in document.get("conditions") or ():
        condition = _load_condition(check, document["conditions"], name, metrics, split, tolerance)
        _check_agreement(check, document["conditions"][name], condition, conditions)
        conditions.append(condition)
    description = check.value(document, "description", Field(str), "description") if "description" in document else ""
    return Spec(path, path.stem, description, k, metrics, conditions, gap)


def _load_metrics(check: Checker, defaults: CommentedMap) -> tuple[str, ...]:
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


def _metric_values(check: Checker, parent: CommentedMap, key: str, metrics: tuple[str, ...], where: str,
                   allow_none: bool) -> dict[str, Any]:
    """Metric -> value in [0, 1] (None when allowed), for the spec's metrics only."""
    schema = {metric: Field(float, None, minimum=0, maximum=1, nullable=allow_none) for metric in metrics}
    return check.read(parent, key, schema, where, fill=False)


def _load_condition(check: Checker, parent: CommentedMap, name: str, metrics: tuple[str, ...], split: str,
                    tolerance: Tolerance) -> Condition:
    where = f"condition '{name}'"
    if not isinstance(name, str) or not name or unsafe_character(name) or "/" in name:
        raise check.fail(parent, name, f"{where}: a condition name must be a non-empty string without whitespace, "
                                       "control characters or '/' (it names a folder and the run's tag); rename it")
    node = parent[name] or CommentedMap()
    built_model = None
    if isinstance(node.get("model"), CommentedMap):  # model: {build: round_trip, from: MODEL}, built by the run
        built_model = check.read(node, "model", _BUILT_SOURCE, f"{where}.model")
        view = copy.deepcopy(node)  # its lines kept, for the messages about its other keys
        del view["model"]
        given = ConditionOptions.read(check, {name: view}, name, where)
    else:
        given = ConditionOptions.read(check, parent, name, where)
    sources = [key for key in ("model", "transfer", "train")
               if getattr(given, key) is not None or (key == "model" and built_model is not None)]
    datasets = given.datasets or CommentedMap()
    all_encoded = bool(datasets) and all(isinstance(entry, CommentedMap) and "encoded" in entry
                                         for entry in datasets.values())
    retrieval = given.retrieval or ("impact" if sources or all_encoded else None)
    if retrieval is None:
        raise check.fail(parent, name, f"{where} needs 'retrieval: bm25', a 'model', a 'transfer' block or a 'train' recipe")
    if retrieval == "impact" and not (sources or all_encoded):
        raise check.fail(parent, name, f"{where} uses impact retrieval but names no 'model', 'transfer' or 'train' "
                                       "(or 'encoded' vectors for every dataset)")
    if len(sources) > 1:
        raise check.fail(node, sources[1], f"{where} takes one of 'model', 'transfer' and 'train', not {' and '.join(sources)}")
    if given.train is not None and given.calibrate is not None:
        raise check.fail(node, "calibrate", f"{where}: a 'train' recipe calibrates in its own stages; remove 'calibrate'")
    if not datasets:
        raise check.fail(parent, name, f"{where} needs 'datasets:' mapping dataset names to expected scores")
    model, stages = given.model, []
    if model is not None and model_name_problem(model):
        raise check.fail(node, "model", f"{where}: {model_name_problem(model)}; give a model folder or a Hub id")
    source_build = None
    if built_model is not None:
        model, source_build = built_model["from"], built_model["build"]
    if given.transfer is not None:
        built = isinstance(node["transfer"], CommentedMap) and isinstance(node["transfer"].get("source"), CommentedMap)
        options, source = TransferOptions.read_with(check, node, "transfer", f"{where}.transfer",
                                                    {"source": Field("mapping")} if built else _TRANSFER_SOURCE)
        model = source["source"]
        if built:
            source = check.read(node["transfer"], "source", _BUILT_SOURCE, f"{where}.transfer.source")
            model, source_build = source["from"], source["build"]
        stages.append(Stage("transfer", options))
    if given.calibrate is not None:
        stages.append(read_stage(check, node, "calibrate", "calibrate", f"{where}.calibrate"))
    condition = Condition(
        name=name, retrieval=retrieval, datasets=[], model=model, stages=tuple(stages), train=given.train,
        source_build=source_build, description=given.description or "", trust_remote_code=given.trust_remote_code,
        query_encoder=given.query_encoder, bm25=Bm25Options.read(check, node, "bm25", f"{where}.bm25"),
        encoder=EncoderOptions.read(check, node, "encoder", f"{where}.encoder"),
        quantization=Quantization.read(check, node, "quantization", f"{where}.quantization"),
        reference_source=given.reference_source, reference_tolerance=given.reference_tolerance,
        reference_average=_metric_values(check, node, "reference_average", metrics, f"{where}.reference_average", False),
        tolerance=Tolerance.read(check, node, "tolerance", f"{where}.tolerance", **tolerance.to_dict()),
        agrees_with=given.agrees_with, gap=given.gap,
    )
    if given.gap and retrieval != "impact":
        raise check.fail(node, "gap", f"{where}: 'gap' measures the vocabulary gap in a model's vectors; BM25 has none")
    for dataset in datasets:
        _check_dataset_name(check, datasets, dataset, where)
        condition.datasets.append(_load_dataset(check, datasets, dataset, f"{where}, dataset '{dataset}'", retrieval,
                                                metrics, split))
    if given.published is not None:
        _apply_published(check, node, condition, given.published, metrics)
    return condition


def _check_agreement(check: Checker, node: CommentedMap, condition: Condition, earlier: list[Condition]) -> None:
    """``agrees_with`` names an impact condition before this one (its vectors exist when these are made)."""
    if condition.agrees_with is None:
        return
    where = f"condition '{condition.name}'.agrees_with"
    if condition.retrieval != "impact":
        raise check.fail(node, "agrees_with", f"{where}: only impact conditions have vectors to compare; remove it")
    other = next((candidate for candidate in earlier if candidate.name == condition.agrees_with), None)
    if other is None or other.retrieval != "impact":
        names = ", ".join(candidate.name for candidate in earlier if candidate.retrieval == "impact") or "none"
        raise check.fail(node, "agrees_with", f"{where}: '{condition.agrees_with}' is not an impact condition listed "
                                              f"before this one (those are: {names}); name one of them")


def _apply_published(check: Checker, node: CommentedMap, condition: Condition, key: str, metrics: tuple[str, ...]) -> None:
    """References from a published table: each dataset's values for the spec's metrics, and the stated
    average when the condition runs exactly the datasets it is over."""
    where = f"condition '{condition.name}'"
    try:
        system = load_system(key)
    except VtreproError as error:
        raise check.fail(node, "published", f"{where}.published: {error}") from None
    for keyword in ("reference_source", "reference_average"):
        if keyword in node:
            raise check.fail(node, keyword, f"{where}: '{keyword}' comes from 'published: {key}'; remove one")
    condition.published, condition.reference_source = system, f"{system.source}: {system.citation}"
    for dataset in condition.datasets:
        if dataset.reference:
            raise check.fail(node, "published", f"{where}, dataset '{dataset.name}' has its own 'reference' and "
                                                f"'published: {key}' gives it too; keep one")
        dataset.reference = {metric: value for metric, value in system.datasets.get(dataset.name, {}).items()
                             if metric in metrics}
    if set(system.average_datasets) == {dataset.name for dataset in condition.datasets}:
        condition.reference_average = {metric: value for metric, value in system.average.items() if metric in metrics}


def _check_dataset_name(check: Checker, parent: CommentedMap, name: Any, where: str) -> None:
    """A dataset key is a name (``scifact``, ``cqadupstack/android``), never a path: it is looked up under the
    data root and names the run's artifact folder, which a path would put inside the dataset itself."""
    if not isinstance(name, str):
        raise check.fail(parent, name, f"{where}: dataset key {name!r} is a YAML {type(name).__name__}, not a "
                                       "dataset name; quote the name as written (e.g. '2024')")
    if not DATASET_NAME.fullmatch(name):
        raise check.fail(parent, name, f"{where}: dataset {name!r:.80} is not a dataset name (letters, digits, "
                                       "'.', '_', '-', starting with a letter or digit, with at most one '/' as in "
                                       "cqadupstack/android), never a path; put the folder at <data root>/beir/<name> "
                                       "(--data-dir / $VTREPRO_DATA) and use its name")


def _load_dataset(check: Checker, parent: CommentedMap, name: str, where: str, retrieval: str,
                  metrics: tuple[str, ...], split: str) -> DatasetRun:
    given = DatasetOptions.read(check, parent, name, where, split=split)
    entry = parent[name] or CommentedMap()
    if retrieval == "bm25" and (given.vectors is not None or given.encoded is not None):
        raise check.fail(entry, "vectors" if given.vectors is not None else "encoded",
                         f"{where}: BM25 runs have no vectors; remove 'vectors'/'encoded'")
    return DatasetRun(
        name=str(name),
        split=given.split,
        scores=_metric_values(check, entry, "scores", metrics, f"{where}.scores", True),
        reference=_metric_values(check, entry, "reference", metrics, f"{where}.reference", False),
        index=check.read(entry, "index", _INDEX, f"{where}.index", fill=False),
        vectors=_load_fingerprints(check, entry, f"{where}.vectors"),
        encoded=_load_encoded(check, entry, f"{where}.encoded"),
        gap=check.read(entry, "gap", {figure: Field(float, None, minimum=0, nullable=True) for figure in MODEL_PINNED},
                       f"{where}.gap", fill=False),
    )


def _load_fingerprints(check: Checker, parent: CommentedMap, where: str) -> dict[str, str | None]:
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


def _load_encoded(check: Checker, parent: CommentedMap, where: str) -> EncodedVectors | None:
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


def _references(node: Any, counts: dict[int, int]) -> dict[int, int]:
    """How often each mapping and list under ``node`` is reached through its own keys and its merges
    (``<<: *pins``): more than once means the spec shares it (``&pins`` ... ``*pins``)."""
    counts[id(node)] = counts.get(id(node), 0) + 1
    if counts[id(node)] == 1:
        children = ([value for _, value in node.non_merged_items()] + list(node.merge)
                    if isinstance(node, CommentedMap) else list(node))
        for child in children:
            if isinstance(child, (CommentedMap, CommentedSeq)):
                _references(child, counts)
    return counts


def _own_node(document: CommentedMap, parent: CommentedMap, key: str) -> Any:
    """The value of ``key`` in ``parent`` (None when absent), made this place's own first when the spec
    shares it (an alias, or a merge ``<<: *pins``): replaced by a copy, so what is written into it lands
    here alone."""
    own = dict(parent.non_merged_items())
    node = own[key] if key in own else next((source[key] for source in parent.merge if key in source), None)
    if isinstance(node, (CommentedMap, CommentedSeq)) and (key not in own or _references(document, {})[id(node)] > 1):
        node = copy.deepcopy(node)
        node.anchor.value = None  # the copy is this place's own: no anchor of its own to write
        parent[key] = node
    return node


def record_observed(path: Path, observed: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Write observed scores and index stats as the spec's expected values, keeping comments and order.

    ``observed`` maps (condition, dataset) to ``{"scores": {metric: value}, "index": {stat: value},
    "vectors": {"corpus": sha256, "queries": sha256}}`` (no "vectors" for BM25). Each run's values are
    written into its own place: a node the spec shares (``&pins``/``*pins``, ``<<: *pins``) is first
    replaced there by a copy, so one condition's values never land in another's.
    """
    document = _read_document(path)
    for (condition, dataset), values in observed.items():
        condition_node = _own_node(document, document["conditions"], condition)
        datasets = _own_node(document, condition_node, "datasets")
        entry = _own_node(document, datasets, dataset)
        if entry is None:
            entry = datasets[dataset] = CommentedMap()
        for section in ("vectors", "index", "scores", "gap"):
            if not values.get(section):
                continue
            pinned = _own_node(document, entry, section)
            if pinned is None:
                pinned = CommentedMap()
                pinned.fa.set_flow_style()
                entry.insert(len(entry) if section != "vectors" else 0, section, pinned)
            for key, value in values[section].items():
                pinned[key] = value
    buffer = io.StringIO()
    round_trip_yaml().dump(document, buffer)
    with atomic_write(rewritten_in_place(path)) as handle:  # a linked spec: its file, the link kept
        handle.write(buffer.getvalue())
