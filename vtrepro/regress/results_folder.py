"""A regression's results folder (``runs/<spec>/``), written: ``results.json`` and ``results.csv`` with the
environment they record, the comparison report of the run (:mod:`vtrepro.report`), and the terminal table.
The report reads the folder back through :mod:`vtrepro.report.results`."""
from __future__ import annotations

import importlib.metadata as metadata
import json
import math
import platform
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.anserini import anserini_version
from vtrepro.core.io import JSON_FILE_BYTES, check_fields, read_json_file, read_jsonl
from vtrepro.core.processor import cpu_model
from vtrepro.regress.spec import Spec
from vtrepro.report.render import build_report, figure_text, hold_interrupts, report_files, write_files
from vtrepro.report.results import (
    CALIBRATION_FIGURES,
    MAX_LOSS_POINTS,
    RESULTS_NAME,
    ROW_KEYS,
    STATUS_MEASURED,
    ResultRow,
    check_results,
)
from vtrepro.report.tables import DEFAULT_METRIC, measured_figures, published_systems, score_metrics
from vtrepro.training.run_folder import LOG_NAME
from vtrepro.vocabulary.calibrate import CALIBRATION_REPORT

# torch is imported only to record its version in a report, on purpose: BM25-only runs never load it.
# pandas is imported where a frame is built, on purpose: `regress --help` and `export --help` stay fast.
if TYPE_CHECKING:
    import pandas as pd


def _show(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value[:12]  # a fingerprint: its first 12 hex digits
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def tally(rows: list[ResultRow]) -> str:
    """``"12 OK, 1 OKISH"``: how many rows have each status, in first-seen order."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return ", ".join(f"{count} {status}" for status, count in counts.items())


COLUMNS = ("condition", "dataset", "metric", "tier", "expected", "observed", "status", "difference")


def results_frame(rows: list[ResultRow], reference_suffix: str = " (published)") -> pd.DataFrame:
    """One line per result row, the report's columns, figures as printed (4 decimals, fingerprints cut to 12)."""
    import pandas as pd

    return pd.DataFrame(
        [(row.condition, row.dataset, row.metric + (reference_suffix if row.kind == "reference" else ""), row.tier,
          _show(row.expected), _show(row.observed), row.status, row.note) for row in rows],
        columns=list(COLUMNS),
    )


def judged(rows: list[ResultRow]) -> list[ResultRow]:
    """The rows judged against a pin or a published value (not the efficiency figures)."""
    return [row for row in rows if row.status != STATUS_MEASURED]


def _aligned(frame: pd.DataFrame) -> str:
    """Left-aligned columns, two spaces apart."""
    columns = [str(column) for column in frame.columns]
    cells = frame.astype(str)
    widths = [max([len(column), *cells[name].str.len()]) for name, column in zip(frame.columns, columns)]
    lines = ["  ".join(column.ljust(width) for column, width in zip(columns, widths)).rstrip()]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
              for line in cells.itertuples(index=False)]
    return "\n".join(lines)


def efficiency_frame(rows: list[ResultRow]) -> pd.DataFrame:
    """One line per run (condition, dataset), one column per measured figure it has."""
    import pandas as pd

    frame = pd.DataFrame([asdict(row) for row in rows], columns=list(ROW_KEYS))
    return pd.DataFrame([{"condition": condition, "dataset": dataset, **figures}
                         for condition, dataset, figures in measured_figures(frame)])


def format_table(rows: list[ResultRow]) -> str:
    """The terminal table of judged rows, then the efficiency figures of each run."""
    text = _aligned(results_frame(judged(rows), reference_suffix=" (ref)"))
    efficiency = efficiency_frame(rows)
    if not efficiency.empty:
        shown = efficiency.set_index(["condition", "dataset"]).T
        shown.columns = [f"{condition}/{dataset}" for condition, dataset in shown.columns]
        shown = shown.map(figure_text)
        text += ("\n\nMeasured on this machine (efficiency, and vector agreement; not judged):\n"
                 + _aligned(shown.reset_index(names="figure")))
    return text


