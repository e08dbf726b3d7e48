"""Atomic writes and line-checked JSONL / TSV reading shared by every stage."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import tempfile
import unicodedata
import zlib
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import jsonlines

from vtrepro.core.errors import VtreproError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Write to a temporary file beside ``path`` and rename it into place only on success."""
    path = Path(path)
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
    """Yield ``(line_number, text)`` of a UTF-8 (optionally gzipped) file; bad UTF-8 is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise VtreproError(f"{path}: file not found")
    line_number = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as handle:
            for line_number, raw in enumerate(handle, start=1):
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


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; a bad line is a one-line error.

    Written by hand rather than with ``jsonlines.Reader``: every caller needs the line number of
    valid records too (a duplicate id, a bad impact), which the reader does not expose.
    """
    path = Path(path)
    for line_number, line in read_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise VtreproError(
                f"{path}:{line_number}: not valid JSON ({error.msg}); fix or remove that line"
            ) from None
        if not isinstance(record, dict):
            raise VtreproError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
        yield line_number, record


def check_output_file(path: str | Path) -> Path:
    """Fail before any work when ``path`` cannot be written as a file: it is a folder, or its folder is not writable."""
    path = Path(path)
    if path.is_dir():
        raise VtreproError(f"{path}: is a folder; give a file path for the output")
    check_output_folder(path.parent)
    return path


def check_output_folder(folder: str | Path) -> Path:
    """Fail before any work when ``folder`` (existing, or to be created later) cannot be written; creates nothing."""
    folder = Path(folder)
    existing = next(path for path in (folder, *folder.absolute().parents) if path.exists())
    if not existing.is_dir():
        raise VtreproError(f"{existing}: is a file, not a folder; choose another output path")
    check_writable(existing)
    return folder


def check_writable(folder: str | Path) -> None:
    """Fail when no file can be created in the existing ``folder`` (tried for real: permissions, read-only
    file systems and root's exemptions all answer)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise VtreproError(f"{folder}: cannot write here ({error.strerror}); choose another output path") from None


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
