"""Write the comparison report: ``report.md`` (figures linked), ``report.html`` (self-contained: inline
CSS, figures embedded, no script) and ``table.csv`` (the BEIR matrix), replaced together only once all
are completely written.

Every text in a report may come from a stranger's results folder, so every value goes out through one
escape per format: :func:`_text` and :func:`_attribute` in HTML (``&<>"'`` escaped in text and in
attributes; CSS classes only from a fixed list), :func:`_markdown` and :func:`_markdown_code` in
markdown (no HTML, link, image or table-cell break survives), :func:`_csv_cell` in CSV (a text that a
spreadsheet would run as a formula starts with ``'``).
"""
from __future__ import annotations

import base64
import contextlib
import html
import logging
import math
import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, check_output
from vtrepro.report.gap import FIGURE_FORMATS, GapSection, figure_stems, gap_folder, gap_section
from vtrepro.report.published import PublishedSystem
from vtrepro.report.results import NOT_OK, STATUS_OKISH, STATUSES, Results
from vtrepro.report.tables import (
    DEFAULT_METRIC,
    SIGNIFICANCE_LEVEL,
    Matrix,
    System,
    beir_matrix,
    checks_table,
    efficiency_table,
    observed_systems,
)

# pandas is imported where a table is formatted and the figures (numpy, matplotlib) where they are drawn, on
# purpose: `report --help` and `regress --help` stay fast.
if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

FIGURES_DIRNAME = "figures"
FIGURE_NAMES = ("scores", "retention", "cost", "terms", "calibration", "training")
"""Every figure a report may draw (``figures/<name>.png``), in report order."""
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
_MARKDOWN_ESCAPES = str.maketrans({"\\": "\\\\", "`": "\\`", "[": "\\[", "]": "\\]", "|": "\\|",
                                   "&": "&amp;", "<": "&lt;", ">": "&gt;"})
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP's list)."""


@dataclass
class Report:
    """What a report shows, before it is written in any format."""

    results: list[Results]
    matrix: Matrix
    efficiency: pd.DataFrame
    figures: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # file stem -> (caption, PNG)
    gap: list[GapSection] = field(default_factory=list)  # the "Vocabulary gap" of each results folder holding gap/


def build_report(results: list[Results], published: list[PublishedSystem], metric: str = DEFAULT_METRIC,
                 baseline: str | None = None, *, lenient_gap: bool = False) -> Report:
    """The tables and figures of a report over ``results`` (``baseline``: a system label; default the first), with
    the vocabulary gap section of each folder holding ``gap/``; a bad gap file fails the report, or with
    ``lenient_gap`` leaves that section out with a warning."""
    from vtrepro.report import plots

    gap = gap_sections([result.folder for result in results], lenient_gap)  # checked before any figure is drawn
    systems = observed_systems(results)
    chosen = _baseline(systems, baseline)
    matrix = beir_matrix(systems, published, metric, chosen)
    efficiency = efficiency_table(systems)
    calibrations = {system.label: system.results.record(system.condition).calibration for system in systems}
    losses = {system.label: system.results.record(system.condition).training_loss for system in systems}
    with plots.drawing():
        drawn = {
            "scores": (f"{metric} per dataset, observed and published", plots.scores_chart(matrix)),
            "retention": (f"{metric} as a share of {chosen.label if chosen else ''}'s",
                          plots.retention_chart(matrix, chosen.label) if chosen else None),
            "cost": (f"{metric} against FLOPS", plots.cost_chart(systems, metric, efficiency)),
            "terms": ("terms per document vector", plots.terms_chart(systems)),
            "calibration": ("APC: active terms before and after calibration",
                            plots.calibration_chart({label: value for label, value in calibrations.items() if value})),
            "training": ("training loss", plots.training_chart({label: value for label, value in losses.items() if value})),
        }
    figures = {name: (caption, png) for name, (caption, png) in drawn.items() if png is not None}
    return Report(results, matrix, efficiency, figures, gap)


