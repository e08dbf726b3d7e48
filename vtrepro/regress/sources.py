"""Vectors from elsewhere for ``regress --vectors``/``--reference-vectors``: bundles and run folders, checked."""
from __future__ import annotations

import functools
from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.encode.fingerprint import VectorDiff, VectorSetSummary, compare_vectors, fingerprint_folder
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import load_vectors, read_query_vectors, vector_files
from vtrepro.regress.bundle import BUNDLE_MANIFEST, open_bundle, read_bundle_manifest, verify_runs
from vtrepro.regress.spec import Condition, DatasetRun, EncodedVectors


def vector_differences(reference: EncodedVectors, used: EncodedVectors) -> dict[str, VectorDiff]:
    """How the vectors used differ from reference vectors, for corpus and queries."""
    return {
        "corpus": compare_vectors(load_vectors(vector_files(reference.corpus)), load_vectors(vector_files(used.corpus))),
        "queries": compare_vectors(read_query_vectors(reference.queries), read_query_vectors(used.queries)),
    }


def _vector_root(path: Path, cache: Path) -> Path:
    """A folder of runs laid out ``<condition>/<dataset>/``: a bundle is checked and extracted first."""
    if path.is_file():
        return open_bundle(path, cache)[0]
    if not path.is_dir():
        raise VtreproError(f"{path}: no such bundle or folder; give a file from 'python -m vtrepro export' or a runs folder")
    if (path / BUNDLE_MANIFEST).is_file():
        verify_runs(path, read_bundle_manifest(path, path), path)
    return path


def vector_sources(path: Path, runs: list[tuple[Condition, DatasetRun]], cache: Path) -> dict[tuple[str, str], EncodedVectors]:
    """Encoded vectors for every impact run from a bundle, a folder of runs or (one run) one encoded folder."""
    root = _vector_root(path, cache)
    impact = [(condition.name, dataset.name) for condition, dataset in runs if condition.retrieval == "impact"]
    if not impact:
        raise VtreproError(f"--vectors {path}: the selected runs are all BM25; they have no vectors")
    sources = {}
    for condition, dataset in impact:
        folder = EncodedFolder(root / condition / dataset)
        if not folder.root.is_dir() and len(impact) == 1 and EncodedFolder(root).queries.is_file():
            folder = EncodedFolder(root)  # one encoded corpus folder for the one run
        if not folder.queries.is_file() or not folder.vectors.is_dir():
            raise VtreproError(f"{path}: no vectors for {condition}/{dataset} (expected {condition}/{dataset}/"
                               f"{folder.queries.name} and {folder.vectors.name}/); use --datasets to choose runs it holds")
        sources[(condition, dataset)] = EncodedVectors(folder.vectors, folder.queries)
    return sources


@functools.lru_cache(maxsize=None)
def cached_fingerprint(folder: Path) -> VectorSetSummary:
    """Fingerprint of an already-encoded vector folder, read once per process: checked before any work, used after."""
    return fingerprint_folder(folder)


def check_encoded(encoded: EncodedVectors) -> None:
    """Read and check every vector of ``encoded`` (ids unique, integer impacts) before any work starts."""
    if encoded.queries.resolve() in {path.resolve() for path in vector_files(encoded.corpus)}:
        raise VtreproError(f"{encoded.queries}: the queries file lies in the corpus folder {encoded.corpus}, so it "
                           "would be indexed as documents; move it out of that folder")
    cached_fingerprint(encoded.corpus)
    read_query_vectors(encoded.queries)
