"""Build Lucene indexes with Anserini: impact indexes from JSON vectors, BM25 indexes from text.

``python -m vtrepro index --vectors ENCODED_DIR --output INDEX_DIR`` indexes an encoded corpus
(or any Pyserini ``JsonVectorCollection`` folder) and checks the index against its manifest;
``--engine pisa`` builds a PISA index of the same vectors instead (:mod:`vtrepro.index.pisa`).
"""
from __future__ import annotations

import contextlib
import errno
import glob
import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output, process_alive
from vtrepro.core.java import describe_causes, java_class, java_errors, java_path, logged_java_errors, start_jvm
from vtrepro.core.log import verbose
from vtrepro.core.progress import Progress
from vtrepro.encode.fingerprint import VectorSetSummary
from vtrepro.encode.reader import count_full_read, vector_files
from vtrepro.index.lucene_checks import index_stats, is_lucene_index
from vtrepro.index.parts import POLL_S, Piece, fingerprint_in_parts, in_processes, piece_inputs, split_pieces

logger = logging.getLogger(__name__)

# jnius is imported once the JVM is started with Anserini's classpath (core.java), on purpose.

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_MESSAGES = tuple(os.strerror(number) for number in DISK_FULL_ERRNOS)
"""How the OS words a full disk or quota, in Python's errors and in Java's (the same C library text)."""


@dataclass(frozen=True)
class IndexInput:
    """What an index must hold: Anserini skips what it cannot parse and goes on, so a shortfall is an error."""

    source: str | Path  # the input, as messages name it
    documents: int  # documents the index must hold
    total_terms: int | None = None  # the impact total it must hold, when known
    allow_empty: bool = False  # documents without text are skipped, as Anserini does for BM25


def _run_indexer(collection: str, input_dir: Path, index_dir: Path, work: Path, threads: int, extra: list[str],
                 holds: IndexInput) -> dict[str, int]:
    """Index ``input_dir`` into ``work``, check the result against what it ``holds``, then swap it into
    ``index_dir``; returns its stats. On any failure an existing index stays as it was."""
    staging = work / "index"
    with Progress(holds.documents, "index", "doc") as progress:
        counters = _anserini_build(collection, input_dir, staging, threads, extra, holds.source, index_dir,
                                   lambda indexed: progress.update(indexed - progress.done))
    return _checked_swap(staging, index_dir, work, counters, holds)


def _anserini_build(collection: str, input_dir: Path, staging: Path, threads: int, extra: list[str],
                    source: str | Path, index_dir: Path, report: Callable[[int], None]) -> dict[str, int]:
    """Anserini's IndexCollection from ``input_dir`` into ``staging``; returns its counters. ``report`` is told
    the documents indexed so far while it runs; a build that left no index is one line, from what Java logged."""
    args = [
        "-collection", collection,
        "-input", str(input_dir),
        "-index", str(staging),
        "-generator", "DefaultLuceneDocumentGenerator",
        "-threads", str(threads),
        *([] if verbose() else ["-quiet"]),
        *extra,
    ]
    with logged_java_errors() as logged:
        counters = _index_with_progress(args, source, index_dir, report)
    if not is_lucene_index(staging):
        raise _not_built(index_dir, logged)
    return counters


def _checked_swap(staging: Path, index_dir: Path, work: Path, counters: dict[str, int], holds: IndexInput) -> dict[str, int]:
    """Check the index at ``staging`` against what it ``holds`` (and what Anserini's ``counters`` say it
    dropped), then swap it into ``index_dir``; returns its stats."""
    source, documents, total_terms, allow_empty = holds.source, holds.documents, holds.total_terms, holds.allow_empty
    stats = index_stats(staging)
    empty = counters["empty"] if allow_empty else 0
    dropped = {name: counters[name] for name in ("empty", "unindexable", "skipped", "errors")
               if counters[name] and not (name == "empty" and allow_empty)}
    expected = {"documents": documents - empty, **({"total_terms": total_terms} if total_terms is not None else {})}
    found = {key: stats[key] for key in expected}
    if dropped or found != expected:
        raise VtreproError(f"{source}: Anserini indexed {found} but the input holds {expected}"
                           f"{f' ({dropped} documents dropped)' if dropped else ''}; "
                           f"the previous index at {index_dir} is kept")
    if empty:
        logger.warning(f"index: {empty} document(s) without text not indexed (Anserini skips them)")
    _swap_into_place(staging, index_dir, work / "old")
    return stats


