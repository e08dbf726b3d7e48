"""Reading JSON vectors, every record checked: the reader index, search, regress and fingerprints share.

A JSON-vector file holds one ``{"id", "contents", "vector"}`` record per line (Anserini's
JsonVectorCollection); ``vector`` maps terms to integer impacts. Each record is refused, naming its
file and line, where Anserini would silently change it: an id or term it would split, a float or
out-of-range impact it would truncate, an empty document it would drop.
"""
from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Iterator, Mapping

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_regular_file, read_jsonl, read_jsonl_range, unsafe_character

MAX_IMPACT = 2**31 - 1
"""Anserini stores an impact as a Lucene term frequency: a positive 32-bit integer."""

MAX_VECTOR_TERMS = 1_000_000
"""Distinct terms of one vector: no vocabulary vtrepro encodes with holds more (``vocabulary.calibrate.MAX_VOCABULARY``)."""

Vector = dict[str, int]

logger = logging.getLogger(__name__)

_full_reads: Counter[Path] = Counter()
"""Full reads of each vector file (resolved path) since the process started or the command running in it
(:func:`reset_full_reads`): by :func:`read_vectors`, or by Anserini when an index is built (:func:`count_full_read`)."""


def count_full_read(files: list[Path], by: str) -> None:
    """Count one full read of each of ``files`` (``by``: who reads them) and say so at debug level."""
    for path in files:
        _full_reads[path.resolve()] += 1
    where = files[0] if len(files) == 1 else f"{len(files)} files in {files[0].parent}" if files else "no file"
    logger.debug(f"full read of the vectors: {where} ({by})")


def reset_full_reads() -> None:
    """Count from zero again (a command counts its own reads)."""
    _full_reads.clear()


def full_reads(files: list[Path]) -> int:
    """How often this process has read ``files`` whole: the most reads of any one of them."""
    return max((_full_reads[path.resolve()] for path in files), default=0)


def vector_files(folder: str | Path) -> list[Path]:
    """The JSON-vector files Anserini reads from ``folder`` (``*.jsonl``, ``*.jsonl.gz``), hidden temp files skipped."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VtreproError(f"{folder}: no such vector folder")
    files = sorted(path for pattern in ("*.jsonl", "*.jsonl.gz") for path in folder.glob(pattern)
                   if not path.name.startswith("."))
    if not files:
        raise VtreproError(f"{folder}: no *.jsonl vector files; point at an encoded corpus or a JsonVectorCollection folder")
    for path in files:  # before anything opens one: a FIFO would block, a device never end
        check_regular_file(path, 2**62, "a vector folder holds regular files: copy the vectors in", folder)
    return files


MAX_SAFE_TERMS = 300_000
"""Terms remembered as safe: more than any vocabulary vtrepro encodes with (XLM-R's 250,002 the largest)."""
MAX_SAFE_TERM_LENGTH = 64
"""Characters of a term remembered as safe (a vocabulary's are shorter): hostile vectors hold at most ~40 MB here."""
_safe_terms: set[str] = set()
"""Terms already found safe: a term recurs in many vectors, and checking it character by character was most of
a read's time."""


def _checked_vector(path: Path, line: int, record: Mapping, allow_empty: bool) -> tuple[str, Vector]:
    """(id, vector) of one JSON-vector record, refusing what Anserini would silently change.

    An empty vector is refused for documents (Anserini drops the document) unless ``allow_empty`` (queries)."""
    doc_id, vector = record.get("id"), record.get("vector")
    if not isinstance(doc_id, str) or not doc_id or unsafe_character(doc_id):
        raise VtreproError(f"{path}:{line}: 'id' must be a non-empty string without whitespace or control "
                           f"characters, got {doc_id!r}; fix the id")
    if not isinstance(record.get("contents", ""), str):
        raise VtreproError(f"{path}:{line}: 'contents' must be a string, got {record['contents']!r:.40}")
    if not isinstance(vector, dict) or not (vector or allow_empty):
        raise VtreproError(f"{path}:{line}: 'vector' must be a non-empty object {{term: integer impact}} "
                           "(Anserini drops a document without terms)")
    if len(vector) > MAX_VECTOR_TERMS:
        raise VtreproError(f"{path}:{line}: 'vector' holds {len(vector)} terms, more than the {MAX_VECTOR_TERMS} of any "
                           "vocabulary; not vectors an encoder wrote")
    for term, impact in vector.items():
        if term not in _safe_terms:
            if not term or unsafe_character(term):
                raise VtreproError(f"{path}:{line}: term {term!r} is empty or holds whitespace or control characters; "
                                   "Anserini would split or drop it (python -m vtrepro encode escapes such terms)")
            if len(term) <= MAX_SAFE_TERM_LENGTH and len(_safe_terms) < MAX_SAFE_TERMS:
                _safe_terms.add(term)
        if isinstance(impact, bool) or not isinstance(impact, int) or not 0 < impact <= MAX_IMPACT:
            raise VtreproError(f"{path}:{line}: impact {impact!r} of term {term!r} must be an integer in "
                               f"1..{MAX_IMPACT}; quantize the weights (python -m vtrepro encode does)")
    return doc_id, vector


def read_vectors(files: list[Path] | Path, allow_empty: bool = False) -> Iterator[tuple[Path, int, str, Vector]]:
    """Yield ``(file, line, id, vector)`` of every record, each checked; one file or several (each read
    counted, :func:`count_full_read`)."""
    paths = [files] if isinstance(files, Path) else files
    count_full_read(paths, "vtrepro's checked reader")
    for path in paths:
        for line, record in read_jsonl(path):
            yield (path, line, *_checked_vector(path, line, record, allow_empty))


def read_vector_range(path: Path, start: int, stop: int) -> Iterator[tuple[Path, int, str, Vector]]:
    """:func:`read_vectors` of the records of one plain file from byte ``start`` to ``stop`` (both at line starts:
    a build split the file at line boundaries), numbered by their line in the file; a part of a read, not
    counted as a full one."""
    for line, record in read_jsonl_range(path, start, stop):
        yield (path, line, *_checked_vector(path, line, record, False))


def load_vectors(files: list[Path] | Path, allow_empty: bool = False) -> dict[str, Vector]:
    """All vectors of the given files as ``{id: vector}`` (duplicates refused)."""
    vectors: dict[str, Vector] = {}
    for path, line, record_id, vector in read_vectors(files, allow_empty):
        if record_id in vectors:
            raise VtreproError(f"{path}:{line}: duplicate id '{record_id}'; remove one of them")
        vectors[record_id] = vector
    return vectors


def read_query_vectors(path: str | Path) -> dict[str, Vector]:
    """Encoded queries (``{"id", "vector"}`` per line) as qid -> {term: integer weight}, every line checked
    like a document vector; a query may have an empty vector."""
    return load_vectors(Path(path), allow_empty=True)
