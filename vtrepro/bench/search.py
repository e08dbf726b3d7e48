"""``python -m vtrepro bench search``: Lucene and PISA side by side on the same vectors (build time,
throughput, latency) and a check that they return identical runs.

:func:`bench_search` builds (or keeps) both indexes of one vector folder, searches every query with
each engine, warm first, then timed with one thread (latency per query) and with more (throughput), and
checks that every run equals Lucene's one-thread run: same top ``k``, same scores, same order (ties by
document id). Beside it, PISA's own time per query without Python (the limit of a Python caller): one call of
the bindings for every query. Exit status 1 when any run differs.

``--engines`` adding ``seismic`` or ``bmp``: each approximate engine is built in ``index_dir/<engine>`` (its declared
defaults, one thread; kept while it holds these vectors with those options), searched with one thread, and measured
against Lucene's one-thread run: recall@10 and recall@1000 (at k >= 1000) against exact. Its runs are not expected
to be identical.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from vtrepro.bench.machine import machine_line
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_files
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import read_query_vectors, vector_files
from vtrepro.index.approximate import APPROXIMATE_ENGINES, INDEX_OPTIONS, read_meta
from vtrepro.index.lucene import build_impact_index
from vtrepro.index.lucene_checks import index_stats, is_lucene_index
from vtrepro.index.pisa import ensure_pisa_index
from vtrepro.search.lucene import search_impact
from vtrepro.search.pisa import bindings_seconds_per_query, search_pisa
from vtrepro.search.runs import ENGINES, Run, SearchTiming


@dataclass
class EngineFigures:
    """One engine's build time (None when an existing index was kept) and its timed searches."""

    engine: str
    build_seconds: float | None = None
    timings: list[SearchTiming] = field(default_factory=list)
    size_bytes: int | None = None
    recall: dict[str, float | None] = field(default_factory=dict)
    """An approximate engine's recall@10 and recall@k against Lucene's one-thread run."""

    def rate(self, threads: int) -> float:
        return next(timing.queries / timing.seconds for timing in self.timings if timing.threads == threads)


@dataclass
class EngineComparison:
    """Both engines on one vector folder and one query set; ``differing`` lists the queries whose run
    differs from Lucene's one-thread run in any engine or thread count."""

    vectors: VectorSetSummary
    queries: int
    k: int
    engines: dict[str, EngineFigures]
    runs_compared: int
    differing: list[str]
    pisa_limit_seconds: float
    """PISA's own time per query: the bindings' one call for every query, one thread, no Python per query."""


def _lucene_index(vectors_dir: Path, index_dir: Path, summary: VectorSetSummary) -> float | None:
    """Build seconds of the Lucene index at ``index_dir``, or None when it already holds these vectors' totals."""
    if is_lucene_index(index_dir):
        stats = index_stats(index_dir)
        if (stats["documents"], stats["total_terms"]) == (summary.count, summary.total_impact):
            return None
    began = time.perf_counter()
    build_impact_index(vectors_dir, index_dir, expected=summary)
    return time.perf_counter() - began


def compare_engines(vectors_dir: str | Path, queries_path: str | Path, k: int, threads: int,
                    index_dir: str | Path, engines: tuple[str, ...] | list[str] = ENGINES) -> EngineComparison:
    """Build or keep ``index_dir``/lucene and ``index_dir``/pisa, then search with 1 and ``threads`` threads; then
    each approximate engine of ``engines`` (one thread), against Lucene's run."""
    vectors_dir, index_dir = Path(vectors_dir), Path(index_dir)
    summary = fingerprint_files(vector_files(vectors_dir))
    queries = read_query_vectors(queries_path)
    figures = {"lucene": EngineFigures("lucene", _lucene_index(vectors_dir, index_dir / "lucene", summary)),
               "pisa": EngineFigures("pisa", ensure_pisa_index(vectors_dir, index_dir / "pisa")[1])}
    search: dict[str, Callable[..., Run]] = {"lucene": search_impact, "pisa": search_pisa}
    reference: Run | None = None
    differing: set[str] = set()
    runs = 0
    for engine in ENGINES:
        search[engine](index_dir / engine, queries, k, threads)  # warm-up: JIT compilation, page cache
        for count in sorted({1, threads}):
            timing = SearchTiming()
            run = search[engine](index_dir / engine, queries, k, count, timing=timing)
            figures[engine].timings.append(timing)
            reference = reference if reference is not None else run
            differing.update(qid for qid in queries if list(run[qid].items()) != list(reference[qid].items()))
            runs += 1
    for engine in engines:
        if engine in APPROXIMATE_ENGINES and reference is not None:
            figures[engine] = _approximate(engine, vectors_dir, index_dir / engine, summary, queries, k, reference)
    for engine, folder in (("lucene", index_dir / "lucene"), ("pisa", index_dir / "pisa")):
        figures[engine].size_bytes = sum(path.stat().st_size for path in folder.iterdir() if path.is_file())
    limit = bindings_seconds_per_query(index_dir / "pisa", queries, k)
    return EngineComparison(summary, len(queries), k, figures, runs, sorted(differing), limit)


