"""Vectors from elsewhere for ``regress --vectors``/``--reference-vectors``: bundles, run folders and prebuilt
indexes, checked.

A prebuilt index (``export index``: one ``.tar.gz``, or the folder of them with its ``prebuilt.json``) holds
no vector files: once its checksums and files are verified, each document's vector is read back from the
index's postings (:mod:`vtrepro.index.postings`) and each query's from the topics (a term's count is its
weight, checked against the recorded query fingerprint). The run then goes on as from a bundle: the vectors'
fingerprints are compared with the spec's pins, so a faithful index makes every figure exact.
"""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import write_jsonl
from vtrepro.encode.bundle import BUNDLE_MANIFEST, open_bundle, read_bundle_manifest, verify_runs
from vtrepro.encode.fingerprint import VectorDiff, compare_vectors
from vtrepro.encode.folder import SCAN_NAME, EncodedFolder
from vtrepro.encode.reader import load_vectors, read_query_vectors, vector_files
from vtrepro.encode.scan import VectorScan, scan_folder
from vtrepro.index.postings import write_index_vectors
from vtrepro.index.prebuilt import (
    HEADER_NAME,
    METADATA_NAME,
    NAME_PATTERN,
    SUFFIX,
    is_prebuilt,
    named_members,
    open_prebuilt,
    read_topics,
)
from vtrepro.regress.spec import Condition, DatasetRun, EncodedVectors


def vector_differences(reference: EncodedVectors, used: EncodedVectors) -> dict[str, VectorDiff]:
    """How the vectors used differ from reference vectors, for corpus and queries."""
    return {
        "corpus": compare_vectors(load_vectors(vector_files(reference.corpus)), load_vectors(vector_files(used.corpus))),
        "queries": compare_vectors(read_query_vectors(reference.queries), read_query_vectors(used.queries)),
    }


PREBUILT_VECTORS = "from-prebuilt"
"""Under the bundle cache: the vectors read back from prebuilt indexes, laid out ``<condition>/<dataset>/``."""


def _prebuilt_vectors(tarball: Path, cache: Path) -> tuple[str, str]:
    """The vectors of one prebuilt index under ``cache/from-prebuilt/<condition>/<dataset>/`` (read back once per
    tarball: a stamp names its sha256); returns its (condition, dataset)."""
    opened = open_prebuilt(tarball, cache / "prebuilt")
    header = opened.header
    for key in ("condition", "dataset"):  # they name folders under the cache: a plain name, never a path
        if not isinstance(header.get(key), str) or not NAME_PATTERN.fullmatch(header[key]):
            raise VtreproError(f"{tarball}: its {HEADER_NAME} names {key} {str(header.get(key))[:80]!r}, not a plain "
                               "name (letters, digits, '.', '_', '-'); the tarball is not one 'export index' wrote")
    folder = EncodedFolder(cache / PREBUILT_VECTORS / header["condition"] / header["dataset"])
    stamp = folder.root / "prebuilt.stamp"
    if not stamp.is_file() or stamp.read_text() != opened.root.parent.name:
        with named_members(opened, tarball):
            queries = read_topics(opened.topics, header.get("queries_fingerprint"))
            folder.vectors.mkdir(parents=True, exist_ok=True)
            write_index_vectors(opened.index, folder.vectors / "part-00000.jsonl")
        write_jsonl(folder.queries, ({"id": qid, "vector": vector} for qid, vector in queries.items()))
        stamp.write_text(opened.root.parent.name)
    return str(header.get("condition")), str(header.get("dataset"))


def _prebuilt_root(path: Path, cache: Path) -> Path:
    """A folder of runs read back from one prebuilt index or an 'export index' folder of them."""
    tarballs = [path] if path.is_file() else sorted(path.glob(f"*{SUFFIX}"))
    if not tarballs:
        raise VtreproError(f"{path}: {METADATA_NAME} but no {SUFFIX} prebuilt indexes beside it")
    for tarball in tarballs:
        _prebuilt_vectors(tarball, cache)
    return cache / PREBUILT_VECTORS


def _vector_root(path: Path, cache: Path) -> Path:
    """A folder of runs laid out ``<condition>/<dataset>/``: a bundle is checked and extracted first, a
    prebuilt index checked, extracted and its vectors read back."""
    if (path.is_file() and is_prebuilt(path)) or (path.is_dir() and (path / METADATA_NAME).is_file()):
        return _prebuilt_root(path, cache)
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


def scan_encoded(encoded: EncodedVectors, artifacts: Path) -> VectorScan:
    """One pass over the corpus vectors of ``encoded`` (every record checked, fingerprint, statistics), recorded in
    the run's ``artifacts`` folder (never beside vectors from elsewhere) and reused while the files are unchanged."""
    return scan_folder(encoded.corpus, artifacts / SCAN_NAME)


def check_encoded(encoded: EncodedVectors, artifacts: Path) -> None:
    """Read and check every vector of ``encoded`` (ids unique, integer impacts) before any work starts; the
    corpus's pass is recorded in ``artifacts``, the run's folder for them (:func:`scan_encoded`)."""
    if encoded.queries.resolve() in {path.resolve() for path in vector_files(encoded.corpus)}:
        raise VtreproError(f"{encoded.queries}: the queries file lies in the corpus folder {encoded.corpus}, so it "
                           "would be indexed as documents; move it out of that folder")
    scan_encoded(encoded, artifacts)
    read_query_vectors(encoded.queries)