COUNTERS = ("indexed", "empty", "unindexable", "skipped", "errors")
"""Anserini's IndexCollection counters, by name."""


def _index_with_progress(args: list[str], source: str | Path, index_dir: Path,
                         report: Callable[[int], None]) -> dict[str, int]:
    """Run Anserini's IndexCollection, telling ``report`` its document counter from a second thread."""
    start_jvm()
    import jnius  # only once the JVM is started with Anserini's classpath

    array_list = java_class("java.util.ArrayList")()
    for arg in args:
        array_list.add(arg)
    with java_errors(source, "check the input files", lambda causes: _disk_full_reason(index_dir, causes)):
        options = java_class("io.anserini.index.IndexCollection$Args")()
        java_class("org.kohsuke.args4j.CmdLineParser")(options).parseArgument(array_list)
        indexer = java_class("io.anserini.index.IndexCollection")(options)
    counters = indexer.getCounters()
    finished = threading.Event()

    def follow() -> None:
        try:
            while not finished.wait(POLL_S):
                report(int(counters.indexed.get()))
        finally:
            jnius.detach()

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        with java_errors(source, "Anserini could not index it; check the input files",
                         lambda causes: _disk_full_reason(index_dir, causes)):
            indexer.run()
    finally:
        finished.set()
        follower.join()
    report(int(counters.indexed.get()))
    return {name: int(getattr(counters, name).get()) for name in COUNTERS}


def _kept(index_dir: Path) -> str:
    """What a failed build left at ``index_dir``: the previous index, or nothing."""
    return f"the previous index at {index_dir} is kept" if is_lucene_index(index_dir) else "no index was written"


def _disk_full_reason(index_dir: Path, messages: list[str]) -> str | None:
    """``"reason; fix"`` when Java's or the OS's ``messages`` say the disk (or quota) is full, else None."""
    full = next((words for words in DISK_FULL_MESSAGES if any(words in message for message in messages)), None)
    if full is None:
        return None
    return (f"the disk holding {index_dir} is full ({full}) while the new index was written; {_kept(index_dir)}; "
            "free disk space or build the index on another disk, and rerun")


def _not_built(index_dir: Path, logged: list[str]) -> VtreproError:
    """The error for a build after which Anserini left no index, from the errors it logged (and swallowed)."""
    disk_full = _disk_full_reason(index_dir, logged)
    if disk_full is not None:
        return VtreproError(f"{index_dir}: {disk_full}")
    first = next((line for line in logged if "Exception" in line or "Error" in line), logged[0] if logged else None)
    cause = f" ({describe_causes([first])})" if first else ""
    return VtreproError(f"{index_dir}: Anserini did not finish the new index{cause}; {_kept(index_dir)}; "
                        "check the input files and the disk, then rerun (--verbose shows Anserini's log)")


@contextlib.contextmanager
def _work_folder(index_dir: Path) -> Iterator[Path]:
    """This process's folder beside ``index_dir`` for the indexer's input, the new index and the old one.

    Folders that killed runs left are cleaned first; if one was killed between moving the old index
    aside and moving the new one in, the old index is put back.
    """
    check_index_target(index_dir)
    work = index_dir.with_name(f".{index_dir.name}.work-{os.getpid()}")
    try:
        index_dir.parent.mkdir(parents=True, exist_ok=True)
        _recover_abandoned(index_dir)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        yield work
    except OSError as error:
        disk_full = _disk_full_reason(index_dir, [error.strerror or ""]) if error.errno in DISK_FULL_ERRNOS else None
        if disk_full is None:
            raise
        raise VtreproError(f"{index_dir}: {disk_full}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_index_target(index_dir: Path) -> None:
    """``index_dir`` may be written only when it is new, an empty folder or a Lucene index (which is then
    replaced), never a file, device or FIFO (:func:`vtrepro.core.io.check_output`), and Java must be able to name it."""
    check_output(index_dir, kind="folder")
    if index_dir.is_dir() and any(index_dir.iterdir()) and not is_lucene_index(index_dir):
        raise VtreproError(f"{index_dir}: exists and is not a Lucene index; refusing to replace it: "
                           "remove it or choose another --output folder")
    java_path(index_dir)


def _recover_abandoned(index_dir: Path) -> None:
    for work in index_dir.parent.glob(f".{glob.escape(index_dir.name)}.work-*"):
        pid = work.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid)):
            continue
        old = work / "old"
        if not index_dir.exists() and is_lucene_index(old):
            old.rename(index_dir)
            logger.warning(f"{index_dir}: put back the index an interrupted rebuild had moved aside")
        shutil.rmtree(work, ignore_errors=True)


