"""The recipe's pipeline stages (vocabulary transfer, MLM adaptation, calibration), each run once on
rank 0 into its own folder of the run and skipped on a rerun."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

from vtrepro.data.availability import data_path
from vtrepro.training.distributed import Processes
from vtrepro.training.recipe import Recipe, Stage
from vtrepro.training.run_folder import stage_dir


def run_stage(stage: Stage, model: str, out: Path, data_dir, model_dir, trust_remote_code: bool) -> None:
    """Run one pipeline stage from ``model`` into ``out`` (an HF folder written atomically)."""
    options = stage.options
    print(f"stage {stage.name}: {model} -> {out}", file=sys.stderr)
    if stage.name == "transfer":
        from vtrepro.vocabulary.transfer import run_transfer

        run_transfer(model, options["target_tokenizer"], options["reference"], options["init"], out,
                     temperature=options["temperature"], similarity=options["similarity"],
                     target_norm=options["target_norm"], seed=options["seed"], model_dir=model_dir,
                     leaveout=options["leaveout"])
    elif stage.name == "mlm":
        from vtrepro.training.mlm import run_mlm

        run_mlm(model, out, dataset=options["dataset"], corpus=_corpus_path(options["corpus"], data_dir),
                data_dir=data_dir, steps=options["steps"], mask_rate=options["mask_rate"],
                max_length=options["max_length"], lr=options["lr"], batch_size=options["batch_size"],
                warmup_steps=options["warmup_steps"], precision=options["precision"], seed=options["seed"],
                model_dir=model_dir, trust_remote_code=trust_remote_code)
    else:
        from vtrepro.vocabulary.calibrate import run_calibration

        run_calibration(model, out, dataset=options["dataset"], corpus=_corpus_path(options["corpus"], data_dir),
                        data_dir=data_dir, docs=options["docs"], cut_percent=options["cut_percent"],
                        target_terms=options["target_terms"], max_length=options["max_length"],
                        max_sample=options["max_sample"], batch_size=options["batch_size"], seed=options["seed"],
                        model_dir=model_dir)


def _corpus_path(value: str | None, data_dir) -> Path | None:
    return None if value is None else data_path(value, data_dir)


def run_stages(recipe: Recipe, output: Path, data_dir, model_dir, processes: Processes) -> str:
    """Run the unfinished stages (on rank 0) and return the model training starts from."""
    current = recipe.model
    for index, stage in enumerate(recipe.stages):
        out = stage_dir(output, index, stage)
        if not out.is_dir():
            processes.main_first(output, out, functools.partial(run_stage, stage, current, out, data_dir, model_dir,
                                                                recipe.trust_remote_code))
        current = str(out)
    return current
