"""The measurement behind the approximate engines' defaults (docs/scale.md): each knob setting of Seismic and BMP on
real encoded vectors, against the exact PISA run, one thread.

    python scripts/approximate_defaults.py --encoded runs/beir_splade_tiny/splade-tiny --datasets scifact,nfcorpus \
        --output runs/approximate-defaults.json

For each dataset (an encoded folder with vectors/ and queries.jsonl): the exact run (PISA) at k 10 and 1000, then
every build setting, and for each its search settings: queries/s, mean, p50 and p99 latency at k=10 (the best of
``--repeat`` timed passes, the machine being shared), recall@10 against exact (at k=10) and recall@1000 (at
k=1000), and for BMP the queries it refuses (their 16-bit sums could wrap).
"""
from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.encode.reader import read_query_vectors
from vtrepro.evaluate.against_exact import recall_against_exact
from vtrepro.index.approximate import BmpIndexOptions, BmpSearchOptions, SeismicIndexOptions, SeismicSearchOptions
from vtrepro.index.build_approximate import build_approximate_index
from vtrepro.index.pisa import build_pisa_index
from vtrepro.search.approximate import ApproximateSearcher, search_approximate
from vtrepro.search.pisa import search_pisa
from vtrepro.search.runs import SearchTiming

GRIDS = {
    "seismic": ([SeismicIndexOptions(n_postings=n) for n in (1000, 2000, 4000)],
                [SeismicSearchOptions(query_cut=q, heap_factor=h) for q, h in itertools.product((5, 10, 20, 40),
                                                                                             (0.6, 0.7, 0.8, 0.9, 1.0))]),
    "bmp": ([BmpIndexOptions(block_size=b, max_impact=m) for b, m in itertools.product((16, 32, 64), (32, 64))],
            [BmpSearchOptions(alpha=a) for a in (0.6, 0.7, 0.8, 0.9, 1.0)]),
}


def timed(engine, searcher, queries, k, options, repeat):
    best = None
    for _ in range(repeat):
        timing = SearchTiming()
        run = search_approximate(engine, searcher.opened.folder, queries, k, options, timing=timing, searcher=searcher)
        figures = timing.figures()
        if best is None or figures["latency_mean_ms"] < best[1]["latency_mean_ms"]:
            best = (run, figures)
    return best


def measure(folder: Path, work: Path, engines, repeat: int) -> list[dict]:
    queries = read_query_vectors(folder / "queries.jsonl")
    build_pisa_index(folder / "vectors", work / "pisa", threads=1)
    exact = {k: search_pisa(work / "pisa", queries, k, 1) for k in (10, 1000)}
    rows = []
    for engine in engines:
        builds, searches = GRIDS[engine]
        for build in builds:
            began = time.perf_counter()
            meta = build_approximate_index(engine, folder / "vectors", work / engine, build, threads=1)
            seconds = time.perf_counter() - began
            searcher = ApproximateSearcher(engine, work / engine)
            usable = dict(queries)
            for qid, vector in queries.items():
                try:
                    searcher.check(qid, vector)
                except VtreproError:
                    del usable[qid]
            for search in searches:
                run10, figures = timed(engine, searcher, usable, 10, search, repeat)
                run1000, _ = timed(engine, searcher, usable, 1000, search, 1)
                rows.append({"dataset": folder.name, "engine": engine, **build.to_dict(), **search.to_dict(),
                             "build_seconds": seconds, "index_mb": meta["index_bytes"] / 2**20,
                             "refused_queries": len(queries) - len(usable),
                             "recall@10": recall_against_exact(run10, exact[10], 10),
                             "recall@1000": recall_against_exact(run1000, exact[1000], 1000), **figures})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoded", type=Path, required=True, help="folder holding <dataset>/vectors, queries.jsonl")
    parser.add_argument("--datasets", default="scifact,nfcorpus")
    parser.add_argument("--engines", default="seismic,bmp")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for dataset in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as work:
            rows += measure(args.encoded / dataset, Path(work), args.engines.split(","), args.repeat)
    args.output.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
