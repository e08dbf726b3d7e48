"""The machine line every benchmark prints first: cores, processor, load at the start, and for the
benchmarks that run torch its version and thread count, so a figure is never read without its machine."""
from __future__ import annotations

import os

from vtrepro.core.machine import cpu_model


def machine_line(with_torch: bool = False) -> str:
    """``machine: N cores (CPU), [torch V with T threads, ]load average L at start``."""
    parts = [f"machine: {os.cpu_count()} cores ({cpu_model()})"]
    if with_torch:
        import torch  # only the benchmarks that load a model pay for it

        parts.append(f"torch {torch.__version__} with {torch.get_num_threads()} threads")
    parts.append(f"load average {os.getloadavg()[0]:.2f} at start")
    return ", ".join(parts)
