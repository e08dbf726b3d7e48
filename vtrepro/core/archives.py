"""Bounded reading of compressed and archived input: the one place tar members, checksum sidecars, lines and disk
room are checked.

Python's ``tarfile`` reads a GNU long-name (``././@LongLink``) or PAX extended header whole, at whatever size
its header declares, before the caller sees the member: a 3 MB ``.tar.gz`` declaring a 2 GB long name took
the process to 6.2 GB. :func:`open_tar` opens every archive vtrepro reads with :class:`BoundedTarInfo`, which
refuses such a header from its 512-byte block, before its payload is read (and GNU sparse headers, whose maps
are read block by block without end, and chains of extended headers, which ``tarfile`` follows by
recursion). :func:`extract_tar` is the one reader of tar members: vector bundles and prebuilt indexes both go
through it, each with its :class:`TarRules`; :func:`check_sidecar` is the one reader of ``sha256sum``/``md5sum``
sidecars; :func:`new_tar` opens the archives vtrepro writes. :func:`bounded_lines` reads lines in bounded pieces
so one huge line never sits in memory; :func:`check_room` compares what an extraction will write with the
disk's free space before it writes.
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterator, Protocol

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


# --- tar archives: the one reader of their members -----------------------------------------------------------


@contextlib.contextmanager
def new_tar(handle: IO[bytes] | gzip.GzipFile, tar_format: int) -> Iterator[tarfile.TarFile]:
    """A tar archive written into ``handle`` in ``tar_format``; the writer adds its members (what is read back is
    checked by :func:`extract_tar`, whoever wrote it)."""
    with tarfile.open(fileobj=handle, mode="w", format=tar_format) as archive:
        yield archive


def _no_problem(member: tarfile.TarInfo, first: str | None) -> str | None:
    return None


@dataclass(frozen=True)
class TarRules:
    """What one kind of archive may hold, and how its refusals read.

    ``noun`` names the archive in refusals ("has a path that leaves the bundle"); ``kind`` says what a refused
    archive is not and ``remedy`` what to do ("not a vtrepro bundle: fetch it again or re-export it"). Members may
    declare at most ``budget`` bytes in all (``why`` says why that many) and be at most ``max_members``.
    ``member_problem(member, first)`` is the kind's own check of a member's header (``first``: the first member
    accepted, None before it), and ``max_line_bytes``, when given, bounds every line a member holds."""

    noun: str
    kind: str
    remedy: str
    budget: int
    why: str
    max_members: int
    member_problem: Callable[[tarfile.TarInfo, str | None], str | None] = _no_problem
    max_line_bytes: int | None = None

    @property
    def fix(self) -> str:
        return f"{self.kind}: {self.remedy}"


class _MemberCheck:
    """The checks every archive's members get, in order: their number, plain files and folders only, no sparse
    member, no path leaving the archive, the kind's own check, no name twice, the declared sizes within the budget."""

    def __init__(self, path: Path, rules: TarRules, refused: str) -> None:
        self.path, self.rules, self.refused = path, rules, refused
        self.names: set[str] = set()
        self.first: str | None = None
        self.total = 0

    def problem(self, member: tarfile.TarInfo) -> str | None:
        rules, parts = self.rules, PurePosixPath(member.name).parts
        if len(self.names) >= rules.max_members:
            return f"is one more than the {rules.max_members} members a {rules.noun} may hold"
        if not (member.isfile() or member.isdir()):
            return "is not a plain file or folder (a link, device or FIFO)"
        if member.issparse():
            return f"is a sparse file declaring {member.size} bytes; vtrepro never writes one"
        if not parts or member.name.startswith("/") or PurePosixPath(member.name).is_absolute() or ".." in parts:
            return f"has a path that leaves the {rules.noun}"
        own = rules.member_problem(member, self.first)
        if own is not None:
            return own
        if member.name.rstrip("/") in self.names:
            return "appears twice"
        self.total += member.size
        if self.total > rules.budget:
            return f"brings the declared sizes to {self.total} bytes, more than the {rules.budget} allowed ({rules.why})"
        return None

    def __call__(self, member: tarfile.TarInfo) -> tarfile.TarInfo:
        """``member``, once its header passes every check; else one refusal naming the archive and the member."""
        problem = self.problem(member)
        if problem is not None:
            raise VtreproError(f"{self.path}: member {member.name!r} {problem}; {self.rules.kind} ({self.refused}): "
                               f"{self.rules.remedy}")
        self.names.add(member.name.rstrip("/"))
        self.first = self.first or member.name
        return member