def _swap_into_place(staging: Path, index_dir: Path, old: Path) -> None:
    """Move an existing index to ``old``, then ``staging`` to ``index_dir`` (putting the old one back on failure)."""
    if index_dir.exists():
        index_dir.rename(old)
    try:
        staging.rename(index_dir)
    except OSError:
        if old.exists():
            old.rename(index_dir)
        raise




IMPACT_OPTIONS = ["-impact", "-pretokenized"]
MIN_PART_BYTES = 32 * 2**20
"""The least vector bytes worth a process of their own (about 8,000 documents at splade-tiny's density, 13 s of
one build thread): a part's JVM takes about 2 s to start and load Anserini, so smaller collections take fewer
processes (scifact's 26 MB: one)."""
ANSERINI_MEMORY_BUFFER_MB = 4096
"""Anserini's default ``-memoryBuffer``: the RAM one index writer fills before it writes a segment."""


def build_impact_index(vectors_dir: str | Path, index_dir: str | Path, threads: int = DEFAULT_THREADS,
                       expected: VectorSetSummary | None = None, min_part_bytes: int = MIN_PART_BYTES) -> dict[str, int]:
    """Impact index (``-impact -pretokenized``) of a JsonVectorCollection folder; returns its stats.

    Every record is checked first (:mod:`vtrepro.encode.reader`: what Anserini would silently change
    is refused) unless ``expected`` already summarizes the folder's checked vectors; only the
    vector files are given to Anserini (never hidden temporary files), and the index must hold
    exactly their documents and impact total.

    ``threads`` are processes: the vectors are split into that many contiguous parts of about equal bytes, a
    large plain file at line boundaries (:func:`vtrepro.index.parts.split_pieces`; never parts of under
    ``min_part_bytes``; a range reaches Anserini through a named pipe, no copy on disk), each indexed by its own
    JVM with one Anserini thread, and the parts' segments are
    then added to one index (Lucene's ``addIndexes``, which copies them: the disk holds the index twice
    while it does). Lucene's internal document order depends on the split, and no run does
    (:func:`vtrepro.search.runs.search_until_complete`).
    """
    files = vector_files(vectors_dir)
    expected = expected or fingerprint_in_parts(files, threads)
    holds = IndexInput(vectors_dir, expected.count, expected.total_impact)
    parts = split_pieces(files, threads, min_part_bytes) if files else [[]]
    with _work_folder(Path(index_dir)) as work:
        count_full_read(files, "Anserini's index build")
        if len(parts) == 1:
            return _run_indexer("JsonVectorCollection", _linked(files, work / "input"), Path(index_dir), work, 1,
                                IMPACT_OPTIONS, holds)
        divided = len({piece.path for part in parts for piece in part if not piece.whole})
        logger.info(f"index: {len(files)} vector files indexed by {len(parts)} processes"
                    + (f" ({divided} divided at line boundaries)" if divided else ""))
        indexed = get_context("spawn").Array("q", len(parts), lock=False)
        part_indexes = [work / f"part-{number}" for number in range(len(parts))]
        buffer_mb = _part_memory_buffer_mb(len(parts))
        with Progress(holds.documents, "index", "doc") as progress:
            def poll() -> None:
                progress.update(sum(indexed) - progress.done)

            counted = in_processes(_index_part, [(number, part, part_index, str(holds.source), str(index_dir), buffer_mb)
                                                 for number, (part, part_index) in enumerate(zip(parts, part_indexes))],
                                   initializer=_share_counters, initargs=(indexed,), poll=poll)
            poll()
        counters = {name: sum(part[name] for part in counted) for name in COUNTERS}
        _add_indexes(part_indexes, work / "index")
        return _checked_swap(work / "index", Path(index_dir), work, counters, holds)


