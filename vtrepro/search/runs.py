"""Runs, whichever engine searched: the run type, TREC run files, hit depth, the top-k cut and its tie order.

Both engines (:mod:`vtrepro.search.lucene`, :mod:`vtrepro.search.pisa`) return the same :data:`Run` for the
same vectors: hits ordered by score, ties by document id, a query's own id removed (the BEIR convention),
the top ``k`` kept (:func:`top_hits`). Evaluation, training and the regressions read and write runs through
this module, so none of them depends on an engine.

Neither does a run depend on how the index was built (threads, segments, merged or not): an engine's top
``depth`` is exact in scores but may keep any part of the documents tied at its last score, in the index's
internal order; :func:`search_until_complete` searches deeper until the tie at the cut is whole, so the cut
by score then document id sees every document it could keep.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, read_lines
from vtrepro.core.options import Options, option
from vtrepro.core.schema import Field
from vtrepro.encode.reader import MAX_IMPACT
from vtrepro.index.approximate import APPROXIMATE_ENGINES

# numpy is imported where latencies are summarized, on purpose: every command's `--help` stays fast.

Run = dict[str, dict[str, float]]
"""qid -> {docid: score}, the shape pytrec_eval takes."""
MAX_K = 10_000
"""Most hits per query: ten times the deepest cutoff evaluated here (recall@1000, the paper's k). The
engines set aside room for k hits per query before they search."""
MAX_RUN_HITS = 20_000_000
"""Most hits one search may return (queries x hits per query, once k is cut to the documents): a run is
held in memory, about 150 bytes a hit (3 GB); the largest BEIR query set at k=1000 (quora, 10,000
queries) returns 10 million."""


@dataclass
class SearchTiming:
    """Wall time of a search. With one thread each query is searched and timed on its own (latency);
    with more, queries run in batches across the threads and only the total is known (throughput)."""

    threads: int = 1
    queries: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds per query, one-thread searches only

    def figures(self) -> dict[str, float | int | None]:
        """Threads, queries per second, and latency in milliseconds (None unless timed per query)."""
        latency: dict[str, float | None] = dict.fromkeys(("latency_mean_ms", "latency_p50_ms", "latency_p99_ms"))
        if self.latencies:
            import numpy as np

            milliseconds = np.asarray(self.latencies) * 1000.0
            latency = {"latency_mean_ms": float(milliseconds.mean()),
                       "latency_p50_ms": float(np.percentile(milliseconds, 50)),
                       "latency_p99_ms": float(np.percentile(milliseconds, 99))}
        rate = self.queries / self.seconds if self.seconds > 0 else None
        return {"search_threads": self.threads, "search_queries_per_s": rate, **latency}


ENGINES = ("lucene", "pisa")
"""The exact impact search engines: the same run from either (PISA is faster)."""
ALL_ENGINES = (*ENGINES, *APPROXIMATE_ENGINES)
"""Every engine ``index`` and ``search`` take: the exact ones, then the approximate ones
(:mod:`vtrepro.index.approximate`), whose runs are measured against an exact run, never pinned."""


@dataclass(frozen=True)
class SearchOptions(Options):
    """How a search runs: the one declaration of each setting's default, which the search command's flags,
    a spec's ``defaults.k`` and the search functions' signatures (``k=SearchOptions.k``) all take.
    The thread count is :data:`vtrepro.core.cli.DEFAULT_THREADS` (``--threads``, :func:`~vtrepro.core.cli.add_threads`)."""

    k: int = option(Field(
        int, 1000, minimum=1, maximum=MAX_K,
        help=f"hits per query, 1 to {MAX_K} (the default is the paper's); a k above the documents in the index "
             f"is cut to them before searching (the same run), and queries x hits must stay within "
             f"{MAX_RUN_HITS:,} (a run is held in memory)"))
    threads: int = option(Field(int, DEFAULT_THREADS, minimum=1, help="search threads (results do not depend on it)"))
    engine: str = option(Field(str, "lucene", ALL_ENGINES,
                               help="lucene or pisa: the same exact run, PISA is faster; seismic or bmp: approximate, "
                                    "measured against an exact run (--exact-index or --exact-run)"))
    keep_query_id: bool = option(Field(bool, False, help="keep hits whose docid equals the query id"))


@dataclass(frozen=True)
class Bm25Options(Options):
    """BM25's parameters (Pyserini's and Anserini's defaults): a spec condition's ``bm25:`` block."""

    k1: float = option(Field(float, 0.9, minimum=0, help="term-frequency saturation"))
    b: float = option(Field(float, 0.4, minimum=0, maximum=1, help="document-length normalization"))


def hits_per_query(k: int, documents: int, queries: int) -> int:
    """``k`` cut to the index's ``documents`` (no engine returns more hits than documents, so the run is the
    same), refused when ``queries`` searches of that depth would return more than :data:`MAX_RUN_HITS`."""
    k = max(1, min(k, documents))
    if k * queries > MAX_RUN_HITS:
        raise VtreproError(f"{queries} queries x {k} hits per query would return {k * queries:,} hits, more than "
                           f"the {MAX_RUN_HITS:,} a run may hold in memory; lower k or search the queries in parts")
    return k


EXACT_SCORE_LIMIT = 2**24
"""Lucene and PISA sum impact scores in float32, which holds every integer up to 2^24 and no odd one past it
(2^24 + 1 is read as 2^24). With every query weight and impact >= 0 a score never shrinks as terms add up, so
a computed score below 2^24 is the exact dot product, and so is every partial sum before it."""


def check_exact_weights(qid: str, vector: Mapping[str, int], largest_impact: int | None = None) -> None:
    """Refuse a query whose largest possible score, its summed weights x ``largest_impact`` (1 when unknown:
    a document holding each of its terms once), reaches :data:`EXACT_SCORE_LIMIT`."""
    bound = sum(vector.values()) * (largest_impact or 1)
    if bound >= EXACT_SCORE_LIMIT:
        basis = "summed weights x the largest impact" if largest_impact else "its summed weights"
        raise VtreproError(f"query '{qid}' could score {bound} ({basis}), at or beyond 2^24 = {EXACT_SCORE_LIMIT} "
                           "where Lucene's and PISA's float32 scores stop being exact integers; quantize the queries "
                           "at a lower scale")


def check_exact_score(qid: str, score: float) -> None:
    """Refuse a hit Lucene scored at or beyond :data:`EXACT_SCORE_LIMIT`: the float32 sum may not be the dot
    product there (two documents scoring 2^24 and 2^24 + 1 both come back as 16777216)."""
    if score >= EXACT_SCORE_LIMIT:
        raise VtreproError(f"query '{qid}' scored a document {score:.0f}, at or beyond 2^24 = {EXACT_SCORE_LIMIT} "
                           "where Lucene's float32 scores stop being exact integers (documents would tie or swap); "
                           "quantize the queries or documents at a lower scale")


def check_query_weights(qid: str, vector: Mapping[str, object], lowest: int, requirement: str) -> None:
    """Refuse a query weight an engine would not score exactly: anything but an integer from ``lowest`` to
    :data:`~vtrepro.encode.reader.MAX_IMPACT` (a bool is not one); ``requirement`` ends the message."""
    for term, weight in vector.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or not lowest <= weight <= MAX_IMPACT:
            raise VtreproError(f"query '{qid}' has weight {weight!r} for '{term}': {requirement}")


Hits = list[tuple[str, float]]
"""One query's ``(docid, score)`` hits."""


