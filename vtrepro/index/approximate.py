"""Approximate impact indexes, Seismic and BMP: their options, their manifest, and how one from elsewhere is opened.

``python -m vtrepro index --engine seismic|bmp`` builds from the vector folders Lucene and PISA index
(:mod:`vtrepro.index.seismic`, :mod:`vtrepro.index.bmp`); ``search --engine seismic|bmp`` searches them and
writes beside the run its agreement with an exact run on the same vectors. Neither engine is exact: Seismic
prunes each posting list to about ``n_postings`` documents and skips blocks by their summaries, BMP skips
blocks whose bound is below ``alpha`` of the current k-th score and holds impacts as bytes. So no figure a spec
pins is searched with them.

Each engine's knobs are declared once here (:class:`SeismicIndexOptions`, :class:`SeismicSearchOptions`,
:class:`BmpIndexOptions`, :class:`BmpSearchOptions`): the ``index`` and ``search`` flags, their bounds (a value
out of range is exit 2 naming the flag and the range) and the defaults, chosen by measurement on splade-tiny's
SciFact vectors (docs/scale.md).

An index folder holds the engine's one binary file, ``terms.tsv`` (each term, its component number and its
largest impact as the engine holds it) and :data:`META_NAME`, which names both with their sizes and SHA-256.
Both libraries load their file whole with Rust's ``bincode`` (no pickle anywhere): a folder from elsewhere is
opened only by :func:`open_index`, which reads the manifest through the one bounded JSON reader, checks every
file of the folder is a regular file inside it, each file's size against the manifest and a cap before any
byte is read, then its SHA-256, and only then lets the library load it (:func:`native`: a Rust panic is one
line, its own output hidden unless ``--verbose``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import (
    JSON_FILE_BYTES,
    FieldTypes,
    check_fields,
    check_folder_files,
    check_regular_file,
    read_json_file,
    sha256_file,
)
from vtrepro.core.log import verbose
from vtrepro.core.options import Options, option
from vtrepro.core.schema import Field

# seismic, bmp and numpy are imported where an index is built or searched, on purpose: `index --help` and
# `search --help` stay fast, and a machine without the optional libraries still runs every other command.

APPROXIMATE_ENGINES = ("seismic", "bmp")
"""The approximate engines, in the order the commands list them."""
PACKAGES = {"seismic": "pyseismic-lsr", "bmp": "bmp"}
"""Each engine's package on PyPI (module ``seismic`` and ``bmp``): the ``approximate`` extra of vtrepro."""
META_NAME = "vtrepro-approximate.json"
META_FORMAT = "vtrepro.approximate-index/1"
TERMS_NAME = "terms.tsv"
ENGINE_FILES = {"seismic": "index.seismic", "bmp": "index.bmp"}
"""The one binary file each engine writes (Seismic's ``save`` adds ``.index.seismic`` to the name it is given)."""
MAX_TERM_BYTES = 1024
"""Largest term line of ``terms.tsv`` in UTF-8 bytes (a term is at most 255 UTF-16 units: 765 bytes)."""
INDEX_BYTES_PER_POSTING = 512
"""A bound on either engine's file per posting (measured on SciFact: Seismic 91 bytes, most of it its block
summaries; BMP 8), with :data:`INDEX_BYTES_PER_DOCUMENT` and :data:`INDEX_FIXED_BYTES`: a file larger than its
manifest's postings allow is refused before it is read."""
INDEX_BYTES_PER_DOCUMENT = 256
INDEX_FIXED_BYTES = 16 * 2**20
BMP_MAX_TERMS = 2**16
"""BMP numbers terms with 16 bits: a collection with more distinct terms cannot be held (it would wrap)."""
BMP_QUERY_LEVELS = 32
"""BMP rescales every query so that its largest weight is 32 (``MAX_TERM_WEIGHT``), rounding up."""
BMP_SCORE_LIMIT = 2**16
"""BMP sums scores in 16 bits, which wrap past 65,535: a query that could reach it is refused."""
SEISMIC_EXACT_VALUES = 2048
"""Seismic holds values in half precision, exact for integers up to 2,048: its scores are the exact integer
dot products while the impacts and query weights stay within it."""


