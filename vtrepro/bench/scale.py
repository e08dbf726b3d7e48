"""``python -m vtrepro bench scale``: every stage after encoding at 10^4 to 10^6 documents and beyond.

No corpus of that size is encoded here (encoding is measured by ``bench encode``), so the collections are
synthetic, drawn from statistics fitted to a real encoding (:func:`fit_statistics`): the number of terms per
document, each term's document frequency and the impact values, all as observed (splade-tiny's SciFact
vectors by default). Each size then runs, each stage in a fresh process so that its peak memory is its own:
writing the vectors, one pass fingerprinting them and taking statistics, the Lucene index build with each of the
``build_threads`` (its rate per thread, speed-up and scaling efficiency against one thread) and the PISA build,
search with both engines at ``k`` 10 and 1000 (one thread, the real queries of the fitted encoding; PISA's runs must
be Lucene's, and each many-thread Lucene index's runs the one-thread index's, byte for byte) and evaluation against
synthetic judgments. With ``--engines`` naming Seismic or BMP, each is built (one thread, its declared defaults) and
searched the same way, and its runs measured against the exact engine's (PISA's, else Lucene's): recall@10 and
recall@1000 against exact, over the queries it takes (BMP refuses a query whose 16-bit sums could wrap: counted as
``queries_refused``). Printed and written as JSON: seconds, CPU seconds, peak RSS, size on disk, queries/s and
latency (mean, p50, p99) per stage and size, one row per engine and k (build seconds, size, queries/s, latency,
recall against exact), and each stage's growth exponent (the slope of log seconds over log documents; 1 is linear).

The synthetic terms are drawn independently of each other (only their frequencies are real), so documents share no
topical structure: a hard case for Seismic, which clusters each posting list's documents and skips whole blocks by
their summaries. Real vectors cluster; docs/scale.md sets the two side by side where both exist.
"""
from __future__ import annotations

import filecmp
import json
import multiprocessing
import resource
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vtrepro.bench.machine import machine_line, peak_rss_bytes
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK, VtreproError
from vtrepro.core.io import atomic_write, parse_json
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import read_query_vectors, read_vectors, vector_files
from vtrepro.encode.shards import ShardOptions
from vtrepro.index.approximate import APPROXIMATE_ENGINES
from vtrepro.search.runs import ENGINES

SHARD_DOCUMENTS = ShardOptions.shard_size
"""Documents per synthetic vector file, as ``encode`` writes shards by default: the builds' processes split the
files between them, so this is what they share at every size."""
BLOCK_DOCUMENTS = 10_000
"""Documents drawn at once: bounds the generator's memory whatever the collection's size."""
KS = (10, 1000)
COLLECTION_SEED = 0
"""Seed of the synthetic collection's documents."""
RESULTS_NAME = "scale.json"
WARMUP_QUERIES = 50
"""Queries searched once, untimed, before the timed search: enough for the JIT and the first page-cache reads,
without doubling the search's time at millions of documents."""
JUDGED_PER_QUERY = 3
"""Synthetic relevant documents per query: evaluation is timed, its scores mean nothing."""


@dataclass(frozen=True)
class CollectionStatistics:
    """What a synthetic collection is drawn from, as observed in a real encoding."""

    source: str
    documents: int
    terms: list[str]
    document_frequency: np.ndarray
    """Documents holding each term of :attr:`terms`."""
    terms_per_document: np.ndarray
    """One count per real document."""
    impact_values: np.ndarray
    impact_counts: np.ndarray

    def describe(self) -> str:
        lengths, impacts = self.terms_per_document, np.repeat(self.impact_values, self.impact_counts)
        frequency = np.sort(self.document_frequency)[::-1]
        ranks = np.arange(1, len(frequency) + 1)
        zipf = -np.polyfit(np.log(ranks[:1000]), np.log(frequency[:1000]), 1)[0]
        return (f"fitted to {self.source}: {self.documents} documents, {len(self.terms)} distinct terms; terms per "
                f"document mean {lengths.mean():.1f}, median {np.median(lengths):.0f}, max {lengths.max()}; document "
                f"frequency of the top 1,000 terms falls as rank^-{zipf:.2f}; impacts mean {impacts.mean():.1f}, "
                f"median {np.median(impacts):.0f}, max {impacts.max()}")


