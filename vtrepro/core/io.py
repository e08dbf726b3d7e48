"""Atomic writes and line-checked JSONL / TSV reading shared by every stage."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import re
import stat
import tempfile
import unicodedata
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Literal, Mapping

import jsonlines

from vtrepro.core.archives import MAX_LINE_BYTES, bounded_lines
from vtrepro.core.errors import VtreproError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Write to a temporary file beside ``path`` and rename it into place only on success; an existing
    ``path`` that is not a regular file (a device, FIFO, socket, folder) is refused, never replaced."""
    path = Path(path)
    _check_kind(path, "file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp_name, 0o666 & ~_UMASK)
    if "b" in mode:
        encoding = None
    try:
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def write_jsonl(path: str | Path, records: Iterable[Any]) -> int:
    """Write one JSON object per line (UTF-8 kept as is), atomically; returns how many were written."""
    count = 0
    with atomic_write(path) as handle, jsonlines.Writer(handle, dumps=_compact_json) as writer:
        for record in records:
            writer.write(record)
            count += 1
    return count


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented, key-ordered JSON, atomically."""
    with atomic_write(path) as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` of a UTF-8 (optionally gzipped) file; bad UTF-8 is an error naming the line,
    and so is a line over :data:`~vtrepro.core.archives.MAX_LINE_BYTES` (read in bounded pieces: a 2 GiB line in
    a 2 MB ``.gz`` never sits in memory)."""
    path = Path(path)
    if not path.is_file():
        raise VtreproError(f"{path}: file not found")
    line_number = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as handle:
            for line_number, raw in bounded_lines(handle, path, MAX_LINE_BYTES):
                yield line_number, _decoded(raw, path, line_number)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise VtreproError(f"{path}:{line_number + 1}: corrupt or truncated gzip data ({error}); "
                           "download or compress the file again") from None


def _decoded(raw: bytes, path: Path, line_number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise VtreproError(
            f"{path}:{line_number}: not valid UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1}); "
            "re-save the file as UTF-8"
        ) from None


def unsafe_character(text: str) -> str | None:
    """The first whitespace or control character in an id or term (Anserini would split or mangle it), or None.

    This is what outside input may not hold; the encoder's own escaping (:func:`vtrepro.encode.vectors.escape_term`)
    is wider on purpose: it also escapes format characters, so every term it writes passes here.
    """
    for char in text:
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cs"):
            return char
    return None


MAX_JSON_DEPTH = 64
"""Deepest nesting of any JSON file or line vtrepro reads from a user (model configs, tokenizers, reports,
vectors, pairs, trainer states, bundle and index headers nest at most 8 levels): deeper input is refused
before it reaches a recursive reader (Python's or transformers'), where it ended in RecursionError."""
MAX_JSON_INT_DIGITS = 40
"""Most digits of a JSON integer: every count, id or impact fits in far fewer; 5,000 digits make Python refuse
the conversion (a ValueError) and millions make it slow."""
JsonKind = Literal["model", "manifest", "receipt", "scan", "index", "bundle", "prebuilt", "results", "stamp",
                   "trainer_state", "pairs", "safetensors_header", "gap"]
"""The kinds of JSON file vtrepro reads, each with its one size cap in :data:`JSON_FILE_BYTES`."""
JSON_FILE_BYTES: dict[JsonKind, int] = {
    "model": 64 * 2**20,  # a model folder's configs, tokenizer (a large multilingual tokenizer.json is about 17 MB),
    # reports (transfer, MLM, training, calibration) and idf.json
    "manifest": 64 * 2**20,  # a vector folder's manifest.json and timings.json (a shard is about 200 bytes of each)
    "receipt": 2**20,  # one finished shard's receipt (a few hundred bytes)
    "scan": 64 * 2**20,  # scan.json: one pass over a vector folder (its files' keys and statistics)
    "index": 2**20,  # a PISA index's vtrepro-pisa.json (a few hundred bytes)
    "bundle": 16 * 2**20,  # a vector bundle's bundle.json (every run's fingerprints)
    "prebuilt": 16 * 2**20,  # a prebuilt index tarball's vtrepro.json; export index's prebuilt.json
    "results": 32 * 2**20,  # results.json and per_query.json (10 conditions on 29 sets: about 1 MiB)
    "stamp": 2**20,  # a run folder's build stamps (<folder>.build.json: a few settings)
    "trainer_state": 16 * 2**20,  # a checkpoint's trainer_state.json (scalars and parameter-group settings)
    "pairs": 2**30,  # a pairs file written as one JSON array (JSON lines are read line by line)
    "safetensors_header": 100_000_000,  # a safetensors file's JSON header
    "gap": 16 * 2**20,  # a gap study's census, corpus, bm25 and integrity.json (8 tokenizers on 2 sets: 100 KiB)
}
"""The one size cap of each kind of JSON file, checked with ``stat`` before the file is opened and again on
the bytes read (:func:`read_json_file`)."""
MAX_MODEL_JSON_BYTES = JSON_FILE_BYTES["model"]
"""Largest JSON file of a model folder read (the ``model`` cap of :data:`JSON_FILE_BYTES`)."""


def _refuse_constant(name: str) -> float:
    raise ValueError(f"holds {name}, which is not a number")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_JSON_INT_DIGITS:
        raise ValueError(f"holds an integer of {digits} digits, more than any value vtrepro reads")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"holds {text[:40]}, which is too large for a number")
    return value


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


def json_depth(data: bytes | str) -> int:
    """The deepest nesting of JSON text (strings skipped), counted without parsing it (in C and numpy: a
    tokenizer.json of 17 MB takes a few tenths of a second)."""
    import numpy as np

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    codes = np.frombuffer(brackets, dtype=np.uint8)
    return int(np.cumsum(np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)).max())