@dataclass(frozen=True)
class SeismicIndexOptions(Options):
    """How a Seismic index is built (``vtrepro index --engine seismic``)."""

    n_postings: int = option(Field(int, 4000, minimum=1, maximum=100_000_000,
                                   help="Seismic: postings kept per term on average (the posting-list length), "
                                        "the largest impacts of each list first"))
    centroid_fraction: float = option(Field(float, 0.1, above=0, maximum=1,
                                            help="Seismic: blocks per posting list, as a fraction of its length"))
    min_cluster_size: int = option(Field(int, 2, minimum=1, maximum=1_000_000,
                                         help="Seismic: fewest documents in a block"))
    summary_energy: float = option(Field(float, 0.4, above=0, maximum=1,
                                         help="Seismic: share of a block's impact mass its summary keeps"))
    max_fraction: float = option(Field(float, 1.5, minimum=1, maximum=1000,
                                       help="Seismic: longest posting list, in multiples of --n-postings"))
    doc_cut: int = option(Field(int, 15, minimum=1, maximum=100_000,
                                help="Seismic: a document's largest impacts used to cluster it"))


@dataclass(frozen=True)
class SeismicSearchOptions(Options):
    """How a Seismic index is searched (``vtrepro search --engine seismic``)."""

    query_cut: int = option(Field(int, 10, minimum=1, maximum=1_000_000,
                                  help="Seismic: a query's largest weights whose posting lists are read"))
    heap_factor: float = option(Field(float, 0.8, above=0, maximum=1,
                                      help="Seismic: a block is read only when its summary scores at least this "
                                           "fraction of the current k-th score (lower reads more: slower, closer to "
                                           "exact)"))


@dataclass(frozen=True)
class BmpIndexOptions(Options):
    """How a BMP index is built (``vtrepro index --engine bmp``)."""

    block_size: int = option(Field(int, 64, minimum=1, maximum=256,
                                   help="BMP: documents per block (BMP numbers them in a block with 8 bits)"))
    max_impact: int = option(Field(int, 64, minimum=1, maximum=255,
                                   help="BMP: the largest impact held (BMP stores bytes and sums 16-bit scores); "
                                        "impacts are scaled to it when the collection's are larger"))


@dataclass(frozen=True)
class BmpSearchOptions(Options):
    """How a BMP index is searched (``vtrepro search --engine bmp``)."""

    alpha: float = option(Field(float, 1.0, above=0, maximum=1,
                                help="BMP: stop when the next block's bound is below k-th score / alpha (1: exact "
                                     "on BMP's scores; lower prunes more)"))
    beta: float = option(Field(float, 1.0, above=0, maximum=1,
                               help="BMP: share of a query's terms kept, the largest weights first (1: all)"))


INDEX_OPTIONS: dict[str, type[Options]] = {"seismic": SeismicIndexOptions, "bmp": BmpIndexOptions}
SEARCH_OPTIONS: dict[str, type[Options]] = {"seismic": SeismicSearchOptions, "bmp": BmpSearchOptions}


def engine_options(options: dict[str, type[Options]], engine: str, given: dict[str, Any]) -> Options | None:
    """The ``engine``'s options from the parsed flags ``given`` (name -> value, every engine's knobs); a knob of
    another engine set to other than its default is one line. None for an engine without knobs."""
    for other, declared in options.items():
        for name, field in declared.schema().items():
            if other != engine and name in given and given[name] != field.default:
                raise VtreproError(f"--{name.replace('_', '-')} is a {other} option; it does nothing with --engine "
                                   f"{engine}: leave it out or use --engine {other}")
    chosen = options.get(engine)
    return None if chosen is None else chosen(**{name: given[name] for name in chosen.schema() if name in given})


