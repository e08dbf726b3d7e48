"""``python -m vtrepro.report``: compare regression results with each other and with published tables.

    python -m vtrepro.report runs/beir_bm25_flat runs/beir_splade_tiny

writes ``report.md``, ``report.html`` (self-contained, opens from disk) and ``table.csv`` (the BEIR
matrix: datasets x systems, published values beside observed ones with the delta and the regression's
verdict, averages, paired significance against a baseline) and ``figures/*.png`` into ``--output``.
By default the published columns are the systems the specs refer to and every table in
``regressions/published/`` with values for the datasets shown.
"""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.cli import cli_entry, command_parser
from vtrepro.evaluate.trec import parse_metric
from vtrepro.report.published import PUBLISHED_DIR, PublishedSystem, load_system, load_table
from vtrepro.report.render import build_report, write_report_files
from vtrepro.report.results import Results, load_results


def published_systems(results: list[Results], names: list[str] | None) -> list[PublishedSystem]:
    """The published systems to show: ``names`` (tables or ``<table>/<system>``), or by default those the
    results refer to and every system with per-dataset values on a dataset the results cover."""
    chosen: dict[str, PublishedSystem] = {}
    for result in results:
        for settings in result.conditions.values():
            if settings.get("published"):
                system = load_system(settings["published"])
                chosen[system.key] = system
    if names is None:
        datasets = {dataset for result in results for dataset in result.rows["dataset"]}
        candidates = [system for path in sorted(PUBLISHED_DIR.glob("*.yaml")) for system in load_table(path).values()
                      if datasets & set(system.datasets)]
    else:
        candidates = [system for name in names
                      for system in ([load_system(name)] if "/" in name else load_table(name).values())]
    chosen.update({system.key: system for system in candidates})
    return list(chosen.values())


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("report", __doc__)
    parser.add_argument("results", nargs="+", type=Path, help="results folders written by regress (runs/<spec>/)")
    parser.add_argument("--output", type=Path, default=Path("runs/report"), help="folder for the report (default runs/report)")
    parser.add_argument("--metric", default="ndcg@10", help="metric of the matrix (default ndcg@10)")
    parser.add_argument("--published", nargs="*", metavar="TABLE[/SYSTEM]",
                        help="published tables or systems to show (default: the specs' and every table covering "
                             "the datasets shown; give none to show only the specs')")
    parser.add_argument("--baseline", help="system the p-values compare with (default: the first)")
    args = parser.parse_args(argv)
    parse_metric(args.metric)
    results = [load_results(folder) for folder in args.results]
    report = build_report(results, published_systems(results, args.published), args.metric, args.baseline)
    for path in write_report_files(report, args.output):
        print(path)
    return 0
