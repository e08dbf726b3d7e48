"""Exact impact search with PISA (through pyterrier-pisa's bindings): the same runs as Lucene, faster.

:func:`build_pisa_index` indexes the JsonVectorCollection folder Lucene indexes; :func:`search_pisa`
returns what :func:`vtrepro.search.lucene.search_impact` returns for the same vectors: the same top
``k``, the same integer scores, ties by document id, a query's own id removed
(:func:`vtrepro.search.runs.top_hits`). How PISA is set up so:

- impacts are posted as term frequencies, as they are (scale 1), and scored with PISA's
  ``quantized`` scorer (query weight x frequency): no stemmer, no stopwords;
- terms are posted as the hex of their UTF-8 bytes: PISA lowercases query terms, which would
  send ``Paris`` to ``paris``;
- an integer query weight is exact: the bindings repeat a term ``weight`` times and PISA's weighted
  query counts the repeats; a weight of 0 is refused (Lucene would list documents scoring 0 for it);
- scores are float32 sums, exact integers while the highest score a query could reach (its summed
  weights x the collection's largest impact) stays below 2^24: a query that could go beyond is refused;
- term-at-a-time over an accumulator per document (PISA's ``ranked_or_taat``, exhaustive, so exact at any
  k) with one thread: SPLADE queries are long (52 terms on scifact) and weight frequent terms, so dynamic
  pruning saves little and costs its bookkeeping. The bindings alone, one thread, ms per query: scifact 0.46
  at k=10 and 0.77 at k=1000 against MaxScore's 0.81 and 1.52; a 100,000-document synthetic collection
  fitted to it 5.9 and 6.3 against 19.3 and 24.9 (docs/performance.md). With several threads MaxScore
  (:data:`THREADED_ALGORITHM`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import process_alive, write_json
from vtrepro.core.log import verbose
from vtrepro.core.progress import Progress
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_files
from vtrepro.encode.reader import read_vectors, vector_files
from vtrepro.search.runs import (
    Run,
    SearchTiming,
    check_exact_weights,
    check_query_weights,
    hits_per_query,
    search_until_complete,
    top_hits,
)

logger = logging.getLogger(__name__)

# pyterrier_pisa is imported where it is used, on purpose: it imports pyterrier, pandas and ir_datasets
# (over a second), which `search --help` and Lucene searches do not need.

META_NAME = "vtrepro-pisa.json"
META_FORMAT = "vtrepro.pisa-index/1"
ENCODING = "block_simdbp"
ALGORITHM = "ranked_or_taat"
"""PISA's query algorithm with one thread (the module's last point); its lazy variant would drop the query weights."""
THREADED_ALGORITHM = "maxscore"
"""PISA's query algorithm with several threads: the bindings share one ``ranked_or_taat`` accumulator among
their threads, which then add into each other's scores (measured: 287 of 300 scifact runs wrong at k=1000)."""


def pisa_term(term: str) -> str:
    """The token PISA stores for ``term``: its UTF-8 bytes in hex, untouched by PISA's lowercasing."""
    return term.encode("utf-8").hex()


def read_pisa_meta(index_dir: str | Path) -> dict | None:
    """What :func:`build_pisa_index` recorded about a PISA index folder, or None when it holds none."""
    path = Path(index_dir) / META_NAME
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise VtreproError(f"{path}:{error.lineno}: corrupt ({error.msg}); delete the folder and build it again") from None
    return meta if isinstance(meta, dict) and meta.get("format") == META_FORMAT else None


def build_pisa_index(vectors_dir: str | Path, index_dir: str | Path,
                     expected: VectorSetSummary | None = None) -> dict:
    """PISA index of a JsonVectorCollection folder (checked as for Lucene unless ``expected`` summarizes
    it already), built beside ``index_dir`` (where killed builds' leftovers are removed first) and moved
    into place when complete; returns its metadata."""
    index_dir = Path(index_dir)
    if index_dir.is_file() or (index_dir.is_dir() and any(index_dir.iterdir()) and read_pisa_meta(index_dir) is None):
        raise VtreproError(f"{index_dir}: exists and is not a PISA index; refusing to replace it: remove it or "
                           "choose another PISA index folder")
    files = vector_files(vectors_dir)
    expected = expected or fingerprint_files(files)
    if not expected.count:
        raise VtreproError(f"{vectors_dir}: the vector files hold no documents; point at an encoded corpus")
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_builds(index_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.{os.getpid()}.", suffix=".tmp", dir=index_dir.parent))
    aside = staging.with_suffix(".old")
    try:
        meta = _write_index(files, staging, expected)
        if index_dir.exists():
            index_dir.rename(aside)
        staging.rename(index_dir)
        return meta
    finally:
        if aside.exists() and not index_dir.exists():  # the new index never arrived: the old one goes back
            aside.rename(index_dir)
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)


