"""Train SPLADE models from a YAML recipe, on one CPU, one GPU or many processes (torchrun, DDP).

``python -m vtrepro train --recipe regressions/recipes/splade_tiny_nfcorpus.yaml`` runs the recipe's
pipeline stages (vocabulary transfer, MLM adaptation, calibration), then trains, writing to
``runs/train/<recipe name>/``::

    01-transfer/ 02-mlm/ ...         finished pipeline stages (HF folders), skipped on a rerun
    checkpoint-000500/              HF folder + trainer_state.json/.safetensors (optimizer, scheduler, step, RNG, threads)
    final/                          the trained model (HF folder, idf.json for inference-free models)
    train_log.jsonl, curves.png     per-step loss, FLOPS, active terms, learning rate
    data/                           mined BM25 negatives, IDF table

``torchrun --standalone --nproc_per_node N -m vtrepro train --recipe ...`` runs the same recipe with
DDP (gloo on CPU, nccl on GPU). The recipe's batch size is global: each process encodes its slice,
representations are gathered so in-batch negatives, FLOPS and the loss cover the whole batch, and
the loss trajectory matches a single process. Rerunning an interrupted command resumes from the
latest checkpoint with the same data order and losses. docs/training.md describes the recipe format.
"""
from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from vtrepro.core.io import check_output
from vtrepro.core.launch import Shared, launch
from vtrepro.training.inputs import check_inputs
from vtrepro.training.plan import describe_plan, estimate_cost
from vtrepro.training.recipe import Recipe
from vtrepro.training.rehearsal import (
    STANDINS_NAME,
    Rehearsal,
    describe_rehearsal,
    rehearsal_recipe,
    write_rehearsal_record,
)
from vtrepro.training.run_folder import FAILED_NAME, PREPARED_NAME, stage_dir
from vtrepro.training.stages import stage_job

# torch, the processes and the trainer are imported where training starts, on purpose: `--help` and
# `--dry-run` stay fast.
if TYPE_CHECKING:
    from vtrepro.training.distributed import Processes

logger = logging.getLogger(__name__)


def run_stages(recipe: Recipe, output: Path, data_dir, model_dir, processes: Processes) -> str:
    """Run the unfinished stages in process (on rank 0, each into its own folder of the run, skipped on a
    rerun; the recipe's grant to run model code passed to each) and return the model training starts from."""
    current, shared = recipe.model, Shared(data_dir, model_dir, recipe.trust_remote_code)
    for index, stage in enumerate(recipe.stages):
        out = stage_dir(output, index, stage)
        if not out.is_dir():
            processes.main_first(output, out, functools.partial(launch, stage_job(stage, current, out), shared))
        current = str(out)
    return current


def run_recipe(recipe: Recipe, output: Path, data_dir=None, model_dir=None) -> Path:
    """Stages then training, in this process (one of a torchrun job, or alone); returns the final folder."""
    import torch

    from vtrepro.training.distributed import Processes
    from vtrepro.training.trainer import Trainer

    processes = Processes.start()
    if processes.device.type == "cpu" and recipe.training.cpu_threads:
        torch.set_num_threads(recipe.training.cpu_threads)  # CPU float sums depend on the thread count
    try:
        check_inputs(recipe, output, data_dir, model_dir)
        if processes.main:
            for stale in (output / FAILED_NAME, output / "data" / PREPARED_NAME):
                stale.unlink(missing_ok=True)
        processes.barrier()
        final = output / "final"
        if final.is_dir():
            if processes.main:
                logger.info(f"{final} exists: training is complete (remove it, or choose another --output, to retrain)")
            return final
        start = run_stages(recipe, output, data_dir, model_dir, processes)
        return Trainer(recipe, start, output, data_dir, model_dir, processes).train()
    finally:
        processes.close()


def rehearse(recipe: Recipe, output: Path, model_dir: str | None, gpu_tflops: float, dry_run: bool) -> int:
    """``train --rehearse``: the recipe scaled down on stand-ins, run as a real run is (``--dry-run``: the plan
    of that run). The stand-ins are those ``regress --rehearse`` uses for the same root: ``<root>/standins/``
    for a run folder ``<root>/train/<name>`` (else beside the run folder), so a recipe rehearsed here is the
    one a spec rehearsal trains, and is reused."""
    root = output.parent.parent if output.parent.name == "train" else output.parent
    rehearsal = Rehearsal(root / STANDINS_NAME)
    check_output(output, [recipe.path, rehearsal.root], kind="folder")
    cost = estimate_cost(recipe, model_dir, gpu_tflops)  # the real recipe's, from the models' shapes
    scaled = rehearsal_recipe(recipe.path, rehearsal)
    print(describe_rehearsal(rehearsal, cost))
    if dry_run:
        print(describe_plan(scaled, output, rehearsal.data_dir, rehearsal.model_dir, gpu_tflops))
        return 0
    final = run_recipe(scaled, output, rehearsal.data_dir, rehearsal.model_dir)
    if int(os.environ.get("RANK", "0")) == 0:
        write_rehearsal_record(output, rehearsal, cost)
        logger.info(f"rehearsed: {final} (a stand-in model: never a result)")
    return 0