def parse_json(data: bytes | str, where: str, fix: str) -> Any:
    """JSON text (``where`` names it in messages: ``file`` or ``file:line``) parsed with its nesting bounded
    (:data:`MAX_JSON_DEPTH`), numbers finite (no NaN, Infinity, 1e999) and integers of bounded digits; bytes
    must be UTF-8. Any fault is one VtreproError ``where: what; fix``."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as error:
        raise VtreproError(f"{where}: not valid UTF-8 (byte {error.start}); {fix}") from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise VtreproError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels (no file vtrepro reads nests "
                           f"more than 8); {fix}")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except json.JSONDecodeError as error:
        one_line = "\n" not in text.rstrip("\r\n")  # a JSONL line: ``where`` names it, the column places the fault
        position = f"column {error.pos + 1}" if one_line else f"line {error.lineno} column {error.colno}"
        raise VtreproError(f"{where}: not valid JSON ({error.msg}, {position}); {fix}") from None
    except ValueError as error:  # a non-finite number, an integer of too many digits
        raise VtreproError(f"{where}: {' '.join(str(error).split())[:200]}; {fix}") from None
    except RecursionError:  # below MAX_JSON_DEPTH only when the stack is nearly used up already
        raise VtreproError(f"{where}: JSON nested too deeply; {fix}") from None


def check_regular_file(path: Path, max_bytes: int, fix: str, folder: Path | None = None) -> int:
    """The size of ``path`` once it is known to be a regular file (links followed: never a FIFO, a device or a
    socket, which would block or never end) of at most ``max_bytes``, lying inside ``folder`` (when given) once
    links are followed; checked with ``stat``, before anything opens it. Anything else is one line."""
    if folder is not None:
        resolved = path.resolve()
        if not resolved.is_relative_to(folder.resolve()):
            raise VtreproError(f"{path}: leads to {resolved}, outside the folder {folder}; vtrepro reads only files "
                               f"inside the folders it is given: {fix}")
    try:
        mode = path.stat()
    except FileNotFoundError:
        raise VtreproError(f"{path}: not found (a dangling link?); {fix}") from None
    except OSError as error:
        raise VtreproError(f"{path}: cannot be read ({error.strerror}); {fix}") from None
    if not stat.S_ISREG(mode.st_mode):
        what = "a folder" if stat.S_ISDIR(mode.st_mode) else next(
            (what for test, what in _SPECIAL_FILES if test(mode.st_mode)), "a special file")
        raise VtreproError(f"{path}: is {what}, not a regular file; {fix}")
    if mode.st_size > max_bytes:
        raise VtreproError(f"{path}: {mode.st_size} bytes, more than the {max_bytes} such a file may hold; {fix}")
    return mode.st_size


def check_folder_files(folder: Path, fix: str, max_bytes: int = 2**62) -> list[Path]:
    """Every file under ``folder`` (its subfolders too), each a regular file of at most ``max_bytes`` inside the
    folder once links are followed (:func:`check_regular_file`), checked with ``stat`` before anything opens
    one: a FIFO, a device or a link leading out, anywhere in it, is one line ending with ``fix``. Returns them."""
    files = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and not path.is_symlink():  # a linked folder is refused below (a folder, or outside)
            files += check_folder_files(path, fix, max_bytes)
        else:
            check_regular_file(path, max_bytes, fix, folder)
            files.append(path)
    return files


def open_regular_file(path: str | Path, fix: str) -> IO[bytes]:
    """``path`` opened for reading without ever blocking (``O_NONBLOCK``: a FIFO swapped in after a
    :func:`check_regular_file` opens at once) and checked again on the open descriptor: a regular file, or
    one line ending with ``fix``."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise VtreproError(f"{path}: cannot be read ({error.strerror}); {fix}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise VtreproError(f"{path}: is no longer a regular file (replaced while being read); {fix}")
    return os.fdopen(fd, "rb")


