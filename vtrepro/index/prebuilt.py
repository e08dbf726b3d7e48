"""Prebuilt Lucene impact indexes: one run's index, topics and qrels as a checksummed ``.tar.gz``.

A prebuilt index holds one folder, ``<name>/``, with:

- ``index/``: the Lucene impact index as Anserini wrote it (``-impact -pretokenized``);
- ``topics.tsv``: the encoded queries in Anserini's pretokenized impact topic format (``qid<TAB>terms``,
  each term repeated by its integer weight, separated by single spaces), which Anserini's
  ``SearchCollection -topicReader TsvString -impact -pretokenized`` and Pyserini's
  ``--impact --pretokenized`` turn back into the same weights (a term's count is its boost);
- ``qrels.txt``: the relevance judgements in TREC format (``qid 0 docid relevance``);
- ``README.md``: the encoder, quantization, escaping, statistics and the commands that search it;
- ``vtrepro.json``: the same as data, with the sha256 of every other file and the Lucene, Anserini and
  Pyserini versions that wrote the index (``anserini_lucene``, ``anserini``, ``pyserini``).

Beside it, ``<tar>.sha256`` and ``<tar>.md5`` (``sha256sum``/``md5sum`` format). The archive is
deterministic (sorted members, no time or owner, gzip without name or time), so the same run gives the
same bytes. An export folder's ``prebuilt.json`` describes every tarball in Pyserini's prebuilt-index
metadata shape (:func:`pyserini_info`).

A prebuilt index comes from elsewhere, so :func:`open_prebuilt` treats it as hostile input, through the one
reader of sidecars and tar members that vector bundles share (:mod:`vtrepro.core.archives`): the sidecar
checksum (when present) is checked first; the archive is streamed once, each member's header checked
before its bytes are written (plain files and folders only, one top folder, no path leaving it, no
duplicate, declared sizes within :func:`~vtrepro.core.archives.expansion_allowance` and the disk's free space in all, at most
:data:`MAX_MEMBERS`; long-name and PAX headers bounded before ``tarfile`` reads them), into
a staging folder renamed into place only when every file's sha256 equals ``vtrepro.json``'s record. An index
written by a newer Lucene major than the installed one is refused in one line naming the Pyserini that reads it
(:func:`vtrepro.core.anserini.check_readable`). The topics hold at most :data:`MAX_TOPICS` queries of at most
:data:`MAX_QUERY_TERMS` terms, lines of at most :data:`MAX_TOPIC_LINE_BYTES`; a refusal inside the tarball names
the tarball and the member (:func:`named_members`), never the temporary folder it was extracted into.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Mapping

from vtrepro.core.anserini import check_readable
from vtrepro.core.archives import (
    MAX_LINE_BYTES,
    TarRules,
    bounded_lines,
    check_sidecar,
    expansion_allowance,
    extract_tar,
    file_digest,
    new_tar,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, read_json_file, sha256_file, unsafe_character
from vtrepro.encode.fingerprint import fingerprint_vectors
from vtrepro.encode.reader import MAX_IMPACT, MAX_VECTOR_TERMS

PREBUILT_FORMAT = "vtrepro.prebuilt-index/1"
SUFFIX = ".tar.gz"
INDEX_DIRNAME = "index"
TOPICS_NAME = "topics.tsv"
QRELS_NAME = "qrels.txt"
README_NAME = "README.md"
HEADER_NAME = "vtrepro.json"
METADATA_NAME = "prebuilt.json"
"""In an export folder: every tarball's metadata in Pyserini's prebuilt-index shape."""
WRITER_KEYS = ("anserini_lucene", "anserini", "pyserini")
"""The header's record of what wrote the index: the Lucene inside the Anserini, the Anserini, the Pyserini."""
MAX_MEMBERS = 10_000  # a Lucene index written with one thread holds a few dozen files
MAX_EXTRACTED_BYTES = 256 << 30  # declared sizes in all: room for MS MARCO v2 impact indexes, not for a tar bomb
HEADER_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str, "queries_fingerprint": (str, type(None)), "statistics": dict, "encoder": dict, "spec": str,
    "condition": str, "dataset": str, "split": str, **{key: (str, type(None)) for key in WRITER_KEYS}}
