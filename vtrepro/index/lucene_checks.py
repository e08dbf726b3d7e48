"""Lucene indexes checked before and after they are read: a folder that holds one, Lucene's own integrity check
of every file, one line for whatever Java says is wrong, Anserini's statistics and their agreement with an encoded
corpus's manifest. Built by :mod:`vtrepro.index.lucene`."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from vtrepro.core.anserini import newer_lucene_fix
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_folder_files
from vtrepro.core.java import describe_causes, java_class, java_errors, java_path

BUILD_COMMAND = "'python -m vtrepro index'"
REBUILD = f"rebuild it with {BUILD_COMMAND}"
CONTENTS_FIELD = "contents"  # Anserini's Constants.CONTENTS and Constants.ID
ID_FIELD = "id"


def is_lucene_index(folder: str | Path) -> bool:
    """Whether ``folder`` holds a Lucene index (a ``segments_N`` file)."""
    return any(Path(folder).glob("segments_*"))


def check_index_folder(index_dir: str | Path) -> str:
    """``index_dir`` as Java will name it, once it is a folder this user can list holding a ``segments_N``
    file; each other case is one line saying which, before Java reads anything."""
    path = Path(index_dir)
    if not path.exists():
        raise VtreproError(f"{path}: no such index folder; build it with {BUILD_COMMAND}")
    if not path.is_dir():
        raise VtreproError(f"{path}: is a file, not an index folder; give the folder {BUILD_COMMAND} built")
    try:
        names = os.listdir(path)
    except PermissionError:
        raise VtreproError(f"{path}: not a readable Lucene index: permission denied listing the folder; check its "
                           "permissions (ls -ld) or ask its owner") from None
    if not names:
        raise VtreproError(f"{path}: is an empty folder, not a Lucene index; build it with {BUILD_COMMAND}")
    if not is_lucene_index(path):
        raise VtreproError(f"{path}: not a Lucene index (no segments_N file); build it with {BUILD_COMMAND}")
    check_folder_files(path, f"not a Lucene index as Anserini writes it: {REBUILD}")  # Lucene would block on a FIFO
    return java_path(path)


def verified_index(index_dir: str | Path) -> str:
    """``index_dir`` as Java will name it, once Lucene has opened it and verified the checksum of every file
    (Lucene checks them only when it merges: a flipped bit would otherwise change scores silently)."""
    path = check_index_folder(index_dir)
    with index_errors(index_dir):
        reader = java_class("io.anserini.index.IndexReaderUtils").getReader(path)
        try:
            for leaf in reader.leaves().toArray():
                leaf.reader().checkIntegrity()
        finally:
            reader.close()
    return path


def index_errors(index_dir: str | Path) -> contextlib.AbstractContextManager[None]:
    """A Java exception inside the block as one line saying why the index ``index_dir`` cannot be read."""
    return java_errors(index_dir, f"not a readable Lucene index: {REBUILD}", _unreadable_reason)


def _unreadable_reason(causes: list[str]) -> str | None:
    """``"reason; fix"`` for a Lucene index Java could not open or verify, from the exception's causes (None: unknown)."""
    def first(*names: str) -> str | None:
        return next((cause for cause in causes if cause.partition(":")[0].rpartition(".")[2] in names), None)

    denied = first("AccessDeniedException")
    if denied:
        return (f"not a readable Lucene index: permission denied reading {denied.partition(': ')[2]}; check the "
                "permissions of its files (ls -l) or ask their owner")
    newer = first("IndexFormatTooNewException") or next((cause for cause in causes if "is in the future" in cause), None)
    if newer:
        return (f"not a readable Lucene index: written by a newer Lucene than this Anserini's {lucene_version()} "
                f"({describe_causes([newer])}); {newer_lucene_fix()}, or rebuild it from its vectors with {BUILD_COMMAND}")
    older = first("IndexFormatTooOldException")
    if older:
        return (f"not a readable Lucene index: in a format Lucene {lucene_version()} does not read (an old Lucene's, "
                f"or not Lucene's files: {describe_causes([older])}); {REBUILD}")
    missing = first("NoSuchFileException", "FileNotFoundException")
    if missing:
        return f"not a readable Lucene index: incomplete, {missing.partition(': ')[2]} is missing; {REBUILD}"
    corrupt = first("CorruptIndexException", "EOFException")
    if corrupt:
        return f"not a readable Lucene index: corrupt ({describe_causes([corrupt])}); {REBUILD}"
    return None


def lucene_version() -> str:
    """The version of the Lucene inside this Anserini (e.g. ``9.9.1``)."""
    return str(java_class("org.apache.lucene.util.Version").LATEST.toString())


def index_stats(index_dir: str | Path) -> dict[str, int]:
    """Anserini's index statistics: documents, non_empty_documents, unique_terms, total_terms."""
    path = check_index_folder(index_dir)
    utils = java_class("io.anserini.index.IndexReaderUtils")
    with index_errors(index_dir):
        reader = utils.getReader(path)
    try:
        stats = utils.getIndexStats(reader)
        counted = {key: int(stats.get(key)) for key in ("documents", "non_empty_documents", "unique_terms", "total_terms")}
        if counted["unique_terms"] < 0:  # Lucene keeps a term count per segment only: Anserini says -1 for several
            counted["unique_terms"] = _distinct_terms(reader)
        return counted
    finally:
        reader.close()


def _distinct_terms(reader: Any) -> int:
    """The distinct terms of Anserini's ``contents`` field over every segment of ``reader``."""
    terms = java_class("org.apache.lucene.index.MultiTerms").getTerms(reader, CONTENTS_FIELD)
    if terms is None:
        return 0
    iterator, count = terms.iterator(), 0
    while iterator.next() is not None:
        count += 1
    return count


def check_against_manifest(stats: dict[str, int], manifest: dict) -> None:
    """Vectors (or their index) must hold exactly the manifest's documents and total impact."""
    expected = {"documents": manifest["documents"], "total_terms": manifest["total_terms"]}
    for key, value in expected.items():
        if stats[key] != value:
            raise VtreproError(
                f"found {key}={stats[key]} but the encoded corpus manifest says {value}: "
                "the vectors folder changed since encoding; re-encode"
            )
