"""The processes of a run: one alone or the ranks of a torchrun job (DDP, gloo on CPU, nccl on GPU),
their device, collectives, rank-0-first work, and the random states a checkpoint keeps per process."""
from __future__ import annotations

import os
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
from vtrepro.training.run_folder import FAILED_NAME

POLL_SECONDS = 5.0


@dataclass
class Processes:
    """This process's place in a torchrun job (or a lone process) and its device."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def start(cls) -> Processes:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if world > 1:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(minutes=30))
            return cls(dist.get_rank(), world, device)
        return cls(0, 1, device)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        if self.world > 1:
            dist.destroy_process_group()

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
