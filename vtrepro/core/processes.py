"""The processes of a job: one alone, or the ranks of a ``torchrun`` job joined over gloo on CPU or nccl on GPU.

Encoding and training split their work the same way, so both join through :class:`ProcessGroup`. torch is
imported only when a job has several processes or asks for its GPU, so the commands that import this
module keep ``--help`` and argument errors fast.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta


def world_size() -> int:
    """How many processes the job has: torchrun's ``WORLD_SIZE``, 1 outside torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_gpu() -> str | None:
    """This process's GPU (``cuda:LOCAL_RANK``, torchrun's local rank), made the current CUDA device; None
    without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    torch.cuda.set_device(device)
    return device


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place in a job: ``rank`` among ``world`` processes (0 of 1 for a lone process)."""

    rank: int = 0
    world: int = 1

    @staticmethod
    def join(device: str | None, timeout: timedelta | None = None) -> ProcessGroup:
        """Join the torchrun job this process belongs to, over nccl when ``device`` is a GPU, else gloo; a
        lone process joins nothing. ``timeout`` bounds each collective (torch's default for the backend when None)."""
        world = world_size()
        if world == 1:
            return ProcessGroup()
        import torch.distributed as dist

        dist.init_process_group("nccl" if device and device.startswith("cuda") else "gloo", timeout=timeout)
        return ProcessGroup(dist.get_rank(), world)

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the process that does the job's shared work (merging, saving, reporting)."""
        return self.rank == 0

    def owns(self, item: int) -> bool:
        """Whether item ``item`` of a job's numbered work (e.g. a shard) is this process's: every ``world``-th one."""
        return item % self.world == self.rank

    def barrier(self) -> None:
        """Wait until every process of the job gets here."""
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """Leave the job (the last collective call of a process)."""
        if self.world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
