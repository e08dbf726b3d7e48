"""The report's figures (matplotlib, PNG): scores against published values, effectiveness against
cost, terms per document, retention against the baseline, and APC's effect on active terms; and the grouped
bars of the vocabulary gap (:func:`bars_chart`, PNG and SVG)."""
from __future__ import annotations

import contextlib
import io
import math
import warnings
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from vtrepro.report.results import CALIBRATION_FIGURES
from vtrepro.report.tables import AVERAGE, STATED_AVERAGE, Matrix, System, scores

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# matplotlib is imported when a figure is drawn, on purpose: `--help` and table-only reports stay fast.

MAX_FIGURE_INCHES = 100.0
"""The widest figure drawn (9,000 pixels at the report's 90 dpi): a results folder's size never scales memory past it."""
LEGEND_ROWS = 40
"""Legend entries per column: a legend of many runs grows in columns."""
MAX_LEGEND_ENTRIES = 200
"""A figure of more runs than this draws no legend (it would be unreadable, and as large as the figure)."""
LEGEND_LABEL_CHARS = 60
"""Legend labels are cut to this many characters (names may have 200)."""
MAX_BAR_GROUPS = 60
"""The most groups of bars :func:`bars_chart` draws (the first ones; the caller says so in its caption)."""
MAX_BAR_SERIES = 20
"""The most bars per group :func:`bars_chart` draws."""


@contextlib.contextmanager
def drawing() -> Iterator[None]:
    """Draw the figures inside: every label (a condition, dataset or metric name from a results folder) is
    shown as written; a '$' in it never starts matplotlib's TeX parser, which fails on what it cannot parse."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(min(width, MAX_FIGURE_INCHES), height))


def _legend(axis: Axes, **options: Any) -> None:
    """The axis's legend, in as many columns of at most :data:`LEGEND_ROWS` entries as it needs, labels cut
    to :data:`LEGEND_LABEL_CHARS`; none beyond :data:`MAX_LEGEND_ENTRIES` entries."""
    handles, labels = axis.get_legend_handles_labels()
    if len(labels) > MAX_LEGEND_ENTRIES:
        return
    shown = [_cut(label) for label in labels]
    axis.legend(handles, shown, ncol=max(1, math.ceil(len(labels) / LEGEND_ROWS)), **options)


def _log_scale(axis: Axes, which: str) -> None:
    """A log scale on the ``x`` or ``y`` axis, its ticks written as plain numbers (0.01, 100): the default ones are
    TeX (``$\\mathdefault{10^{2}}$``), which :func:`drawing` shows as written."""
    from matplotlib.ticker import LogFormatter

    if which == "x":
        axis.set_xscale("log")
    else:
        axis.set_yscale("log")
    scale = axis.xaxis if which == "x" else axis.yaxis
    scale.set_major_formatter(LogFormatter())
    scale.set_minor_formatter(LogFormatter(labelOnlyBase=False))  # labels some minor ticks where a range is narrow


def _cut(label: str) -> str:
    return label if len(label) <= LEGEND_LABEL_CHARS else label[:LEGEND_LABEL_CHARS - 1] + "…"


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
    _legend(axis, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _png(figure)


def cost_chart(systems: list[System], metric: str, efficiency: pd.DataFrame) -> bytes | None:
    """Effectiveness against cost: each run's score against its FLOPS (log scale); runs without vectors are left out."""
    if efficiency.empty or "flops" not in efficiency:
        return None
    figure, axis = _figure(6.5, 4.2)
    drawn = False
    for system in systems:
        rows = efficiency[(efficiency["system"] == system.label) & efficiency["flops"].notna()]
        observed = scores(system, metric)
        for row in rows.itertuples():
            if row.dataset in observed:
                axis.scatter(float(row.flops), observed[row.dataset], label=f"{system.label} / {row.dataset}")
                drawn = True
    _log_scale(axis, "x")
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
    _legend(axis, fontsize=8)
    return _png(figure)


def calibration_chart(reports: dict[str, dict[str, dict[str, float]]]) -> bytes | None:
    """APC's effect per calibrated system: active terms per document (mean, median, p90) before and after."""
    if not reports:
        return None
    figure, axis = _figure(max(6.0, 2.2 * len(reports) + 2), 4.2)
    positions = np.arange(len(reports))
    for index, (moment, shade) in enumerate((("before", 0.45), ("after", 1.0))):
        for offset, statistic in enumerate(CALIBRATION_FIGURES):
            values = [report[moment][statistic] for report in reports.values()]
            axis.bar(positions + (index * 3 + offset - 2.5) * 0.13, values, 0.13, alpha=shade,
                     color=f"C{offset}", label=f"{statistic.replace('active_', '')} {moment}")
    axis.set_xticks(positions, list(reports))
    _log_scale(axis, "y")
    axis.set_ylabel("active terms per document")
    axis.set_title("Activation Potential Calibration: active terms before and after")
    axis.legend(fontsize=7, ncol=2)
    return _png(figure)


