"""What a run cost: encoding rate, index size and build time, sparsity, FLOPS and search speed.

These figures describe the machine as much as the system, so a regression records them beside its
scores and never judges them against pins. Vector-derived figures (terms per vector, FLOPS) are fixed
by the vectors; timings are not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import Vector
from vtrepro.encode.statistics import PERCENTILES, Sparsity, expected_flops, sparsity
from vtrepro.search.runs import SearchTiming

FIGURES: dict[str, str] = {
    "encode_docs_per_s": "documents encoded per second",
    "encode_device": "device the documents were encoded on",
    "index_seconds": "seconds to build the index",
    "index_mib": "index size on disk (MiB)",
    "terms_per_document_mean": "mean terms per document vector",
    "terms_per_document_median": "median terms per document vector",
    "terms_per_query_mean": "mean terms per query vector",
    "terms_per_query_median": "median terms per query vector",
    "flops": "SPLADE FLOPS: expected shared terms per query-document pair",
    "search_threads": "search threads",
    "search_queries_per_s": "queries searched per second",
    "latency_mean_ms": "query latency, mean (ms, one thread)",
    "latency_p50_ms": "query latency, median (ms, one thread)",
    "latency_p99_ms": "query latency, 99th percentile (ms, one thread)",
}
"""Every efficiency figure a run reports, in report order, with what it means."""


@dataclass
class Efficiency:
    """The efficiency figures of one run and the distributions of terms per vector behind them."""

    figures: dict[str, Any] = field(default_factory=dict)
    distributions: dict[str, list[float]] = field(default_factory=dict)  # "terms_per_document" -> PERCENTILES values


def folder_mib(folder: Path) -> float:
    """Size of the files under ``folder`` in MiB."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 2**20


def encoding_rate(corpus: Path) -> tuple[float | None, str | None]:
    """Documents per second and device of an encoded corpus (its folder or its ``vectors/``), from the
    shard timings beside its manifest; None for plain vector folders and corpora not timed whole."""
    encoded = EncodedFolder.around(corpus)
    manifest, timings = encoded.load_manifest(), encoded.load_timings()
    if manifest is None or timings is None:
        return None, None
    seconds = [timings["seconds"].get(Path(shard["file"]).name) for shard in manifest["shards"]]
    if None in seconds or sum(seconds) <= 0:
        return None, timings["device"]
    return manifest["documents"] / sum(seconds), timings["device"]


def measure(index_dir: Path, index_seconds: float, timing: SearchTiming, corpus: Path | None = None,
            documents: Sparsity | None = None, queries: dict[str, Vector] | None = None) -> Efficiency:
    """The figures of one run; ``corpus`` (a vector folder), the sparsity of its ``documents`` (from the pass
    over them, :mod:`vtrepro.encode.scan`: nothing is read again here) and ``queries`` are absent for BM25."""
    figures: dict[str, Any] = dict.fromkeys(FIGURES)
    figures.update(index_seconds=round(index_seconds, 2), index_mib=round(folder_mib(index_dir), 3), **timing.figures())
    efficiency = Efficiency(figures)
    if corpus is None or documents is None or queries is None:
        return efficiency
    figures["encode_docs_per_s"], figures["encode_device"] = encoding_rate(corpus)
    asked = sparsity(queries.values())
    figures.update(_sparsity_figures("document", documents), **_sparsity_figures("query", asked),
                   flops=expected_flops(documents, asked))
    efficiency.distributions = {"percentiles": [float(value) for value in PERCENTILES],
                                "terms_per_document": list(documents.percentile_terms),
                                "terms_per_query": list(asked.percentile_terms)}
    return efficiency


def _sparsity_figures(what: str, statistics: Sparsity) -> dict[str, float]:
    return {f"terms_per_{what}_mean": statistics.mean_terms, f"terms_per_{what}_median": statistics.median_terms}