def require(engine: str) -> Any:
    """The engine's Python module, or one line saying how to install it."""
    module = {"seismic": "seismic", "bmp": "bmp"}[engine]
    try:
        with native(engine, "reinstall it"):
            return __import__(module)
    except ImportError:
        raise VtreproError(f"--engine {engine} needs the '{PACKAGES[engine]}' package, which is not installed: "
                           f"pip install 'vtrepro[approximate]' (or pip install {PACKAGES[engine]})") from None


@contextlib.contextmanager
def native(what: str, fix: str, quiet: bool = True) -> Iterator[None]:
    """Around a call into an engine's Rust code: what it prints on file descriptors 1 and 2 (its progress lines,
    a panic's message and backtrace) goes to a temporary file unless ``--verbose`` (or not ``quiet``: around
    vtrepro's own progress bar); a Rust panic (pyo3's ``PanicException``, which is no ``Exception``) is one line
    naming ``what`` and ending with ``fix``."""
    with contextlib.ExitStack() as stack:
        if quiet and not verbose():
            sys.stdout.flush()
            sys.stderr.flush()
            log = stack.enter_context(tempfile.TemporaryFile())
            saved = [os.dup(1), os.dup(2)]
            stack.callback(_restore, saved)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        try:
            yield
        except BaseException as error:
            if type(error).__name__ != "PanicException":
                raise
            message = " ".join(str(error).split())[:200]
            raise VtreproError(f"{what}: the engine stopped ({message}); {fix}") from None


def _restore(saved: list[int]) -> None:
    """File descriptors 1 and 2 back from their copies ``saved``."""
    for fd, copy in zip((1, 2), saved):
        os.dup2(copy, fd)
        os.close(copy)


META_FIELDS: FieldTypes = {"format": str, "engine": str, "vectors_sha256": str, "documents": int, "postings": int,
                           "unique_terms": int, "total_terms": int, "max_impact": int, "index_file": str,
                           "index_bytes": int, "index_sha256": str, "terms_bytes": int, "terms_sha256": str,
                           "options": dict, "library": str}
"""What a build records and every reader checks, with their types."""


def meta_fix(engine: str) -> str:
    return f"delete the folder and build it again with 'python -m vtrepro index --engine {engine}'"


def read_meta(index_dir: str | Path) -> dict | None:
    """The manifest of an approximate index folder, or None when it holds none (or one of another format);
    through the one bounded JSON reader, inside the folder, its fields typed."""
    path = Path(index_dir) / META_NAME
    if not os.path.lexists(path):
        return None
    fix = meta_fix("ENGINE")
    meta = read_json_file(path, fix, JSON_FILE_BYTES["index"], Path(index_dir))
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        return None
    return check_fields(meta, str(path), fix, META_FIELDS)


def index_bytes_bound(postings: int, documents: int) -> int:
    """The largest engine file a manifest of ``postings`` and ``documents`` may name."""
    return INDEX_BYTES_PER_POSTING * postings + INDEX_BYTES_PER_DOCUMENT * documents + INDEX_FIXED_BYTES


def memory_bytes() -> int:
    """This machine's memory: an engine loads its file whole, so a file beyond half of it is refused unread."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class OpenedIndex:
    """An approximate index folder checked against its manifest, ready for the engine to load."""

    folder: Path
    meta: dict
    index_file: Path
    terms: dict[str, int]
    """Term -> its component number (its line in ``terms.tsv``)."""
    largest: list[int]
    """Each component's largest impact, as the engine holds it."""
    options: Options