def gap_sections(folders: list[Path], lenient: bool = False) -> list[GapSection]:
    """The vocabulary gap section of each folder holding ``gap/`` (:mod:`vtrepro.report.gap`), in order; with
    ``lenient``, a folder whose gap files are bad gives none (a warning names the fault)."""
    sections: list[GapSection] = []
    for folder in folders:
        try:
            section = gap_section(folder, len(sections))
        except VtreproError as error:
            if not lenient:
                raise
            logger.warning(f"{error} (the report leaves its vocabulary gap section out)")
            continue
        if section is not None:
            sections.append(section)
    return sections


def _gap_title(report: Report, section: GapSection) -> str:
    return "Vocabulary gap" + (f": {section.folder.parent}" if len(report.gap) > 1 else "")


def _baseline(systems: list[System], label: str | None) -> System | None:
    if label is None:
        return systems[0] if systems else None
    for system in systems:
        if system.label == label:
            return system
    raise VtreproError(f"--baseline '{label}' is not a system of these results; choose one of "
                       f"{', '.join(system.label for system in systems)}")


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
    import pandas as pd

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


# -- Markdown --------------------------------------------------------------------------------------------


def _markdown(value: object) -> str:
    """Text shown as written in markdown: one line, no raw HTML, link, image, code span or table-cell break."""
    return " ".join(str(value).split()).translate(_MARKDOWN_ESCAPES)


def _markdown_code(value: str) -> str:
    """A code span holding ``value`` literally: its fence is longer than any run of backticks inside."""
    text = " ".join(value.split())
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    import pandas as pd

    shown = frame.map(_markdown)
    shown.columns = [_markdown(column) for column in frame.columns]
    shown.index = pd.Index([_markdown(label) for label in frame.index], name=frame.index.name)
    return shown.to_markdown(index=index, tablefmt="pipe", disable_numparse=True)


def markdown_text(report: Report) -> str:
    """``report.md``: the same sections as the HTML, figures linked from ``figures/``."""
    matrix = report.matrix
    parts = [f"# Comparison report: {_markdown(matrix.metric)}\n"]
    for title, lines in _headers(report):
        parts.append(f"## {_markdown(title)}\n\n" + "\n".join(f"- {label}: {_markdown(text)}"
                                                             for label, text in lines if text) + "\n")
    parts.append(f"## BEIR matrix ({_markdown(matrix.metric)})\n")
    parts.append(_markdown_table(matrix_text(matrix)) + "\n")
    parts.append("\n".join(f"- {_markdown(note)}" for note in matrix.notes) + "\n")
    if report.figures:
        parts.append("## Figures\n\n" + "\n".join(f"![{_markdown(caption)}]({FIGURES_DIRNAME}/{name}.png)"
                                                  for name, (caption, _) in report.figures.items()) + "\n")
    if not report.efficiency.empty:
        parts.append("## Measured: efficiency and vector agreement (on the machine that ran it; not judged)\n")
        parts.append(_markdown_table(_efficiency_text(report.efficiency), index=False) + "\n")
    for section in report.gap:
        parts.append(_gap_markdown(_gap_title(report, section), section))
    parts.append("## Commands\n\n" + "\n".join(f"- {_markdown(column)} / {_markdown(dataset)}: {_markdown_code(command)}"
                                                for (column, dataset), command in matrix.commands.items()) + "\n")
    for results in report.results:
        parts.append(f"## Regression checks: {_markdown(results.name)}\n")
        parts.append(_markdown_table(_checks_text(results), index=False) + "\n")
    return "\n".join(parts)


def _gap_markdown(title: str, section: GapSection) -> str:
    """A vocabulary gap section: its tables with their notes, its figures (PNG, with a link to the SVG)."""
    parts = [f"## {_markdown(title)}\n"]
    for table in section.tables:
        parts.append(f"### {_markdown(table.title)}\n")
        parts.append(_markdown_table(table.frame, index=False) + "\n")
        if table.notes:
            parts.append("\n".join(f"- {_markdown(note)}" for note in table.notes) + "\n")
    if section.figures:
        parts.append("\n".join(f"![{_markdown(caption)}]({FIGURES_DIRNAME}/{stem}.png) ([SVG]({FIGURES_DIRNAME}/{stem}.svg))"
                               for stem, (caption, _, _) in section.figures.items()) + "\n")
    return "\n".join(parts)


