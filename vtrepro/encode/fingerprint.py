"""Content fingerprints of sparse vectors: what makes a pinned figure exact on any machine.

A fingerprint is a SHA-256 over the vectors alone (id and ``{term: impact}`` of every document or
query), independent of how they are split into files, of file and line order and of JSON spelling:
each record is hashed in a canonical form (terms sorted), and the record digests are hashed in
the order of their ids' digests. Two folders with the same fingerprint hold the same vectors, so
their index statistics and every score computed from them are equal, wherever they were made.

``python -m vtrepro fingerprint --vectors A [--reference-vectors B]`` prints the fingerprint of A (an encoded corpus folder, a
JSON-vector folder or file, e.g. ``queries.jsonl``) and, given B, how B's vectors differ from A's.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from vtrepro.core.errors import VtreproError
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import Vector, read_vectors, vector_files

FINGERPRINT_VERSION = b"vtrepro.vectors/1\n"


@dataclass(frozen=True)
class VectorSetSummary:
    """The fingerprint of a set of vectors with the two totals a reader can check at a glance."""

    sha256: str
    count: int
    total_impact: int


@dataclass(frozen=True)
class VectorDiff:
    """How two sets of vectors over the same ids differ."""

    records: int
    records_differing: int
    impacts_differing: int
    max_impact_delta: int
    total_impact_delta: int
    only_in_first: int
    only_in_second: int

    @property
    def identical(self) -> bool:
        return not (self.records_differing or self.only_in_first or self.only_in_second)


def _record_digest(record_id: str, vector: Vector) -> bytes:
    canonical = json.dumps([record_id, sorted(vector.items())], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).digest()


class Fingerprinter:
    """A fingerprint computed one record at a time (a streaming pass adds each record as it reads it)."""

    def __init__(self) -> None:
        self._keyed: list[tuple[bytes, bytes]] = []
        self._total = 0

    def add(self, record_id: str, vector: Vector) -> None:
        self._keyed.append((hashlib.sha256(record_id.encode("utf-8")).digest(), _record_digest(record_id, vector)))
        self._total += sum(vector.values())

    def merge(self, other: Fingerprinter) -> None:
        """Add every record ``other`` saw: a part of the same set, fingerprinted in another process (the
        fingerprint does not depend on the order records arrive in)."""
        self._keyed += other._keyed
        self._total += other._total

    def summary(self) -> VectorSetSummary:
        """The fingerprint of every record added; two records sharing an id raise :class:`DuplicateId`."""
        keyed = sorted(self._keyed)
        if any(first == second for (first, _), (second, _) in zip(keyed, keyed[1:])):
            raise DuplicateId
        digest = hashlib.sha256(FINGERPRINT_VERSION)
        for _, record in keyed:
            digest.update(record)
        return VectorSetSummary(digest.hexdigest(), len(keyed), self._total)


def _summarize(records: Iterator[tuple[Path, int, str, Vector]]) -> VectorSetSummary:
    fingerprinter = Fingerprinter()
    for _, _, record_id, vector in records:
        fingerprinter.add(record_id, vector)
    return fingerprinter.summary()


class DuplicateId(Exception):
    """Two records share an id; the caller names them."""


def fingerprint_files(files: list[Path] | Path, allow_empty: bool = False) -> VectorSetSummary:
    """Fingerprint of the vectors in one JSON-vector file or several (ids unique across all)."""
    paths = [files] if isinstance(files, Path) else files
    try:
        return _summarize(read_vectors(paths, allow_empty))
    except DuplicateId:
        raise locate_duplicate(paths, allow_empty) from None


def fingerprint_folder(folder: str | Path) -> VectorSetSummary:
    """Fingerprint of a JSON-vector folder (an encoded corpus's ``vectors/`` or any JsonVectorCollection)."""
    return fingerprint_files(vector_files(folder))


def fingerprint_vectors(vectors: Mapping[str, Vector]) -> VectorSetSummary:
    """Fingerprint of in-memory vectors (e.g. encoded queries), equal to that of the same vectors in files."""
    records = ((Path("<memory>"), 0, record_id, dict(vector)) for record_id, vector in vectors.items())
    return _summarize(records)


def locate_duplicate(paths: list[Path], allow_empty: bool) -> VtreproError:
    """Second pass, only after a duplicate was seen: name both places."""
    seen: dict[str, tuple[Path, int]] = {}
    for path, line, record_id, _ in read_vectors(paths, allow_empty):
        if record_id in seen:
            first_path, first_line = seen[record_id]
            return VtreproError(f"{path}:{line}: duplicate id '{record_id}' (first at {first_path}:{first_line}); "
                                "remove one of them")
        seen[record_id] = (path, line)
    return VtreproError(f"{', '.join(map(str, paths))}: duplicate ids")


def compare_vectors(first: Mapping[str, Vector], second: Mapping[str, Vector]) -> VectorDiff:
    """Count the records and impacts that differ between two sets of vectors."""
    records_differing = impacts_differing = max_delta = total_delta = 0
    for record_id in first.keys() & second.keys():
        a, b = first[record_id], second[record_id]
        if a == b:
            continue
        records_differing += 1
        for term in a.keys() | b.keys():
            delta = b.get(term, 0) - a.get(term, 0)
            if delta:
                impacts_differing += 1
                max_delta = max(max_delta, abs(delta))
                total_delta += delta
    only_first = first.keys() - second.keys()
    only_second = second.keys() - first.keys()
    total_delta += sum(sum(second[i].values()) for i in only_second) - sum(sum(first[i].values()) for i in only_first)
    return VectorDiff(len(first.keys() | second.keys()), records_differing, impacts_differing, max_delta,
                      total_delta, len(only_first), len(only_second))


def _files(path: Path) -> list[Path]:
    """The vector files of an encoded corpus folder (its ``vectors/``), a JSON-vector folder, or one file."""
    if path.is_file():
        return [path]
    return vector_files(EncodedFolder(path).vectors_or_root)