def _remove_dead_builds(index_dir: Path) -> None:
    """Remove what killed builds of ``index_dir`` left beside it.

    A build works in ``.<name>.<pid>.<random>.tmp`` and sets the index it replaces aside as
    ``.<name>.<pid>.<random>.old``; it removes both when it ends, exception or not, so only a killed build
    leaves them. Such a folder whose pid no longer runs is a leftover: its pid is in its name from its
    creation, so a live build's folder is never taken (a reused pid only keeps a leftover a while longer).
    A build killed between setting the old index aside and moving the new one in leaves no index: the
    old one is put back, as Lucene's builds do. Pids are this machine's: builds of one index from several
    machines sharing a disk are not told apart.
    """
    pattern = re.compile(rf"\.{re.escape(index_dir.name)}\.(\d{{1,9}})\.[^.]+\.(tmp|old)")  # pids fit a C int
    for path in sorted(index_dir.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if not match or not path.is_dir() or path.is_symlink() or process_alive(int(match[1])):
            continue
        if match[2] == "old" and not index_dir.exists() and read_pisa_meta(path) is not None:
            path.rename(index_dir)
            logger.warning(f"{index_dir}: put back the index an interrupted rebuild had moved aside")
        else:
            shutil.rmtree(path, ignore_errors=True)


def ensure_pisa_index(vectors_dir: str | Path, index_dir: str | Path) -> tuple[dict, float | None]:
    """The PISA index of ``vectors_dir`` at ``index_dir``, kept when it holds exactly these vectors (same
    fingerprint) and built otherwise: (its metadata, build seconds or None when kept)."""
    summary = fingerprint_files(vector_files(vectors_dir))
    meta = read_pisa_meta(index_dir)
    if meta is not None and meta["vectors_sha256"] == summary.sha256:
        return meta, None
    began = time.perf_counter()
    meta = build_pisa_index(vectors_dir, index_dir, expected=summary)
    return meta, time.perf_counter() - began


def _write_index(files: list[Path], folder: Path, expected: VectorSetSummary) -> dict:
    """PISA's binary collection (``inv.docs``, ``inv.freqs``, ``inv.sizes``: uint32 sequences, each list
    led by its length) and lexicons, then its compressed index and score bounds.

    Two passes over the vectors, so memory holds the vocabulary and a count per document, never the
    postings: the first counts each term's documents (and writes the document lexicon), the second writes
    every posting straight to its place in memory-mapped output files, documents in collection order."""
    terms = _count_terms(files, folder / "fwd.documents", expected.count)
    tokens = sorted(terms.ids)  # PISA's lexicon is searched by bisection
    rank = np.empty(len(tokens), dtype=np.int64)
    rank[[terms.ids[token] for token in tokens]] = np.arange(len(tokens))
    counts = np.asarray(terms.counts, dtype=np.int64)[np.argsort(rank)]  # by rank
    cursor = np.cumsum(counts + 1) - counts  # where each term's first posting goes (after its length)
    postings = int(counts.sum())
    doc_file = np.memmap(folder / "inv.docs", dtype=np.uint32, mode="w+", shape=(2 + postings + len(tokens),))
    freq_file = np.memmap(folder / "inv.freqs", dtype=np.uint32, mode="w+", shape=(postings + len(tokens),))
    doc_file[:2] = (1, len(terms.lengths))
    doc_file[2 + cursor - 1] = counts
    freq_file[cursor - 1] = counts
    with Progress(expected.count, "index (PISA)", "doc") as progress:
        for number, (_, _, _, vector) in enumerate(read_vectors(files)):
            ranks = rank[[terms.ids[pisa_term(term)] for term in vector]]
            places = cursor[ranks]
            doc_file[2 + places] = number
            freq_file[places] = np.fromiter(vector.values(), dtype=np.uint32, count=len(vector))
            cursor[ranks] += 1
            progress.update()
    doc_file.flush()
    freq_file.flush()
    del doc_file, freq_file  # unmapped before PISA reads the files
    np.concatenate(([len(terms.lengths)], terms.lengths)).astype(np.uint32).tofile(folder / "inv.sizes")  # unused by the scorer
    (folder / "fwd.terms").write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    with _native_output_quiet():
        pisathon = _pisathon()
        pisathon.build_binlex(str(folder / "fwd.terms"), str(folder / "fwd.termlex"))
        pisathon.build_binlex(str(folder / "fwd.documents"), str(folder / "fwd.doclex"))
        _prepare(folder)  # compresses the index and stores the score bounds, once
    meta = {"format": META_FORMAT, "vectors_sha256": expected.sha256, "documents": len(terms.lengths),
            "unique_terms": len(tokens), "total_terms": expected.total_impact, "max_impact": terms.max_impact,
            "encoding": ENCODING}
    write_json(folder / META_NAME, meta)
    return meta


class _TermCounts:
    """The first pass's findings: term -> id in order of appearance, documents per term id, terms per
    document, the largest impact."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.counts = array("q")
        self.lengths = array("I")
        self.max_impact = 0


def _count_terms(files: list[Path], documents_lexicon: Path, documents: int) -> _TermCounts:
    """Pass one: count each term's documents and write the document ids, one a line, in collection order."""
    terms = _TermCounts()
    with open(documents_lexicon, "w", encoding="utf-8") as lexicon, \
            Progress(documents, "index (PISA): count terms", "doc") as progress:
        for _, _, doc_id, vector in read_vectors(files):
            for term in vector:
                term_id = terms.ids.setdefault(pisa_term(term), len(terms.ids))
                if term_id == len(terms.counts):
                    terms.counts.append(0)
                terms.counts[term_id] += 1
            terms.lengths.append(len(vector))
            terms.max_impact = max(terms.max_impact, max(vector.values(), default=0))
            lexicon.write(f"{doc_id}\n")
            progress.update()
    return terms


@contextlib.contextmanager
def _native_output_quiet() -> Iterator[None]:
    """PISA's C++ logs and bars write to file descriptors 1 and 2: into a temporary file while it builds
    (shown when the build fails), unless ``--verbose``."""
    if verbose():
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        except BaseException:
            _restore(saved)
            log.seek(0)
            native_log = log.read().decode("utf-8", "replace").rstrip("\n")
            if native_log:
                logger.error(native_log)
            raise
        _restore(saved)


def _restore(saved: list[int]) -> None:
    for fd, copy in zip((1, 2), saved):
        os.dup2(copy, fd)
        os.close(copy)


def _pisathon():
    from pyterrier_pisa import _pisathon

    return _pisathon


def _prepare(index_dir: Path):
    """PISA's retrieval context over ``index_dir`` (quantized scorer, no stemmer, no stopwords)."""
    pisathon = _pisathon()
    context = pisathon.RetrievalContext()
    pisathon.prepare_index(context, str(index_dir), ENCODING, "quantized", "", quantize=0, stop_fname="")
    return context


def _checked_pisa_index(index_dir: str | Path) -> dict:
    meta = read_pisa_meta(index_dir)
    if meta is None:
        raise VtreproError(f"{index_dir}: not a PISA index (no {META_NAME}); add --vectors FOLDER to "
                           "'python -m vtrepro search --engine pisa' to build it there")
    return meta


def _pisa_queries(queries: Mapping[str, Mapping[str, int]], max_impact: int) -> list[dict[str, float]]:
    """Each query as PISA's bindings take it ({hex term: weight as a float}: they read it as a C double
    without converting), refused where PISA would not be exact."""
    converted = []
    for qid, vector in queries.items():
        check_query_weights(qid, vector, 1, "the PISA engine takes integer weights from 1 (quantize query vectors; "
                                            "drop zero weights)")
        check_exact_weights(qid, vector, max_impact)
        converted.append({pisa_term(term): float(weight) for term, weight in vector.items()})
    return converted


def _call(context, queries: list[dict[str, float]], depth: int, threads: int) -> tuple[int, np.ndarray, np.ndarray,
                                                                                   np.ndarray]:
    """One call of the bindings: (hits found, each hit's query index, document id, score), the arrays set
    aside for ``depth`` hits per query."""
    size = len(queries) * depth
    qidxs, docnos = np.empty(size, dtype=np.int32), np.empty(size, dtype=object)
    ranks, scores = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.float32)
    algorithm = ALGORITHM if threads == 1 else THREADED_ALGORITHM
    found = _pisathon().retrieve(context, algorithm, list(enumerate(queries)), k=depth, threads=threads,
                                 query_weighted=1, pretokenised=True, result_qidxs=qidxs, result_docnos=docnos,
                                 result_ranks=ranks, result_scores=scores)
    return found, qidxs, docnos, scores


