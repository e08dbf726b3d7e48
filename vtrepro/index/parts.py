"""Index builds split over processes: the vectors in contiguous parts, one spawned process each.

Both engines build this way (:mod:`vtrepro.index.lucene`, :mod:`vtrepro.index.pisa`). Processes, not threads:
Anserini's threads share one JVM heap, and on a 2-core machine two of them spent 1.4-2.2 times the CPU of one
thread for the same documents (``docs/scale.md``), while two JVMs each indexing half the files did not.

A part is a list of :class:`Piece`: a whole file, or a byte range of one plain ``.jsonl`` file from a line start
to a line start (:func:`split_pieces`): one large file (Pyserini's encoder output, a concatenated export) is
divided at line boundaries, so it uses every core too. Nothing is copied: PISA's passes read a range by offset
(:func:`read_piece_vectors`), and Anserini, which reads whole files, reads a range through a named pipe that the
part's process fills from the file (:func:`piece_inputs`). A gzipped file is never divided (it cannot be read
from an offset): its parts end at its boundaries, as before.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from bisect import bisect_right
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from itertools import accumulate
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from vtrepro.encode.fingerprint import DuplicateId, Fingerprinter, VectorSetSummary, fingerprint_files, locate_duplicate
from vtrepro.encode.reader import Vector, read_vector_range, read_vectors

POLL_S = 0.5
"""How often a caller following the parts' progress is told."""


