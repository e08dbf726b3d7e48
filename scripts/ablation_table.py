"""Markdown table of a transfer ablation: each condition's nDCG@10, its retention of the original model's,
and a paired randomization test against one condition (by default ``vtrepro``), per dataset.

    python scripts/ablation_table.py --runs runs/vt_round_trip_ablation --data-dir ../shared/data
"""
from __future__ import annotations

import sys
from pathlib import Path

from vtrepro.core.cli import add_data_dir, cli_entry, command_parser
from vtrepro.data.beir import load_dataset
from vtrepro.evaluate.trec import compare_runs
from vtrepro.search.runs import read_trec_run


def ablation_rows(runs: Path, data_dir: str | None, against: str, original: str, metric: str) -> list[str]:
    """One markdown row per condition: per dataset the metric, its retention of ``original``'s and the
    randomization-test p-value of the difference to ``against``."""
    conditions = sorted(path.name for path in runs.iterdir() if (path / "scifact" / "run.trec").is_file()
                        or (path / "nfcorpus" / "run.trec").is_file())
    datasets = sorted({path.parent.name for path in runs.glob("*/*/run.trec")})
    qrels = {name: load_dataset(name, data_dir).qrels("test") for name in datasets}
    header = ["condition"] + [f"{name} {column}" for name in datasets for column in (metric, "retention", f"p vs {against}")]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for condition in conditions:
        cells = [condition]
        for name in datasets:
            run = read_trec_run(runs / condition / name / "run.trec")
            base = compare_runs(run, read_trec_run(runs / original / name / "run.trec"), qrels[name], (metric,))[metric]
            versus = compare_runs(run, read_trec_run(runs / against / name / "run.trec"), qrels[name], (metric,))[metric]
            p_value = "-" if condition == against else f"{versus['p_randomization']:.4f}"
            cells += [f"{base['run']:.4f}", f"{100 * base['run'] / base['baseline']:.1f}%", p_value]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("ablation-table", __doc__)
    parser.add_argument("--runs", type=Path, required=True, help="results folder of the ablation spec")
    add_data_dir(parser)
    parser.add_argument("--against", default="vtrepro", help="condition the p-values compare with")
    parser.add_argument("--original", default="original", help="condition retention is measured against")
    parser.add_argument("--metric", default="ndcg@10")
    args = parser.parse_args(argv)
    print("\n".join(ablation_rows(args.runs, args.data_dir, args.against, args.original, args.metric)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