"""The type of each header key a prebuilt index's reader uses (checked when present)."""
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_TOPIC_LINE_BYTES = MAX_LINE_BYTES
MAX_QUERY_TOKENS = 10_000_000  # a topic line repeats each term by its weight; SPLADE queries hold ~10^4
MAX_TOPICS = 1_000_000
"""Queries in one prebuilt index's topics: above MS MARCO's 808,731 training queries, the largest split there is."""
MAX_QUERY_TERMS = MAX_VECTOR_TERMS  # distinct terms of one query, as of any vector
COPY_BLOCK = 1 << 20
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


@dataclass(frozen=True)
class PrebuiltRun:
    """What one exported run is: its ``name`` (the top folder and the tarball's stem), the run folder
    regress left (``index/``, ``queries.jsonl``), its qrels, and ``header``: the spec, condition,
    dataset, split, k, encoder, quantization and fingerprints recorded in ``vtrepro.json``."""

    name: str
    index: Path
    queries: Mapping[str, Mapping[str, int]]
    qrels: Mapping[str, Mapping[str, int]]
    header: Mapping[str, Any]


@dataclass(frozen=True)
class PrebuiltIndex:
    """An opened prebuilt index: its extracted folder, the files in it and its ``vtrepro.json``."""

    root: Path
    header: dict[str, Any]

    @property
    def index(self) -> Path:
        return self.root / INDEX_DIRNAME

    @property
    def topics(self) -> Path:
        return self.root / TOPICS_NAME

    @property
    def qrels(self) -> Path:
        return self.root / QRELS_NAME


@contextlib.contextmanager
def named_members(opened: PrebuiltIndex, tarball: Path) -> Iterator[None]:
    """Refusals about the extracted files name the tarball and the member (``<tarball>: member <top>/<file>``),
    not the temporary folder the member was extracted into, which is gone once the command ends."""
    try:
        yield
    except VtreproError as error:
        extracted = str(opened.root)
        text = str(error)
        if extracted not in text:
            raise
        raise VtreproError(text.replace(extracted, f"{tarball}: member {opened.root.name}", 1)
                           .replace(extracted, opened.root.name)) from None


def tarball_name(spec: str, condition: str, dataset: str) -> str:
    """``lucene-impact.<spec>.<condition>.<dataset>`` (a cqadupstack forest's ``/`` becomes ``-``)."""
    name = ".".join(("lucene-impact", spec, condition, dataset.replace("/", "-")))
    if not NAME_PATTERN.fullmatch(name):
        raise VtreproError(f"{name!r}: not a usable prebuilt-index name (letters, digits, '.', '_', '-'; at most 200); "
                           "rename the spec, condition or dataset")
    return name


def checksum_paths(tarball: Path) -> dict[str, Path]:
    return {kind: tarball.with_name(tarball.name + f".{kind}") for kind in ("sha256", "md5")}


# --- writing ---------------------------------------------------------------------------------------------


def topic_line(qid: str, vector: Mapping[str, int]) -> str:
    """One Anserini pretokenized impact topic: ``qid<TAB>`` then each term repeated by its weight (terms sorted)."""
    if "\t" in qid or "\n" in qid or "\r" in qid:
        raise VtreproError(f"query id {qid!r} holds a tab or line break, which a topics TSV cannot hold")
    tokens = sum(vector.values())
    if tokens > MAX_QUERY_TOKENS:
        raise VtreproError(f"query '{qid}' weighs {tokens} in all, more than the {MAX_QUERY_TOKENS:,} repeated terms a "
                           "topic line may hold; export queries quantized at a smaller scale")
    return qid + "\t" + " ".join(term for term, weight in sorted(vector.items()) for _ in range(weight)) + "\n"


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _stage(run: PrebuiltRun, staging: Path, stats: Mapping[str, int], readme: str) -> dict[str, Any]:
    """Write the generated files into ``staging``; return ``vtrepro.json``'s content."""
    with open(staging / TOPICS_NAME, "w", encoding="utf-8", newline="\n") as handle:
        for qid, vector in run.queries.items():
            handle.write(topic_line(qid, vector))
    with open(staging / QRELS_NAME, "w", encoding="utf-8", newline="\n") as handle:
        for qid, judged in run.qrels.items():
            for docid, relevance in judged.items():
                handle.write(f"{qid} 0 {docid} {relevance}\n")
    _write_text(staging / README_NAME, readme)
    files = {f"{INDEX_DIRNAME}/{path.name}": sha256_file(path) for path in sorted(run.index.iterdir())}
    files.update({name: sha256_file(staging / name) for name in (TOPICS_NAME, QRELS_NAME, README_NAME)})
    queries = fingerprint_vectors({qid: dict(vector) for qid, vector in run.queries.items()})
    return {"format": PREBUILT_FORMAT, "name": run.name, **run.header, "statistics": dict(stats),
            "queries_fingerprint": queries.sha256, "files": dict(sorted(files.items()))}


