"""Progress of a long stage, on stderr: a live bar with rate and ETA on a terminal, lines otherwise.

On a terminal the bar moves with every batch. In a log (CI, ``nohup``, a pipe) a bar would be noise,
so a stage prints one line when it finishes: ``encode documents: 5183 doc in 41.2 s (125.8 doc/s)``,
and, while it runs longer than a minute, a line a minute with the count, rate and ETA so far.
Progress is its own stream, not log records: it shows in library use too, and goes quiet only where
the ``vtrepro`` logger was set above information (``--quiet``; see :func:`vtrepro.core.log.progress_shown`).
"""
from __future__ import annotations

import sys
import time
from types import TracebackType

from tqdm import tqdm

from vtrepro.core.log import progress_shown, write_line

LOG_INTERVAL_S = 60.0
"""Seconds between the interim lines a stage prints to a non-terminal."""


class Progress:
    """Counts the units of one stage; use as a context manager and call :meth:`update` per batch.

    ``initial`` units were done before (a resumed run): they count towards the total, not the rate.
    ``enabled=False`` shows nothing (e.g. on the non-main processes of a distributed run), nor does ``--quiet``.
    """

    def __init__(self, total: int | None, desc: str, unit: str, initial: int = 0, enabled: bool = True):
        self.total, self.desc, self.unit, self.enabled = total, desc, unit, enabled and progress_shown()
        self.done = self._initial = initial
        self._started = self._logged = time.perf_counter()
        self._bar = None
        self._postfix = ""
        if self.enabled and sys.stderr.isatty():
            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)

    def set_postfix(self, **values: str) -> None:
        """Figures shown after the count (e.g. ``loss="0.412"``): on the bar, and in the lines of a log."""
        self._postfix = ", ".join(f"{key}={value}" for key, value in values.items())
        if self._bar is not None:
            self._bar.set_postfix(values, refresh=False)

    def update(self, count: int = 1) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.update(count)
        elif self.enabled and time.perf_counter() - self._logged >= LOG_INTERVAL_S:
            self._logged = time.perf_counter()
            write_line(self._interim_line())

    def close(self, failed: bool = False) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and not failed:
            write_line(self._summary_line())

    def _rate(self) -> float:
        seconds = time.perf_counter() - self._started
        return (self.done - self._initial) / seconds if seconds > 0 else 0.0

    def _resumed(self) -> str:
        return f", resumed at {self._initial}" if self._initial else ""

    def _interim_line(self) -> str:
        rate, of_total = self._rate(), f"/{self.total}" if self.total is not None else ""
        eta = ""
        if self.total is not None and rate > 0:
            eta = f", ETA {_duration((self.total - self.done) / rate)}"
        postfix = f", {self._postfix}" if self._postfix else ""
        return f"{self.desc}: {self.done}{of_total} {self.unit}{self._resumed()} ({rate:.1f} {self.unit}/s{eta}{postfix})"

    def _summary_line(self) -> str:
        seconds, rate = time.perf_counter() - self._started, self._rate()
        rate_text = f" ({rate:.1f} {self.unit}/s)" if rate > 0 else ""
        postfix = f"; {self._postfix}" if self._postfix else ""
        return f"{self.desc}: {self.done} {self.unit}{self._resumed()} in {seconds:.1f} s{rate_text}{postfix}"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self.close(failed=kind is not None)


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``2h07m``."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
