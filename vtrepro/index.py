"""Build Lucene indexes with Anserini: impact indexes from JSON vectors, BM25 indexes from text.

``python -m vtrepro.index --vectors ENCODED_DIR --index INDEX_DIR`` indexes an encoded corpus
(or any Pyserini ``JsonVectorCollection`` folder) and checks the index against its manifest.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterable

from vtrepro.cli import cli_entry
from vtrepro.errors import VtreproError
from vtrepro.io import atomic_write
from vtrepro.java import java_class


def _run_indexer(collection: str, input_dir: Path, index_dir: Path, threads: int, extra: list[str]) -> None:
    """Index into a temporary folder beside ``index_dir`` and move it into place when complete."""
    index_dir = Path(index_dir)
    if index_dir.exists():
        shutil.rmtree(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.", dir=index_dir.parent))
    try:
        args = [
            "-collection", collection,
            "-input", str(input_dir),
            "-index", str(staging),
            "-generator", "DefaultLuceneDocumentGenerator",
            "-threads", str(threads),
            "-quiet",
            *extra,
        ]
        java_class("io.anserini.index.IndexCollection").main(args)
        staging.rename(index_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build_impact_index(vectors_dir: str | Path, index_dir: str | Path, threads: int = 1) -> dict[str, int]:
    """Impact index (``-impact -pretokenized``) of a JsonVectorCollection folder; returns its stats.

    One thread keeps Lucene's internal document order equal to the collection's, so tied scores
    at the top-k boundary are resolved the same way on every run.
    """
    vectors_dir = Path(vectors_dir)
    if not any(vectors_dir.glob("*.jsonl")):
        raise VtreproError(f"{vectors_dir}: no *.jsonl vector files to index; run 'python -m vtrepro.encode' first")
    _run_indexer("JsonVectorCollection", vectors_dir, Path(index_dir), threads, ["-impact", "-pretokenized"])
    return index_stats(index_dir)


def build_bm25_index(documents: Iterable[tuple[str, str]], index_dir: str | Path, threads: int = 1) -> dict[str, int]:
    """BM25 index (Anserini's default analyzer) of ``(doc_id, contents)`` pairs; returns its stats."""
    index_dir = Path(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".bm25-input.", dir=index_dir.parent) as collection_dir:
        with atomic_write(Path(collection_dir) / "docs.jsonl") as handle:
            for doc_id, contents in documents:
                handle.write(json.dumps({"id": doc_id, "contents": contents}, ensure_ascii=False) + "\n")
        _run_indexer("JsonCollection", Path(collection_dir), index_dir, threads, ["-storeRaw"])
    return index_stats(index_dir)


def index_stats(index_dir: str | Path) -> dict[str, int]:
    """Anserini's index statistics: documents, non_empty_documents, unique_terms, total_terms."""
    if not (Path(index_dir) / "segments_1").exists() and not any(Path(index_dir).glob("segments_*")):
        raise VtreproError(f"{index_dir}: not a Lucene index; build it with 'python -m vtrepro.index'")
    utils = java_class("io.anserini.index.IndexReaderUtils")
    reader = utils.getReader(str(index_dir))
    try:
        stats = utils.getIndexStats(reader)
        return {key: int(stats.get(key)) for key in ("documents", "non_empty_documents", "unique_terms", "total_terms")}
    finally:
        reader.close()


def check_against_manifest(stats: dict[str, int], manifest: dict) -> None:
    """The index must hold exactly the manifest's documents and total impact."""
    expected = {"documents": manifest["documents"], "total_terms": manifest["total_terms"]}
    for key, value in expected.items():
        if stats[key] != value:
            raise VtreproError(
                f"index has {key}={stats[key]} but the encoded corpus manifest says {value}: "
                "the vectors folder changed or indexing dropped documents; re-encode and re-index"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtrepro.index", description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", required=True, type=Path,
                        help="encoded corpus folder (with manifest.json) or a folder of JsonVectorCollection *.jsonl")
    parser.add_argument("--index", required=True, type=Path, help="output index folder (replaced if present)")
    parser.add_argument("--threads", type=int, default=1, help="indexing threads (1 keeps runs tie-stable)")
    args = parser.parse_args(argv)

    from vtrepro.encode import load_manifest, vectors_folder

    manifest = load_manifest(args.vectors)
    stats = build_impact_index(vectors_folder(args.vectors), args.index, args.threads)
    if manifest is not None:
        check_against_manifest(stats, manifest)
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(cli_entry(main)())