def _add(archive: tarfile.TarFile, name: str, path: Path | None) -> None:
    """Add ``path`` (None: a folder) as ``name``, without time or owner."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if path is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(info)
        return
    with open(path, "rb") as content:
        info.size, info.mode = os.fstat(content.fileno()).st_size, 0o644
        archive.addfile(info, content)


def write_prebuilt(run: PrebuiltRun, output_dir: Path, stats: Mapping[str, int], readme: str) -> dict[str, Any]:
    """Write ``output_dir/<name>.tar.gz`` with its ``.sha256`` and ``.md5``; return its Pyserini-shaped metadata."""
    if not run.index.is_dir() or not any(run.index.glob("segments_*")):
        raise VtreproError(f"{run.index}: no Lucene index; run 'python -m vtrepro regress' for this run first")
    tarball = output_dir / f"{run.name}{SUFFIX}"
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run.name}.", dir=output_dir))
    try:
        header = _stage(run, staging, stats, readme)
        _write_text(staging / HEADER_NAME, json.dumps(header, indent=2, ensure_ascii=False) + "\n")
        generated = [TOPICS_NAME, QRELS_NAME, README_NAME, HEADER_NAME]
        members: list[tuple[str, Path | None]] = [(run.name, None), (f"{run.name}/{INDEX_DIRNAME}", None)]
        members += [(f"{run.name}/{INDEX_DIRNAME}/{path.name}", path) for path in sorted(run.index.iterdir())]
        members += [(f"{run.name}/{name}", staging / name) for name in generated]
        with atomic_write(tarball, "wb") as handle, \
                gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0) as compressed, \
                new_tar(compressed, tarfile.GNU_FORMAT) as archive:
            for name, path in sorted(members):
                _add(archive, name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    digests = {kind: file_digest(tarball, kind) for kind in ("sha256", "md5")}
    for kind, path in checksum_paths(tarball).items():
        with atomic_write(path) as sidecar:
            sidecar.write(f"{digests[kind]}  {tarball.name}\n")
    return pyserini_info(header, tarball, digests)


def pyserini_info(header: Mapping[str, Any], tarball: Path, digests: Mapping[str, str]) -> dict[str, Any]:
    """The tarball's entry in Pyserini's prebuilt-index metadata shape (``pyserini/prebuilt_index_info.py``:
    description, filename, readme, urls, md5, size compressed, total terms, documents, unique terms, texts),
    with vtrepro's sha256, spec, condition, dataset and the Lucene, Anserini and Pyserini that wrote it added."""
    stats = header["statistics"]
    encoder = header.get("encoder", {})
    return {
        "description": f"Lucene impact index of {header['dataset']} ({header['split']} queries) encoded by "
                       f"{encoder.get('hub_id') or encoder.get('model')} (vtrepro {header['spec']}/{header['condition']})",
        "filename": tarball.name,
        "readme": f"{header['name']}/{README_NAME}",
        "urls": [tarball.name],
        "md5": digests["md5"],
        "sha256": digests["sha256"],
        "size compressed (bytes)": tarball.stat().st_size,
        "total_terms": stats["total_terms"],
        "documents": stats["documents"],
        "unique_terms": stats["unique_terms"],
        "texts": None,
        "vtrepro": {**{key: header[key] for key in ("spec", "condition", "dataset", "split")},
                    **{key: header.get(key) for key in WRITER_KEYS}},
    }


# --- opening ---------------------------------------------------------------------------------------------


def _check_sidecars(tarball: Path) -> str:
    """The tarball's sha256, once it equals the ``.sha256`` (and md5 the ``.md5``) written beside it, when present."""
    sidecars = checksum_paths(tarball)
    digest = check_sidecar(tarball, sidecars["sha256"], "sha256")
    if sidecars["md5"].is_file():
        check_sidecar(tarball, sidecars["md5"], "md5")
    return digest


