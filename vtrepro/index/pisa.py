"""PISA indexes of impact vectors (through pyterrier-pisa's bindings), built by ``python -m vtrepro index
--engine pisa`` and searched by :mod:`vtrepro.search.pisa`.

:func:`build_pisa_index` indexes the JsonVectorCollection folder Lucene indexes: impacts are posted as term
frequencies, as they are (scale 1), for PISA's ``quantized`` scorer; terms are posted as the hex of their
UTF-8 bytes (:func:`pisa_term`), since PISA lowercases query terms. :func:`ensure_pisa_index` keeps an index
that already holds the same vectors (same fingerprint).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Iterator

import numpy as np

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, FieldTypes, check_fields, read_json_file, write_json
from vtrepro.core.log import verbose
from vtrepro.core.progress import Progress
from vtrepro.encode.fingerprint import VectorSetSummary
from vtrepro.encode.reader import vector_files
from vtrepro.index.parts import Piece, fingerprint_in_parts, in_processes, read_piece_vectors, split_pieces
from vtrepro.index.staging import staged_index

logger = logging.getLogger(__name__)

# pyterrier_pisa is imported where it is used, on purpose: it imports pyterrier, pandas and ir_datasets
# (over a second), which `index --help` and Lucene indexing do not need.

META_NAME = "vtrepro-pisa.json"
META_FORMAT = "vtrepro.pisa-index/1"
ENCODING = "block_simdbp"


def pisa_term(term: str) -> str:
    """The token PISA stores for ``term``: its UTF-8 bytes in hex, untouched by PISA's lowercasing."""
    return term.encode("utf-8").hex()


META_FIELDS: FieldTypes = {"format": str, "vectors_sha256": str, "documents": int, "unique_terms": int,
                           "total_terms": int, "max_impact": int}
"""What :func:`build_pisa_index` records and every reader uses, with their types."""
META_FIX = "delete the folder and build it again with 'python -m vtrepro index --engine pisa'"


def read_pisa_meta(index_dir: str | Path) -> dict | None:
    """What :func:`build_pisa_index` recorded about a PISA index folder, or None when it holds none (or one of
    another format); through the one bounded JSON reader, inside the folder, its fields typed."""
    path = Path(index_dir) / META_NAME
    if not os.path.lexists(path):
        return None
    meta = read_json_file(path, META_FIX, JSON_FILE_BYTES["index"], Path(index_dir))
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        return None
    return check_fields(meta, str(path), META_FIX, META_FIELDS)


def build_pisa_index(vectors_dir: str | Path, index_dir: str | Path, expected: VectorSetSummary | None = None,
                     threads: int = DEFAULT_THREADS) -> dict:
    """PISA index of a JsonVectorCollection folder (checked as for Lucene unless ``expected`` summarizes
    it already), built beside ``index_dir`` (where killed builds' leftovers are removed first) and moved
    into place when complete; returns its metadata. ``threads`` processes read the vector files (at most
    one per file); the index files are byte-identical whatever their number."""
    index_dir = Path(index_dir)
    if index_dir.is_file() or (index_dir.is_dir() and any(index_dir.iterdir()) and read_pisa_meta(index_dir) is None):
        raise VtreproError(f"{index_dir}: exists and is not a PISA index; refusing to replace it: remove it or "
                           "choose another PISA index folder")
    files = vector_files(vectors_dir)
    expected = expected or fingerprint_in_parts(files, threads)
    if not expected.count:
        raise VtreproError(f"{vectors_dir}: the vector files hold no documents; point at an encoded corpus")
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    with staged_index(index_dir, lambda folder: read_pisa_meta(folder) is not None) as staging:
        meta = _write_index(files, staging, expected, threads)
    return meta


def ensure_pisa_index(vectors_dir: str | Path, index_dir: str | Path,
                      threads: int = DEFAULT_THREADS) -> tuple[dict, float | None]:
    """The PISA index of ``vectors_dir`` at ``index_dir``, kept when it holds exactly these vectors (same
    fingerprint) and built otherwise with ``threads``: (its metadata, build seconds or None when kept)."""
    summary = fingerprint_in_parts(vector_files(vectors_dir), threads)
    meta = read_pisa_meta(index_dir)
    if meta is not None and meta["vectors_sha256"] == summary.sha256:
        return meta, None
    began = time.perf_counter()
    meta = build_pisa_index(vectors_dir, index_dir, expected=summary, threads=threads)
    return meta, time.perf_counter() - began


