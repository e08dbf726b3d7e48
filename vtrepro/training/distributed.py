"""The processes of a training run (a :class:`~vtrepro.core.processes.ProcessGroup`, DDP under torchrun):
their device, collectives, rank-0-first work, and the random states a checkpoint keeps per process."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from vtrepro.core.errors import VtreproError
from vtrepro.core.processes import ProcessGroup, local_gpu
from vtrepro.training.run_folder import FAILED_NAME

POLL_SECONDS = 5.0
COLLECTIVE_TIMEOUT = timedelta(minutes=30)
"""How long a collective of a training job waits for the slowest process."""


@dataclass(frozen=True)
class Processes(ProcessGroup):
    """This process's place in a training job, with its device: its GPU when there is one, else the CPU."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def start(cls) -> Processes:
        device = torch.device(local_gpu() or "cpu")
        group = ProcessGroup.join(str(device), timeout=COLLECTIVE_TIMEOUT)
        return cls(group.rank, group.world, device)

    def gather(self, tensor: Tensor) -> Tensor:
        """Every process's rows, in rank order; this process's rows keep their gradient."""
        if self.world == 1:
            return tensor
        parts = [torch.empty_like(tensor) for _ in range(self.world)]
        dist.all_gather(parts, tensor.detach().contiguous())
        parts[self.rank] = tensor
        return torch.cat(parts)

    def gather_objects(self, value: Any) -> list[Any]:
        if self.world == 1:
            return [value]
        values: list[Any] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def main_first(self, output: Path, done: Path, work: Callable[[], None]) -> None:
        """Run ``work`` on rank 0 while the others poll for ``done`` (no collective, so no timeout on
        long stages); a failure on rank 0 is reported by every process."""
        failed = output / FAILED_NAME
        if self.main:
            try:
                work()
            except BaseException as error:
                output.mkdir(parents=True, exist_ok=True)
                failed.write_text(f"{type(error).__name__}: {error}", encoding="utf-8")
                raise
            return
        while not done.exists():
            if failed.exists():
                raise VtreproError(f"rank 0 failed: {failed.read_text(encoding='utf-8')}")
            time.sleep(POLL_SECONDS)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