def _retrieve(context, queries: list[dict[str, float]], depth: int, threads: int) -> list[list[tuple[str, float]]]:
    """PISA's top ``depth`` of each query, by score, ties by document id. The bindings write each query's hits
    as one run of positions, ordered by score (then PISA's internal order), so the arrays are cut where the
    query index changes and only the runs of tied scores are reordered."""
    found, qidxs, docnos, scores = _call(context, queries, depth, threads)
    hits: list[list[tuple[str, float]]] = [[] for _ in queries]
    query_of, documents, values = qidxs[:found], docnos[:found], scores[:found]
    starts = [0, *(np.flatnonzero(query_of[1:] != query_of[:-1]) + 1).tolist()]
    for start, stop in zip(starts, [*starts[1:], found]):
        if stop > start:
            hits[query_of[start]] = _by_score_then_id(documents[start:stop].tolist(), values[start:stop])
    return hits


def _by_score_then_id(documents: list[str], scores: np.ndarray) -> list[tuple[str, float]]:
    """One query's hits as PISA ranked them (``scores`` not increasing), each run of equal scores ordered by
    document id: the order of :func:`vtrepro.search.runs.top_hits`, found without sorting every hit."""
    if len(scores) > 1 and np.any(scores[1:] > scores[:-1]):
        raise RuntimeError("PISA returned hits out of score order")
    edges = np.flatnonzero(scores[1:] != scores[:-1]) + 1
    for start, stop in zip([0, *edges.tolist()], [*edges.tolist(), len(documents)]):
        if stop - start > 1:
            documents[start:stop] = sorted(documents[start:stop])
    return list(zip(documents, scores.tolist()))


