"""Approximate impact search with Seismic or BMP: a run shaped like the exact engines', not their run.

:func:`search_approximate` opens an index only through :func:`vtrepro.index.approximate.open_index` (manifest,
sizes and SHA-256 checked before the engine loads a byte), then searches each query alone, one thread, timed
(latency). A query's terms the index never saw are left out (they score nothing), and a query with none left
returns no hits without calling the engine (BMP's search would stop on it). The engine's top ``k`` (one more
when the query's own id is removed) is ordered as every run is, by score then document id
(:func:`vtrepro.search.runs.top_hits`).

What the scores are:

- **Seismic** scores a candidate with the full query against its forward vector: the exact integer dot product
  while impacts and weights stay within 2,048 (half precision). What is approximate is which documents it
  looks at (``query_cut``, ``heap_factor``, and the build's ``n_postings``).
- **BMP** rescales each query so that its largest weight is 32 (rounding up) and holds impacts as bytes
  (scaled to the build's ``max_impact``), so its scores are BMP's own, not the dot product; ``alpha`` below 1
  prunes blocks. Its 16-bit sums wrap past 65,535, so a query that could reach that (each term's rescaled weight
  x its largest held impact, summed) is refused, naming the fix (a lower ``--max-impact``). BMP 0.2.8 also never
  scores the last block of its candidate list, even at ``alpha`` 1 (docs/scale.md).

How close a run is to the exact one is measured, not assumed: ``search --engine seismic|bmp`` writes the
agreement (:mod:`vtrepro.evaluate.against_exact`) beside the run.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping

from vtrepro.core.errors import VtreproError
from vtrepro.core.progress import Progress
from vtrepro.index.approximate import (
    BMP_QUERY_LEVELS,
    BMP_SCORE_LIMIT,
    BmpSearchOptions,
    OpenedIndex,
    SeismicSearchOptions,
    meta_fix,
    native,
    open_index,
    require,
)
from vtrepro.search.runs import Run, SearchOptions, SearchTiming, check_query_weights, hits_per_query, top_hits


class ApproximateSearcher:
    """One approximate index, loaded once, searched query by query."""

    def __init__(self, engine: str, index_dir: str | Path):
        self.engine = engine
        self.opened: OpenedIndex = open_index(index_dir, engine)
        module = require(engine)
        fix = meta_fix(engine)
        path = str(self.opened.index_file)
        with native(f"{self.opened.index_file}: {engine}'s load", fix):
            try:
                self.index: Any = (module.SeismicIndex.load(path) if engine == "seismic" else module.Searcher(path))
            except (OSError, ValueError) as error:
                raise VtreproError(f"{self.opened.index_file}: {engine} could not load it ({str(error)[:200]}); "
                                   f"{fix}") from None
        if engine == "seismic" and self.index.len != self.opened.meta["documents"]:
            raise VtreproError(f"{self.opened.index_file}: holds {self.index.len} documents, but its manifest says "
                               f"{self.opened.meta['documents']}; {fix}")
        self.string_type = module.get_seismic_string() if engine == "seismic" else None

    @property
    def documents(self) -> int:
        return int(self.opened.meta["documents"])

    def check(self, qid: str, vector: Mapping[str, int]) -> None:
        """Refuse a query the engine would not take as it is (weights from 1; for BMP, one whose 16-bit sums
        could wrap)."""
        check_query_weights(qid, vector, 1, f"the {self.engine} engine takes integer weights from 1 (quantize query "
                                            "vectors; drop zero weights)")
        known = {term: weight for term, weight in vector.items() if term in self.opened.terms}
        if self.engine == "bmp" and known:
            bound = sum(weight * self.opened.largest[self.opened.terms[term]]
                        for term, weight in bmp_query(known).items())
            if bound >= BMP_SCORE_LIMIT:
                raise VtreproError(
                    f"query '{qid}' could score {bound} in BMP (its weights rescaled to at most {BMP_QUERY_LEVELS} x "
                    f"each term's largest impact), at or past the {BMP_SCORE_LIMIT} where BMP's 16-bit sums wrap; "
                    f"rebuild the BMP index with a lower --max-impact (this one holds "
                    f"{self.opened.meta.get('held_max_impact')}), or search it with --engine seismic or pisa")

    def retrieve(self, vector: Mapping[str, int], depth: int, options: SeismicSearchOptions | BmpSearchOptions) \
            -> list[tuple[str, float]]:
        """The engine's top ``depth`` for one query, as it returned them."""
        import numpy as np

        known = [(term, weight) for term, weight in vector.items() if term in self.opened.terms]
        if not known:
            return []
        with native(f"{self.engine}'s search", "report it with the command line and the query"):
            if isinstance(options, SeismicSearchOptions):
                components = np.asarray([str(self.opened.terms[term]) for term, _ in known], dtype=self.string_type)
                values = np.asarray([weight for _, weight in known], dtype=np.float32)
                found = self.index.search("q", components, values, k=depth, query_cut=options.query_cut,
                                          heap_factor=options.heap_factor)
                return [(doc_id, float(score)) for _, score, doc_id in found]
            docnos, scores = self.index.search(dict(known), k=depth, alpha=options.alpha, beta=options.beta)
            return list(zip(docnos, map(float, scores)))


def bmp_query(vector: Mapping[str, int]) -> dict[str, int]:
    """A query as BMP 0.2.8's searcher takes it: each weight x 32 / the largest weight in float32, rounded up."""
    import numpy as np

    largest = np.float32(max(vector.values()))
    scale = np.float32(BMP_QUERY_LEVELS) / largest
    return {term: int(math.ceil(np.float32(weight) * scale)) for term, weight in vector.items()}


def search_approximate(engine: str, index_dir: str | Path, queries: Mapping[str, Mapping[str, int]],
                       k: int = SearchOptions.k, options: SeismicSearchOptions | BmpSearchOptions | None = None,
                       remove_query_id: bool = True, timing: SearchTiming | None = None,
                       searcher: ApproximateSearcher | None = None) -> Run:
    """Each query's top ``k`` from the ``engine``'s index at ``index_dir`` (one thread, each query timed into
    ``timing``); ``options`` default to the engine's declared ones. ``searcher`` reuses a loaded index."""
    if options is None:
        options = SeismicSearchOptions() if engine == "seismic" else BmpSearchOptions()
    searcher = searcher if searcher is not None else ApproximateSearcher(engine, index_dir)
    for qid, vector in queries.items():
        searcher.check(qid, vector)
    k = hits_per_query(k, searcher.documents, len(queries))
    depth = min(k + int(remove_query_id), searcher.documents)
    timing = timing if timing is not None else SearchTiming()
    timing.threads, timing.queries, timing.latencies = 1, len(queries), []
    run: Run = {}
    started = time.perf_counter()
    with Progress(len(queries), f"search ({engine})", "query") as progress:
        for qid, vector in queries.items():
            began = time.perf_counter()
            run[qid] = top_hits(qid, searcher.retrieve(vector, depth, options), k, remove_query_id)
            timing.latencies.append(time.perf_counter() - began)
            progress.update()
    timing.seconds = time.perf_counter() - started
    return run