def split_files(files: Sequence[Path], parts: int, min_part_bytes: int = 1) -> list[list[Path]]:
    """``files`` in at most ``parts`` contiguous runs of about equal bytes, in order (none empty, and no more
    runs than ``min_part_bytes`` fit in the files' bytes: at least one): each run ends at the file boundary
    nearest its share of the bytes."""
    ends = list(accumulate((path.stat().st_size for path in files), initial=0))  # ends[j]: bytes of the first j files
    parts = max(1, min(parts, ends[-1] // min_part_bytes))
    bounds = [0]
    for share in range(1, parts):
        target = ends[-1] * share / parts
        after = bisect_right(ends, target)  # ends[after - 1] <= target < ends[after]
        nearest = after if after < len(ends) and ends[after] - target < target - ends[after - 1] else after - 1
        bounds.append(max(bounds[-1], min(nearest, len(files))))
    bounds.append(len(files))
    return [list(files[start:end]) for start, end in zip(bounds, bounds[1:]) if end > start]


@dataclass(frozen=True)
class Piece:
    """Bytes ``start`` to ``stop`` of the vector file ``path`` (of ``size`` bytes), both at line starts."""

    path: Path
    start: int
    stop: int
    size: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.size

    @property
    def bytes(self) -> int:
        return self.stop - self.start


def whole_pieces(files: Sequence[Path]) -> list[Piece]:
    """Each of ``files`` whole."""
    sizes = [path.stat().st_size for path in files]
    return [Piece(path, 0, size, size) for path, size in zip(files, sizes)]


def splittable(path: Path) -> bool:
    """Whether a vector file can be read from an offset: a plain file, not gzipped."""
    return not path.name.endswith(".gz")


def split_pieces(files: Sequence[Path], parts: int, min_part_bytes: int = 1) -> list[list[Piece]]:
    """``files`` in at most ``parts`` contiguous runs of about equal bytes, in order (none empty, and no more runs
    than ``min_part_bytes`` fit in the files' bytes: at least one). A run ends at the first line end at or after
    its share of the bytes, inside a plain file (:func:`splittable`), else at the file boundary nearest its share
    (:func:`split_files`' rule)."""
    pieces = whole_pieces(files)
    ends = list(accumulate((piece.size for piece in pieces), initial=0))  # ends[j]: bytes of the first j files
    parts = max(1, min(parts, ends[-1] // max(min_part_bytes, 1)))
    cuts = []  # (file, offset in it) where each run after the first begins
    for share in range(1, parts):
        target = ends[-1] * share // parts
        number = bisect_right(ends, target) - 1  # the file holding byte `target`: ends[number] <= target
        offset = target - ends[number]
        if offset and splittable(files[number]):
            offset = _next_line_start(files[number], offset)
        elif offset:  # a gzipped file: its nearer boundary
            number, offset = (number + 1, 0) if ends[number + 1] - target < offset else (number, 0)
        if number < len(files) and offset >= pieces[number].size:
            number, offset = number + 1, 0
        cuts.append((number, offset))
    runs: list[list[Piece]] = []
    begin = (0, 0)
    for cut in [*cuts, (len(files), 0)]:
        if cut <= begin:
            continue
        run = [Piece(piece.path, begin[1] if number == begin[0] else 0, cut[1] if number == cut[0] else piece.size,
                     piece.size) for number, piece in enumerate(pieces) if begin[0] <= number <= cut[0]]
        runs.append([piece for piece in run if piece.bytes > 0])
        begin = cut
    return [run for run in runs if run] if len(runs) > 1 else [pieces]


def _next_line_start(path: Path, offset: int) -> int:
    """The first line start at or after byte ``offset`` of ``path`` (its size when no newline follows)."""
    with open(path, "rb") as handle:
        handle.seek(offset - 1)  # a line starts at `offset` when the byte before it ends one
        while True:
            chunk = handle.read(2**16)
            if not chunk:
                return handle.tell()
            newline = chunk.find(b"\n")
            if newline >= 0:
                return handle.tell() - len(chunk) + newline + 1


def read_piece_vectors(pieces: Sequence[Piece]) -> Iterator[tuple[Path, int, str, Vector]]:
    """Every record of ``pieces`` in order, each checked: a whole file by :func:`~vtrepro.encode.reader.read_vectors`,
    a range by offset (:func:`~vtrepro.encode.reader.read_vector_range`)."""
    for piece in pieces:
        if piece.whole:
            yield from read_vectors([piece.path])
        else:
            yield from read_vector_range(piece.path, piece.start, piece.stop)


FINGERPRINT_PART_BYTES = 8 * 2**20
"""The smallest part of a fingerprint read by a process of its own (a smaller collection is read in this one)."""


def fingerprint_in_parts(files: list[Path], threads: int) -> VectorSetSummary:
    """:func:`~vtrepro.encode.fingerprint.fingerprint_files` of ``files`` (every record checked) read by up to
    ``threads`` spawned processes, each a contiguous part (:func:`split_pieces`): the fingerprint does not depend on
    the order of the records, so the parts' record digests are merged and it is the one-process value. The check
    before a build is then no longer one core's work."""
    parts = split_pieces(files, threads, FINGERPRINT_PART_BYTES)
    if len(parts) == 1:
        return fingerprint_files(files)
    merged = Fingerprinter()
    for found in in_processes(_fingerprint_part, [(part,) for part in parts]):
        merged.merge(found)
    try:
        return merged.summary()
    except DuplicateId:
        raise locate_duplicate(files, False) from None


def _fingerprint_part(pieces: list[Piece]) -> Fingerprinter:
    """In a spawned process: the record digests of one part."""
    fingerprinter = Fingerprinter()
    for _, _, record_id, vector in read_piece_vectors(pieces):
        fingerprinter.add(record_id, vector)
    return fingerprinter


@contextlib.contextmanager
def piece_inputs(pieces: Sequence[Piece], folder: Path) -> Iterator[Path]:
    """A new ``folder`` for a program that reads every file of a folder (Anserini): a link to each whole file,
    and for each range a named pipe a thread of this process fills with the range's bytes while the block runs
    (no copy on disk). Each name keeps the file's name, then its offset, so the folder lists in collection order."""
    folder.mkdir()
    feeders = []
    for piece in pieces:
        if piece.whole:
            os.symlink(piece.path.resolve(), folder / piece.path.name)
            continue
        pipe = folder / f"{piece.path.name}.{piece.start:020d}.jsonl"
        os.mkfifo(pipe, 0o600)
        feeder = threading.Thread(target=_feed, args=(piece, pipe), daemon=True)
        feeder.start()
        feeders.append((feeder, pipe))
    try:
        yield folder
    finally:
        for feeder, pipe in feeders:
            deadline = time.monotonic() + 10
            while feeder.is_alive() and time.monotonic() < deadline:  # the reader stopped early or never opened
                with contextlib.suppress(OSError):  # it: a reader comes and goes, and the writer sees it gone
                    os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))
                feeder.join(timeout=0.05)


def _feed(piece: Piece, pipe: Path) -> None:
    """Write ``piece``'s bytes into the named pipe ``pipe`` (blocking until a reader opens it)."""
    with contextlib.suppress(BrokenPipeError), open(piece.path, "rb") as source, open(pipe, "wb") as sink:
        left = piece.bytes
        source.seek(piece.start)
        while left > 0:
            chunk = source.read(min(2**20, left))
            if not chunk:
                break
            sink.write(chunk)
            left -= len(chunk)


def in_processes(function: Callable[..., Any], calls: list[tuple], initializer: Callable[..., None] | None = None,
                 initargs: tuple = (), poll: Callable[[], None] | None = None) -> list[Any]:
    """``function(*call)`` for every call, results in order: in this process for one call, else one spawned
    process each (never forked: the caller may hold a JVM). ``initializer(*initargs)`` runs first in every
    spawned process (shared counters travel this way); ``poll()`` is called every :data:`POLL_S` seconds
    while they run. The first failure is raised, as the function raised it."""
    if len(calls) == 1:
        return [function(*calls[0])]
    with ProcessPoolExecutor(len(calls), mp_context=get_context("spawn"), initializer=initializer,
                             initargs=initargs) as pool:
        futures = [pool.submit(function, *call) for call in calls]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_EXCEPTION)
            if poll is not None:
                poll()
            failed = next((future for future in done if future.exception() is not None), None)
            if failed is not None:
                for future in pending:
                    future.cancel()
                raise failed.exception()  # type: ignore[misc]
        return [future.result() for future in futures]
