"""The machine line every benchmark prints first: cores, processor, load at the start, and for the
benchmarks that run torch its version and thread count, so a figure is never read without its machine."""
from __future__ import annotations

import os
import resource
from pathlib import Path

from vtrepro.core.processor import cpu_model


def machine_line(with_torch: bool = False) -> str:
    """``machine: N cores (CPU), [torch V with T threads, ]load average L at start``."""
    parts = [f"machine: {os.cpu_count()} cores ({cpu_model()})"]
    if with_torch:
        import torch  # only the benchmarks that load a model pay for it

        parts.append(f"torch {torch.__version__} with {torch.get_num_threads()} threads")
    parts.append(f"load average {os.getloadavg()[0]:.2f} at start")
    return ", ".join(parts)


def peak_rss_bytes() -> int:
    """This process's peak resident memory: Linux's ``VmHWM``, the peak of this program image. ``ru_maxrss``
    (the fallback elsewhere) also keeps the parent's resident size at the fork that started a process, carried
    across exec, so a benchmark run from a large process would report that process's memory."""
    status = Path("/proc/self/status")
    if status.exists():
        return next(int(line.split()[1]) * 1024 for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