def rank_hits(hits: Iterable[tuple[str, float]]) -> Hits:
    """``hits`` by score, ties by document id (ascending string order, Anserini's and trec_eval's)."""
    ordered = list(hits)
    ordered.sort(key=itemgetter(0))  # two stable sorts, by document id then by score: no key tuple per hit
    ordered.sort(key=itemgetter(1), reverse=True)
    return ordered


def holds_cut(hits: Sequence[tuple[str, float]], depth: int, wanted: int) -> bool:
    """Whether an engine's top ``depth`` hits (:func:`rank_hits`) hold every document scoring at least the
    ``wanted``-th score, so that no index order can change the top ``wanted`` by score then document id.

    An engine's top ``depth`` is exact in scores: a document it left out scores at most its last hit's. So
    when the ``wanted``-th score is above the last hit's, every document scoring at least the ``wanted``-th is
    in, and when fewer than ``depth`` documents came back, every matching document is in. Otherwise the tie
    at the last hit may go on past it, in an order the index decides (threads, segments), and a deeper search
    is needed. Exact because equal scores are equal numbers: impact scores are integers below
    :data:`EXACT_SCORE_LIMIT`, and a document's BM25 score does not depend on the index's layout."""
    return len(hits) < depth or hits[wanted - 1][1] > hits[-1][1]