FieldTypes = Mapping[str, type | tuple[type, ...]]
"""The fields of a JSON object a reader uses, each with its type (or types; ``type(None)`` among them makes the
field optional): :func:`check_fields`."""


def check_fields(value: Any, where: str, fix: str, fields: FieldTypes) -> dict[str, Any]:
    """``value`` as a JSON object whose ``fields`` have their types (a bool is no int), or one line naming
    ``where`` and the first field that is missing or of another type."""
    if not isinstance(value, dict):
        raise VtreproError(f"{where}: holds a JSON {_json_type(value)}, not an object; {fix}")
    for name, kinds in fields.items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        field = value.get(name)
        if not isinstance(field, kinds) or (isinstance(field, bool) and bool not in kinds):
            got = "is missing" if name not in value else f"is a JSON {_json_type(field)}"
            wanted = " or ".join(_JSON_TYPES.get(kind, kind.__name__) for kind in kinds)
            raise VtreproError(f"{where}: field {name!r} {got}, expected {wanted}; {fix}")
    return value


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean",
               type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def read_json_file(path: str | Path, fix: str, max_bytes: int = MAX_MODEL_JSON_BYTES,
                   folder: Path | None = None, fields: FieldTypes | None = None) -> Any:
    """A JSON file, whoever wrote it (vtrepro or a stranger: the one path): a regular file
    (:func:`check_regular_file`: checked before it is opened, inside ``folder`` when given) of at most
    ``max_bytes`` (its kind's cap in :data:`JSON_FILE_BYTES`), opened without blocking
    (:func:`open_regular_file`), parsed by :func:`parse_json`; with ``fields``, an object whose fields have
    those types (:func:`check_fields`). Every fault is one line ending with ``fix``."""
    path = Path(path)
    check_regular_file(path, max_bytes, fix, folder)
    try:
        with open_regular_file(path, fix) as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise VtreproError(f"{path}: cannot be read ({error.strerror}); {fix}") from None
    if len(data) > max_bytes:
        raise VtreproError(f"{path}: more than the {max_bytes} bytes such a file may hold; {fix}")
    value = parse_json(data, str(path), fix)
    return value if fields is None else check_fields(value, str(path), fix, fields)


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; a bad line is a one-line error.

    Written by hand rather than with ``jsonlines.Reader``: every caller needs the line number of
    valid records too (a duplicate id, a bad impact), which the reader does not expose.
    """
    path = Path(path)
    yield from _records(path, read_lines(path))


def read_jsonl_range(path: str | Path, start: int, stop: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`read_jsonl` of the lines of a plain (not gzipped) file from byte ``start`` to byte ``stop``, both at
    line starts (``stop`` may be the file's end), numbered by their line in the whole file: read by offset, with
    nothing before ``start`` read but its newlines (counted for the numbers)."""
    path = Path(path)

    def lines() -> Iterator[tuple[int, str]]:
        with open(path, "rb") as handle:
            before = 0
            while handle.tell() < start:
                chunk = handle.read(min(2**24, start - handle.tell()))
                if not chunk:
                    raise VtreproError(f"{path}: shorter than byte {start}: changed while being read; rerun")
                before += chunk.count(b"\n")
            for number, raw in bounded_lines(_ByteRange(handle, stop - start), path, MAX_LINE_BYTES):
                yield before + number, _decoded(raw, path, before + number)

    yield from _records(path, lines())


