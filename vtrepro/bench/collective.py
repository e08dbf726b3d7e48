"""A collective on every process of a torchrun job, over nccl on GPUs (gloo on CPUs): each rank adds its rank + 1
and all must see the sum, then a barrier. Part of the first-GPU check (:mod:`vtrepro.bench.gpu_check`): with
one GPU, torchrun's one-process encode forms no process group, so nccl itself is checked here.

``torchrun --standalone --nproc_per_node N -m vtrepro.bench.collective``; rank 0 prints one line.
"""
from __future__ import annotations

import sys

from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK
from vtrepro.core.processes import local_gpu, world_size


def main() -> int:
    import torch
    import torch.distributed as dist

    device = local_gpu() or "cpu"
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), world_size()
    total = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(total)
    dist.barrier()
    expected = world * (world + 1) / 2
    dist.destroy_process_group()
    if rank == 0:
        print(f"{backend}: {world} rank(s), all_reduce {total.item():g} (expected {expected:g}), barrier passed")
    return EXIT_OK if total.item() == expected else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