def search_until_complete(search: Callable[[list[int], int], list[Hits]], queries: list[int], wanted: int,
                          documents: int, done: Callable[[int], object] | None = None) -> list[Hits]:
    """The hits (:func:`rank_hits`) of the queries at positions ``queries``, each deep enough to hold every
    document scoring at least its ``wanted``-th score (:func:`holds_cut`). ``search(positions, depth)``
    returns the ranked top ``depth`` of the queries at ``positions``; it is called with one hit more than
    ``wanted``, then, for the queries whose tie at the last hit may go on, twice as deep (at most ``documents``
    + 1 hits: then every match is in). ``done(n)`` hears of the queries completed after each call."""
    found: dict[int, Hits] = {}
    pending, depth = list(queries), min(wanted + 1, documents + 1)
    while pending:
        found.update(zip(pending, search(pending, depth)))
        unfinished = [position for position in pending if not holds_cut(found[position], depth, wanted)]
        if done is not None:
            done(len(pending) - len(unfinished))
        pending, depth = unfinished, min(2 * depth, documents + 1)
    return [found[position] for position in queries]


def top_hits(qid: str, hits: Iterable[tuple[str, float]], k: int, remove_query_id: bool,
             ranked: bool = False) -> dict[str, float]:
    """The top ``k`` of an engine's ``(docid, score)`` hits for query ``qid``: by score, ties by document id,
    the query's own id left out when ``remove_query_id``. Engines return more hits than ``k`` (room for the
    query's own id, and every document tied at the cut: :func:`search_until_complete`), so this cut decides
    the run. ``ranked``: the hits are :func:`rank_hits` already, and are only cut."""
    ordered = list(hits) if ranked else rank_hits(hits)
    kept = [hit for hit in ordered if hit[0] != qid] if remove_query_id else ordered
    return dict(kept[:k])


def write_trec_run(run: Run, path: str | Path, tag: str = "vtrepro") -> None:
    """Write a TREC run file (``qid Q0 docid rank score tag``), atomically, in run order."""
    with atomic_write(path) as handle:
        for qid, hits in run.items():
            for rank, (docid, score) in enumerate(hits.items(), start=1):
                handle.write(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``, six fields separated by whitespace).

    What trec_eval would read differently is refused, naming file and line: a line with another
    number of fields (an id holding a space), a rank or score that is not a number, a non-finite
    score, the same document twice for a query.
    """
    path = Path(path)
    run: Run = {}
    for line_number, line in read_lines(path):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{line_number}"
        if len(fields) != 6:
            raise VtreproError(f"{where}: expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)} in "
                               f"{line.strip()[:80]!r}; ids must not hold whitespace")
        qid, _, docid, rank, score_text, _ = fields
        try:
            int(rank)
            score = float(score_text)
        except ValueError:
            raise VtreproError(f"{where}: rank must be an integer and score a number, got {rank!r} and "
                               f"{score_text!r}") from None
        if not math.isfinite(score):
            raise VtreproError(f"{where}: score {score_text} is not finite; fix the run that wrote it")
        hits = run.setdefault(qid, {})
        if docid in hits:
            raise VtreproError(f"{where}: document '{docid}' appears twice for query '{qid}'; keep one line")
        hits[docid] = score
    return run
