"""The processor a figure was measured on: its model name, read in one place for the benchmarks' machine
line (:mod:`vtrepro.bench.machine`) and a regression's recorded environment."""
from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The processor's model name (Linux ``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        for line in CPUINFO.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
