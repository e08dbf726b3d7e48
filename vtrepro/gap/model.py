"""The vocabulary gap in a model's vectors: what redundant surface forms cost an encoder, read from an encoded run
(docs/vocabulary-gap.md, "In the model").

An encoded run's terms are vocabulary entries as the encoder wrote them (percent-escaped: ``encode.vectors``).
Each term is mapped back to its entry id and read as a surface form of its unit (:mod:`vtrepro.gap.units`):

- **duplicate activation**: the share of documents (and of queries) whose vector activates two or more forms of
  one unit, and the share of impact mass on the forms beyond the strongest of their unit (the redundant mass);
- **dead terms**: the entries (specials left out) no document activates, split into entries whose unit has other
  forms in the vocabulary and entries whose unit has none; ``dead_shadowed`` counts the dead entries whose unit is
  activated through another form;
- **density**: active terms per document and per query (mean, p50, p99) and SPLADE's FLOPS
  (:func:`vtrepro.encode.statistics.expected_flops`).

Every figure follows from the vectors alone, so it is exact for fixed vectors (their fingerprint is kept beside
the figures).
"""
from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, check_regular_file, read_json_file
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import Vector, read_vectors, vector_files
from vtrepro.encode.statistics import SparsityCounter, expected_flops
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, escape_term
from vtrepro.gap.census import unit_groups
from vtrepro.gap.vocabularies import Vocabulary

logger = logging.getLogger(__name__)

# numpy is imported where percentiles are taken, on purpose: `vtrepro gap --help` stays fast.

MAX_VECTOR_FILE_BYTES = 16 << 30
"""Largest vector shard or queries file read (an MS MARCO shard of 100,000 SPLADE vectors is under 1 GiB)."""
TOP_DUPLICATES = 15
FIX_RUN = ("give the folder `vtrepro encode` wrote (manifest.json, vectors/, queries.jsonl) or a "
           "JsonVectorCollection folder")
FIX_TOKENIZER = "give the --tokenizer of the model that encoded the run"


@dataclass(frozen=True)
class TermIndex:
    """A vocabulary as an encoder's terms: escaped entry -> id, each id's unit index (None: a special) and
    how many forms each unit has."""

    vocabulary: Vocabulary
    ids: dict[str, int]
    unit_of: list[int | None]
    units: list[str]
    forms: list[list[int]]

    @classmethod
    def of(cls, vocabulary: Vocabulary) -> TermIndex:
        groups = unit_groups(vocabulary)
        units = sorted(groups.by_unit)
        unit_of: list[int | None] = [None] * len(vocabulary.entries)
        forms = []
        for number, unit in enumerate(units):
            forms.append(groups.by_unit[unit])
            for index in groups.by_unit[unit]:
                unit_of[index] = number
        return cls(vocabulary, {escape_term(entry): index for index, entry in enumerate(vocabulary.entries)},
                   unit_of, units, forms)

    def vocabulary_sha256(self) -> str:
        """What ``encode`` records as ``settings.vocabulary_sha256``: the entries by id, one a line."""
        return hashlib.sha256("\n".join(self.vocabulary.entries).encode()).hexdigest()


@dataclass
class ActivationCounter:
    """Duplicate activation, the entries activated and terms per vector, counted one vector at a time."""

    index: TermIndex
    vectors: int = 0
    with_duplicates: int = 0
    duplicate_units: int = 0
    mass: int = 0
    redundant_mass: int = 0
    duplicate_group_mass: int = 0
    duplicated: Counter[int] = field(default_factory=Counter)
    active: bytearray = field(default_factory=bytearray)
    sparsity: SparsityCounter = field(default_factory=SparsityCounter)

    def __post_init__(self) -> None:
        self.active = bytearray(len(self.index.vocabulary.entries))

    def add(self, vector: Vector, where: str) -> None:
        groups: dict[int, list[int]] = {}
        for term, impact in vector.items():
            if term == EMPTY_DOCUMENT_TERM:
                continue
            term_id = self.index.ids.get(term)
            if term_id is None:
                raise VtreproError(f"{where}: term {term[:60]!r} is no entry of the tokenizer "
                                   f"{self.index.vocabulary.name}: the run's vocabulary does not match; {FIX_TOKENIZER}")
            self.active[term_id] = 1
            self.mass += impact
            unit = self.index.unit_of[term_id]
            if unit is not None:
                groups.setdefault(unit, []).append(impact)
        self.vectors += 1
        self.sparsity.add(vector)
        repeated = [unit for unit, impacts in groups.items() if len(impacts) > 1]
        if repeated:
            self.with_duplicates += 1
            self.duplicate_units += len(repeated)
            self.duplicated.update(repeated)
            for unit in repeated:
                self.duplicate_group_mass += sum(groups[unit])
                self.redundant_mass += sum(groups[unit]) - max(groups[unit])

    def duplicates(self) -> dict[str, Any]:
        return {"vectors": self.vectors, "with_duplicates": self.with_duplicates,
                "duplicate_share": share(self.with_duplicates, self.vectors),
                "duplicate_units_per_vector": share(self.duplicate_units, self.vectors),
                "redundant_mass": share(self.redundant_mass, self.mass),
                "duplicate_group_mass": share(self.duplicate_group_mass, self.mass)}

    def density(self) -> dict[str, float]:
        import numpy as np

        lengths = np.asarray(self.sparsity.lengths or [0], dtype=np.float64)
        return {"mean": round(float(lengths.mean()), 4), "p50": float(np.percentile(lengths, 50)),
                "p99": round(float(np.percentile(lengths, 99)), 4)}