def training_chart(curves: dict[str, list[tuple[int, float]]]) -> bytes | None:
    """Training loss per step of every system trained by a recipe (from its ``train_log.jsonl``)."""
    if not curves:
        return None
    figure, axis = _figure(6.5, 4.2)
    for label, points in curves.items():
        axis.plot([step for step, _ in points], [loss for _, loss in points], label=label)
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
    _legend(axis, fontsize=8)
    return _png(figure)


def _png_and_svg(figure: Figure) -> tuple[bytes, bytes]:
    """The figure as PNG and as SVG (text drawn as paths, no date or version stamped, ids from a fixed salt:
    the same figure gives the same bytes)."""
    import matplotlib
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():  # a legend beside the axes may not fit tight_layout; bbox_inches="tight" fits it
        warnings.filterwarnings("ignore", "Tight layout not applied", UserWarning)
        figure.tight_layout()
    raster, vector = io.BytesIO(), io.BytesIO()
    figure.savefig(raster, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    with matplotlib.rc_context({"svg.hashsalt": "vtrepro", "svg.fonttype": "path"}):
        figure.savefig(vector, format="svg", bbox_inches="tight", metadata={"Creator": None, "Date": None})
    plt.close(figure)
    return raster.getvalue(), vector.getvalue()


def panels_chart(panels: list[tuple[str, dict[str, tuple[list[float], list[float]]], bool]], xlabel: str,
                 title: str) -> tuple[bytes, bytes] | None:
    """Line panels side by side, PNG and SVG: each ``(title, {label: (x, y)}, log y)``, one line per label (the
    same label the same colour in every panel). None when no panel has a line."""
    if not any(lines for _, lines, _ in panels):
        return None
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    colours: dict[str, str] = {}
    for axis, (name, lines, log) in zip(axes[0], panels):
        for label, (xs, ys) in list(lines.items())[:MAX_BAR_SERIES]:
            colour = colours.setdefault(label, f"C{len(colours) % 10}")
            axis.plot(xs, ys, label=label, color=colour)
        if log:
            _log_scale(axis, "y")
        axis.set_xlabel(xlabel)
        axis.set_title(name, fontsize=9)
        if axis.lines:
            _legend(axis, fontsize=7)
    figure.suptitle(title)
    return _png_and_svg(figure)


def bars_chart(groups: list[str], series: dict[str, list[float | None]], ylabel: str, title: str, *,
               log: bool = False, marks: dict[str, list[bool]] | None = None) -> tuple[bytes, bytes] | None:
    """Grouped bars, PNG and SVG: one group per entry of ``groups`` (at most :data:`MAX_BAR_GROUPS`, the first),
    one bar per series in each (at most :data:`MAX_BAR_SERIES`; a None value draws no bar); ``marks`` puts a
    star over the bars it flags. None when there is nothing to draw."""
    groups = groups[:MAX_BAR_GROUPS]
    drawn = {name: [math.nan if value is None else float(value) for value in values[:len(groups)]]
             for name, values in list(series.items())[:MAX_BAR_SERIES]}
    if not groups or not any(value == value for values in drawn.values() for value in values):  # all NaN
        return None
    figure, axis = _figure(max(6.0, 0.35 * len(groups) * len(drawn) + 3), 4.2)
    positions, width = np.arange(len(groups)), 0.8 / len(drawn)
    for index, (name, values) in enumerate(drawn.items()):
        places = positions[:len(values)] + (index - (len(drawn) - 1) / 2) * width
        axis.bar(places, values, width, label=name, color=f"C{index % 10}")
        for place, value, marked in zip(places, values, (marks or {}).get(name, [])):
            if marked and value == value:
                axis.annotate("*", (place, value), ha="center", va="bottom", fontsize=9)
    if log:
        _log_scale(axis, "y")
    turned = len(groups) > 8 or sum(map(len, groups)) > 40
    axis.set_xticks(positions, [_cut(group) for group in groups], rotation=30 if turned else 0,
                    ha="right" if turned else "center")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    _legend(axis, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _png_and_svg(figure)