def fit_statistics(vectors_dir: Path) -> CollectionStatistics:
    """Terms per document, document frequencies and impact values of a real encoded corpus, read as a stream."""
    folder = EncodedFolder(vectors_dir).collection
    frequency: Counter[str] = Counter()
    impacts: Counter[int] = Counter()  # by value: memory grows with the distinct impacts, not the largest one
    lengths: list[int] = []
    for _, _, _, vector in read_vectors(vector_files(folder)):
        lengths.append(len(vector))
        frequency.update(vector.keys())
        impacts.update(vector.values())
    if not lengths:
        raise VtreproError(f"{folder}: no documents to fit a collection to; give an encoded corpus")
    values = np.asarray(sorted(impacts), dtype=np.int64)
    return CollectionStatistics(str(folder), len(lengths), list(frequency), np.fromiter(frequency.values(), dtype=np.int64),
                                np.asarray(lengths), values, np.asarray([impacts[value] for value in values.tolist()]))


def write_collection(statistics: CollectionStatistics, documents: int, folder: Path, seed: int = COLLECTION_SEED) -> int:
    """Write ``documents`` synthetic vectors (JsonVectorCollection shards) into ``folder``; returns bytes written.

    Each document draws its length from the observed lengths, that many distinct terms with probability
    proportional to their document frequency (so document frequencies scale with the collection), and an
    impact per term from the observed impacts; blocks of :data:`BLOCK_DOCUMENTS` keep memory flat."""
    rng = np.random.default_rng(seed)
    term_weights = statistics.document_frequency / statistics.document_frequency.sum()
    cumulative = np.cumsum(term_weights)
    impact_cumulative = np.cumsum(statistics.impact_counts) / statistics.impact_counts.sum()
    terms = np.asarray(statistics.terms, dtype=object)
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for shard_start in range(0, documents, SHARD_DOCUMENTS):
        shard_stop = min(shard_start + SHARD_DOCUMENTS, documents)
        with atomic_write(folder / f"part-{shard_start // SHARD_DOCUMENTS:05d}.jsonl") as handle:
            for block_start in range(shard_start, shard_stop, BLOCK_DOCUMENTS):
                for line in _block_lines(rng, (cumulative, impact_cumulative), statistics, terms,
                                         range(block_start, min(block_start + BLOCK_DOCUMENTS, shard_stop))):
                    handle.write(line)
                    written += len(line.encode())
    return written


def _block_lines(rng: np.random.Generator, cumulative: tuple[np.ndarray, np.ndarray], statistics: CollectionStatistics,
                 terms: np.ndarray, numbers: range) -> list[str]:
    """JSON lines of one block of synthetic documents: over-draw terms, keep each document's first distinct ones."""
    term_cumulative, impact_cumulative = cumulative
    lengths = np.minimum(rng.choice(statistics.terms_per_document, size=len(numbers)), len(terms))
    draws = np.searchsorted(term_cumulative, rng.random(int(lengths.sum() * 2) + 64), side="right")
    draws = np.minimum(draws, len(terms) - 1)
    impacts = statistics.impact_values[np.minimum(np.searchsorted(impact_cumulative, rng.random(int(lengths.sum())),
                                                                  side="right"), len(statistics.impact_values) - 1)]
    lines, cursor, impact_cursor = [], 0, 0
    for number, length in zip(numbers, lengths.tolist()):
        chosen: dict[int, None] = {}
        while len(chosen) < length:
            if cursor == len(draws):
                draws, cursor = np.searchsorted(term_cumulative, rng.random(4 * length + 64), side="right"), 0
                draws = np.minimum(draws, len(terms) - 1)
            chosen.setdefault(int(draws[cursor]))
            cursor += 1
        vector = dict(zip(terms[list(chosen)].tolist(), impacts[impact_cursor:impact_cursor + length].tolist()))
        impact_cursor += length
        lines.append(json.dumps({"id": f"d{number}", "contents": "", "vector": vector}, ensure_ascii=False) + "\n")
    return lines