def _linked(files: list[Path], folder: Path) -> Path:
    """A folder of links to ``files`` (Anserini reads every file of the folder it is given)."""
    folder.mkdir()
    for path in files:
        os.symlink(path.resolve(), folder / path.name)
    return folder


def _part_memory_buffer_mb(parts: int) -> int:
    """Each part's ``-memoryBuffer``: Anserini's default, less where the parts' buffers together would pass a
    quarter of the machine's memory (each JVM's default heap), never under 256 MB."""
    physical_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return max(256, min(ANSERINI_MEMORY_BUFFER_MB, physical_mb // (4 * parts)))


_indexed_by_part: list[int] | None = None
"""In a part's process: the documents each part has indexed so far, shared with the parent."""


def _share_counters(indexed: list[int]) -> None:
    global _indexed_by_part
    _indexed_by_part = indexed


def _index_part(number: int, pieces: list[Piece], part_index: Path, source: str, index_dir: str,
                buffer_mb: int) -> dict[str, int]:
    """In a spawned process: index one part's ``pieces`` (whole files, ranges through named pipes this process
    fills) into ``part_index`` with one Anserini thread."""
    def report(indexed: int) -> None:
        if _indexed_by_part is not None:
            _indexed_by_part[number] = indexed

    with piece_inputs(pieces, part_index.with_name(f"{part_index.name}-input")) as inputs:
        return _anserini_build("JsonVectorCollection", inputs, part_index, 1,
                               [*IMPACT_OPTIONS, "-memoryBuffer", str(buffer_mb)], source, Path(index_dir), report)


def _add_indexes(part_indexes: list[Path], index: Path) -> None:
    """One index at ``index`` holding every segment of ``part_indexes``, in their order (Lucene's
    ``addIndexes`` copies the segments; with no merge policy nothing is merged after, where the default policy
    would merge ten or more parts' segments)."""
    fs_directory, paths = java_class("org.apache.lucene.store.FSDirectory"), java_class("java.nio.file.Paths")
    config = java_class("org.apache.lucene.index.IndexWriterConfig")()
    config.setOpenMode(java_class("org.apache.lucene.index.IndexWriterConfig$OpenMode").CREATE)
    config.setMergePolicy(java_class("org.apache.lucene.index.NoMergePolicy").INSTANCE)  # addIndexes would merge 10+
    sources = [fs_directory.open(paths.get(java_path(part))) for part in part_indexes]
    with java_errors(index, "the parts' indexes could not be joined; check the disk",
                     lambda causes: _disk_full_reason(index, causes)):
        writer = java_class("org.apache.lucene.index.IndexWriter")(fs_directory.open(paths.get(java_path(index))), config)
        try:
            writer.addIndexes(*sources)
            writer.commit()
        finally:
            writer.close()
            for directory in sources:
                directory.close()


def build_bm25_index(documents: Iterable[tuple[str, str]], index_dir: str | Path,
                     threads: int = DEFAULT_THREADS) -> dict[str, int]:
    """BM25 index (Anserini's default analyzer) of ``(doc_id, contents)`` pairs; returns its stats.

    The documents go to Anserini in ``threads`` files, dealt in turn, one for each of its threads (it indexes
    a file per thread). Documents without text are not indexed (Anserini skips them, as in Pyserini's BM25
    indexes)."""
    with _work_folder(Path(index_dir)) as work:
        count = _deal_documents(documents, work / "input", threads)
        return _run_indexer("JsonCollection", work / "input", Path(index_dir), work, threads, ["-storeRaw"],
                            IndexInput(f"{index_dir} (BM25 documents)", count, allow_empty=True))


PRETOKENIZED_OPTIONS = ["-pretokenized", "-storeRaw"]
MAX_TERM_CHARS = 255
"""The longest term Lucene's ``WhitespaceAnalyzer`` (``-pretokenized``) keeps whole, in UTF-16 code units: it cuts
a longer run of non-space characters into several terms."""


def check_terms(what: str, terms: Sequence[str]) -> Sequence[str]:
    """``terms`` when each is a non-empty string without whitespace of at most :data:`MAX_TERM_CHARS` UTF-16 units,
    so that Lucene's whitespace analysis gives back exactly these terms; else one line naming ``what`` (a
    document or query) and the first bad term. A string in place of the list is refused (its characters would be
    the terms). Whitespace is what Python's ``str.isspace`` says, which holds everything Java's
    ``Character.isWhitespace`` splits on (and a few more: no-break spaces, U+0085)."""
    if isinstance(terms, (str, bytes)):
        raise VtreproError(f"{what}: terms must be a list of strings, not one {type(terms).__name__} "
                           f"({str(terms)[:40]!r}); split it into its terms")
    for position, term in enumerate(terms):
        problem = (f"is a {type(term).__name__}, not a string" if not isinstance(term, str) else
                   "is empty" if not term else
                   "holds whitespace" if any(character.isspace() for character in term) else
                   f"is longer than {MAX_TERM_CHARS} UTF-16 units (Lucene would cut it)"
                   if len(term.encode("utf-16-le", "surrogatepass")) // 2 > MAX_TERM_CHARS else None)
        if problem:
            raise VtreproError(f"{what}: term {position} ({str(term)[:40]!r}) {problem}; pretokenized terms must be "
                               f"non-empty, without whitespace, at most {MAX_TERM_CHARS} characters")
    return terms


def build_pretokenized_bm25_index(documents: Iterable[tuple[str, Sequence[str]]], index_dir: str | Path,
                                  threads: int = DEFAULT_THREADS) -> dict[str, int]:
    """BM25 index of ``(doc_id, terms)`` pairs whose terms are taken as they are; returns its stats (as
    :func:`build_bm25_index`: ``documents``, ``non_empty_documents``, ``unique_terms``, ``total_terms``).

    The terms are joined by single spaces and Anserini indexes them with ``-pretokenized`` (Lucene's
    ``WhitespaceAnalyzer``: no lowercasing, stemming or stopwords; ``Apple`` and ``apple`` are two terms), raw
    JSON stored as :func:`build_bm25_index` does; search it with
    :func:`vtrepro.search.lucene.search_pretokenized_bm25`. A term that is not a non-empty string without
    whitespace of at most :data:`MAX_TERM_CHARS` characters is refused (:func:`check_terms`: one line naming
    the document), and no index is written. A document with no terms is not indexed, as
    :func:`build_bm25_index` skips a document without text (Anserini skips it; one warning line counts them):
    it is in no run and in neither ``documents`` nor BM25's document count."""
    def joined() -> Iterator[tuple[str, str]]:
        for doc_id, terms in documents:
            yield doc_id, " ".join(check_terms(f"document '{doc_id}'", terms))

    with _work_folder(Path(index_dir)) as work:
        count = _deal_documents(joined(), work / "input", threads)
        return _run_indexer("JsonCollection", work / "input", Path(index_dir), work, threads, PRETOKENIZED_OPTIONS,
                            IndexInput(f"{index_dir} (pretokenized BM25 documents)", count, allow_empty=True))


def _deal_documents(documents: Iterable[tuple[str, str]], folder: Path, parts: int) -> int:
    """Write ``(doc_id, contents)`` pairs as JsonCollection records into ``parts`` files in ``folder``, one
    document to each file in turn; returns how many were written."""
    folder.mkdir()
    count = 0
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(folder / f"docs-{part:04d}.jsonl", "w", encoding="utf-8"))
                 for part in range(parts)]
        for count, (doc_id, contents) in enumerate(documents, start=1):
            files[count % parts].write(json.dumps({"id": doc_id, "contents": contents}, ensure_ascii=False) + "\n")
    return count
