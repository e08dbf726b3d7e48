"""A spec's ``gap:`` block: the vocabulary-gap study a regression runs, and every figure it pins
(docs/regression-specs.md, "Vocabulary gap"; docs/vocabulary-gap.md).

```yaml
gap:
  tokenizers: [gpt2-bpe, olmo-bpe, bert-cased, splade-tiny]   # the census
  corpus_tokenizers: [gpt2-bpe, splade-tiny]                  # corpus, BM25 and integrity (default: tokenizers)
  datasets: [scifact, nfcorpus]
  pins:
    census: {gpt2-bpe: {marked: 4710, ...}}
    corpus: {gpt2-bpe/scifact: {exact_match: 0.5892, ...}}
    bm25: {gpt2-bpe/scifact/raw: {ndcg@10: 0.6, ...}}
    integrity: {gpt2-bpe/scifact: {groups_measured: 1092, ...}}
```

Tokenization, counting, Lucene's BM25 and the divergences are deterministic, so every pin is exact (tier fixed,
compared at 4 decimals); the paired tests' p-values are measured beside them, never judged. ``--record`` writes the
observed figures into ``pins``.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, rewritten_in_place
from vtrepro.core.schema import Checker, Field, read_yaml, round_trip_yaml
from vtrepro.data.beir import DATASET_NAME
from vtrepro.gap.units import NORMALIZATIONS
from vtrepro.report.results import (
    STATUS_FAIL,
    STATUS_MEASURED,
    STATUS_OK,
    STATUS_OKISH,
    STATUS_UNPINNED,
    TIER_FIXED,
    ResultRow,
)

PINNED: dict[str, tuple[str, ...]] = {
    "census": ("entries", "units", "units_without_accents", "coarse_graining", "multi_form_share", "marked",
               "marked_capitalized", "capitalized", "position_twins", "case_variants"),
    "corpus": ("document_tokens", "variant_mass_documents", "variant_mass_queries", "form_entropy_documents",
               "form_entropy_queries", "exact_match", "match_markers", "match_case", "unit_match",
               "pairs_gained_by_units"),
    "bm25": ("ndcg@10", "recall@100", "total_terms"),
    "integrity": ("groups_measured", "mean_divergence", "random_pair_divergence", "groups_at_baseline"),
}
"""The figures each part of the study (:data:`vtrepro.gap.study.PARTS`, in its order) pins, per key (census: a
tokenizer; corpus and integrity: tokenizer/dataset; bm25: tokenizer/dataset/normalization)."""
PARTS = tuple(PINNED)
MEASURED = ("p_t_test", "p_randomization")
"""The BM25 figures shown beside the pins (each normalization's paired tests against raw), never judged."""
_KEYS = {"tokenizers", "corpus_tokenizers", "datasets", "pins"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A tokenizer's name in a block: a built-in name, or a folder's name under --model-dir (no path)."""
MAX_NAMES = 64
"""The most tokenizers or datasets a block lists."""


@dataclass
class GapBlock:
    """The study a spec's ``gap:`` block asks for, and its pins (part -> key -> figure -> value, None unpinned)."""

    tokenizers: tuple[str, ...]
    corpus_tokenizers: tuple[str, ...]
    datasets: tuple[str, ...]
    pins: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


def load_gap_block(check: Checker, document: CommentedMap) -> GapBlock | None:
    """The ``gap:`` block of a spec document, checked, or None when it has none."""
    if "gap" not in document:
        return None
    node = check.mapping(document, "gap", _KEYS, "gap")
    names = check.read(document, "gap", {"tokenizers": Field("str_list"), "corpus_tokenizers": Field("str_list", None),
                                         "datasets": Field("str_list", None), "pins": Field("mapping", None)}, "gap")
    for key in ("tokenizers", "corpus_tokenizers", "datasets"):
        given = names[key] or ()
        if len(given) > MAX_NAMES:
            raise check.fail(node, key, f"gap.{key}: {len(given)} names, more than the {MAX_NAMES} a study takes")
        for position, name in enumerate(given):
            pattern = DATASET_NAME if key == "datasets" else _NAME
            if not pattern.fullmatch(name):
                raise check.fail(node[key], position, f"gap.{key}: {name!r:.80} is not a "
                                 f"{'dataset' if key == 'datasets' else 'tokenizer'} name (a built-in name or a folder's "
                                 "name under --model-dir or the data root: letters, digits, '.', '_', '-'); use one")
            if name in given[:position]:
                raise check.fail(node[key], position, f"gap.{key}: {name} is listed twice; remove one")
    corpus_tokenizers = names["corpus_tokenizers"] or names["tokenizers"]
    datasets = names["datasets"] or ()
    keys = {"census": set(names["tokenizers"]),
            "corpus": {f"{tokenizer}/{dataset}" for tokenizer in corpus_tokenizers for dataset in datasets}}
    keys["integrity"] = keys["corpus"]
    keys["bm25"] = {f"{key}/{normalization}" for key in keys["corpus"] for normalization in NORMALIZATIONS}
    pins: dict[str, dict[str, dict[str, Any]]] = {}
    pin_node = check.mapping(node, "pins", set(PARTS), "gap.pins")
    for part in pin_node:
        entries = pin_node[part]
        if not isinstance(entries, CommentedMap):
            raise check.fail(pin_node, part, f"gap.pins.{part} must map keys to their figures")
        pins[part] = {}
        for key in entries:
            if key not in keys[part]:
                raise check.fail(entries, key, f"gap.pins.{part}: {str(key)[:80]!r} is no figure of this study (its keys: "
                                               "a tokenizer for census; tokenizer/dataset for corpus and integrity; "
                                               "tokenizer/dataset/normalization for bm25, of the block's names); "
                                               "remove it or list its names")
            schema = {figure: Field(float, None, minimum=0, nullable=True) for figure in PINNED[part]}
            pins[part][str(key)] = check.read(entries, key, schema, f"gap.pins.{part}.{key}", fill=False)
    return GapBlock(tuple(names["tokenizers"]), tuple(corpus_tokenizers), tuple(datasets), pins)


def observed_figures(results: dict[str, dict]) -> dict[str, dict[str, dict[str, Any]]]:
    """The figures :data:`PINNED` names, by part and key, from a study's results."""
    observed: dict[str, dict[str, dict[str, Any]]] = {part: {} for part in results}
    for entry in results.get("census", {}).get("tokenizers", []):
        figures = {**entry, **entry["variants"]}
        observed["census"][entry["name"]] = {name: figures.get(name) for name in PINNED["census"]}
    for entry in results.get("corpus", {}).get("figures", []):
        figures = {**entry, "match_markers": entry["match_rate"]["markers"], "match_case": entry["match_rate"]["case"]}
        observed["corpus"][f"{entry['tokenizer']}/{entry['dataset']}"] = {name: figures[name] for name in PINNED["corpus"]}
    for run in results.get("bm25", {}).get("runs", []):
        figures = {**run["scores"], "total_terms": run["index"]["total_terms"]}
        observed["bm25"][f"{run['tokenizer']}/{run['dataset']}/{run['normalization']}"] = {
            name: figures[name] for name in PINNED["bm25"]}
    for entry in results.get("integrity", {}).get("tokenizers", []):
        observed["integrity"][f"{entry['tokenizer']}/{entry['dataset']}"] = {
            name: entry[name] for name in PINNED["integrity"]}
    return observed


def _same(expected: Any, observed: Any) -> bool:
    return f"{expected:.4f}" == f"{observed:.4f}"


def gap_rows(block: GapBlock, results: dict[str, dict]) -> list[ResultRow]:
    """One row per pinned figure (OK, FAIL or UNPINNED; a figure the study did not give is a FAIL), and the
    paired tests' p-values as measured rows."""
    rows = []
    observed = observed_figures(results)
    for part in PARTS:
        keys = list(dict.fromkeys([*observed.get(part, {}), *block.pins.get(part, {})]))
        for key in keys:
            seen = observed.get(part, {}).get(key, {})
            pinned = block.pins.get(part, {}).get(key, {})
            for figure in PINNED[part]:
                value, expected = seen.get(figure), pinned.get(figure)
                if value is None and expected is None:
                    continue  # a figure this tokenizer does not have (WordPiece has no word-start marks)
                status = (STATUS_UNPINNED if expected is None else STATUS_FAIL if value is None
                          else STATUS_OK if _same(expected, value) else STATUS_FAIL)
                rows.append(ResultRow(f"gap-{part}", key, figure, "gap", expected, value, status, TIER_FIXED))
    for run in results.get("bm25", {}).get("runs", []):
        for metric, comparison in run["against_raw"].items():
            for figure in MEASURED:
                rows.append(ResultRow("gap-bm25", f"{run['tokenizer']}/{run['dataset']}/{run['normalization']}",
                                      f"{metric}/{figure}", "gap", None, comparison[figure], STATUS_MEASURED,
                                      TIER_FIXED, "paired test against raw"))
    return rows


def record_gap(path: Path, results: dict[str, dict]) -> None:
    """Write the observed figures as the spec's ``gap.pins``, keeping the file's comments and order."""
    document = read_yaml(path)
    if not isinstance(document, CommentedMap) or not isinstance(document.get("gap"), CommentedMap):
        raise VtreproError(f"{path}: no 'gap' block to record into")
    pins = document["gap"].get("pins")
    if not isinstance(pins, CommentedMap):
        pins = document["gap"]["pins"] = CommentedMap()
    for part, entries in observed_figures(results).items():
        if not isinstance(pins.get(part), CommentedMap):
            pins[part] = CommentedMap()
        for key, figures in entries.items():
            values = CommentedMap((name, value) for name, value in figures.items() if value is not None)
            values.fa.set_flow_style()
            pins[part][key] = values
    buffer = io.StringIO()
    round_trip_yaml().dump(document, buffer)
    with atomic_write(rewritten_in_place(path)) as handle:  # a linked spec: its file, the link kept
        handle.write(buffer.getvalue())


MODEL_PINNED = ("duplicate_share_documents", "duplicate_share_queries", "redundant_mass_documents",
                "redundant_mass_queries", "dead", "dead_multi_form", "terms_per_document_mean", "terms_per_query_mean",
                "flops")
"""The vocabulary-gap figures an impact condition with ``gap: true`` pins per dataset (:mod:`vtrepro.gap.model`)."""
ENVELOPE_IMPACTS = 150
"""The most impacts another CPU's arithmetic moved by one in a corpus, with margin: 103 on SciFact, 67 on NFCorpus
over every path measured (docs/regression-specs.md, the measured envelope). A gap figure of vectors encoded here
that differ from the pinned ones may move by what that many flips of a term between impact 0 and 1 can move it."""


def model_bound(figure: str, figures: dict[str, Any]) -> float:
    """How far ``figure`` may move in the encoded tier: :data:`ENVELOPE_IMPACTS` terms turning on or off, each moving
    a share of documents (queries) by 1/documents (1/queries), the dead count by 1, a mean length by 1/documents,
    a share of impact mass by at most 2/mass (mass >= active terms), FLOPS by 1/documents + 1/queries."""
    documents, queries = max(figures["documents"], 1), max(figures["queries"], 1)
    mass = max(figures["terms_per_document_mean"] * documents, 1)
    step = {"duplicate_share_documents": 1 / documents, "duplicate_share_queries": 1 / queries,
            "redundant_mass_documents": 2 / mass,
            "redundant_mass_queries": 2 / max(figures["terms_per_query_mean"] * queries, 1),
            "dead": 1.0, "dead_multi_form": 1.0, "terms_per_document_mean": 1 / documents,
            "terms_per_query_mean": 1 / queries, "flops": 1 / documents + 1 / queries}[figure]
    return ENVELOPE_IMPACTS * step


def model_rows(condition: str, dataset: str, pinned: dict[str, Any], figures: dict[str, Any],
               tier: str) -> list[ResultRow]:
    """One row per pinned model figure: exact at 4 decimals in the fixed tier; in the encoded tier within
    :func:`model_bound` is OKISH."""
    rows = []
    for figure in MODEL_PINNED:
        value, expected = figures.get(figure), pinned.get(figure)
        if value is None and expected is None:
            continue
        if expected is None:
            status = STATUS_UNPINNED
        elif value is None:
            status = STATUS_FAIL
        elif _same(expected, value):
            status = STATUS_OK
        elif tier != TIER_FIXED and abs(value - expected) <= model_bound(figure, figures):
            status = STATUS_OKISH
        else:
            status = STATUS_FAIL
        note = "" if value is None or expected is None or _same(expected, value) else f"{value - expected:+.4g}"
        rows.append(ResultRow(condition, dataset, f"gap/{figure}", "gap", expected, value, status, tier, note))
    return rows
