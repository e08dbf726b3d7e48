"""Learning-rate schedules shared by SPLADE training and MLM adaptation."""
from __future__ import annotations

import math
from typing import Callable

SCHEDULES = ("linear", "constant", "cosine")


def lr_factor(schedule: str, warmup: int, steps: int) -> Callable[[int], float]:
    """LambdaLR factor of 0-based step s: linear warm-up (s + 1) / warmup, then constant, linear decay to
    1 / (steps - warmup) at the last step, or cosine decay ``(1 + cos(pi * (s - warmup) / (steps - warmup))) / 2``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        if schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))
        return (steps - step) / (steps - warmup)

    return factor