@dataclass
class StageFigures:
    """One stage at one size: seconds, the peak RSS of its largest process (its own, or a part it spawned),
    bytes on disk and stage-specific figures."""

    stage: str
    documents: int
    seconds: float
    peak_rss_bytes: int
    size_bytes: int | None = None
    figures: dict[str, Any] | None = None
    cpu_seconds: float | None = None
    """User and system CPU time of the stage's process and of the processes it spawned (all ended when the stage
    ends), all their threads: over ``seconds``, the cores it kept busy."""


def _peak_rss_bytes() -> int:
    """The largest peak resident memory of one process: the stage's own, or one it spawned (a build's part)."""
    return max(peak_rss_bytes(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _stage_child(connection, job: Callable[..., tuple[int | None, dict | None]], args: tuple) -> None:
    began = time.perf_counter()
    size, figures = job(*args)
    cpu_seconds = sum(usage.ru_utime + usage.ru_stime
                      for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
    connection.send(json.dumps({"seconds": time.perf_counter() - began, "peak_rss_bytes": _peak_rss_bytes(),
                                "size_bytes": size, "figures": figures, "cpu_seconds": cpu_seconds}))
    connection.close()


def run_stage(stage: str, documents: int, job: Callable[..., tuple[int | None, dict | None]], *args: Any) -> StageFigures:
    """Run ``job(*args)`` in a fresh process (its peak memory alone) and collect its figures as JSON text."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_stage_child, args=(sender, job, args))
    process.start()
    sender.close()
    try:
        reply = receiver.recv()
    except EOFError:
        reply = None
    process.join()
    if reply is None or process.exitcode != 0:
        raise VtreproError(f"bench scale: stage {stage} at {documents} documents failed (exit {process.exitcode})")
    return StageFigures(stage, documents, **parse_json(reply, f"bench scale: stage {stage}'s reply", "report it"))


def _write_job(statistics: CollectionStatistics, documents: int, folder: Path) -> tuple[int, None]:
    return write_collection(statistics, documents, folder), None


def _scan_job(folder: Path) -> tuple[None, dict]:
    from vtrepro.encode.scan import scan_folder

    scan = scan_folder(folder, _scan_record(folder))  # a run's one pass: every record checked, fingerprint, statistics
    return None, {"sha256": scan.fingerprint.sha256, "total_terms": scan.fingerprint.total_impact,
                  "terms_per_document_mean": scan.sparsity.mean_terms}


def _scan_record(folder: Path) -> Path:
    """Where the scan stage records its pass, beside the synthetic vectors: the builds read it back, as a run's
    later stages do (``regress`` passes the fingerprint to its builds)."""
    return folder.with_name("scan.json")


def _lucene_job(folder: Path, index: Path, threads: int) -> tuple[int, dict]:
    """Anserini's build alone with ``threads`` processes: the JVM started and the scan read back first, untimed."""
    from vtrepro.core.java import start_jvm
    from vtrepro.encode.scan import scan_folder
    from vtrepro.index.lucene import build_impact_index

    start_jvm()
    summary = scan_folder(folder, _scan_record(folder)).fingerprint
    began = time.perf_counter()
    stats = build_impact_index(folder, index, threads, expected=summary)
    seconds = time.perf_counter() - began
    return _folder_bytes(index), {"threads": threads, "build_seconds": seconds, "documents_per_s": summary.count / seconds,
                                  "segments": len(list(index.glob("*.si"))), "unique_terms": stats.get("unique_terms"),
                                  "total_terms": stats.get("total_terms")}


def _pisa_job(folder: Path, index: Path, threads: int) -> tuple[int, dict]:
    """vtrepro's PISA build alone with ``threads`` processes reading the vectors, the scan read back first, untimed."""
    from vtrepro.encode.scan import scan_folder
    from vtrepro.index.pisa import build_pisa_index

    summary = scan_folder(folder, _scan_record(folder)).fingerprint
    began = time.perf_counter()
    meta = build_pisa_index(folder, index, expected=summary, threads=threads)
    seconds = time.perf_counter() - began
    return _folder_bytes(index), {"threads": threads, "build_seconds": seconds, "documents_per_s": summary.count / seconds,
                                  "unique_terms": meta["unique_terms"], "total_terms": meta["total_terms"]}


def _approximate_job(engine: str, folder: Path, index: Path) -> tuple[int, dict]:
    """The ``engine``'s build alone (one thread, its declared defaults), the scan read back first, untimed."""
    from vtrepro.encode.scan import scan_folder
    from vtrepro.index.build_approximate import build_approximate_index

    summary = scan_folder(folder, _scan_record(folder)).fingerprint
    began = time.perf_counter()
    meta = build_approximate_index(engine, folder, index, threads=1, expected=summary)
    seconds = time.perf_counter() - began
    return _folder_bytes(index), {"threads": 1, "build_seconds": seconds, "documents_per_s": summary.count / seconds,
                                  "options": meta["options"], "held_max_impact": meta["held_max_impact"],
                                  "unique_terms": meta["unique_terms"], "total_terms": meta["total_terms"]}


def same_files(folder: Path, other: Path) -> bool:
    """Whether two folders hold the same file names with the same bytes (compared in chunks: the bench's own
    memory stays small, and every stage it starts after would otherwise count it)."""
    names = sorted(path.name for path in folder.iterdir())
    return names == sorted(path.name for path in other.iterdir()) and all(
        filecmp.cmp(folder / name, other / name, shallow=False) for name in names)


def _search_job(engine: str, index: Path, queries_path: Path, k: int, run_path: Path) -> tuple[None, dict]:
    from vtrepro.search.lucene import search_impact
    from vtrepro.search.pisa import search_pisa
    from vtrepro.search.runs import SearchTiming, write_trec_run

    queries = read_query_vectors(queries_path)
    refused = 0
    search: Callable[..., Any] = search_impact if engine == "lucene" else search_pisa
    if engine in APPROXIMATE_ENGINES:
        from vtrepro.search.approximate import ApproximateSearcher, search_approximate

        searcher = ApproximateSearcher(engine, index)
        kept = {qid: vector for qid, vector in queries.items() if _takes(searcher, qid, vector)}
        refused, queries = len(queries) - len(kept), kept

        def search(index: Path, queries: dict, k: int, threads: int, timing: Any = None) -> Any:
            return search_approximate(engine, index, queries, k, timing=timing, searcher=searcher)

    search(index, dict(list(queries.items())[:WARMUP_QUERIES]), k, 1)  # warm-up: JIT compilation, page cache
    timing = SearchTiming()
    run = search(index, queries, k, 1, timing=timing)
    write_trec_run(run, run_path)
    refused_ids = sorted(set(read_query_vectors(queries_path)) - set(queries))
    return None, {**timing.figures(), **({"queries_refused": refused, "refused_ids": refused_ids}
                                         if engine in APPROXIMATE_ENGINES else {})}


def _takes(searcher: Any, qid: str, vector: dict) -> bool:
    """Whether the approximate engine takes the query as it is (BMP refuses one whose 16-bit sums could wrap)."""
    try:
        searcher.check(qid, vector)
    except VtreproError:
        return False
    return True


def recall_figures(run_path: Path, exact_path: Path, k: int, exact_engine: str,
                   refused: Sequence[str] = ()) -> dict[str, Any]:
    """An approximate run's recall@10 and recall@1000 against the exact run of the same k (None past k), over the
    queries the engine took (``refused``: those it did not, counted apart)."""
    from vtrepro.evaluate.against_exact import DEPTHS, recall_against_exact
    from vtrepro.search.runs import read_trec_run

    run, exact = read_trec_run(run_path), read_trec_run(exact_path)
    exact = {qid: hits for qid, hits in exact.items() if qid not in set(refused)}
    return {"exact_engine": exact_engine, **{f"recall@{depth}_vs_exact": recall_against_exact(run, exact, depth)
                                             if k >= depth else None for depth in DEPTHS}}


def _evaluate_job(run_path: Path, documents: int) -> tuple[None, dict]:
    from vtrepro.evaluate.trec import evaluate_run
    from vtrepro.search.runs import read_trec_run

    run = read_trec_run(run_path)
    rng = np.random.default_rng(1)
    qrels = {qid: {f"d{number}": 1 for number in rng.integers(0, documents, JUDGED_PER_QUERY).tolist()} for qid in run}
    return None, evaluate_run(run, qrels)


def measure_size(statistics: CollectionStatistics, documents: int, queries_path: Path, work: Path,
                 record: Callable[[StageFigures], None], build_threads: list[int],
                 engines: Sequence[str] = ENGINES) -> None:
    """Every stage at one size, in ``work``, each passed to ``record`` as it ends: each of ``engines``' builds
    with each of ``build_threads`` (1 first, the baseline of the others' speed-up and runs); each search at
    ``k`` by PISA says whether its run is Lucene's (both engines measured), each search of a many-thread Lucene
    index whether its run is the one-thread index's."""
    folder = work / "vectors"
    written = run_stage("write", documents, _write_job, statistics, documents, folder)
    written.size_bytes = _folder_bytes(folder)
    record(written)
    record(run_stage("fingerprint+statistics", documents, _scan_job, folder))
    builds = {threads: run_stage(f"index lucene t={threads}", documents, _lucene_job, folder, work / f"lucene-{threads}",
                                 threads) for threads in build_threads if "lucene" in engines}
    for build in builds.values():
        build.figures = {**(build.figures or {}), **scaling(build.figures or {}, builds[1].figures or {})}
        record(build)
    pisa_builds = {threads: run_stage(f"index pisa t={threads}", documents, _pisa_job, folder, work / f"pisa-{threads}",
                                      threads) for threads in build_threads if "pisa" in engines}
    for threads, build in pisa_builds.items():
        build.figures = {**(build.figures or {}), **scaling(build.figures or {}, pisa_builds[1].figures or {}),
                         **({"index_identical": same_files(work / f"pisa-{threads}", work / "pisa-1")} if threads > 1 else {})}
        record(build)
    for engine in engines:
        if engine in APPROXIMATE_ENGINES:
            record(run_stage(f"index {engine}", documents, _approximate_job, engine, folder, work / engine))
    exact_engine = next((engine for engine in ("pisa", "lucene") if engine in engines), None)
    for k in KS:
        runs = {engine: work / f"{engine}-{k}.trec" for engine in engines}
        searches = {engine: run_stage(f"search {engine} k={k}", documents, _search_job, engine,
                                      work / (engine if engine in APPROXIMATE_ENGINES else f"{engine}-1"), queries_path, k,
                                      runs[engine]) for engine in engines}
        if set(ENGINES) <= set(engines):
            identical = runs["lucene"].read_bytes() == runs["pisa"].read_bytes()
            searches["pisa"].figures = {**(searches["pisa"].figures or {}), "runs_identical": identical}
        for engine, figure in searches.items():
            if engine in APPROXIMATE_ENGINES and exact_engine is not None:
                refused = (figure.figures or {}).get("refused_ids", [])
                figure.figures = {**(figure.figures or {}), **recall_figures(runs[engine], runs[exact_engine], k,
                                                                             exact_engine, refused)}
            record(figure)
        for threads in build_threads[1:] if "lucene" in engines else []:
            run = work / f"lucene-t{threads}-{k}.trec"
            search = run_stage(f"search lucene k={k} t={threads}", documents, _search_job, "lucene",
                               work / f"lucene-{threads}", queries_path, k, run)
            search.figures = {**(search.figures or {}), "runs_identical": run.read_bytes() == runs["lucene"].read_bytes()}
            record(search)
    record(run_stage("evaluate", documents, _evaluate_job, work / f"{exact_engine or engines[0]}-1000.trec", documents))


def scaling(build: dict, one_thread: dict) -> dict[str, float]:
    """A build's rate per thread, speed-up over the one-thread build and scaling efficiency (speed-up / threads)."""
    speed_up = one_thread["build_seconds"] / build["build_seconds"]
    return {"documents_per_s_per_thread": build["documents_per_s"] / build["threads"], "speed_up": speed_up,
            "efficiency": speed_up / build["threads"]}


def growth_exponents(figures: list[StageFigures]) -> dict[str, float]:
    """Per stage, the slope of log seconds over log documents (least squares; stages measured at two sizes or more)."""
    exponents = {}
    for stage in dict.fromkeys(figure.stage for figure in figures):
        points = [(figure.documents, figure.seconds) for figure in figures if figure.stage == stage]
        if len({documents for documents, _ in points}) >= 2:
            sizes, seconds = np.log([p[0] for p in points]), np.log([max(p[1], 1e-6) for p in points])
            exponents[stage] = float(np.polyfit(sizes, seconds, 1)[0])
    return exponents


def print_table(figures: list[StageFigures], exponents: dict[str, float]) -> None:
    print(f"{'stage':26} {'documents':>10} {'seconds':>9} {'CPU s':>8} {'peak RSS MB':>11} {'size MB':>9} "
          f"{'queries/s':>10} {'mean ms':>7} {'p50 ms':>7} {'p99 ms':>7} {'R@10 exact':>10}")
    for figure in figures:
        extra = figure.figures or {}
        size = f"{figure.size_bytes / 2**20:.0f}" if figure.size_bytes else "-"
        cpu = f"{figure.cpu_seconds:.1f}" if figure.cpu_seconds is not None else "-"
        search = [f"{extra[key]:.1f}" if extra.get(key) is not None else "-"
                  for key in ("search_queries_per_s", "latency_mean_ms", "latency_p50_ms", "latency_p99_ms")]
        recall = f"{extra['recall@10_vs_exact']:.3f}" if extra.get("recall@10_vs_exact") is not None else "-"
        print(f"{figure.stage:26} {figure.documents:>10} {figure.seconds:>9.1f} {cpu:>8} "
              f"{figure.peak_rss_bytes / 2**20:>11.0f} {size:>9} {search[0]:>10} {search[1]:>7} {search[2]:>7} "
              f"{search[3]:>7} {recall:>10}")
    if exponents:
        print("growth exponents (seconds ~ documents^e): " + ", ".join(f"{stage} {value:.2f}"
                                                                       for stage, value in exponents.items()))


def print_builds(figures: list[StageFigures]) -> None:
    """The Lucene and PISA builds by threads: the build's seconds alone, documents/s (all and per thread),
    speed-up and efficiency over one thread, peak RSS, and whether the index's runs at each k are the
    one-thread index's (Lucene; PISA: whether its index files are the one-thread build's, byte for byte)."""
    print(f"{'engine':>6} {'documents':>10} {'threads':>7} {'build s':>8} {'docs/s':>8} {'docs/s/thread':>13} "
          f"{'speed-up':>8} {'efficiency':>10} {'segments':>8} {'peak RSS MB':>11} "
          + " ".join(f"{f'runs k={k}':>11}" for k in KS))
    for figure in figures:
        if not figure.stage.startswith("index ") or "speed_up" not in (figure.figures or {}):
            continue
        engine, build = figure.stage.split()[1], figure.figures or {}
        identical = []
        for k in KS:
            search = next((other for other in figures if other.documents == figure.documents
                           and other.stage == f"search lucene k={k} t={build['threads']}"), None)
            same = (search.figures or {}).get("runs_identical") if engine == "lucene" and search else \
                build.get("index_identical")
            identical.append("reference" if build["threads"] == 1 else "-" if same is None else
                             "identical" if same else "DIFFER")
        print(f"{engine:>6} {figure.documents:>10} {build['threads']:>7} {build['build_seconds']:>8.1f} "
              f"{build['documents_per_s']:>8.0f} {build['documents_per_s_per_thread']:>13.0f} {build['speed_up']:>8.2f} "
              f"{build['efficiency']:>10.2f} {build.get('segments', '-'):>8} {figure.peak_rss_bytes / 2**20:>11.0f} "
              + " ".join(f"{text:>11}" for text in identical))


def print_engines(figures: list[StageFigures]) -> None:
    """One row per size, engine and k: its one-thread build seconds and index size, its one-thread search's
    queries/s and latency, and its recall against exact (an exact engine's runs are exact)."""
    print(f"{'documents':>10} {'engine':>7} {'k':>5} {'build s':>8} {'size MB':>8} {'queries/s':>10} {'mean ms':>8} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'R@10 exact':>10} {'R@1000 exact':>12}")
    for figure in figures:
        stage = figure.stage.split()
        if stage[0] != "search" or len(stage) != 3:  # the one-thread index's searches
            continue
        engine, k, extra = stage[1], int(stage[2].partition("=")[2]), figure.figures or {}
        build = next((other for other in figures if other.documents == figure.documents and other.stage in
                      (f"index {engine}", f"index {engine} t=1")), None)
        build_s = f"{(build.figures or {})['build_seconds']:.1f}" if build else "-"
        size = f"{build.size_bytes / 2**20:.0f}" if build and build.size_bytes else "-"
        latency = [f"{extra[key]:.2f}" if extra.get(key) is not None else "-"
                   for key in ("latency_mean_ms", "latency_p50_ms", "latency_p99_ms")]
        recalls = [("exact" if engine not in APPROXIMATE_ENGINES else
                    f"{extra[key]:.3f}" if extra.get(key) is not None else "-")
                   for key in ("recall@10_vs_exact", "recall@1000_vs_exact")]
        rate = f"{extra['search_queries_per_s']:.1f}" if extra.get("search_queries_per_s") else "-"
        print(f"{figure.documents:>10} {engine:>7} {k:>5} {build_s:>8} {size:>8} {rate:>10} {latency[0]:>8} "
              f"{latency[1]:>7} {latency[2]:>7} {recalls[0]:>10} {recalls[1]:>12}")


def bench_scale(vectors_dir: Path, queries_path: Path, sizes: list[int], output: Path, build_threads: list[int],
                engines: Sequence[str] = ENGINES) -> int:
    """Measure every size, each of ``engines``' builds with each of ``build_threads`` (1 is added: the baseline);
    write ``output``/scale.json and print the tables. Exit 1 when runs differ."""
    build_threads = sorted({1, *build_threads})
    print(machine_line())
    statistics = fit_statistics(vectors_dir)
    print(statistics.describe())
    print(f"queries: {len(read_query_vectors(queries_path))} from {queries_path}, one thread, k {', '.join(map(str, KS))}; "
          f"{' and '.join(engines)} builds with {', '.join(map(str, build_threads))} threads, vector files of "
          f"{SHARD_DOCUMENTS:,} documents")
    figures: list[StageFigures] = []
    output.mkdir(parents=True, exist_ok=True)

    def record(figure: StageFigures) -> None:  # scale.json rewritten after every stage: a stopped run keeps its figures
        figures.append(figure)
        _write_results(output, statistics, sizes, figures)

    for documents in sizes:
        work = output / f"work-{documents}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            measure_size(statistics, documents, queries_path, work, record, build_threads, engines)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    exponents = growth_exponents(figures)
    print_table(figures, exponents)
    print_builds(figures)
    print_engines(figures)
    differing = [f"{figure.documents} documents, {figure.stage}" for figure in figures
                 if False in ((figure.figures or {}).get("runs_identical"), (figure.figures or {}).get("index_identical"))]
    print(f"runs: DIFFER ({'; '.join(differing)})" if differing else
          "runs: Lucene's and PISA's identical at every size and k where both ran (same documents, scores and "
          "order), and every Lucene build's runs and every PISA build's index files the one-thread build's")
    return EXIT_MISMATCH if differing else EXIT_OK


def _write_results(output: Path, statistics: CollectionStatistics, sizes: list[int], figures: list[StageFigures]) -> None:
    with atomic_write(output / RESULTS_NAME) as handle:
        json.dump({"machine": machine_line(), "statistics": statistics.describe(), "sizes": sizes,
                   "stages": [asdict(figure) for figure in figures], "growth_exponents": growth_exponents(figures)},
                  handle, indent=1)
