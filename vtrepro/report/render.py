"""Write the comparison report: ``report.md`` (figures linked), ``report.html`` (self-contained: inline
CSS, figures embedded) and ``table.csv`` (the BEIR matrix), each replaced only once completely written."""
from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write
from vtrepro.report import plots
from vtrepro.report.published import PublishedSystem
from vtrepro.report.results import NOT_OK, STATUS_OKISH, Results
from vtrepro.report.tables import (
    SIGNIFICANCE_LEVEL,
    Matrix,
    System,
    beir_matrix,
    checks_table,
    efficiency_table,
    observed_systems,
)

FIGURES_DIRNAME = "figures"
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
tr.average td { font-weight: bold; background: #f4f4f4; }
td.OK { color: #176317; } td.OKISH { color: #8a6d00; } td.FAIL, td.ERROR, td.UNPINNED { color: #b00020; font-weight: bold; }
td.published { color: #555; font-style: italic; }
.note { color: #555; font-size: 0.9em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""


@dataclass
class Report:
    """What a report shows, before it is written in any format."""

    results: list[Results]
    matrix: Matrix
    efficiency: pd.DataFrame
    figures: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # file stem -> (caption, PNG)


def build_report(results: list[Results], published: list[PublishedSystem], metric: str = "ndcg@10",
                 baseline: str | None = None) -> Report:
    """The tables and figures of a report over ``results`` (``baseline``: a system label; default the first)."""
    systems = observed_systems(results)
    chosen = _baseline(systems, baseline)
    matrix = beir_matrix(systems, published, metric, chosen)
    efficiency = efficiency_table(systems)
    drawn = {
        "scores": (f"{metric} per dataset, observed and published", plots.scores_chart(matrix)),
        "retention": (f"{metric} as a share of {chosen.label if chosen else ''}'s",
                      plots.retention_chart(matrix, chosen.label) if chosen else None),
        "cost": (f"{metric} against FLOPS", plots.cost_chart(systems, metric, efficiency)),
        "terms": ("terms per document vector", plots.terms_chart(systems)),
        "calibration": ("APC: active terms before and after calibration",
                        plots.calibration_chart(_condition_files(systems, "calibration_report"))),
        "training": ("training loss", plots.training_chart(_condition_files(systems, "training_log"))),
    }
    figures = {name: (caption, png) for name, (caption, png) in drawn.items() if png is not None}
    return Report(results, matrix, efficiency, figures)


def _baseline(systems: list[System], label: str | None) -> System | None:
    if label is None:
        return systems[0] if systems else None
    for system in systems:
        if system.label == label:
            return system
    raise VtreproError(f"--baseline '{label}' is not a system of these results; choose one of "
                       f"{', '.join(system.label for system in systems)}")


def _condition_files(systems: list[System], key: str) -> dict[str, Path]:
    """System label -> the file its results record under ``key`` (a calibration report, a training log), where present."""
    files = {}
    for system in systems:
        path = system.results.conditions.get(system.condition, {}).get(key)
        if path and Path(path).is_file():
            files[system.label] = Path(path)
    return files


def _cell(value, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if kind == "delta":
        return f"{value:+.4f}"
    if kind == "p":
        return f"{value:.4f}{'*' if value < SIGNIFICANCE_LEVEL else ''}"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def matrix_text(matrix: Matrix) -> pd.DataFrame:
    """The matrix with every cell formatted as shown (4 decimals, signed deltas, starred p-values)."""
    return pd.DataFrame({column: [_cell(value, matrix.kinds[column]) for value in matrix.table[column]]
                         for column in matrix.table.columns}, index=matrix.table.index)


def _verdict(results: Results) -> str:
    judged = checks_table(results)
    failed = int(judged["status"].isin(NOT_OK).sum())
    okish = int((judged["status"] == STATUS_OKISH).sum())
    verdict = f"{failed} row(s) not OK" if failed else ("all OK" if not okish else f"OK, {okish} row(s) OKISH")
    return verdict + (" (interrupted: only the runs listed finished)" if results.interrupted else "")


def _headers(report: Report) -> list[tuple[str, list[tuple[str, str]]]]:
    """Per results folder: its title and (label, text) lines."""
    return [(f"{results.name} ({results.folder})", [
        ("Spec", results.spec), ("Description", results.description),
        ("Command", "python -m vtrepro regress " + " ".join(results.command)),
        ("Result", _verdict(results)),
        ("Environment", ", ".join(f"{key} {value}" for key, value in results.environment.items())),
    ]) for results in report.results]


def write_markdown(report: Report, path: Path) -> None:
    """``report.md``: the same sections as the HTML, figures linked from ``figures/``."""
    matrix = report.matrix
    parts = [f"# Comparison report: {matrix.metric}\n"]
    for title, lines in _headers(report):
        parts.append(f"## {title}\n\n" + "\n".join(f"- {label}: {text}" for label, text in lines if text) + "\n")
    parts.append(f"## BEIR matrix ({matrix.metric})\n")
    parts.append(matrix_text(matrix).to_markdown(tablefmt="pipe", disable_numparse=True) + "\n")
    parts.append("\n".join(f"- {note}" for note in matrix.notes) + "\n")
    if report.figures:
        parts.append("## Figures\n\n" + "\n".join(f"![{caption}]({FIGURES_DIRNAME}/{name}.png)"
                                                  for name, (caption, _) in report.figures.items()) + "\n")
    if not report.efficiency.empty:
        parts.append("## Measured: efficiency and vector agreement (on the machine that ran it; not judged)\n")
        parts.append(_efficiency_text(report.efficiency).to_markdown(index=False, tablefmt="pipe", disable_numparse=True) + "\n")
    parts.append("## Commands\n\n" + "\n".join(f"- {column} / {dataset}: `{command}`"
                                                for (column, dataset), command in matrix.commands.items()) + "\n")
    for results in report.results:
        parts.append(f"## Regression checks: {results.name}\n")
        parts.append(_checks_text(results).to_markdown(index=False, tablefmt="pipe", disable_numparse=True) + "\n")
    with atomic_write(path) as handle:
        handle.write("\n".join(parts))


def _efficiency_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Figures at 4 significant digits; a figure no run has (e.g. FLOPS of BM25) is left out."""
    return frame.dropna(axis=1, how="all").map(figure_text)


def figure_text(value: object) -> str:
    """A measured figure as shown: 4 significant digits, blank where missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _checks_text(results: Results) -> pd.DataFrame:
    """The checks as the regression printed them: counts whole, scores at 4 decimals, fingerprints cut to 12."""
    frame = checks_table(results).copy()
    for column in ("expected", "observed"):
        frame[column] = [_cell(int(value) if kind == "index" and isinstance(value, float) and value.is_integer()
                               else value, "observed")[:12] for value, kind in zip(frame[column], frame["kind"])]
    return frame.fillna("")


def write_html(report: Report, path: Path) -> None:
    """``report.html``: one file, inline CSS and figures, no script; opens from disk."""
    matrix, text = report.matrix, matrix_text(report.matrix)
    body = [f"<h1>Comparison report: {html.escape(matrix.metric)}</h1>"]
    for title, lines in _headers(report):
        body.append(f"<h2>{html.escape(title)}</h2><ul>" + "".join(
            f"<li><b>{html.escape(label)}</b>: {_code(text) if label == 'Command' else html.escape(text)}</li>"
            for label, text in lines if text) + "</ul>")
    body.append(f"<h2>BEIR matrix ({html.escape(matrix.metric)})</h2>")
    head = "".join(f"<th>{html.escape(str(column))}</th>" for column in text.columns)
    rows = []
    for dataset, line in text.iterrows():
        cells = []
        for column, value in line.items():
            kind = matrix.kinds[str(column)]
            source = matrix.commands.get((str(column), str(dataset))) or matrix.citations.get((str(column), str(dataset)))
            title = f' title="{html.escape(source)}"' if source else ""
            css = value if kind == "status" else ("published" if kind == "published" else "number")
            cells.append(f'<td class="{css}"{title}>{html.escape(value)}</td>')
        average = ' class="average"' if str(dataset).startswith("average") else ""
        rows.append(f"<tr{average}><th>{html.escape(str(dataset))}</th>{''.join(cells)}</tr>")
    body.append(f'<table class="matrix"><tr><th>dataset</th>{head}</tr>{"".join(rows)}</table>')
    body.append("".join(f'<p class="note">{html.escape(note)}</p>' for note in matrix.notes))
    body.append('<p class="note">Hover over a score for the command that reproduces it (listed under Commands), '
                'over a published value for its citation.</p>')
    for caption, png in report.figures.values():
        encoded = base64.b64encode(png).decode("ascii")
        body.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{encoded}">'
                    f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    if not report.efficiency.empty:
        body.append("<h2>Measured: efficiency and vector agreement (on the machine that ran it; not judged)</h2>")
        body.append(_efficiency_text(report.efficiency).to_html(index=False, border=0))
    body.append("<h2>Commands</h2><ul>" + "".join(
        f"<li>{html.escape(column)} / {html.escape(dataset)}: {_code(command)}</li>"
        for (column, dataset), command in matrix.commands.items()) + "</ul>")
    for results in report.results:
        body.append(f"<h2>Regression checks: {html.escape(results.name)}</h2>")
        body.append(_checks_text(results).to_html(index=False, border=0))
    document = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vtrepro report: '
                f"{html.escape(matrix.metric)}</title><style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")
    with atomic_write(path) as handle:
        handle.write(document)


def _code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def write_report_files(report: Report, output: Path) -> list[Path]:
    """``report.md``, ``report.html``, ``table.csv`` and ``figures/*.png`` in ``output``; returns their paths."""
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (_, png) in report.figures.items():
        figure = output / FIGURES_DIRNAME / f"{name}.png"
        figure.parent.mkdir(exist_ok=True)
        with atomic_write(figure, "wb") as handle:
            handle.write(png)
        written.append(figure)
    with atomic_write(output / "table.csv") as handle:
        report.matrix.table.to_csv(handle, float_format="%.4f")
    write_markdown(report, output / "report.md")
    write_html(report, output / "report.html")
    return [output / "report.md", output / "report.html", output / "table.csv", *written]
