"""``python -m vtrepro report``: compare regression results with each other and with published tables.

    python -m vtrepro report runs/beir_bm25_flat runs/beir_splade_tiny

writes ``report.md``, ``report.html`` (self-contained, opens from disk) and ``table.csv`` (the BEIR
matrix: datasets x systems, published values beside observed ones with the delta and the regression's
verdict, averages, paired significance against a baseline) and ``figures/*.png`` into ``--output``.
By default the published columns are the systems the specs refer to and every table in
``regressions/published/`` with values for the datasets shown.
"""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.cli import cli_entry, command_parser
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.evaluate.trec import parse_metric
from vtrepro.report.published import PUBLISHED_DIR
from vtrepro.report.render import build_report, report_paths, write_report_files
from vtrepro.report.results import Results, load_results
from vtrepro.report.tables import DEFAULT_METRIC, published_systems, score_metrics


def check_metric(results: list[Results], metric: str) -> None:
    """The matrix's metric must be one the results hold scores of."""
    held = score_metrics(results)
    if metric not in held:
        folders = ", ".join(str(result.folder) for result in results)
        raise VtreproError(f"--metric {metric}: {folders} hold no {metric} scores; they hold "
                           f"{', '.join(held) or 'no scores at all'}: choose one of those")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("report", __doc__)
    parser.add_argument("results", nargs="+", type=Path, help="results folders written by regress (runs/<spec>/)")
    parser.add_argument("--output", type=Path, default=Path("runs/report"), help="folder for the report (default runs/report)")
    parser.add_argument("--metric", default=DEFAULT_METRIC, help=f"metric of the matrix (default {DEFAULT_METRIC})")
    parser.add_argument("--published", nargs="*", metavar="TABLE[/SYSTEM]",
                        help="published tables or systems to show (default: the specs' and every table covering "
                             "the datasets shown; give none to show only the specs')")
    parser.add_argument("--baseline", help="system the p-values compare with (default: the first)")
    args = parser.parse_args(argv)
    parse_metric(args.metric)
    check_output(args.output, [*args.results, PUBLISHED_DIR], kind="folder")
    for path in report_paths(args.output):
        check_output(path)
    results = [load_results(folder) for folder in args.results]
    check_metric(results, args.metric)
    report = build_report(results, published_systems(results, args.published), args.metric, args.baseline)
    for path in write_report_files(report, args.output):
        print(path)
    return 0
