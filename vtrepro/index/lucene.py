"""Build Lucene indexes with Anserini: impact indexes from JSON vectors, BM25 indexes from text.

``python -m vtrepro.index --vectors ENCODED_DIR --index INDEX_DIR`` indexes an encoded corpus
(or any Pyserini ``JsonVectorCollection`` folder) and checks the index against its manifest.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Iterable, Iterator

from vtrepro.core.cli import add_threads, cli_entry, command_parser, verbose
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output_folder, process_alive, write_jsonl
from vtrepro.core.java import java_class, java_errors, start_jvm
from vtrepro.core.progress import Progress
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_files, vector_files
from vtrepro.encode.writer import MANIFEST_NAME, load_manifest, vectors_folder

# jnius is imported once the JVM is started with Anserini's classpath (core.java), on purpose.


def _run_indexer(collection: str, input_dir: Path, index_dir: Path, work: Path, threads: int, extra: list[str],
                 source: str | Path, documents: int, total_terms: int | None = None,
                 allow_empty: bool = False) -> dict[str, int]:
    """Index ``input_dir`` into ``work``, check the result, then swap it into ``index_dir``; returns its stats.

    The index must hold exactly ``documents`` (and ``total_terms``, when given): Anserini skips what
    it cannot parse and goes on, so a shortfall is an error. With ``allow_empty`` documents without
    text are skipped, as Anserini does for BM25. On any failure an existing index stays as it was.
    """
    staging = work / "index"
    args = [
        "-collection", collection,
        "-input", str(input_dir),
        "-index", str(staging),
        "-generator", "DefaultLuceneDocumentGenerator",
        "-threads", str(threads),
        *([] if verbose() else ["-quiet"]),
        *extra,
    ]
    counters = _index_with_progress(args, documents, source)
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
        print(f"index: {empty} document(s) without text not indexed (Anserini skips them)", file=sys.stderr)
    _swap_into_place(staging, index_dir, work / "old")
    return stats


def _index_with_progress(args: list[str], documents: int, source: str | Path) -> dict[str, int]:
    """Run Anserini's IndexCollection, following its document counter from a second thread."""
    start_jvm()
    import jnius  # only once the JVM is started with Anserini's classpath

    array_list = java_class("java.util.ArrayList")()
    for arg in args:
        array_list.add(arg)
    with java_errors(source, "check the input files"):
        options = java_class("io.anserini.index.IndexCollection$Args")()
        java_class("org.kohsuke.args4j.CmdLineParser")(options).parseArgument(array_list)
        indexer = java_class("io.anserini.index.IndexCollection")(options)
    counters = indexer.getCounters()
    finished = threading.Event()
    with Progress(documents, "index", "doc") as progress:
        def follow() -> None:
            try:
                while not finished.wait(0.5):
                    progress.update(counters.indexed.get() - progress.done)
            finally:
                jnius.detach()

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        try:
            with java_errors(source, "Anserini could not index it; check the input files"):
                indexer.run()
        finally:
            finished.set()
            follower.join()
        progress.update(counters.indexed.get() - progress.done)
    return {name: int(getattr(counters, name).get()) for name in ("indexed", "empty", "unindexable", "skipped", "errors")}


@contextlib.contextmanager
def _work_folder(index_dir: Path) -> Iterator[Path]:
    """This process's folder beside ``index_dir`` for the indexer's input, the new index and the old one.

    Folders that killed runs left are cleaned first; if one was killed between moving the old index
    aside and moving the new one in, the old index is put back.
    """
    check_index_target(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    _recover_abandoned(index_dir)
    work = index_dir.with_name(f".{index_dir.name}.work-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_index_target(index_dir: Path) -> None:
    """``index_dir`` may be written only when it is new, empty or a Lucene index (which is then replaced)."""
    if index_dir.is_file():
        raise VtreproError(f"{index_dir}: is a file; choose another --index folder")
    if index_dir.is_dir() and any(index_dir.iterdir()) and not is_lucene_index(index_dir):
        raise VtreproError(f"{index_dir}: exists and is not a Lucene index; refusing to replace it: "
                           "remove it or choose another --index folder")


def _recover_abandoned(index_dir: Path) -> None:
    for work in index_dir.parent.glob(f".{glob.escape(index_dir.name)}.work-*"):
        pid = work.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid)):
            continue
        old = work / "old"
        if not index_dir.exists() and is_lucene_index(old):
            old.rename(index_dir)
            print(f"{index_dir}: put back the index an interrupted rebuild had moved aside", file=sys.stderr)
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