def _approximate(engine: str, vectors_dir: Path, index: Path, summary: VectorSetSummary, queries: dict, k: int,
                 exact: Run) -> EngineFigures:
    """Build (or keep) the ``engine``'s index with its defaults, search it with one thread (warm first), and
    measure the run against ``exact``."""
    from vtrepro.evaluate.against_exact import DEPTHS, recall_against_exact
    from vtrepro.index.build_approximate import build_approximate_index
    from vtrepro.search.approximate import search_approximate

    meta = read_meta(index) if index.is_dir() else None
    options = INDEX_OPTIONS[engine]()
    built: float | None = None
    if meta is None or meta["engine"] != engine or meta["vectors_sha256"] != summary.sha256 \
            or meta["options"] != options.to_dict():
        began = time.perf_counter()
        build_approximate_index(engine, vectors_dir, index, options, threads=1, expected=summary)  # type: ignore[arg-type]
        built = time.perf_counter() - began
    search_approximate(engine, index, queries, k)  # warm-up: page cache
    timing = SearchTiming()
    run = search_approximate(engine, index, queries, k, timing=timing)
    figures = EngineFigures(engine, built, [timing], sum(path.stat().st_size for path in index.iterdir()))
    figures.recall = {f"recall@{depth}": recall_against_exact(run, exact, depth) if k >= depth else None
                      for depth in DEPTHS}
    return figures


def print_comparison(comparison: EngineComparison) -> None:
    """The comparison as a table, the PISA/Lucene ratios, and whether the runs are identical."""
    print(f"{'engine':8} {'build s':>8} {'size MB':>8} {'threads':>7} {'queries/s':>10} {'mean ms':>7} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'R@10 exact':>10} {'R@1000 exact':>12}")
    for figures in comparison.engines.values():
        build = "kept" if figures.build_seconds is None else f"{figures.build_seconds:.1f}"
        size = f"{figures.size_bytes / 2**20:.1f}" if figures.size_bytes is not None else "-"
        exact = figures.engine in ENGINES
        recalls = ["exact" if exact else "-" if figures.recall.get(key) is None else f"{figures.recall[key]:.3f}"
                   for key in ("recall@10", "recall@1000")]
        for timing in figures.timings:
            shown = timing.figures()
            latency = [f"{shown[key]:7.2f}" if shown[key] is not None else f"{'-':>7}"
                       for key in ("latency_mean_ms", "latency_p50_ms", "latency_p99_ms")]
            print(f"{figures.engine:8} {build:>8} {size:>8} {timing.threads:>7} {timing.queries / timing.seconds:>10.1f} "
                  f"{' '.join(latency)} {recalls[0]:>10} {recalls[1]:>12}")
            build = size = ""
    lucene, pisa = comparison.engines["lucene"], comparison.engines["pisa"]
    ratios = ", ".join(f"{pisa.rate(timing.threads) / lucene.rate(timing.threads):.1f}x with {timing.threads} "
                       f"thread{'s' if timing.threads > 1 else ''}" for timing in lucene.timings)
    print(f"PISA/Lucene queries/s: {ratios}")
    one_thread = next(timing for timing in pisa.timings if timing.threads == 1)
    per_query = one_thread.seconds / one_thread.queries
    print(f"PISA's own time per query (the bindings' one call for all queries, one thread, no Python per query): "
          f"{comparison.pisa_limit_seconds * 1e3:.3f} ms; vtrepro's one-thread PISA search {per_query * 1e3:.3f} ms, "
          f"{per_query / comparison.pisa_limit_seconds:.2f}x the limit")
    what = f"{comparison.runs_compared} runs x {comparison.queries} queries, top {comparison.k}, ties by document id"
    if comparison.differing:
        print(f"runs: DIFFER for {len(comparison.differing)} queries ({what}), e.g. {comparison.differing[:5]}")
    else:
        print(f"runs: identical ({what})")


def bench_search(vectors_dir: Path, queries_path: Path, k: int, threads: int, index_dir: Path | None,
                 engines: tuple[str, ...] | list[str] = ENGINES) -> int:
    """Compare the engines (indexes kept in ``index_dir``, else built in a temporary folder) and print it;
    exit status 1 when any exact engine's run differs."""
    print(machine_line())
    vectors_dir = EncodedFolder(vectors_dir).collection
    with tempfile.TemporaryDirectory(prefix="vtrepro-bench-") as scratch:
        comparison = compare_engines(vectors_dir, queries_path, k, threads, index_dir or Path(scratch), engines)
    print(f"vectors: {vectors_dir} ({comparison.vectors.count} documents, fingerprint {comparison.vectors.sha256[:12]}), "
          f"{comparison.queries} queries from {queries_path}, top {k}")
    print_comparison(comparison)
    return EXIT_MISMATCH if comparison.differing else EXIT_OK
