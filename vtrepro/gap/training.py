"""The vocabulary gap over training: active terms, inactive terms and loss against step, from training logs
(docs/vocabulary-gap.md, "Over training").

A log is the ``train_log.jsonl`` that ``vtrepro train`` writes, one record a step; ``--log`` takes the file or its
run folder. Each log is bounded before it is read (:data:`MAX_LOG_BYTES`), every record checked (an integer
``step`` counting 1, 2, 3, ... and numbers for the figures drawn), and every log compared must follow one schedule:
the same steps with the same learning rate and FLOPS weights at each (a log of another recipe is refused). Where the
run folder holds ``final/training_report.json``, its step count must be the log's (a shorter log was truncated).

- **active terms**: ``active_d`` and ``active_q``, the mean number of non-zero weights per document and per query
  of the step's batch (dense collapse: documents that activate far too many terms);
- **inactive terms**: the vocabulary less ``used_d``, the entries no document of the step's batch activates
  (dead terms: entries that never activate; logs from before ``used_d`` was logged have no such curve);
- **loss**: ``loss`` and ``ranking_loss``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, check_regular_file, read_json_file, read_jsonl

logger = logging.getLogger(__name__)

LOG_FILE = "train_log.jsonl"
REPORT_FILE = "final/training_report.json"
MAX_LOG_BYTES = 256 << 20
"""Largest training log read: a record is about 400 bytes, so over 600,000 steps."""
REQUIRED = ("loss", "ranking_loss", "active_q", "active_d", "lr", "lambda_q", "lambda_d")
OPTIONAL = ("used_q", "used_d", "vocabulary")
SCHEDULE = ("lr", "lambda_q", "lambda_d")
"""What the recipe fixes at every step: logs that differ here come from different recipes."""
FIX = "give the train_log.jsonl `vtrepro train` wrote (or its run folder), whole"


def _log_path(given: Path) -> tuple[Path, Path | None]:
    """The log file and its run folder (None when a file outside one is given)."""
    if given.is_dir():
        return given / LOG_FILE, given
    return given, given.parent if (given.parent / REPORT_FILE).exists() else None


def _number(record: dict, key: str, where: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise VtreproError(f"{where}: '{key}' must be a number, got {value!r:.40}; {FIX}")
    return float(value)


def read_training_log(given: str | Path, name: str | None = None) -> dict[str, Any]:
    """One run's curves from its log (bounded, every record checked), with its report's recipe and machine."""
    path, folder = _log_path(Path(given))
    check_regular_file(path, MAX_LOG_BYTES, FIX)
    curves: dict[str, list[float]] = {key: [] for key in ("step", *REQUIRED, *OPTIONAL)}
    for line, record in read_jsonl(path):
        where = f"{path}:{line}"
        step = record.get("step")
        if type(step) is not int or step != len(curves["step"]) + 1:
            raise VtreproError(f"{where}: 'step' must be {len(curves['step']) + 1} (steps count 1, 2, 3, ...), got "
                               f"{step!r:.40}; {FIX}")
        curves["step"].append(step)
        for key in REQUIRED:
            curves[key].append(_number(record, key, where))
        for key in OPTIONAL:
            if key in record:
                curves[key].append(_number(record, key, where))
    if not curves["step"]:
        raise VtreproError(f"{path}: no training step in it; {FIX}")
    for key in OPTIONAL:
        if curves[key] and len(curves[key]) != len(curves["step"]):
            raise VtreproError(f"{path}: '{key}' is logged at some steps only; {FIX}")
    report = _report(folder) if folder is not None else None
    if report is not None and report.get("steps") != len(curves["step"]):
        raise VtreproError(f"{path}: {len(curves['step'])} steps, but the run's {REPORT_FILE} says {report.get('steps')!r:.20}:"
                           f" the log is truncated; {FIX}")
    inactive = [vocabulary - used for vocabulary, used in zip(curves["vocabulary"], curves["used_d"])]
    return {"run": name or (folder.name if folder is not None else path.stem), "log": str(path),
            "recipe": (report or {}).get("recipe"), "fingerprint": (report or {}).get("fingerprint"),
            "device": (report or {}).get("device"), "cpu_threads": (report or {}).get("cpu_threads"),
            "train_seconds": (report or {}).get("train_seconds"),
            "curves": {**{key: values for key, values in curves.items() if values}, "inactive_d": inactive}}


def _report(folder: Path) -> dict[str, Any] | None:
    path = folder / REPORT_FILE
    if not path.exists():
        return None
    report = read_json_file(path, FIX, JSON_FILE_BYTES["model"], folder)
    if not isinstance(report, dict):
        raise VtreproError(f"{path}: not a training report (no JSON object); {FIX}")
    return report


def check_one_recipe(runs: list[dict[str, Any]]) -> None:
    """Every log follows the first one's schedule: the same steps, learning rate and FLOPS weights at each."""
    first = runs[0]
    for run in runs[1:]:
        if len(run["curves"]["step"]) != len(first["curves"]["step"]):
            raise VtreproError(f"{run['log']}: {len(run['curves']['step'])} steps against {first['log']}'s "
                               f"{len(first['curves']['step'])}: the logs come from different recipes; draw them apart")
        for key in SCHEDULE:
            for step, (mine, theirs) in enumerate(zip(run["curves"][key], first["curves"][key]), 1):
                if abs(mine - theirs) > 1e-9 * max(abs(theirs), 1e-12):
                    raise VtreproError(f"{run['log']}: {key} {mine:g} at step {step} against {theirs:g} in "
                                       f"{first['log']}: the logs come from different recipes; draw them apart")


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """The first and last tenth of each curve, averaged."""
    curves = run["curves"]
    tenth = max(1, len(curves["step"]) // 10)
    figures: dict[str, Any] = {}
    for key in ("active_d", "active_q", "inactive_d", "used_d", "loss"):
        if curves.get(key):
            figures[f"{key}_first"] = _mean(curves[key][:tenth])
            figures[f"{key}_last"] = _mean(curves[key][-tenth:])
    return figures


PANELS = (("active terms per document", ("active_d",), "log"), ("active terms per query", ("active_q",), "log"),
          ("vocabulary entries no document of the batch activates", ("inactive_d",), "linear"),
          ("loss", ("loss",), "linear"))


def draw_curves(runs: list[dict[str, Any]], output: Path, stem: str = "training") -> list[Path]:
    """``<stem>.png`` and ``<stem>.svg``: the four panels of :data:`PANELS`, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for axis, (title, keys, scale) in zip(axes.flat, PANELS):
        for run in runs:
            for key in keys:
                values = run["curves"].get(key)
                if values:
                    axis.plot(run["curves"]["step"], values, label=run["run"])
        axis.set_title(title)
        axis.set_yscale(scale)
        if axis.lines:
            axis.legend(fontsize=8)
    for axis in axes[1]:
        axis.set_xlabel("step")
    figure.tight_layout()
    written = []
    for kind in ("png", "svg"):
        path = output / f"{stem}.{kind}"
        with atomic_write(path, "wb") as handle:
            figure.savefig(handle, format=kind, dpi=90)
        written.append(path)
    plt.close(figure)
    return written
