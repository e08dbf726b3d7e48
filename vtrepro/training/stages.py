"""Pipeline stages that turn one checkpoint into another: vocabulary transfer, MLM adaptation and
calibration. A recipe's ``stages:`` list and a spec condition's ``transfer:``/``calibrate:`` blocks
are read here with the owning modules' option schemas, and both run through :func:`run_stage`."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vtrepro.core.schema import Checker, Field
from vtrepro.data.availability import data_path
from vtrepro.training.mlm import MLM_OPTIONS, run_mlm
from vtrepro.vocabulary.calibrate import CALIBRATE_OPTIONS, run_calibration
from vtrepro.vocabulary.transfer import LEAVEOUT_OPTIONS, TRANSFER_OPTIONS, run_transfer

STAGE_OPTIONS: dict[str, dict[str, Field]] = {
    "transfer": TRANSFER_OPTIONS, "mlm": MLM_OPTIONS, "calibrate": CALIBRATE_OPTIONS,
}


@dataclass(frozen=True)
class Stage:
    """One stage: its name (a key of :data:`STAGE_OPTIONS`) and every option, defaults filled in."""

    name: str
    options: dict[str, Any]


def read_stage(check: Checker, parent: Any, key: Any, name: str, where: str,
               extra: dict[str, Field] | None = None) -> Stage:
    """``parent[key]`` read as the options of stage ``name`` (plus ``extra`` keys), checked completely."""
    options = check.read(parent, key, {**(extra or {}), **STAGE_OPTIONS[name]}, where)
    node = parent[key]
    if name == "transfer" and options["leaveout"] is not None:
        options["leaveout"] = check.read(node, "leaveout", LEAVEOUT_OPTIONS, f"{where}.leaveout")
    if name in ("mlm", "calibrate") and (options["dataset"] is None) == (options["corpus"] is None):
        raise check.fail(parent, key, f"{where} needs exactly one of 'dataset' (BEIR name) and 'corpus' (a file)")
    if name == "calibrate" and options["cut_percent"] is not None and options["target_terms"] is not None:
        raise check.fail(node, "target_terms", f"{where} takes one of 'cut_percent' and 'target_terms', not both")
    return Stage(name, options)


def run_stage(stage: Stage, model: str, out: Path, data_dir: str | Path | None, model_dir: str | Path | None,
              trust_remote_code: bool = False) -> None:
    """Run one stage from ``model`` into ``out`` (a checkpoint folder, written atomically)."""
    options = dict(stage.options)
    print(f"stage {stage.name}: {model} -> {out}", file=sys.stderr, flush=True)
    if stage.name == "transfer":
        run_transfer(model, out=out, model_dir=model_dir, **options)
        return
    if options["corpus"] is not None:
        options["corpus"] = data_path(options["corpus"], data_dir)
    if stage.name == "mlm":
        run_mlm(model, out, data_dir=data_dir, model_dir=model_dir, trust_remote_code=trust_remote_code, **options)
    else:
        run_calibration(model, out, data_dir=data_dir, model_dir=model_dir, **options)
