"""The report's figures (matplotlib, PNG): scores against published values, effectiveness against
cost, terms per document, retention against the baseline, and APC's effect on active terms."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vtrepro.report.tables import AVERAGE, STATED_AVERAGE, Matrix, System

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# matplotlib is imported when a figure is drawn, on purpose: `--help` and table-only reports stay fast.


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _png(figure: Figure) -> bytes:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})  # no version stamp
    plt.close(figure)
    return buffer.getvalue()


def scores_chart(matrix: Matrix) -> bytes | None:
    """Per dataset, each observed system's score as a bar and each published value as a marker."""
    table = matrix.table.drop(index=[AVERAGE, STATED_AVERAGE], errors="ignore")
    bars = [column for column, kind in matrix.kinds.items() if kind == "observed"]
    markers = [column for column, kind in matrix.kinds.items() if kind == "published" and table[column].notna().any()]
    if table.empty or not bars:
        return None
    figure, axis = _figure(max(6.0, 0.6 * len(table) * len(bars) + 3) + (4.5 if markers else 0), 4.2)
    positions, width = np.arange(len(table)), 0.8 / len(bars)
    for index, column in enumerate(bars):
        axis.bar(positions + (index - (len(bars) - 1) / 2) * width, table[column].astype(float), width, label=column)
    for index, column in enumerate(markers):
        axis.scatter(positions, table[column].astype(float), marker="o^sDv<>"[index % 7], s=40, zorder=3,
                     facecolors="none", edgecolors=f"C{(index + len(bars)) % 10}", label=column)
    axis.set_xticks(positions, list(table.index), rotation=30, ha="right")
    axis.set_ylabel(matrix.metric)
    axis.set_title(f"{matrix.metric} per dataset: observed (bars) and published (markers)")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _png(figure)


def cost_chart(systems: list[System], metric: str, efficiency: pd.DataFrame) -> bytes | None:
    """Effectiveness against cost: each run's score against its FLOPS (log scale); runs without vectors are left out."""
    if efficiency.empty or "flops" not in efficiency:
        return None
    figure, axis = _figure(6.5, 4.2)
    drawn = False
    for system in systems:
        rows = efficiency[(efficiency["system"] == system.label) & efficiency["flops"].notna()]
        observed = system.results.rows
        for row in rows.itertuples():
            score = observed[(observed["condition"] == system.condition) & (observed["dataset"] == row.dataset)
                             & (observed["kind"] == "score") & (observed["metric"] == metric)]["observed"]
            if score.empty:
                continue
            axis.scatter(float(row.flops), float(score.iloc[0]), label=f"{system.label} / {row.dataset}")
            drawn = True
    axis.set_xscale("log")
    return _finished(figure, axis, drawn, "FLOPS (expected shared terms per query-document pair)", metric,
                     f"{metric} against search cost")


def terms_chart(systems: list[System]) -> bytes | None:
    """The distribution of terms per document vector of every run: cumulative share against terms."""
    figure, axis = _figure(6.5, 4.2)
    drawn = False
    for system in systems:
        for key, distribution in system.results.distributions.items():
            condition, _, dataset = key.partition("/")
            if condition != system.condition:
                continue
            axis.plot(distribution["terms_per_document"], np.asarray(distribution["percentiles"]) / 100,
                      label=f"{system.label} / {dataset}")
            drawn = True
    return _finished(figure, axis, drawn, "terms per document vector", "share of documents",
                     "Terms per document (cumulative)")


def retention_chart(matrix: Matrix, baseline: str) -> bytes | None:
    """Each observed system's score as a share of the baseline's, per dataset (the leave-out retention chart)."""
    table = matrix.table.drop(index=[AVERAGE, STATED_AVERAGE], errors="ignore")
    others = [column for column, kind in matrix.kinds.items() if kind == "observed" and column != baseline]
    if table.empty or not others or baseline not in table:
        return None
    figure, axis = _figure(max(6.0, 1.2 * len(table) + 3), 4.2)
    positions, width = np.arange(len(table)), 0.8 / len(others)
    base = table[baseline].astype(float)
    for index, column in enumerate(others):
        axis.bar(positions + (index - (len(others) - 1) / 2) * width, 100 * table[column].astype(float) / base, width,
                 label=column)
    axis.axhline(100, color="black", linewidth=0.8)
    axis.set_xticks(positions, list(table.index), rotation=30, ha="right")
    axis.set_ylabel(f"% of {baseline}'s {matrix.metric}")
    axis.set_title(f"Retention of {baseline}'s {matrix.metric}")
    axis.legend(fontsize=8)
    return _png(figure)


def calibration_chart(reports: dict[str, Path]) -> bytes | None:
    """APC's effect per calibrated system: active terms per document (mean, median, p90) before and after."""
    if not reports:
        return None
    figure, axis = _figure(max(6.0, 2.2 * len(reports) + 2), 4.2)
    statistics = ("active_mean", "active_p50", "active_p90")
    positions = np.arange(len(reports))
    for index, (moment, shade) in enumerate((("before", 0.45), ("after", 1.0))):
        for offset, statistic in enumerate(statistics):
            values = [json.loads(path.read_text())[moment][statistic] for path in reports.values()]
            axis.bar(positions + (index * 3 + offset - 2.5) * 0.13, values, 0.13, alpha=shade,
                     color=f"C{offset}", label=f"{statistic.replace('active_', '')} {moment}")
    axis.set_xticks(positions, list(reports))
    axis.set_yscale("log")
    axis.set_ylabel("active terms per document")
    axis.set_title("Activation Potential Calibration: active terms before and after")
    axis.legend(fontsize=7, ncol=2)
    return _png(figure)


def training_chart(logs: dict[str, Path]) -> bytes | None:
    """Training loss per step of every system trained by a recipe (its ``train_log.jsonl``)."""
    if not logs:
        return None
    figure, axis = _figure(6.5, 4.2)
    for label, path in logs.items():
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        axis.plot([record["step"] for record in records], [record["loss"] for record in records], label=label)
    return _finished(figure, axis, True, "step", "loss", "Training loss")


def _finished(figure: Figure, axis: Axes, drawn: bool, xlabel: str, ylabel: str, title: str) -> bytes | None:
    """The figure as PNG with its labels and legend, or None (and the figure closed) when nothing was drawn."""
    if not drawn:
        import matplotlib.pyplot as plt

        plt.close(figure)
        return None
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=8)
    return _png(figure)
