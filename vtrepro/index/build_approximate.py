"""Seismic and BMP indexes built from a JsonVectorCollection folder (``python -m vtrepro index --engine seismic|bmp``).

The vectors are read once, every record checked (:func:`vtrepro.encode.reader.read_vectors`), into arrays of
term numbers and impacts (8 bytes a posting while the build runs), then handed to the engine:

- **Seismic** (``pyseismic-lsr``) takes them as they are, by component number (``add_documents_by_id``: no
  term strings, so no term is cut at Seismic's 100-character string type), its impacts as float32 and held
  in half precision (exact up to :data:`~vtrepro.index.approximate.SEISMIC_EXACT_VALUES`). Its build runs on
  ``threads`` threads.
- **BMP** (``bmp``) stores each impact as a byte and sums scores in 16 bits, so a collection whose largest
  impact passes ``max_impact`` is scaled to it (rounded half to even, at least 1: no term is dropped), and a
  collection of more than 65,536 distinct terms is refused. Its build is one thread.

The folder is written beside ``index_dir`` and moved into place when complete, with ``terms.tsv`` and the
manifest :mod:`vtrepro.index.approximate` checks before any search loads it.
"""
from __future__ import annotations

import logging
import os
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import sha256_file, write_json
from vtrepro.core.progress import Progress
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_files
from vtrepro.encode.reader import read_vectors, vector_files
from vtrepro.index.approximate import (
    BMP_MAX_TERMS,
    ENGINE_FILES,
    META_FORMAT,
    META_NAME,
    TERMS_NAME,
    BmpIndexOptions,
    SeismicIndexOptions,
    native,
    read_meta,
    require,
    write_terms,
)
from vtrepro.index.staging import staged_index

logger = logging.getLogger(__name__)

BATCH_DOCUMENTS = 100_000
"""Documents handed to Seismic at once: bounds the float32 and int64 copies its call needs."""


@dataclass
class Collection:
    """A vector folder as arrays: document ``ids``, ``terms`` by number, and each document's postings
    ``components[offsets[i]:offsets[i + 1]]`` (term numbers, ascending) with their ``impacts``."""

    ids: list[str]
    terms: list[str]
    offsets: Any  # numpy int64, documents + 1
    components: Any  # numpy int32
    impacts: Any  # numpy int64

    @property
    def largest(self) -> int:
        return int(self.impacts.max()) if len(self.impacts) else 0


def read_collection(files: list[Path], documents: int) -> Collection:
    """Every vector of ``files``, read once and checked, as a :class:`Collection` (term numbers in order of first
    appearance)."""
    import numpy as np

    vocabulary: dict[str, int] = {}
    ids: list[str] = []
    lengths, components, impacts = array("q"), array("i"), array("i")
    with Progress(documents, "index: read vectors", "doc") as progress:
        for _, _, doc_id, vector in read_vectors(files):
            ids.append(doc_id)
            lengths.append(len(vector))
            components.extend(vocabulary.setdefault(term, len(vocabulary)) for term in vector)
            impacts.extend(vector.values())
            progress.update()
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=offsets[1:])
    numbers = np.frombuffer(components, dtype=np.int32)
    rows = np.repeat(np.arange(len(ids), dtype=np.int64), np.diff(offsets))
    order = np.lexsort((numbers, rows))  # ascending term numbers within each document (Seismic's rule)
    return Collection(ids, list(vocabulary), offsets, numbers[order], np.frombuffer(impacts, dtype=np.int32)[order]
                      .astype(np.int64))


def _build_seismic(collection: Collection, folder: Path, options: SeismicIndexOptions, threads: int,
                   by_number: bool = True) -> Any:
    """Seismic's index of the collection written to ``folder``; returns the impacts as it holds them. The terms go
    in as component numbers (``add_documents_by_id``, pyseismic-lsr 0.5.4), or, where that is missing (or not
    ``by_number``), document by document with each number as a token string: either way a query names a term by
    its number's text."""
    import numpy as np

    seismic = require("seismic")
    fix = "check the vectors, or report it with the command line"
    with native("Seismic's build", fix):
        dataset = seismic.SeismicDataset(dim=len(collection.terms))
        if by_number and hasattr(dataset, "add_documents_by_id"):
            for start in range(0, len(collection.ids), BATCH_DOCUMENTS):
                stop = min(start + BATCH_DOCUMENTS, len(collection.ids))
                first, last = int(collection.offsets[start]), int(collection.offsets[stop])
                dataset.add_documents_by_id(collection.ids[start:stop],
                                            collection.components[first:last].astype(np.int64),
                                            collection.impacts[first:last].astype(np.float32),
                                            collection.offsets[start:stop + 1] - first)
        else:  # before pyseismic-lsr 0.5.4 (the newest for Python 3.12): one call per document, the numbers as text
            names = np.asarray([str(number) for number in range(len(collection.terms))], dtype=seismic.get_seismic_string())
            for number, doc_id in enumerate(collection.ids):
                first, last = int(collection.offsets[number]), int(collection.offsets[number + 1])
                dataset.add_document(doc_id, names[collection.components[first:last]],
                                     collection.impacts[first:last].astype(np.float32))
        index = seismic.SeismicIndex.build_from_dataset(dataset, **options.to_dict(), num_threads=threads)
        if index.len != len(collection.ids):
            raise VtreproError(f"Seismic indexed {index.len} documents of {len(collection.ids)}; {fix}")
        index.save(str(folder / "index"))
    os.replace(folder / "index.index.seismic", folder / ENGINE_FILES["seismic"])
    return collection.impacts