def extract_tar(path: Path, mode: str, target: Path, rules: TarRules) -> list[tarfile.TarInfo]:
    """Extract the tar archive ``path`` (``tarfile`` ``mode``: ``"r:"``, ``"r:gz"`` or the stream ``"r|gz"``) into the
    existing empty folder ``target`` under ``rules``; return its members.

    Every header is bounded before ``tarfile`` reads what it declares (:func:`open_tar`) and checked before a byte
    of its member is written (:class:`_MemberCheck`). An archive that can be seeked has every header checked
    before anything is extracted, then its total checked against the disk's free space; a stream has each header
    checked, and its size against the free space, before its own bytes. Members are streamed in blocks into files
    created anew (``O_EXCL|O_NOFOLLOW``), never more than each declares; what is written on a refusal is the
    caller's to remove (``target`` is a staging folder)."""
    whole = "|" not in mode
    check = _MemberCheck(path, rules, "refused before extracting anything" if whole else
                         "refused before writing it; nothing was kept")
    members: list[tarfile.TarInfo] = []
    try:
        with open_tar(path, mode, rules.fix) as archive:
            if whole:
                members = [check(member) for member in archive]
                check_room(target, check.total, path, "extracting its members")
                for member in members:
                    _place(archive, member, target, path, rules)
            else:
                for member in archive:
                    members.append(check(member))
                    check_room(target, member.size, path, f"member {member.name!r}")
                    _place(archive, member, target, path, rules)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise VtreproError(f"{path}: not a readable {rules.noun} ({error}); it is damaged or truncated: "
                           f"{rules.remedy}") from None
    if not members:
        raise VtreproError(f"{path}: an empty archive; {rules.fix}")
    return members


def _place(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path, path: Path, rules: TarRules) -> None:
    """Make one checked member under ``target``: a folder, or a new file its bytes are streamed into."""
    destination = target.joinpath(*PurePosixPath(member.name).parts)
    try:
        if member.isdir():
            destination.mkdir(parents=True, exist_ok=True)
            return
        destination.parent.mkdir(parents=True, exist_ok=True)
        _stream(archive, member, destination, path, rules)
    except (FileExistsError, NotADirectoryError):
        raise VtreproError(f"{path}: member {member.name!r} collides with a file or folder of the same name; "
                           f"{rules.fix}") from None


def _stream(archive: tarfile.TarFile, member: tarfile.TarInfo, destination: Path, path: Path, rules: TarRules) -> None:
    """Copy a regular member in blocks into a file created anew, verifying its size (and its lines' lengths when
    the rules bound them) as it is written."""
    source = archive.extractfile(member)
    assert source is not None  # a checked regular member
    written, open_line = 0, 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with source, open(os.open(destination, flags, 0o644), "wb") as handle:
        for block in iter(lambda: source.read(COPY_BLOCK), b""):
            written += len(block)
            if rules.max_line_bytes is not None:
                open_line = line_length(block, open_line, rules.max_line_bytes)
                if open_line > rules.max_line_bytes:
                    raise VtreproError(f"{path}: member {member.name!r} has a line longer than {rules.max_line_bytes} "
                                       f"bytes; {rules.fix}")
            handle.write(block)
    if written != member.size:
        raise VtreproError(f"{path}: member {member.name!r} holds {written} bytes but declares {member.size}; the "
                           f"{rules.noun} is damaged or truncated: {rules.remedy}")


def line_length(block: bytes, carried: int, max_bytes: int = MAX_LINE_BYTES) -> int:
    """The length of the line still open after ``block``, or more than ``max_bytes`` when a line in it (with the
    ``carried`` open line before it) is too long; lines within one block are shorter than the cap."""
    first = block.find(b"\n")
    if first == -1:
        return carried + len(block)
    if carried + first > max_bytes:
        return carried + first
    return len(block) - block.rfind(b"\n") - 1


# --- checksum sidecars -----------------------------------------------------------------------------------------


def file_digest(path: Path, kind: str = "sha256") -> str:
    """Hex digest (``kind``: ``sha256`` or ``md5``) of a file's bytes, read in blocks."""
    digest = hashlib.new(kind)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(COPY_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sidecar(path: Path, sidecar: Path, kind: str = "sha256") -> str:
    """``path``'s digest (``kind``), once it equals the one ``sidecar`` records (``sha256sum``/``md5sum`` format,
    its first word; at most 4,096 bytes read) when ``sidecar`` exists; else one error: the file is damaged."""
    actual = file_digest(path, kind)
    if sidecar.is_file():
        with open(sidecar, "rb") as handle:
            recorded = handle.read(4096).decode("utf-8", errors="replace").split()[:1]
        if recorded != [actual]:
            raise VtreproError(f"{path}: {kind} {actual[:12]}... does not match {sidecar} "
                               f"({(recorded or ['nothing'])[0][:12]}...); the file is damaged or truncated: fetch it again")
    return actual