# -- HTML ------------------------------------------------------------------------------------------------


def _text(value: object) -> str:
    """Any value as HTML text."""
    return html.escape(str(value), quote=True)


def _attribute(name: str, value: object) -> str:
    """`` name="value"``, the value escaped for a quoted attribute."""
    return f' {name}="{html.escape(str(value), quote=True)}"'


def _code(text: str) -> str:
    return f"<code>{_text(text)}</code>"


def _html_table(frame: pd.DataFrame) -> str:
    """A table of text cells, headed by the frame's columns (the index is not shown)."""
    head = "".join(f"<th>{_text(column)}</th>" for column in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_text(cell)}</td>" for cell in line) + "</tr>"
                   for line in frame.itertuples(index=False))
    return f"<table><tr>{head}</tr>{rows}</table>"


def _matrix_html(matrix: Matrix) -> str:
    """The BEIR matrix; hovering over a score shows its command, over a published value its citation."""
    text = matrix_text(matrix)
    head = "".join(f"<th>{_text(column)}</th>" for column in text.columns)
    rows = []
    for dataset, line in text.iterrows():
        cells = []
        for column, value in line.items():
            kind = matrix.kinds[str(column)]
            source = matrix.commands.get((str(column), str(dataset))) or matrix.citations.get((str(column), str(dataset)))
            title = _attribute("title", source) if source else ""
            if kind == "status":
                css = _attribute("class", value) if value in STATUSES else ""
            else:
                css = _attribute("class", "published" if kind == "published" else "number")
            cells.append(f"<td{css}{title}>{_text(value)}</td>")
        average = _attribute("class", "average") if str(dataset).startswith("average") else ""
        rows.append(f"<tr{average}><th>{_text(dataset)}</th>{''.join(cells)}</tr>")
    return f'<table class="matrix"><tr><th>dataset</th>{head}</tr>{"".join(rows)}</table>'


def _figure_html(caption: str, png: bytes) -> str:
    source = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (f"<figure><img{_attribute('alt', caption)}{_attribute('src', source)}>"
            f"<figcaption>{_text(caption)}</figcaption></figure>")


def _gap_html(title: str, section: GapSection) -> str:
    """A vocabulary gap section: its tables with their notes, its figures embedded as PNG."""
    body = [f"<h2>{_text(title)}</h2>"]
    for table in section.tables:
        body.append(f"<h3>{_text(table.title)}</h3>" + _html_table(table.frame))
        body.append("".join(f'<p class="note">{_text(note)}</p>' for note in table.notes))
    body.extend(_figure_html(caption, png) for caption, png, _ in section.figures.values())
    return "".join(body)


def html_text(report: Report) -> str:
    """``report.html``: one file, inline CSS and figures, no script; opens from disk."""
    matrix = report.matrix
    body = [f"<h1>Comparison report: {_text(matrix.metric)}</h1>"]
    for title, lines in _headers(report):
        body.append(f"<h2>{_text(title)}</h2><ul>" + "".join(
            f"<li><b>{_text(label)}</b>: {_code(text) if label == 'Command' else _text(text)}</li>"
            for label, text in lines if text) + "</ul>")
    body.append(f"<h2>BEIR matrix ({_text(matrix.metric)})</h2>")
    body.append(_matrix_html(matrix))
    body.append("".join(f'<p class="note">{_text(note)}</p>' for note in matrix.notes))
    body.append('<p class="note">Hover over a score for the command that reproduces it (listed under Commands), '
                'over a published value for its citation.</p>')
    body.extend(_figure_html(caption, png) for caption, png in report.figures.values())
    if not report.efficiency.empty:
        body.append("<h2>Measured: efficiency and vector agreement (on the machine that ran it; not judged)</h2>")
        body.append(_html_table(_efficiency_text(report.efficiency)))
    for section in report.gap:
        body.append(_gap_html(_gap_title(report, section), section))
    body.append("<h2>Commands</h2><ul>" + "".join(
        f"<li>{_text(column)} / {_text(dataset)}: {_code(command)}</li>"
        for (column, dataset), command in matrix.commands.items()) + "</ul>")
    for results in report.results:
        body.append(f"<h2>Regression checks: {_text(results.name)}</h2>")
        body.append(_html_table(_checks_text(results)))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vtrepro report: '
            f"{_text(matrix.metric)}</title><style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