def _build_bmp(collection: Collection, folder: Path, options: BmpIndexOptions) -> Any:
    """BMP's index of the collection written to ``folder``; returns the impacts as it holds them (scaled to
    ``max_impact`` when the collection's largest is above it)."""
    import numpy as np

    if len(collection.terms) > BMP_MAX_TERMS:
        raise VtreproError(f"the vectors hold {len(collection.terms):,} distinct terms, more than the {BMP_MAX_TERMS:,} "
                           "BMP can number (16 bits); use --engine seismic or pisa for this collection")
    bmp = require("bmp")
    largest = collection.largest
    held = collection.impacts
    if largest > options.max_impact:  # BMP keeps a byte per impact: scaled, rounded half to even, none to 0
        held = np.maximum(1, np.rint(collection.impacts * (options.max_impact / largest))).astype(np.int64)
        logger.info(f"index (BMP): impacts scaled by {options.max_impact}/{largest} to at most {options.max_impact}")
    terms = np.asarray(collection.terms, dtype=object)
    fix = "check the vectors, or report it with the command line"
    with native("BMP's build", fix, quiet=False), Progress(len(collection.ids), "index (BMP)", "doc") as progress:
        indexer = bmp.Indexer(str(folder / ENGINE_FILES["bmp"]), bsize=options.block_size, compress_range=False)
        for number, doc_id in enumerate(collection.ids):
            first, last = int(collection.offsets[number]), int(collection.offsets[number + 1])
            indexer.add_document(doc_id, dict(zip(terms[collection.components[first:last]].tolist(),
                                                  held[first:last].tolist())))
            progress.update()
    with native("BMP's build", fix):
        indexer.finish()
    return held


def build_approximate_index(engine: str, vectors_dir: str | Path, index_dir: str | Path,
                            options: SeismicIndexOptions | BmpIndexOptions | None = None,
                            threads: int = DEFAULT_THREADS, expected: VectorSetSummary | None = None) -> dict:
    """The ``engine``'s index of a JsonVectorCollection folder, built beside ``index_dir`` and moved into place
    when complete (an approximate index there is replaced; anything else is refused); returns its manifest."""
    import numpy as np

    if options is None:
        options = SeismicIndexOptions() if engine == "seismic" else BmpIndexOptions()
    index_dir = Path(index_dir)
    if index_dir.is_file() or (index_dir.is_dir() and any(index_dir.iterdir()) and read_meta(index_dir) is None):
        raise VtreproError(f"{index_dir}: exists and is not an approximate index; refusing to replace it: remove it or "
                           "choose another index folder")
    files = vector_files(vectors_dir)
    expected = expected or fingerprint_files(files)
    if not expected.count:
        raise VtreproError(f"{vectors_dir}: the vector files hold no documents; point at an encoded corpus")
    collection = read_collection(files, expected.count)
    found = (len(collection.ids), int(collection.impacts.sum()))
    if found != (expected.count, expected.total_impact):
        raise VtreproError(f"{vectors_dir}: read {found[0]} documents of total impact {found[1]}, but their fingerprint "
                           f"says {expected.count} and {expected.total_impact}: the files changed while being read")
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    with staged_index(index_dir, lambda folder: read_meta(folder) is not None) as staging:
        began = time.perf_counter()
        held = (_build_seismic(collection, staging, options, threads) if isinstance(options, SeismicIndexOptions)
                else _build_bmp(collection, staging, options))
        largest = np.zeros(len(collection.terms), dtype=np.int64)
        np.maximum.at(largest, collection.components, held)
        write_terms(staging / TERMS_NAME, collection.terms, largest.tolist())
        index_file = staging / ENGINE_FILES[engine]
        meta = {"format": META_FORMAT, "engine": engine, "vectors_sha256": expected.sha256,
                "documents": expected.count, "postings": len(collection.components),
                "unique_terms": len(collection.terms), "total_terms": expected.total_impact,
                "max_impact": collection.largest, "held_max_impact": int(held.max()),
                "index_file": index_file.name, "index_bytes": index_file.stat().st_size,
                "index_sha256": sha256_file(index_file), "terms_bytes": (staging / TERMS_NAME).stat().st_size,
                "terms_sha256": sha256_file(staging / TERMS_NAME), "options": options.to_dict(),
                "library": _library_version(engine), "build_seconds": time.perf_counter() - began}
        write_json(staging / META_NAME, meta)
    return meta


def _library_version(engine: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    from vtrepro.index.approximate import PACKAGES

    try:
        return f"{PACKAGES[engine]} {version(PACKAGES[engine])}"
    except PackageNotFoundError:
        return f"{PACKAGES[engine]} (version unknown)"