def _search_setup(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]],
                  k: int) -> tuple[object, list[dict[str, float]], int, int]:
    """What every search of ``index_dir`` starts from: PISA's retrieval context, the queries as the bindings
    take them (checked), ``k`` cut to the index's documents, and their number."""
    meta = _checked_pisa_index(index_dir)
    k = hits_per_query(k, meta["documents"], len(queries))
    converted = _pisa_queries(queries, meta["max_impact"])
    return _prepare(Path(index_dir)), converted, k, meta["documents"]


def bindings_seconds_per_query(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int) -> float:
    """PISA's own time per query, the limit of :func:`search_pisa` with one thread: the bindings' one call for
    every query at the first depth :func:`search_pisa` asks for (one thread, best of two), without any Python
    per query. Includes what the bindings do in C++: reading each query's terms, the search, PISA's sort of
    its hits and their document ids as Python strings."""
    context, converted, k, _ = _search_setup(index_dir, queries, k)
    depth = k + 2
    best = float("inf")
    for _ in range(2):
        began = time.perf_counter()
        _call(context, converted, depth, 1)
        best = min(best, time.perf_counter() - began)
    return best / max(len(converted), 1)


def search_pisa(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int = 1000,
                threads: int = DEFAULT_THREADS, remove_query_id: bool = True, timing: SearchTiming | None = None) -> Run:
    """Impact search with PISA: the run :func:`vtrepro.search.lucene.search_impact` gives for the same
    vectors; ``timing`` as there (per query with one thread; all queries in one call with more)."""
    qids = list(queries)
    context, converted, k, documents = _search_setup(index_dir, queries, k)
    wanted = k + int(remove_query_id)
    timing = timing if timing is not None else SearchTiming()
    timing.threads, timing.queries, timing.latencies = threads, len(qids), []
    run: Run = {}

    def search(positions: list[int], depth: int) -> list[list[tuple[str, float]]]:
        return _retrieve(context, [converted[position] for position in positions], depth, threads)

    started = time.perf_counter()
    with Progress(len(qids), "search (PISA)", "query") as progress:
        if threads == 1:  # each query timed to its run, as Lucene's
            for position, qid in enumerate(qids):
                began = time.perf_counter()
                hits = search_until_complete(search, [position], wanted, documents)[0]
                run[qid] = top_hits(qid, hits, k, remove_query_id, ranked=True)
                timing.latencies.append(time.perf_counter() - began)
                progress.update()
        else:
            found = search_until_complete(search, list(range(len(qids))), wanted, documents, progress.update)
            run.update((qid, top_hits(qid, hits, k, remove_query_id, ranked=True)) for qid, hits in zip(qids, found))
    timing.seconds = time.perf_counter() - started
    return run