class _ByteRange:
    """The next ``size`` bytes of an open file, read line by line (:func:`~vtrepro.core.archives.bounded_lines`)."""

    def __init__(self, handle: IO[bytes], size: int):
        self.handle, self.left = handle, size

    def readline(self, size: int = -1, /) -> bytes:
        limit = self.left if size < 0 else min(size, self.left)
        raw = self.handle.readline(limit) if limit > 0 else b""
        self.left -= len(raw)
        return raw


def _records(path: Path, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON object of each non-blank numbered line; a bad line is a one-line error."""
    for line_number, line in lines:
        if not line.strip():
            continue
        record = parse_json(line, f"{path}:{line_number}", "fix or remove that line")
        if not isinstance(record, dict):
            raise VtreproError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
        yield line_number, record


OutputKind = Literal["file", "folder"]
_SPECIAL_FILES = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                  (stat.S_ISSOCK, "a socket"))


def check_output(path: str | Path, inputs: Iterable[str | Path | None] = (), kind: OutputKind = "file") -> Path:
    """Fail before any work when ``path`` may not or cannot be written: the one check of every output.

    Symlinks are followed. Refused: an existing ``path`` that is not a regular file (``kind="file"``: a
    folder, device, FIFO or socket, or a link to one) or not a folder (``kind="folder"``); a ``path`` that
    is an input (same resolved path or same inode), lies inside an input folder or, as a folder, holds an
    input (an input file's checksum sidecars, ``<file>.sha256`` and ``.md5``, count as inputs); a place
    where nothing can be created (tried for real). ``inputs`` are the files and folders the command reads;
    those that do not exist (a Hub id, a dataset name) are skipped, so callers pass the folder a name
    resolves to. Creates nothing.
    """
    path = Path(path)
    _check_kind(path, kind)
    places = _written_places(path)
    for given in inputs:
        if given is not None and Path(given).exists():
            for read in (Path(given), *checksum_sidecars(Path(given))):
                _check_apart(path, places, read, kind)
    _check_creatable(path if kind == "folder" else path.absolute().parent)
    return path


SIDECAR_SUFFIXES = (".sha256", ".md5")
"""Checksum files written beside a tarball or bundle (``<file>.sha256``): read with it, so inputs too."""


def checksum_sidecars(given: Path) -> list[Path]:
    """The checksum files beside the input file ``given`` that exist: an output may not replace them either."""
    if not given.is_file():
        return []
    return [sidecar for suffix in SIDECAR_SUFFIXES if (sidecar := given.with_name(given.name + suffix)).exists()]


def _written_places(path: Path) -> set[Path]:
    """Where writing ``path`` lands: its resolved target and, for a link, the link itself (a rename replaces it)."""
    resolved = path.resolve()
    return {resolved, path.absolute().parent.resolve() / path.name} if path.is_symlink() else {resolved}


def _check_kind(path: Path, kind: OutputKind) -> None:
    """An existing output must be a regular file (``kind="file"``) or a folder (``kind="folder"``)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return  # new, or a dangling link (a write replaces the link itself)
    except OSError:
        return  # not reachable (a file in the way, no permission): the creatable check names it
    linked = f" (a link to {path.resolve()})" if path.is_symlink() else ""
    if stat.S_ISDIR(mode):
        if kind == "file":
            raise VtreproError(f"{path}: is a folder{linked}; give a file path for the output")
        return
    what = "a file" if stat.S_ISREG(mode) else next((what for test, what in _SPECIAL_FILES if test(mode)), "a special file")
    if kind == "folder":
        raise VtreproError(f"{path}: is {what}{linked}, not a folder; choose another output path")
    if not stat.S_ISREG(mode):
        raise VtreproError(f"{path}: is {what}{linked}, not a regular file; vtrepro writes only regular files: "
                           "choose another output path")


def _check_apart(path: Path, places: set[Path], given: Path, kind: OutputKind) -> None:
    """``path`` (written at ``places``) must not be the input ``given``, lie inside it, or hold it."""
    source = given.resolve()
    what = "input folder" if source.is_dir() else "input file"
    if source in places or (path.exists() and os.path.samefile(path, given)):
        raise VtreproError(f"{path}: is the {what} {given}; writing there would overwrite it: choose another output path")
    if any(place.is_relative_to(source) for place in places):
        raise VtreproError(f"{path}: lies inside the {what} {given}; vtrepro never writes inside an input: "
                           "choose another output path")
    if kind == "folder" and any(source.is_relative_to(place) for place in places):
        raise VtreproError(f"{path}: holds the {what} {given}, which writing there could replace; "
                           "choose another output path")


def _check_creatable(folder: Path) -> None:
    """Fail when ``folder`` (existing, or to be created later) cannot be written; creates nothing."""
    existing = next(path for path in (folder, *folder.absolute().parents) if path.exists())
    if not existing.is_dir():
        raise VtreproError(f"{existing}: is a file, not a folder; choose another output path")
    check_writable(existing)


def check_within(path: str | Path, root: str | Path) -> Path:
    """``path`` itself, failing when it (symlinks followed) does not lie strictly under ``root``: an artifact
    path built from names in a file (a spec's conditions and datasets) cannot leave its output root."""
    path, resolved_root = Path(path), Path(root).resolve()
    resolved = path.resolve()
    if resolved == resolved_root or not resolved.is_relative_to(resolved_root):
        raise VtreproError(f"{path}: resolves to {resolved}, outside the output folder {root}; rename what names "
                           "it, or remove the link that leads there")
    return path


def check_writable(folder: str | Path) -> None:
    """Fail when no file can be created in the existing ``folder`` (tried for real: permissions, read-only
    file systems and root's exemptions all answer)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise VtreproError(f"{folder}: cannot write here ({error.strerror}); choose another output path") from None


def rewritten_in_place(path: str | Path) -> Path:
    """The file that rewriting the given file ``path`` in place (``regress --record`` into its spec) replaces:
    ``path`` itself, or, when it is a symbolic link, the file it leads to, which must lie inside the link's own
    folder (written there atomically; the link stays a link). A link leading anywhere else is refused in one
    line: vtrepro never replaces a link with a file, nor writes where a link sent from elsewhere points."""
    path = Path(path)
    if not path.is_symlink():
        return path
    target, folder = path.resolve(), path.absolute().parent.resolve()
    if not target.is_relative_to(folder):
        raise VtreproError(f"{path}: is a symbolic link to {target}, outside the link's folder {folder}; vtrepro "
                           "rewrites a linked file only inside that folder and never replaces the link: give the "
                           f"file itself ({target}) or copy it here")
    return target


def check_replaceable(path: str | Path) -> Path:
    """Fail before any work when the existing regular file ``path`` (a link: the file it leads to, which
    :func:`rewritten_in_place` must accept) cannot be replaced by an atomic write: it or its folder is on a
    read-only file system or not writable for this user (each tried for real), or its mode marks it read-only
    (honoured for root too, whom the mode does not stop). Returns the file a rewrite replaces."""
    path = rewritten_in_place(path)
    _check_kind(path, "file")
    try:
        with open(path, "r+b"):  # opened for writing, nothing written
            pass
    except OSError as error:
        raise VtreproError(f"{path}: cannot be rewritten ({error.strerror}); make it writable or work on a copy") from None
    if not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise VtreproError(f"{path}: is marked read-only (mode {stat.S_IMODE(path.stat().st_mode):o}); "
                           "make it writable (chmod u+w) or work on a copy")
    check_writable(path.absolute().parent)
    return path


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a zombie, or another user's process, counts): the
    owner test of the work folders an index build names after its pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    return True