def share(part: float, whole: float) -> float:
    """``part / whole`` at 4 decimals, 0 for nothing."""
    return round(part / whole, 4) if whole else 0.0


def dead_terms(documents: ActivationCounter) -> dict[str, int]:
    """Entries (specials left out) no document activates, by whether their unit has other forms."""
    index = documents.index
    counts = {"entries": 0, "dead": 0, "dead_multi_form": 0, "dead_single_form": 0, "dead_shadowed": 0}
    unit_alive = [any(documents.active[form] for form in forms) for forms in index.forms]
    for term_id, unit in enumerate(index.unit_of):
        if unit is None:
            continue
        counts["entries"] += 1
        if documents.active[term_id]:
            continue
        counts["dead"] += 1
        counts["dead_multi_form" if len(index.forms[unit]) > 1 else "dead_single_form"] += 1
        counts["dead_shadowed"] += unit_alive[unit]
    return counts


def _bounded_files(folder: Path, files: list[Path]) -> list[Path]:
    for path in files:
        check_regular_file(path, MAX_VECTOR_FILE_BYTES, FIX_RUN, folder)
    return files


def read_run_manifest(folder: EncodedFolder) -> dict[str, Any] | None:
    """The run's manifest (bounded), or None for a plain vector folder."""
    if not folder.manifest_path.exists():
        return None
    manifest = read_json_file(folder.manifest_path, FIX_RUN, JSON_FILE_BYTES["manifest"], folder.root)
    if not isinstance(manifest, dict):
        raise VtreproError(f"{folder.manifest_path}: not an encoded run's manifest (no JSON object); {FIX_RUN}")
    return manifest


def model_figures(run: str | Path, vocabulary: Vocabulary, name: str | None = None) -> dict[str, Any]:
    """Duplicate activation, dead terms and density of the encoded run ``run`` read with ``vocabulary``."""
    folder = EncodedFolder.around(run)
    if not folder.root.is_dir():
        raise VtreproError(f"{folder.root}: no such run folder; {FIX_RUN}")
    manifest = read_run_manifest(folder)
    index = TermIndex.of(vocabulary)
    recorded = (manifest or {}).get("settings", {}).get("vocabulary_sha256") if manifest else None
    if recorded is not None and recorded != index.vocabulary_sha256():
        raise VtreproError(f"{folder.manifest_path}: the run was encoded with another vocabulary than the tokenizer "
                           f"{vocabulary.name} ({len(vocabulary.entries):,} entries; vocabulary_sha256 differs); "
                           f"{FIX_TOKENIZER}")
    documents = ActivationCounter(index)
    files = _bounded_files(folder.root, vector_files(folder.vectors_or_root))
    for path, line, _, vector in read_vectors(files):
        documents.add(vector, f"{path}:{line}")
    queries = ActivationCounter(index)
    if folder.queries.exists():
        for path, line, _, vector in read_vectors(_bounded_files(folder.root, [folder.queries]), allow_empty=True):
            queries.add(vector, f"{path}:{line}")
    flops = expected_flops(documents.sparsity.result(), queries.sparsity.result()) if queries.vectors else None
    top = sorted(documents.duplicated.items(), key=lambda item: (-item[1], index.units[item[0]]))[:TOP_DUPLICATES]
    return {
        "run": name or folder.root.name,
        "folder": str(folder.root),
        "model": (manifest or {}).get("model"),
        "fingerprint": (manifest or {}).get("fingerprint"),
        "tokenizer": vocabulary.name,
        "scheme": vocabulary.scheme.name,
        "vocabulary": len(vocabulary.entries),
        "duplicates_documents": documents.duplicates(),
        "duplicates_queries": queries.duplicates(),
        "dead": dead_terms(documents),
        "density_documents": documents.density(),
        "density_queries": queries.density(),
        "flops": None if flops is None else round(flops, 4),
        "top_duplicates": [{"unit": index.units[unit], "documents": count,
                            "forms": [vocabulary.entries[form] for form in index.forms[unit]]} for unit, count in top],
    }


def flat_figures(entry: dict[str, Any]) -> dict[str, Any]:
    """One run's figures as the flat names the spec pins and the tables show."""
    docs, queries, dead = entry["duplicates_documents"], entry["duplicates_queries"], entry["dead"]
    return {
        "documents": docs["vectors"], "queries": queries["vectors"],
        "duplicate_share_documents": docs["duplicate_share"], "duplicate_share_queries": queries["duplicate_share"],
        "duplicate_units_per_document": docs["duplicate_units_per_vector"],
        "redundant_mass_documents": docs["redundant_mass"], "redundant_mass_queries": queries["redundant_mass"],
        "duplicate_group_mass_documents": docs["duplicate_group_mass"],
        "dead": dead["dead"], "dead_multi_form": dead["dead_multi_form"], "dead_single_form": dead["dead_single_form"],
        "dead_shadowed": dead["dead_shadowed"],
        "terms_per_document_mean": entry["density_documents"]["mean"],
        "terms_per_document_p50": entry["density_documents"]["p50"],
        "terms_per_document_p99": entry["density_documents"]["p99"],
        "terms_per_query_mean": entry["density_queries"]["mean"],
        "terms_per_query_p50": entry["density_queries"]["p50"],
        "terms_per_query_p99": entry["density_queries"]["p99"],
        "flops": entry["flops"],
    }