def _write_index(files: list[Path], folder: Path, expected: VectorSetSummary, threads: int) -> dict:
    """PISA's binary collection (``inv.docs``, ``inv.freqs``, ``inv.sizes``: uint32 sequences, each list
    led by its length) and lexicons, then its compressed index and score bounds.

    Two passes over the vectors, so memory holds the vocabulary and a count per document, never the
    postings: the first counts each term's documents (and writes the document lexicon), the second writes
    every posting straight to its place in memory-mapped output files, documents in collection order.
    Both passes split the vectors into contiguous parts read by one process each (a large plain file at line
    boundaries, each range read by offset: :func:`vtrepro.index.parts.split_pieces`); the parts' counts are
    merged in collection order (each part's postings of a term placed after the earlier parts'), so every
    file is byte for byte the one a single process writes."""
    parts = split_pieces(files, threads)
    shown = len(parts) == 1  # a bar per process would interleave
    if not shown:
        logger.info(f"index (PISA): {len(files)} vector files read by {len(parts)} processes")
    lexicons = [folder / f"fwd.documents.{number}" for number in range(len(parts))]
    counted = in_processes(_count_terms, [(part, lexicon, expected.count, shown) for part, lexicon in zip(parts, lexicons)])
    with open(folder / "fwd.documents", "wb") as lexicon:
        for part_lexicon in lexicons:
            with open(part_lexicon, "rb") as written:
                shutil.copyfileobj(written, lexicon)
            part_lexicon.unlink()
    ids: dict[str, int] = {}
    for part in counted:
        for token in part.counts:
            ids.setdefault(token, len(ids))
    tokens = sorted(ids)  # PISA's lexicon is searched by bisection
    rank = {token: place for place, token in enumerate(tokens)}
    by_part = np.zeros((len(parts), len(tokens)), dtype=np.int64)  # documents per term (by rank) in each part
    for number, part in enumerate(counted):
        by_part[number, [rank[token] for token in part.counts]] = list(part.counts.values())
    counts = by_part.sum(axis=0)
    cursor = np.cumsum(counts + 1) - counts  # where each term's first posting goes (after its length)
    postings = int(counts.sum())
    lengths = np.concatenate([np.frombuffer(part.lengths, dtype=np.uint32) for part in counted])
    shape = {"docs": 2 + postings + len(tokens), "freqs": postings + len(tokens)}
    doc_file = np.memmap(folder / "inv.docs", dtype=np.uint32, mode="w+", shape=(shape["docs"],))
    freq_file = np.memmap(folder / "inv.freqs", dtype=np.uint32, mode="w+", shape=(shape["freqs"],))
    doc_file[:2] = (1, len(lengths))
    doc_file[2 + cursor - 1] = counts
    freq_file[cursor - 1] = counts
    doc_file.flush()
    freq_file.flush()
    del doc_file, freq_file  # each part maps the files itself
    starts = np.cumsum([0, *(len(part.lengths) for part in counted)])
    places = cursor + np.cumsum(by_part, axis=0) - by_part  # each part's first place per term
    in_processes(_write_postings, [(part, folder, shape, rank, places[number], int(starts[number]), expected.count,
                                     shown) for number, part in enumerate(parts)])
    np.concatenate(([len(lengths)], lengths)).astype(np.uint32).tofile(folder / "inv.sizes")  # unused by the scorer
    (folder / "fwd.terms").write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    with _native_output_quiet():
        pisathon = pisa_bindings()
        pisathon.build_binlex(str(folder / "fwd.terms"), str(folder / "fwd.termlex"))
        pisathon.build_binlex(str(folder / "fwd.documents"), str(folder / "fwd.doclex"))
        pisa_context(folder)  # compresses the index and stores the score bounds, once
    meta = {"format": META_FORMAT, "vectors_sha256": expected.sha256, "documents": len(lengths),
            "unique_terms": len(tokens), "total_terms": expected.total_impact,
            "max_impact": max(part.max_impact for part in counted), "encoding": ENCODING}
    write_json(folder / META_NAME, meta)
    return meta


class _PartCounts:
    """The first pass's findings over a part: term -> its documents, the terms of each document in
    collection order, the largest impact."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.lengths = array("I")
        self.max_impact = 0


def _count_terms(pieces: list[Piece], documents_lexicon: Path, documents: int, shown: bool) -> _PartCounts:
    """Pass one over a part: count each term's documents and write the document ids, one a line, in
    collection order."""
    part = _PartCounts()
    with open(documents_lexicon, "w", encoding="utf-8") as lexicon, \
            Progress(documents, "index (PISA): count terms", "doc", enabled=shown) as progress:
        for _, _, doc_id, vector in read_piece_vectors(pieces):
            for term in vector:
                token = pisa_term(term)
                part.counts[token] = part.counts.get(token, 0) + 1
            part.lengths.append(len(vector))
            part.max_impact = max(part.max_impact, max(vector.values(), default=0))
            lexicon.write(f"{doc_id}\n")
            progress.update()
    return part


def _write_postings(pieces: list[Piece], folder: Path, shape: dict[str, int], rank: dict[str, int],
                    cursor: np.ndarray, first: int, documents: int, shown: bool) -> None:
    """Pass two over a part: each posting (document number from ``first``, impact) at ``cursor`` of its
    term, which moves on."""
    doc_file = np.memmap(folder / "inv.docs", dtype=np.uint32, mode="r+", shape=(shape["docs"],))
    freq_file = np.memmap(folder / "inv.freqs", dtype=np.uint32, mode="r+", shape=(shape["freqs"],))
    cursor = cursor.copy()
    with Progress(documents, "index (PISA)", "doc", enabled=shown) as progress:
        for number, (_, _, _, vector) in enumerate(read_piece_vectors(pieces), start=first):
            ranks = [rank[pisa_term(term)] for term in vector]
            places = cursor[ranks]
            doc_file[2 + places] = number
            freq_file[places] = np.fromiter(vector.values(), dtype=np.uint32, count=len(vector))
            cursor[ranks] += 1
            progress.update()
    doc_file.flush()
    freq_file.flush()


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


def pisa_bindings():
    from pyterrier_pisa import _pisathon

    return _pisathon


def pisa_context(index_dir: Path):
    """PISA's retrieval context over ``index_dir`` (quantized scorer, no stemmer, no stopwords)."""
    pisathon = pisa_bindings()
    context = pisathon.RetrievalContext()
    pisathon.prepare_index(context, str(index_dir), ENCODING, "quantized", "", quantize=0, stop_fname="")
    return context
