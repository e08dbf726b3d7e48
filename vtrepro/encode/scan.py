"""One streaming pass over a folder of document vectors: every record checked, the fingerprint and the
statistics the efficiency figures need, from a single read; recorded so that every later stage reuses them.

Reading a large collection is the slow part of everything after encoding (at 10^6 documents fingerprinting
alone took 771 s), so :func:`scan_folder` reads a folder once: it checks every record as
:mod:`vtrepro.encode.reader` does, computes the fingerprint of :mod:`vtrepro.encode.fingerprint` (the same
value) and the sparsity of :mod:`vtrepro.encode.statistics`, keeps the result for this process and, given a
``record`` path, writes it there (``scan.json``) for later stages and later runs. It reads the files again
only when they changed.

When a recorded scan is trusted (it then stands in for checking vectors that are indexed):

- it lies where vtrepro writes, named by the caller: an encoded folder's own ``scan.json`` beside the
  manifest when vtrepro encoded it, or a regression's artifacts folder for vectors it was given. A
  ``scan.json`` inside a folder someone sent is never read (vtrepro writes nothing into an input either);
- its key matches every vector file now: the same files (resolved paths) and, for each, its size,
  modification and change times (ns), inode and device. A copied or extracted folder has new inodes and
  change times, so a record made anywhere else never matches; a file changed in place has a new change
  time, which ``touch`` cannot set back;
- it has this module's :data:`SCAN_FORMAT` (bumped whenever what a pass checks or computes changes), reads
  back within bounds (:func:`vtrepro.core.io.read_json_file`) and holds well-formed values.

Anything else is ignored (said at debug level) and the folder read again. What this cannot catch: someone
who can write into the output folder and also reset the system clock (so a change keeps the change time),
or a file system whose times do not move on write.

A file changed twice within the file system's time granularity would keep its times; so before a pass a
file changed less than :data:`SETTLE_NS` ago (:data:`COARSE_SETTLE_NS` on a file system with whole-second
times) is waited out, and a folder whose files' times moved during the pass is not recorded.
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, read_json_file
from vtrepro.encode.fingerprint import DuplicateId, Fingerprinter, VectorSetSummary, locate_duplicate
from vtrepro.encode.reader import read_vectors, vector_files
from vtrepro.encode.statistics import PERCENTILES, Sparsity, SparsityCounter

logger = logging.getLogger(__name__)

SCAN_FORMAT = "vtrepro.vector-scan/1"
SETTLE_NS = 50_000_000
"""A file's times lag the clock by up to a kernel tick (10 ms at 100 Hz): one changed less than this long
ago may change again without its times moving."""
COARSE_SETTLE_NS = 2_000_000_000
"""The same on a file system that keeps whole seconds (every time a multiple of 10^9 ns)."""
SETTLE_TRIES = 3
"""Waits for files still being written before the pass goes on without recording."""
REMEMBERED = 16
"""Scans this process keeps (a regression uses each folder's within one condition)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_remembered: OrderedDict[str, VectorScan] = OrderedDict()


@dataclass(frozen=True)
class VectorScan:
    """What one pass over a folder's document vectors found: their fingerprint and their sparsity."""

    fingerprint: VectorSetSummary
    sparsity: Sparsity


def scan_files(files: list[Path]) -> VectorScan:
    """Read every record of ``files`` once, each checked (ids unique across all; no empty vector), and
    return their fingerprint and sparsity."""
    fingerprinter, counter = Fingerprinter(), SparsityCounter()
    for _, _, record_id, vector in read_vectors(files):
        fingerprinter.add(record_id, vector)
        counter.add(vector)
    try:
        summary = fingerprinter.summary()
    except DuplicateId:
        raise locate_duplicate(files, False) from None
    return VectorScan(summary, counter.result())


def scan_folder(folder: str | Path, record: Path | None = None) -> VectorScan:
    """The scan of the vector files of ``folder``: remembered by this process or read from ``record`` when
    their key still matches (see the module's notes on trust), else one pass, remembered and written to
    ``record`` (a path in a folder vtrepro writes, never in an input)."""
    files = vector_files(folder)
    keys, settled = _settled_keys(files)
    identity = json.dumps(keys)
    scan = _remembered.get(identity) if settled else None
    from_record = False
    if scan is None and settled and record is not None:
        scan = _recorded(record, keys)
        from_record = scan is not None
    if scan is None:
        scan = scan_files(files)
        if not settled or _keys(files) != keys:
            logger.debug(f"{folder}: its vector files changed while they were read; their scan is not kept")
            return scan
    _remembered[identity] = scan
    _remembered.move_to_end(identity)
    while len(_remembered) > REMEMBERED:
        _remembered.popitem(last=False)
    if record is not None and not from_record and _recorded(record, keys, quiet=True) is None:
        with atomic_write(record) as handle:
            json.dump({"format": SCAN_FORMAT, "files": keys, "fingerprint": asdict(scan.fingerprint),
                       "sparsity": _sparsity_json(scan.sparsity)}, handle, ensure_ascii=False)
    return scan


def _keys(files: list[Path]) -> list[dict[str, Any]]:
    """What identifies each file's content without reading it: path, size, times, inode and device."""
    keys = []
    for path in files:
        status = os.stat(path)
        keys.append({"path": str(path.resolve()), "size": status.st_size, "mtime_ns": status.st_mtime_ns,
                     "ctime_ns": status.st_ctime_ns, "inode": status.st_ino, "device": status.st_dev})
    return keys


def _settled_keys(files: list[Path]) -> tuple[list[dict[str, Any]], bool]:
    """The files' keys once no file changed within the settling time (waited out), and whether that happened."""
    for _ in range(SETTLE_TRIES):
        keys = _keys(files)
        coarse = all(key[name] % 10**9 == 0 for key in keys for name in ("mtime_ns", "ctime_ns"))
        newest = max(max(key["mtime_ns"], key["ctime_ns"]) for key in keys)
        wait = newest + (COARSE_SETTLE_NS if coarse else SETTLE_NS) - time.time_ns()
        if wait <= 0:
            return keys, True
        time.sleep(wait / 1e9)
    return keys, False


def _sparsity_json(sparsity: Sparsity) -> dict[str, Any]:
    return {"count": sparsity.count, "mean_terms": sparsity.mean_terms, "median_terms": sparsity.median_terms,
            "percentile_terms": list(sparsity.percentile_terms), "term_vectors": dict(sparsity.term_vectors)}


def _recorded(record: Path, keys: list[dict[str, Any]], quiet: bool = False) -> VectorScan | None:
    """The scan ``record`` holds when it is a well-formed record of files with exactly ``keys``, else None."""
    if not os.path.lexists(record):
        return None
    try:
        data = read_json_file(record, "ignored", JSON_FILE_BYTES["scan"], record.parent)  # one count per distinct term
        if not isinstance(data, dict) or data.get("format") != SCAN_FORMAT:
            raise ValueError(f"not a {SCAN_FORMAT} record")
        if data.get("files") != keys:
            raise ValueError("made for other files, or before they changed")
        return _scan_of(data)
    except (VtreproError, ValueError) as error:
        if not quiet:
            logger.debug(f"{record}: ignored ({' '.join(str(error).split())[:200]}); the vectors are read again")
        return None


def _count(value: Any, what: str, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (most is not None and value > most):
        raise ValueError(f"{what} is not a count")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is not a number")
    return float(value)


def _scan_of(data: dict[str, Any]) -> VectorScan:
    """A record's scan, every value checked (a ValueError names the first that is not well-formed)."""
    fingerprint, sparsity = data.get("fingerprint"), data.get("sparsity")
    if not isinstance(fingerprint, dict) or not isinstance(sparsity, dict):
        raise ValueError("no fingerprint or sparsity")
    sha256 = fingerprint.get("sha256")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValueError("the fingerprint is not a SHA-256")
    count = _count(fingerprint.get("count"), "the fingerprint's count")
    summary = VectorSetSummary(sha256, count, _count(fingerprint.get("total_impact"), "the total impact"))
    if _count(sparsity.get("count"), "the sparsity's count") != count:
        raise ValueError("the sparsity counts other vectors than the fingerprint")
    percentiles = sparsity.get("percentile_terms")
    if not isinstance(percentiles, list) or len(percentiles) != len(PERCENTILES):
        raise ValueError("the percentiles are not one per PERCENTILES")
    holding = sparsity.get("term_vectors")
    if not isinstance(holding, dict):
        raise ValueError("no term counts")
    term_vectors = Counter({term: _count(number, "a term's count", count) for term, number in holding.items()})
    return VectorScan(summary, Sparsity(count, _number(sparsity.get("mean_terms"), "the mean"),
                                        _number(sparsity.get("median_terms"), "the median"),
                                        tuple(_number(value, "a percentile") for value in percentiles), term_vectors))