def is_lucene_index(folder: str | Path) -> bool:
    """Whether ``folder`` holds a Lucene index (a ``segments_N`` file)."""
    return any(Path(folder).glob("segments_*"))


def build_impact_index(vectors_dir: str | Path, index_dir: str | Path, threads: int = 1,
                       expected: VectorSetSummary | None = None) -> dict[str, int]:
    """Impact index (``-impact -pretokenized``) of a JsonVectorCollection folder; returns its stats.

    Every record is checked first (:mod:`vtrepro.encode.fingerprint`: what Anserini would silently change
    is refused) unless ``expected`` already summarizes the folder's checked vectors; only the
    vector files are given to Anserini (never hidden temporary files), and the index must hold
    exactly their documents and impact total. One thread keeps Lucene's internal document order
    equal to the collection's, so tied scores at the top-k boundary are resolved the same way on every run.
    """
    files = vector_files(vectors_dir)
    expected = expected or fingerprint_files(files)
    with _work_folder(Path(index_dir)) as work:
        linked = work / "input"
        linked.mkdir()
        for path in files:
            os.symlink(path.resolve(), linked / path.name)
        return _run_indexer("JsonVectorCollection", linked, Path(index_dir), work, threads,
                            ["-impact", "-pretokenized"], vectors_dir, expected.count, expected.total_impact)


def build_bm25_index(documents: Iterable[tuple[str, str]], index_dir: str | Path, threads: int = 1) -> dict[str, int]:
    """BM25 index (Anserini's default analyzer) of ``(doc_id, contents)`` pairs; returns its stats.

    Documents without text are not indexed (Anserini skips them, as in Pyserini's BM25 indexes)."""
    with _work_folder(Path(index_dir)) as work:
        count = write_jsonl(work / "input" / "docs.jsonl",
                            ({"id": doc_id, "contents": contents} for doc_id, contents in documents))
        return _run_indexer("JsonCollection", work / "input", Path(index_dir), work, threads, ["-storeRaw"],
                            f"{index_dir} (BM25 documents)", count, allow_empty=True)


def index_stats(index_dir: str | Path) -> dict[str, int]:
    """Anserini's index statistics: documents, non_empty_documents, unique_terms, total_terms."""
    if not is_lucene_index(index_dir):
        raise VtreproError(f"{index_dir}: not a Lucene index; build it with 'python -m vtrepro.index'")
    utils = java_class("io.anserini.index.IndexReaderUtils")
    with java_errors(index_dir, "not a readable Lucene index: rebuild it with 'python -m vtrepro.index'"):
        reader = utils.getReader(str(index_dir))
    try:
        stats = utils.getIndexStats(reader)
        return {key: int(stats.get(key)) for key in ("documents", "non_empty_documents", "unique_terms", "total_terms")}
    finally:
        reader.close()


def check_against_manifest(stats: dict[str, int], manifest: dict) -> None:
    """Vectors (or their index) must hold exactly the manifest's documents and total impact."""
    expected = {"documents": manifest["documents"], "total_terms": manifest["total_terms"]}
    for key, value in expected.items():
        if stats[key] != value:
            raise VtreproError(
                f"found {key}={stats[key]} but the encoded corpus manifest says {value}: "
                "the vectors folder changed since encoding; re-encode"
            )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("index", __doc__)
    parser.add_argument("--vectors", required=True, type=Path,
                        help="encoded corpus folder (with manifest.json) or a folder of JsonVectorCollection *.jsonl")
    parser.add_argument("--index", required=True, type=Path,
                        help="output index folder (an existing index is replaced once the new one is complete)")
    add_threads(parser, "indexing threads (only 1 keeps the document order, and so tie order, fixed)")
    args = parser.parse_args(argv)

    check_index_target(args.index)
    check_output_folder(args.index.parent)
    manifest = load_manifest(args.vectors)
    folder = vectors_folder(args.vectors)
    summary = fingerprint_files(vector_files(folder))
    if manifest is not None:
        if not manifest.get("complete"):
            raise VtreproError(f"{args.vectors / MANIFEST_NAME}: the encoding is not finished; "
                               "rerun the same 'python -m vtrepro.encode' command to complete it")
        check_against_manifest({"documents": summary.count, "total_terms": summary.total_impact}, manifest)
    stats = build_impact_index(folder, args.index, args.threads, expected=summary)
    print(json.dumps(stats))
    return 0
