"""``python -m vtrepro report``: compare regression results with each other and with published tables.

    python -m vtrepro report --results runs/beir_bm25_flat runs/beir_splade_tiny

writes ``report.md``, ``report.html`` (self-contained, opens from disk) and ``table.csv`` (the BEIR
matrix: datasets x systems, published values beside observed ones with the delta and the regression's
verdict, averages, paired significance against a baseline) and ``figures/*.png`` into ``--output``.
A results folder holding ``gap/`` (``vtrepro gap`` or ``regress --spec diagnosis_vocabulary_gap``) adds its
"Vocabulary gap" section, with ``figures/gap-*.png`` and ``.svg``.
By default the published columns are the systems the specs refer to and every table in
``regressions/published/`` with values for the datasets shown.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from vtrepro.core.cli import (
    add_metrics,
    add_output_folder,
    add_path,
    add_renamed,
    cli_entry,
    command_parser,
    positional_fallback,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.evaluate.trec import DEFAULT_METRICS, parse_metric
from vtrepro.report.published import PUBLISHED_DIR
from vtrepro.report.render import build_report, report_paths, write_report_files
from vtrepro.report.results import Results, load_results
from vtrepro.report.tables import published_systems, score_metrics


def check_metric(results: list[Results], metric: str) -> None:
    """The matrix's metric must be one the results hold scores of."""
    held = score_metrics(results)
    if metric not in held:
        folders = ", ".join(str(result.folder) for result in results)
        raise VtreproError(f"--metrics {metric}: {folders} hold no {metric} scores; they hold "
                           f"{', '.join(held) or 'no scores at all'}: choose one of those")


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("report", __doc__)
    add_path(parser, "--results", "input folder", nargs="+", help="results folders written by regress (<runs>/<spec>/)")
    parser.add_argument("paths", type=Path, nargs="*", help=argparse.SUPPRESS)  # the old positional spelling
    add_output_folder(parser, "folder for the report", required=False, default=Path("runs/report"),
                      rule="its report files are replaced")
    add_metrics(parser, DEFAULT_METRICS, "metrics; the report's matrix shows the first")
    add_renamed(parser, "--metric", "--metrics")
    parser.add_argument("--published", nargs="*", metavar="TABLE[/SYSTEM]",
                        help="published tables or systems to show (default: the specs' and every table covering "
                             "the datasets shown; give none to show only the specs')")
    parser.add_argument("--baseline", metavar="SYSTEM", help="system the p-values compare with (default: the first)")
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    positional_fallback(parser, args, "paths", ["--results"])
    if not args.results:
        parser.error("--results is required")
    metric = args.metrics.split(",")[0]
    parse_metric(metric)
    check_output(args.output, [*args.results, PUBLISHED_DIR], kind="folder")
    for path in report_paths(args.output, args.results):
        check_output(path)
    results = [load_results(folder) for folder in args.results]
    check_metric(results, metric)
    report = build_report(results, published_systems(results, args.published), metric, args.baseline)
    for path in write_report_files(report, args.output):
        print(path)
    return 0
