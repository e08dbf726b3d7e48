"""The regression report: the terminal table, ``results.json`` and ``report.md``, and the environment they record."""
from __future__ import annotations

import importlib.metadata as metadata
import platform
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from vtrepro.core.io import atomic_write, write_json
from vtrepro.regress.compare import STATUS_ERROR, STATUS_FAIL, STATUS_OKISH, STATUS_UNPINNED, ResultRow
from vtrepro.regress.spec import Spec

# torch is imported only to record its version in a report, on purpose: BM25-only runs never load it.


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


_ALIGN = ("left", "left", "left", "left", "right", "right", "left", "left")
COLUMNS = ("condition", "dataset", "metric", "tier", "expected", "observed", "status", "difference")


def results_frame(rows: list[ResultRow], reference_suffix: str = " (published)") -> pd.DataFrame:
    """One line per result row, the report's columns, figures as printed (4 decimals, fingerprints cut to 12)."""
    return pd.DataFrame(
        [(row.condition, row.dataset, row.metric + (reference_suffix if row.kind == "reference" else ""), row.tier,
          _show(row.expected), _show(row.observed), row.status, row.note) for row in rows],
        columns=list(COLUMNS),
    )


def format_table(rows: list[ResultRow]) -> str:
    """The terminal table: left-aligned columns, two spaces apart."""
    frame = results_frame(rows, reference_suffix=" (ref)")
    widths = {column: max([len(column), *frame[column].str.len()]) for column in COLUMNS}
    lines = ["  ".join(column.ljust(widths[column]) for column in COLUMNS).rstrip()]
    lines += ["  ".join(str(cell).ljust(widths[column]) for column, cell in zip(COLUMNS, line)).rstrip()
              for line in frame.itertuples(index=False)]
    return "\n".join(lines)


def cpu_model() -> str:
    """The processor's model name (Linux), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment() -> dict[str, str]:
    """Versions and the arithmetic path (CPU, torch's SIMD level, threads) that produced a run's vectors."""
    import torch

    versions = {name: metadata.version(name) for name in ("vtrepro", "torch", "transformers", "pyserini")}
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_model(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": str(torch.get_num_threads()),
            **versions}


def write_report(spec: Spec, rows: list[ResultRow], timings: dict[str, float], out_dir: Path, argv: list[str],
                 interrupted: bool = False) -> None:
    """``results.json``, ``results.csv`` and ``report.md`` in ``out_dir``, each replaced only once completely written;
    ``interrupted`` marks a run stopped before every selected run finished."""
    write_json(out_dir / "results.json", {
        "spec": str(spec.path), "environment": environment(), "timings_seconds": timings, "interrupted": interrupted,
        "rows": [asdict(row) for row in rows],
    })
    with atomic_write(out_dir / "results.csv") as handle:
        results_frame(rows).to_csv(handle, index=False)
    failed = sum(row.status in (STATUS_FAIL, STATUS_UNPINNED, STATUS_ERROR) for row in rows)
    okish = sum(row.status == STATUS_OKISH for row in rows)
    with atomic_write(out_dir / "report.md") as handle:
        handle.write(f"# Regression report: {spec.name}\n\n{spec.description}\n\n")
        handle.write(f"Command: `python -m vtrepro.regress {' '.join(argv)}`\n\n")
        handle.write("Environment: " + ", ".join(f"{k} {v}" for k, v in environment().items()) + "\n\n")
        verdict = f"{failed} row(s) not OK" if failed else ("all OK" if not okish else f"OK, {okish} row(s) OKISH")
        verdict += " (interrupted: only the runs listed finished)" if interrupted else ""
        handle.write(f"Result: {verdict}\n\n")
        handle.write("Tier *fixed*: the vectors' fingerprints match the pinned ones (or BM25), every figure is exact. "
                     "Tier *encoded*: the vectors were encoded here and differ; figures may move within the spec's "
                     "tolerance (OKISH).\n\n")
        handle.write(results_frame(rows).to_markdown(index=False, tablefmt="pipe", colalign=_ALIGN, disable_numparse=True) + "\n")
        handle.write("\nSeconds per run: " + ", ".join(f"{key} {value}" for key, value in timings.items()) + "\n")
