"""Learning-rate schedules shared by SPLADE training and MLM adaptation."""
from __future__ import annotations

from typing import Callable


def lr_factor(schedule: str, warmup: int, steps: int) -> Callable[[int], float]:
    """LambdaLR factor of 0-based step s: linear warm-up (s + 1) / warmup, then constant or linear decay to
    1 / (steps - warmup) at the last step."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 1.0 if schedule == "constant" else (steps - step) / (steps - warmup)

    return factor
