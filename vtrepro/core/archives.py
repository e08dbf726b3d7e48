"""Bounded reading of compressed and archived input: the one place tar headers, lines and disk room are checked.

Python's ``tarfile`` reads a GNU long-name (``././@LongLink``) or PAX extended header whole, at whatever size
its header declares, before the caller sees the member: a 3 MB ``.tar.gz`` declaring a 2 GB long name took
the process to 6.2 GB. :func:`open_tar` opens every archive vtrepro reads with :class:`BoundedTarInfo`, which
refuses such a header from its 512-byte block, before its payload is read (and GNU sparse headers, whose maps
are read block by block without end, and chains of extended headers, which ``tarfile`` follows by
recursion). :func:`bounded_lines` reads lines in bounded pieces so one huge line never sits in memory;
:func:`check_room` compares what an extraction will write with the disk's free space before it writes.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Protocol

from vtrepro.core.errors import VtreproError

MAX_LINE_BYTES = 64 << 20
"""Longest line any reader takes (bytes): far above a 250k-term vector or a BEIR document, far below memory."""
MAX_EXTENDED_HEADER_BYTES = 64 << 10
"""Largest GNU long-name or PAX payload: a path of 4,096 bytes with its PAX records fits many times over."""
MAX_EXTENDED_HEADERS = 8
"""Extended headers in a row before one member (``tarfile`` follows them by recursion); writers use one or two."""
MAX_EXTENDED_TOTAL_BYTES = 64 << 20
"""Extended-header payloads in one archive, all kept in memory with the member list: 1,000 maximal ones."""

MAX_EXPANSION = 32
"""Declared bytes per compressed byte: gzip or zip shrink Lucene's compressed files 1.1-3x, text 3-5x, a bomb 1000x."""
MIN_ALLOWANCE = 64 << 20
"""Declared bytes any archive may hold whatever its size: a small index's topics repeat terms and shrink ~100x."""
MAX_ZIP_MEMBERS = 10_000
"""Members of a downloaded dataset zip: BEIR's largest, cqadupstack, holds about 60."""
COPY_BLOCK = 1 << 20
"""Bytes copied at a time from an archive member to disk."""

_EXTENDED_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                   tarfile.SOLARIS_XHDTYPE)


class LineSource(Protocol):
    """A binary file or decompressing stream: what :func:`bounded_lines` reads."""

    def readline(self, size: int = ..., /) -> bytes: ...


class ArchiveRefusal(Exception):
    """A member header refused from its block, before ``tarfile`` reads what it declares."""

    def __init__(self, member: str, problem: str) -> None:
        super().__init__(f"member {member!r:.200} {problem}")


class BoundedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` whose extended headers are checked before their payloads are read."""

    def _proc_member(self, archive: tarfile.TarFile) -> Any:
        state = _state(archive)
        if self.type in _EXTENDED_TYPES:
            state["chain"] += 1
            state["total"] += self.size
            if self.size > MAX_EXTENDED_HEADER_BYTES or self.size < 0:
                raise ArchiveRefusal(self.name, f"has an extended header (GNU long name or PAX) declaring {self.size} "
                                                f"bytes, more than the {MAX_EXTENDED_HEADER_BYTES} any path needs")
            if state["chain"] > MAX_EXTENDED_HEADERS:
                raise ArchiveRefusal(self.name, f"follows more than {MAX_EXTENDED_HEADERS} extended headers in a row")
            if state["total"] > MAX_EXTENDED_TOTAL_BYTES:
                raise ArchiveRefusal(self.name, f"brings the extended headers to more than {MAX_EXTENDED_TOTAL_BYTES} "
                                                "bytes in all")
        else:
            state["chain"] = 0
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise ArchiveRefusal(self.name, "is a sparse file (an old GNU sparse header); vtrepro never writes one")
        return super()._proc_member(archive)  # type: ignore[misc]  # tarfile's own, not in its stubs

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: Any, archive: tarfile.TarFile) -> None:
        """GNU sparse 1.0 keeps its map in the member's data, read block by block without a bound: refused."""
        raise ArchiveRefusal(next.name, "is a sparse file (GNU sparse 1.0); vtrepro never writes one")


def _state(archive: tarfile.TarFile) -> dict[str, int]:
    """The extended headers seen in a row and in all, kept on the archive being read."""
    state: dict[str, int] = vars(archive).setdefault("_vtrepro_bounds", {"chain": 0, "total": 0})
    return state


@contextlib.contextmanager
def open_tar(path: Path, mode: str, fix: str) -> Iterator[tarfile.TarFile]:
    """``tarfile.open(path, mode)`` with every header bounded (:class:`BoundedTarInfo`); a refused header is one
    :class:`VtreproError` naming ``path``, the member and ``fix``."""
    try:
        with tarfile.open(path, mode=mode, tarinfo=BoundedTarInfo) as archive:  # type: ignore[call-overload]
            yield archive
    except ArchiveRefusal as refusal:
        raise VtreproError(f"{path}: {refusal}; refused before reading it: {fix}") from None


def bounded_lines(handle: LineSource, label: object, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_line)``, reading at most ``max_bytes + 1`` bytes at a time; a longer line is an
    error naming ``label`` and the line, raised before the rest of it is read."""
    for line_number, raw in enumerate(iter(lambda: handle.readline(max_bytes + 1), b""), start=1):
        if len(raw) > max_bytes:
            raise VtreproError(f"{label}:{line_number}: a line longer than {max_bytes} bytes (the most vtrepro reads "
                               "as one line); not a file of the expected format: split or fix that line")
        yield line_number, raw


def check_room(folder: Path, needed: int, source: object, what: str) -> None:
    """Fail when writing ``needed`` more bytes under ``folder`` would not fit on its disk (checked before writing:
    an archive that declares more than the disk holds is refused, not discovered half-written)."""
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise VtreproError(f"{source}: {what} needs {needed} bytes, but the disk holding {folder} has {free} free; "
                           "free disk space or give a cache on a larger disk")


def expansion_allowance(archive: Path, max_bytes: int) -> tuple[int, str]:
    """The most bytes an archive's members may declare in all, and why: :data:`MAX_EXPANSION` times its size
    plus :data:`MIN_ALLOWANCE`, never above ``max_bytes``."""
    size = archive.stat().st_size
    by_size = MIN_ALLOWANCE + MAX_EXPANSION * size
    if by_size < max_bytes:
        return by_size, f"{MAX_EXPANSION} x its {size} compressed bytes + {MIN_ALLOWANCE}: an archive bomb"
    return max_bytes, "the most such an archive may hold"


def extract_zip(path: Path, target: Path, label: object, max_bytes: int) -> None:
    """Extract the zip ``path`` into the new folder ``target``: every entry checked first (at most
    :data:`MAX_ZIP_MEMBERS`, plain relative paths, declared sizes within :func:`expansion_allowance` and the
    disk's free space), then streamed in blocks, never more than each declares; errors name ``label``."""
    with zipfile.ZipFile(path) as archive:
        entries = archive.infolist()
        if len(entries) > MAX_ZIP_MEMBERS:
            raise VtreproError(f"{label}: holds {len(entries)} entries, more than the {MAX_ZIP_MEMBERS} a dataset "
                               "zip holds; not the expected archive")
        allowed, why = expansion_allowance(path, max_bytes)
        total = 0
        for entry in entries:
            parts = PurePosixPath(entry.filename).parts
            if not parts or entry.filename.startswith("/") or ".." in parts or "\\" in entry.filename:
                raise VtreproError(f"{label}: entry {entry.filename!r:.200} has a path that leaves the archive; "
                                   "not the expected archive")
            total += entry.file_size
            if total > allowed:
                raise VtreproError(f"{label}: entry {entry.filename!r:.200} brings the declared sizes to {total} "
                                   f"bytes, more than the {allowed} allowed ({why}); not the expected archive")
        target.mkdir()
        check_room(target, total, label, "extracting it")
        for entry in entries:
            destination = target.joinpath(*PurePosixPath(entry.filename).parts)
            if entry.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            with archive.open(entry) as source, open(os.open(destination, flags, 0o644), "wb") as handle:
                shutil.copyfileobj(source, handle, COPY_BLOCK)