def environment() -> dict[str, str]:
    """Versions (the Anserini inside Pyserini too) and the arithmetic path (CPU, torch's SIMD level, threads) that
    produced a run's vectors."""
    import torch

    versions = {name: metadata.version(name) for name in ("vtrepro", "torch", "transformers", "pyserini")}
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_model(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": str(torch.get_num_threads()),
            **versions, "anserini": anserini_version()}


def _calibration(report: Path) -> dict[str, dict[str, float]]:
    """APC's active terms per document before and after, from a calibration report."""
    fix = f"remove {report.parent} to calibrate again"
    data = read_json_file(report, fix, JSON_FILE_BYTES["model"], report.parent, {"before": dict, "after": dict})
    figures = dict.fromkeys(CALIBRATION_FIGURES, (int, float))
    return {moment: {figure: check_fields(data[moment], f"{report}: {moment}", fix, figures)[figure]
                     for figure in CALIBRATION_FIGURES} for moment in ("before", "after")}


def _training_loss(log: Path) -> list[list[float]]:
    """[step, loss] of a training log, at most :data:`MAX_LOSS_POINTS` evenly spaced, finite losses only."""
    records = [record for _, record in read_jsonl(log)]
    every = max(1, math.ceil(len(records) / MAX_LOSS_POINTS))
    return [[record["step"], record["loss"]] for record in records[::every] if math.isfinite(record["loss"])]


def condition_records(spec: Spec, out_dir: Path, train_root: Path) -> dict[str, dict[str, Any]]:
    """What the report needs to know of each condition: its published counterpart, and APC's effect and the
    training loss of its model where it has them, copied in: a results file names no other file."""
    records = {}
    for condition in spec.conditions:
        work = train_root / Path(condition.train).stem if condition.train else out_dir / condition.name
        calibrations = sorted(work.glob(f"*-calibrate/{CALIBRATION_REPORT}"))
        log = work / LOG_NAME
        records[condition.name] = {
            "published": condition.published.key if condition.published else None,
            "calibration": _calibration(calibrations[-1]) if calibrations else None,
            "training_loss": _training_loss(log) if log.is_file() else None,
        }
    return records


def write_report(spec: Spec, rows: list[ResultRow], timings: dict[str, float], out_dir: Path, argv: list[str],
                 distributions: dict[str, dict[str, list[float]]], interrupted: bool = False, *,
                 train_root: Path) -> None:
    """``results.json`` and ``results.csv`` with the comparison report of this run alone (``report.md``,
    ``report.html``, ``table.csv``, figures): made in memory, checked by the report's own reader, then
    replaced together (:func:`vtrepro.report.render.write_files`, ``results.json`` last), so a failure
    leaves the previous set whole. Ctrl-C is held back until the new set is written (seconds; an interrupt
    inside the imports of torch or matplotlib would break them), then raised. ``interrupted`` marks a
    run stopped before every selected run finished. A bad file in ``<out_dir>/gap/`` leaves the report's vocabulary
    gap section out, with a warning, and the record is written all the same."""
    with hold_interrupts():
        document = {
            "spec": str(spec.path), "description": spec.description, "command": argv, "environment": environment(),
            "timings_seconds": timings, "interrupted": interrupted,
            "conditions": condition_records(spec, out_dir, train_root), "rows": [asdict(row) for row in rows],
            "distributions": distributions,
        }
        results = check_results(document, out_dir, out_dir / RESULTS_NAME)
        metrics = score_metrics([results])
        metric = DEFAULT_METRIC if DEFAULT_METRIC in metrics or not metrics else metrics[0]
        files = report_files(build_report([results], published_systems([results], []), metric, lenient_gap=True))
        files["results.csv"] = results_frame(rows).to_csv(index=False).encode("utf-8")
        files[RESULTS_NAME] = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        write_files(out_dir, files)
