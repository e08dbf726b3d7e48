"""Index builds split over processes: the vector files in contiguous parts, one spawned process each.

Both engines build this way (:mod:`vtrepro.index.lucene`, :mod:`vtrepro.index.pisa`). Processes, not threads:
Anserini's threads share one JVM heap, and on a 2-core machine two of them spent 1.4-2.2 times the CPU of one
thread for the same documents (``docs/scale.md``), while two JVMs each indexing half the files did not.
"""
from __future__ import annotations

from bisect import bisect_right
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from itertools import accumulate
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Sequence

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
