"""Split a leave-out comparison by whether a query contains a held-out token.

After ``python -m vtrepro regress --spec vt_leaveout_splade_tiny_ft`` this prints mean nDCG@10 of
each condition on the NFCorpus test queries whose tokens include one of the transfer's held-out
tokens, and on the rest: where the transferred model differs from the original, the rebuilt rows are
the cause only if the difference sits in the first group.

    python scripts/leaveout_query_split.py --runs runs/vt_leaveout_splade_tiny_ft \\
        --transfer-report runs/vt_leaveout_splade_tiny_ft/topology/transferred/transfer_report.json
"""
from __future__ import annotations

import argparse
from pathlib import Path

from vtrepro.core.io import read_json_file
from vtrepro.data.beir import load_dataset
from vtrepro.evaluate.trec import per_query_scores
from vtrepro.search.runs import read_trec_run
from vtrepro.vocabulary.target import load_tokenizer


def split_scores(runs: dict[str, Path], queries: dict[str, str], qrels, held_out: set[str], tokenizer,
                 metric: str = "ndcg@10") -> dict[str, dict[str, float]]:
    """{group: {condition: mean metric}} for the queries with and without a held-out token."""
    with_held = {qid for qid in qrels if held_out & set(tokenizer.tokenize(queries[qid]))}
    groups = {f"with a held-out token ({len(with_held)})": with_held,
              f"without ({len(qrels) - len(with_held)})": set(qrels) - with_held}
    per_query = {name: per_query_scores(read_trec_run(path), qrels, metric) for name, path in runs.items()}
    return {group: {name: round(sum(scores[qid] for qid in ids) / len(ids), 4) for name, scores in per_query.items()}
            for group, ids in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="a regress output folder: <condition>/<dataset>/run.trec")
    parser.add_argument("--transfer-report", type=Path, required=True, help="transfer_report.json of the leave-out transfer")
    parser.add_argument("--dataset", default="nfcorpus")
    parser.add_argument("--data-dir", default=None, help="data root (default: $VTREPRO_DATA)")
    args = parser.parse_args()
    report = read_json_file(args.transfer_report, "give the transfer_report.json of a leave-out transfer", fields={
        "target_tokenizer": str, "leaveout": dict})
    dataset = load_dataset(args.dataset, args.data_dir)
    runs = {path.parent.parent.name: path for path in sorted(args.runs.glob(f"*/{args.dataset}/run.trec"))}
    tokenizer = load_tokenizer(report["target_tokenizer"])
    table = split_scores(runs, dataset.queries("test"), dataset.qrels("test"), set(report["leaveout"]["held_out"]), tokenizer)
    print("| queries | " + " | ".join(runs) + " |\n|---|" + "---:|" * len(runs))
    for group, means in table.items():
        print(f"| {group} | " + " | ".join(f"{means[name]:.4f}" for name in runs) + " |")


if __name__ == "__main__":
    main()