def _member_problem(member: tarfile.TarInfo, first: str | None) -> str | None:
    """What makes one member unfit for a prebuilt index beyond what every archive is checked for, or None."""
    path = PurePosixPath(member.name)
    top = PurePosixPath(first).parts[0] if first is not None else None
    if not NAME_PATTERN.fullmatch(path.parts[0]) or (top is not None and path.parts[0] != top) or \
            (len(path.parts) == 1 and not member.isdir()):
        return "lies outside the archive's one top folder"
    if len(path.parts) > 3 or (len(path.parts) == 3 and path.parts[1] != INDEX_DIRNAME):
        return "is not a file of a prebuilt index (the index's files, topics, qrels, README and header)"
    if path.name == HEADER_NAME and member.size > JSON_FILE_BYTES["prebuilt"]:
        return (f"declares {member.size} bytes; the header is read whole and may hold at most "
                f"{JSON_FILE_BYTES['prebuilt']}")
    return None


def _extract(tarball: Path, staging: Path, max_bytes: int) -> Path:
    """Stream the tarball into ``staging`` through the one tar reader (:func:`~vtrepro.core.archives.extract_tar`:
    each header checked before its bytes, its declared size against the tarball's allowance and the disk's free
    space too); return the top folder."""
    allowed, why = expansion_allowance(tarball, max_bytes)
    rules = TarRules(noun="archive", kind="not a prebuilt index from 'python -m vtrepro export index'",
                     remedy="fetch it again or re-export it", budget=allowed, why=why, max_members=MAX_MEMBERS,
                     member_problem=_member_problem)
    members = extract_tar(tarball, "r|gz", staging, rules)
    return staging / PurePosixPath(members[0].name).parts[0]


def read_header(root: Path, tarball: Path) -> dict[str, Any]:
    """``vtrepro.json`` of an extracted prebuilt index, checked for its format and file list."""
    path = root / HEADER_NAME
    if not os.path.lexists(path):
        raise VtreproError(f"{tarball}: no readable {HEADER_NAME}; not a prebuilt index from 'python -m vtrepro "
                           "export index'")
    header = read_json_file(path, f"{tarball} is not a prebuilt index from 'python -m vtrepro export index': "
                                  "fetch it again or re-export it", JSON_FILE_BYTES["prebuilt"], root)
    if not isinstance(header, dict) or header.get("format") != PREBUILT_FORMAT or not isinstance(header.get("files"), dict):
        raise VtreproError(f"{tarball}: {HEADER_NAME} is not a {PREBUILT_FORMAT} header; re-export it")
    wrong = next((key for key, kind in HEADER_TYPES.items() if key in header and not isinstance(header[key], kind)), None)
    if wrong is None:
        wrong = next((f"files[{name!r}]" for name, digest in header["files"].items()
                      if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest)), None)
    if wrong is None and isinstance(header.get("statistics"), dict):
        wrong = next((f"statistics.{key}" for key, value in header["statistics"].items()
                      if isinstance(value, bool) or not isinstance(value, (int, float))), None)
    if wrong is not None:
        raise VtreproError(f"{tarball}: {HEADER_NAME}: {wrong} has the wrong type for a {PREBUILT_FORMAT} header; "
                           "fetch it again or re-export it")
    return header


def _verify_files(root: Path, header: Mapping[str, Any], tarball: Path) -> None:
    """Every file but the header is listed in it with its sha256, and nothing listed is missing."""
    found = {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()} - {HEADER_NAME}
    listed = set(header["files"])
    if found != listed:
        extra, missing = sorted(found - listed), sorted(listed - found)
        raise VtreproError(f"{tarball}: holds {extra[:3] or 'nothing more'} beyond {HEADER_NAME}'s list and lacks "
                           f"{missing[:3] or 'nothing'}; the tarball was altered: fetch it again or re-export it")
    for name in sorted(listed):
        digest = sha256_file(root / name)
        if digest != header["files"][name]:
            raise VtreproError(f"{tarball}: {name} has sha256 {digest[:12]}... but {HEADER_NAME} records "
                               f"{str(header['files'][name])[:12]}...; the tarball was altered: fetch it again")


