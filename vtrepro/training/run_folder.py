"""The layout of a training run folder (``runs/train/<recipe name>/``): file names, stage folders,
checkpoints, and the per-step log with its curves plot."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vtrepro.core.io import atomic_write, read_jsonl
from vtrepro.training.stages import Stage

# matplotlib is imported only to draw the curves plot, on purpose: it is slow to import and optional for a run.

STATE_NAME = "trainer_state.pt"
LOG_NAME = "train_log.jsonl"
PLOT_NAME = "curves.png"
REPORT_NAME = "training_report.json"
FAILED_NAME = ".rank0-failed"
PREPARED_NAME = ".prepared"


def stage_dir(output: Path, index: int, stage: Stage) -> Path:
    return output / f"{index + 1:02d}-{stage.name}"


def latest_checkpoint(output: Path) -> Path | None:
    """The finished checkpoint with the highest step (checkpoints are renamed into place when complete)."""
    found = sorted(output.glob("checkpoint-*"), key=lambda path: path.name)
    return found[-1] if found else None


def truncate_log(path: Path, step: int) -> None:
    """Keep the log's records up to ``step`` (those after the resumed checkpoint are redone)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= step]
    with atomic_write(path) as handle:
        handle.write("".join(line + "\n" for line in kept))


def plot_curves(log_path: Path, out: Path) -> None:
    """curves.png: loss, FLOPS, active terms and learning rate per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = [record for _, record in read_jsonl(log_path)]
    if not log:
        return
    steps = [record["step"] for record in log]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [("loss", ("loss", "ranking_loss"), "linear"), ("FLOPS", ("flops_q", "flops_d"), "log"),
              ("active terms", ("active_q", "active_d"), "log"), ("learning rate", ("lr",), "linear")]
    window = max(1, len(log) // 50)
    for axis, (title, keys, scale) in zip(axes.flat, panels):
        smoothed = window > 1 and keys != ("lr",)
        for key in keys:
            values = np.array([max(record[key], 1e-6) if scale == "log" else record[key] for record in log])
            line, = axis.plot(steps, values, alpha=0.3 if smoothed else 1.0, label="_raw" if smoothed else key)
            if smoothed:
                axis.plot(steps[window - 1:], np.convolve(values, np.ones(window) / window, mode="valid"),
                          color=line.get_color(), label=key)
        axis.set_title(f"{title} (lines: mean of {window} steps)" if smoothed else title)
        axis.set_yscale(scale)
        axis.legend()
    for axis in axes[1]:
        axis.set_xlabel("step")
    figure.tight_layout()
    with atomic_write(out, "wb") as handle:
        figure.savefig(handle, format="png", dpi=90)
    plt.close(figure)
