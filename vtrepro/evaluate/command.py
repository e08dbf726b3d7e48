"""``vtrepro evaluate``: its parser and run; the scoring is :mod:`vtrepro.evaluate.trec`."""
from __future__ import annotations

import argparse
import json
import sys

from vtrepro.core.cli import (
    add_data_dir,
    add_dataset,
    add_metrics,
    add_path,
    add_renamed,
    add_split,
    cli_entry,
    command_parser,
)
from vtrepro.data.beir import load_dataset, read_qrels
from vtrepro.evaluate import trec
from vtrepro.evaluate.trec import DEFAULT_METRICS, compare_runs, evaluate_run, parse_metric
from vtrepro.search.runs import read_trec_run


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("evaluate", trec.__doc__)
    add_path(parser, "--run", "input file", required=True, help="TREC run file")
    judgements = parser.add_mutually_exclusive_group(required=True)
    add_path(judgements, "--qrels", "input file", help="qrels file (BEIR TSV with header, or TREC 4-column)")
    add_dataset(judgements, help="BEIR dataset name or folder; uses its qrels/<split>.tsv")
    add_split(parser, "qrels used with --dataset")
    add_data_dir(parser)
    add_metrics(parser, DEFAULT_METRICS)
    add_path(parser, "--baseline-run", "input file",
             help="second TREC run: compare per query (difference, wins/losses, paired t-test and "
                  "randomization-test p-values)")
    add_renamed(parser, "--baseline", "--baseline-run")
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    metrics = tuple(args.metrics.split(","))
    for metric in metrics:
        parse_metric(metric)

    if args.qrels:
        qrels = read_qrels(args.qrels)
    else:
        qrels = load_dataset(args.dataset, args.data_dir).qrels(args.split)
    if args.baseline_run:
        json.dump(compare_runs(read_trec_run(args.run), read_trec_run(args.baseline_run), qrels, metrics), sys.stdout, indent=2)
    else:
        json.dump(evaluate_run(read_trec_run(args.run), qrels, metrics), sys.stdout, indent=2)
    print()
    return 0