# -- CSV and the files -----------------------------------------------------------------------------------


def _csv_cell(value: object) -> object:
    """A text a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@`` first) gets a leading ``'``."""
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA_STARTS) else value


def table_csv(matrix: Matrix) -> str:
    """``table.csv``: the BEIR matrix at full precision (4 decimals), names safe to open in a spreadsheet."""
    import pandas as pd

    table = matrix.table.map(_csv_cell).astype(object)  # numbers written as they are, as in the matrix
    table.columns = [_csv_cell(column) for column in table.columns]
    table.index = pd.Index([_csv_cell(label) for label in table.index], name=matrix.table.index.name)
    return table.to_csv(float_format="%.4f")


def report_paths(output: Path, folders: list[Path] | None = None) -> list[Path]:
    """Every file a report may write into ``output``, whichever figures it draws (to check before work); with
    the results ``folders``, the figures of their vocabulary gap sections too."""
    gaps = sum(gap_folder(folder) is not None for folder in folders or [])
    return [output / name for name in ("report.md", "report.html", "table.csv")] + [
        output / FIGURES_DIRNAME / f"{name}.png" for name in FIGURE_NAMES] + [
        output / FIGURES_DIRNAME / f"{stem}.{suffix}" for index in range(gaps) for stem in figure_stems(index)
        for suffix in FIGURE_FORMATS]


def report_files(report: Report) -> dict[str, bytes]:
    """Every file of a report by its path in the output folder: ``report.md``, ``report.html``, ``table.csv``,
    ``figures/*.png``, and each vocabulary gap figure as ``figures/<stem>.png`` and ``.svg``."""
    files = {"report.md": markdown_text(report).encode("utf-8"), "report.html": html_text(report).encode("utf-8"),
             "table.csv": table_csv(report.matrix).encode("utf-8")}
    files.update({f"{FIGURES_DIRNAME}/{name}.png": png for name, (_, png) in report.figures.items()})
    for section in report.gap:
        for stem, (_, png, svg) in section.figures.items():
            files.update({f"{FIGURES_DIRNAME}/{stem}.png": png, f"{FIGURES_DIRNAME}/{stem}.svg": svg})
    return files


@contextlib.contextmanager
def hold_interrupts() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back while the block runs, and deliver it after: no interrupt cuts the block
    short. Only the main thread sets signal handlers; elsewhere, or under a handler Python did not set,
    the block runs as it is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda number, _: held.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def write_files(output: Path, files: dict[str, bytes]) -> list[Path]:
    """Write ``files`` (path in ``output`` -> content) as one set: every file to a temporary name beside its
    target, then all renamed into place in the order given, with Ctrl-C held back until the last rename.
    An interrupt or a failure before then leaves the old set untouched; after it the new set is whole.
    An existing target that is not a regular file is refused before anything is written."""
    targets = {output / name: content for name, content in files.items()}
    for target in targets:
        check_output(target)
    with contextlib.ExitStack() as renames:
        for target, content in reversed(targets.items()):  # the stack renames the last one entered first
            renames.enter_context(atomic_write(target, "wb")).write(content)
        with hold_interrupts():
            renames.close()
    return list(targets)


def write_report_files(report: Report, output: Path) -> list[Path]:
    """``report.md``, ``report.html``, ``table.csv`` and ``figures/*.png`` in ``output``, replaced together;
    returns their paths."""
    return write_files(output, report_files(report))