def open_prebuilt(tarball: Path, cache_root: Path, max_bytes: int = MAX_EXTRACTED_BYTES) -> PrebuiltIndex:
    """Check a prebuilt index's checksums, extract it once under ``cache_root/<sha256[:16]>/`` and verify
    every file against its header; the queries' fingerprint is checked against the topics when they are read."""
    if not tarball.is_file():
        raise VtreproError(f"{tarball}: no such prebuilt index; give a {SUFFIX} from 'python -m vtrepro export index'")
    digest = _check_sidecars(tarball)
    target = cache_root / digest[:16]
    tops = [path for path in target.iterdir() if path.is_dir()] if target.is_dir() else []
    if len(tops) == 1 and (tops[0] / HEADER_NAME).is_file():
        return _readable(PrebuiltIndex(tops[0], read_header(tops[0], tarball)), tarball)
    shutil.rmtree(target, ignore_errors=True)
    cache_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache_root))
    try:
        top = _extract(tarball, staging, max_bytes)
        header = read_header(top, tarball)
        _verify_files(top, header, tarball)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _readable(PrebuiltIndex(target / top.name, header), tarball)


def _readable(opened: PrebuiltIndex, tarball: Path) -> PrebuiltIndex:
    """``opened``, once the installed Lucene reads the major that wrote it (a header that records none is not refused)."""
    lucene, anserini = opened.header.get("anserini_lucene"), opened.header.get("anserini")
    if isinstance(lucene, str):
        check_readable(tarball, lucene, anserini if isinstance(anserini, str) else None)
    return opened


def read_topics(path: Path, expected_fingerprint: str | None = None) -> dict[str, dict[str, int]]:
    """Query vectors from a pretokenized impact topics TSV (a term's count is its weight), checked against
    ``expected_fingerprint`` (the header's queries fingerprint) when given."""
    queries: dict[str, dict[str, int]] = {}
    _check_topic_count(path)
    for line_number, line in _topic_lines(path):
        qid, tab, text = line.rstrip("\n").partition("\t")
        if not tab or not qid:
            raise VtreproError(f"{path}:{line_number}: expected 'qid<TAB>terms'; not an Anserini impact topics TSV")
        if unsafe_character(qid):
            raise VtreproError(f"{path}:{line_number}: query id {qid!r:.60} holds whitespace or a control character, "
                               "which would break the run file's lines; not topics 'export index' wrote")
        if qid in queries:
            raise VtreproError(f"{path}:{line_number}: query '{qid}' appears twice; keep one line")
        vector: dict[str, int] = {}
        for term in filter(None, text.split(" ")):
            if unsafe_character(term):
                raise VtreproError(f"{path}:{line_number}: term {term!r:.60} holds whitespace or a control character; "
                                   "not topics 'export index' wrote")
            vector[term] = vector.get(term, 0) + 1
            if len(vector) > MAX_QUERY_TERMS:
                raise VtreproError(f"{path}:{line_number}: query '{qid:.60}' holds more than {MAX_QUERY_TERMS} distinct "
                                   "terms, more than any vocabulary; not topics 'export index' wrote")
        if any(weight > MAX_IMPACT for weight in vector.values()):
            raise VtreproError(f"{path}:{line_number}: a term repeats more than {MAX_IMPACT} times")
        queries[qid] = vector
    if expected_fingerprint is not None and fingerprint_vectors(queries).sha256 != expected_fingerprint:
        raise VtreproError(f"{path}: the topics' query vectors have fingerprint "
                           f"{fingerprint_vectors(queries).sha256[:12]}... but {HEADER_NAME} records "
                           f"{expected_fingerprint[:12]}...; the prebuilt index was altered: fetch it again")
    return queries


def _check_topic_count(path: Path) -> None:
    """Refuse topics of more than :data:`MAX_TOPICS` lines from a count of their line breaks, before any is parsed."""
    lines = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(COPY_BLOCK), b""):
            lines += block.count(b"\n")
            if lines > MAX_TOPICS:
                raise VtreproError(f"{path}: more than {MAX_TOPICS} topics (the most a prebuilt index holds); not topics "
                                   "'export index' wrote")


def _topic_lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, "rb") as handle:
        for line_number, raw in bounded_lines(handle, path, MAX_TOPIC_LINE_BYTES):
            yield _topic_text(raw, path, line_number)


def _topic_text(raw: bytes, path: Path, line_number: int) -> tuple[int, str]:
    try:
        return line_number, raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VtreproError(f"{path}:{line_number}: not UTF-8 text; not topics 'export index' wrote") from None


def is_prebuilt(path: Path) -> bool:
    """Whether ``path`` names a prebuilt-index tarball (by its name: the opener checks its content)."""
    return path.name.endswith(SUFFIX) or path.name.endswith(".tgz")
