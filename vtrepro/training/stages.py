"""Pipeline stages that turn one checkpoint into another: vocabulary transfer, MLM adaptation and
calibration. A recipe's ``stages:`` list and a spec condition's ``transfer:``/``calibrate:`` blocks
are read here as the owning modules' options (:data:`STAGE_OPTIONS`), and both launch them as
:func:`stage_job` (:mod:`vtrepro.core.launch`), in process through :func:`run_stage`."""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vtrepro.core.launch import Job
from vtrepro.core.options import Options
from vtrepro.core.schema import Checker
from vtrepro.data.availability import data_path
from vtrepro.training.mlm import MlmOptions, run_mlm
from vtrepro.vocabulary.calibrate import CalibrationOptions, run_calibration
from vtrepro.vocabulary.transfer import TransferOptions, run_transfer

logger = logging.getLogger(__name__)

STAGE_OPTIONS: dict[str, type[Options]] = {
    "transfer": TransferOptions, "mlm": MlmOptions, "calibrate": CalibrationOptions,
}
"""Each stage's name and the options it takes."""


@dataclass(frozen=True)
class Stage:
    """One stage: its name (a key of :data:`STAGE_OPTIONS`) and its options."""

    name: str
    options: Options


def read_stage(check: Checker, parent: Any, key: Any, name: str, where: str) -> Stage:
    """``parent[key]`` read as the options of stage ``name``, checked completely."""
    return Stage(name, STAGE_OPTIONS[name].read(check, parent, key, where))


def stage_job(stage: Stage, model: str, out: Path) -> Job:
    """``stage`` from ``model`` into ``out`` as a job of :func:`vtrepro.core.launch.launch`: the command
    ``python -m vtrepro <stage> --model M --output OUT <options>``, run in process by :func:`run_stage`."""
    return Job(stage.name, ("--model", model, "--output", str(out)), (stage.options,),
               functools.partial(run_stage, stage, model, out))


def run_stage(stage: Stage, model: str, out: Path, data_dir: str | Path | None, model_dir: str | Path | None,
              trust_remote_code: bool = False) -> None:
    """Run one stage from ``model`` into ``out`` (a checkpoint folder, written atomically)."""
    options = stage.options
    logger.info(f"stage {stage.name}: {model} -> {out}")
    if isinstance(options, TransferOptions):
        run_transfer(model, out, options, model_dir=model_dir)
        return
    assert isinstance(options, (MlmOptions, CalibrationOptions))
    if options.corpus is not None:
        options = options.replace(corpus=str(data_path(options.corpus, data_dir)))
    if isinstance(options, MlmOptions):
        run_mlm(model, out, options, data_dir=data_dir, model_dir=model_dir, trust_remote_code=trust_remote_code)
    else:
        run_calibration(model, out, options, data_dir=data_dir, model_dir=model_dir)