def open_index(index_dir: str | Path, engine: str) -> OpenedIndex:
    """The approximate index at ``index_dir`` checked before the engine reads a byte of it (the module's last
    point); each fault is one line."""
    folder = Path(index_dir)
    fix = meta_fix(engine)
    if not folder.is_dir():
        raise VtreproError(f"{folder}: no such index folder; build it with 'python -m vtrepro index --engine {engine} "
                           "--vectors FOLDER --output DIR'")
    meta = read_meta(folder)
    if meta is None:
        raise VtreproError(f"{folder}: not an approximate index (no {META_NAME}); build it with 'python -m vtrepro "
                           f"index --engine {engine} --vectors FOLDER --output DIR'")
    if meta["engine"] != engine:
        raise VtreproError(f"{folder}: a {meta['engine']!r} index, not a {engine} one; search it with --engine "
                           f"{meta['engine']}" if meta["engine"] in APPROXIMATE_ENGINES else
                           f"{folder}: names engine {meta['engine']!r}, none of {', '.join(APPROXIMATE_ENGINES)}; {fix}")
    if meta["index_file"] != ENGINE_FILES[engine]:
        raise VtreproError(f"{folder / META_NAME}: names the file {meta['index_file']!r}, not {ENGINE_FILES[engine]!r}; "
                           f"{fix}")
    check_folder_files(folder, fix)
    counts = {name: meta[name] for name in ("documents", "postings", "unique_terms", "total_terms", "max_impact")}
    if any(value < 0 for value in counts.values()) or meta["postings"] < meta["documents"]:
        raise VtreproError(f"{folder / META_NAME}: impossible counts {counts}; {fix}")
    index_file = folder / meta["index_file"]
    bound = min(index_bytes_bound(meta["postings"], meta["documents"]), memory_bytes() // 2)
    _check_file(index_file, meta["index_bytes"], meta["index_sha256"], bound, fix, folder)
    terms_bound = MAX_TERM_BYTES * meta["unique_terms"]
    _check_file(folder / TERMS_NAME, meta["terms_bytes"], meta["terms_sha256"], terms_bound, fix, folder)
    terms, largest = _read_terms(folder / TERMS_NAME, meta["unique_terms"], fix)
    try:
        options = INDEX_OPTIONS[engine](**meta["options"])
    except (TypeError, VtreproError) as error:
        raise VtreproError(f"{folder / META_NAME}: its options are not {engine}'s ({error}); {fix}") from None
    return OpenedIndex(folder, meta, index_file, terms, largest, options)


def _check_file(path: Path, size: int, sha256: str, bound: int, fix: str, folder: Path) -> None:
    """``path`` of exactly ``size`` bytes (at most ``bound``), checked by ``stat`` before it is read, then its
    SHA-256 against the manifest's."""
    found = check_regular_file(path, bound, fix, folder)
    if found != size:
        raise VtreproError(f"{path}: {found} bytes, but {META_NAME} says {size}; {fix}")
    if sha256_file(path) != sha256:
        raise VtreproError(f"{path}: its SHA-256 is not the one {META_NAME} records (changed or damaged); {fix}")


def _read_terms(path: Path, count: int, fix: str) -> tuple[dict[str, int], list[int]]:
    """``terms.tsv``: ``count`` lines of ``term<TAB>largest impact``, each term once."""
    terms: dict[str, int] = {}
    largest: list[int] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            term, tab, value = raw.rstrip(b"\n").decode("utf-8", "replace").partition("\t")
            if not tab or not term or not value.isdigit() or term in terms or len(raw) > MAX_TERM_BYTES:
                raise VtreproError(f"{path}:{number}: not 'term<TAB>largest impact' of a new term; {fix}")
            terms[term] = len(terms)
            largest.append(int(value))
    if len(terms) != count:
        raise VtreproError(f"{path}: {len(terms)} terms, but {META_NAME} says {count}; {fix}")
    return terms, largest


def write_terms(path: Path, terms: list[str], largest: list[int]) -> None:
    """``terms.tsv``: each term (its component number is its line) and its largest impact as the engine holds it."""
    with open(path, "w", encoding="utf-8") as handle:
        for term, value in zip(terms, largest):
            handle.write(f"{term}\t{value}\n")
