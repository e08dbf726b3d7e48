"""Vector bundles: a regression's encoded corpora and query vectors as one checksummed ``.tar``.

A bundle holds, per run, ``<condition>/<dataset>/`` with ``manifest.json``, ``vectors/*.jsonl`` and
``queries.jsonl``, and at the top ``bundle.json``: the fingerprints of every run's vectors, the spec
and the environment that encoded them. Beside it, ``<bundle>.sha256`` (``sha256sum`` format).
``regress --vectors bundle.tar`` checks both before it uses anything, so figures computed from a
published bundle are exact on any machine.

A bundle comes from elsewhere, so it is opened as hostile input: every member's header is checked
before anything is extracted (plain files and folders only, paths inside the bundle, no sparse
members, each declared size and their total within the bundle's own size, the JSON headers and the
member count within stated caps, their total within the disk's free space; long-name and PAX headers
bounded before ``tarfile`` reads them, :mod:`vtrepro.core.archives`), then members are streamed to disk in
blocks, their sizes and line lengths verified as they are written; nothing is read whole into memory.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import IO, Any, Iterable

from vtrepro.core.archives import MAX_LINE_BYTES as _MAX_LINE_BYTES
from vtrepro.core.archives import check_room, open_tar
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, check_fields, read_json_file, sha256_file
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_vectors
from vtrepro.encode.folder import MANIFEST_NAME, EncodedFolder
from vtrepro.encode.reader import read_query_vectors, vector_files
from vtrepro.encode.scan import scan_folder

BUNDLE_FORMAT = "vtrepro.vector-bundle/1"
BUNDLE_MANIFEST = "bundle.json"
MAX_MEMBERS = 200_000  # headers held in memory while checking; BEIR-13 plus MS MARCO at 2,000 per shard is ~8,000 a run
MAX_LINE_BYTES = _MAX_LINE_BYTES  # a vector line is read whole when fingerprinted: every line reader's bound
COPY_BLOCK = 1 << 20


def run_key(condition: str, dataset: str) -> str:
    return f"{condition}/{dataset}"


def run_fingerprints(run_dir: Path) -> dict[str, VectorSetSummary]:
    """Fingerprints of a run folder's corpus vectors (``vectors/`` of an encoded corpus, else the folder
    itself) and query vectors; the corpus's pass (:mod:`vtrepro.encode.scan`) is kept for this process's later stages."""
    folder = EncodedFolder(run_dir)
    return {"corpus": scan_folder(folder.vectors_or_root).fingerprint,
            "queries": fingerprint_vectors(read_query_vectors(folder.queries))}


def _members(run_dir: Path, key: str) -> list[tuple[str, Path]]:
    """(name in the bundle, file) of one run, or an error naming what is missing."""
    folder = EncodedFolder(run_dir)
    if not folder.is_complete():
        raise VtreproError(f"{run_dir}: no complete encoded corpus; run 'python -m vtrepro regress' for it first")
    if not folder.queries.is_file():
        raise VtreproError(f"{folder.queries}: missing; run 'python -m vtrepro regress' for it first")
    files = [folder.manifest_path, folder.queries, *vector_files(folder.vectors)]
    return [(f"{key}/{path.relative_to(run_dir).as_posix()}", path) for path in files]


def _add_member(archive: tarfile.TarFile, name: str, size: int, content: IO[bytes]) -> None:
    """Add ``size`` bytes from ``content`` as a member without time or owner (streamed, never read whole)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    archive.addfile(info, content)


def write_bundle(run_root: Path, runs: Iterable[tuple[str, str]], output: Path, spec_path: Path,
                 environment: dict[str, str]) -> str:
    """Bundle the runs under ``run_root/<condition>/<dataset>/`` into ``output``; return its sha256.

    Members are sorted and carry no time or owner, so the same vectors give the same bytes.
    """
    entries: dict[str, Any] = {}
    members: list[tuple[str, Path]] = []
    for condition, dataset in runs:
        key = run_key(condition, dataset)
        run_dir = run_root / condition / dataset
        members += _members(run_dir, key)
        entries[key] = {name: asdict(summary) for name, summary in run_fingerprints(run_dir).items()}
    if not entries:
        raise VtreproError(f"{run_root}: no impact runs to bundle (BM25 runs have no vectors)")
    header = {"format": BUNDLE_FORMAT, "spec": spec_path.name, "spec_text": spec_path.read_text(encoding="utf-8"),
              "environment": environment, "runs": entries}
    with atomic_write(output, "wb") as handle, tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as archive:
        manifest = (json.dumps(header, indent=2, ensure_ascii=False) + "\n").encode()
        _add_member(archive, BUNDLE_MANIFEST, len(manifest), io.BytesIO(manifest))
        for name, path in sorted(members):
            with open(path, "rb") as content:
                _add_member(archive, name, os.fstat(content.fileno()).st_size, content)
    digest = sha256_file(output)
    with atomic_write(checksum_path(output)) as handle:
        handle.write(f"{digest}  {output.name}\n")
    return digest


def checksum_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + ".sha256")


def _check_checksum(bundle: Path) -> str:
    digest = sha256_file(bundle)
    sidecar = checksum_path(bundle)
    if sidecar.is_file():
        with open(sidecar, "rb") as handle:
            recorded = handle.read(4096).decode("utf-8", errors="replace").split()[:1]
        if recorded != [digest]:
            raise VtreproError(f"{bundle}: sha256 {digest[:12]}... does not match {sidecar} "
                               f"({(recorded or ['nothing'])[0][:12]}...); the file is damaged or truncated: fetch it again")
    return digest


def _extract(bundle: Path, target: Path) -> None:
    """Check every member's header, then stream the members into a temporary folder beside ``target`` and
    rename it; refuse unsafe, oversized or damaged archives."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with open_tar(bundle, "r:", "not a vtrepro bundle: fetch it again or re-export it") as archive:
            members = _checked_members(archive, bundle)
            check_room(staging, sum(member.size for member in members), bundle, "extracting its members")
            for member in members:
                _write_member(archive, member, staging, bundle)
        os.replace(staging, target)
    except (tarfile.TarError, EOFError) as error:
        raise VtreproError(f"{bundle}: not a readable vector bundle ({error}); it is damaged or truncated: "
                           "fetch it again or re-export it") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _checked_members(archive: tarfile.TarFile, bundle: Path) -> list[tarfile.TarInfo]:
    """Every member's header, checked before anything is extracted; the sizes may not add up to more than
    the bundle itself holds (a member's bytes are stored in it: nothing expands on extraction)."""
    budget = bundle.stat().st_size
    members: list[tarfile.TarInfo] = []
    names: set[str] = set()
    total = 0
    for member in archive:
        if len(members) == MAX_MEMBERS:
            raise VtreproError(f"{bundle}: more than {MAX_MEMBERS} members; not a vtrepro bundle (refused before "
                               "extracting anything): re-export it with fewer, larger shards")
        problem = _member_problem(member, budget)
        if problem is None and member.name in names:
            problem = "appears twice"
        total += member.size
        if problem is None and total > budget:
            problem = f"brings the declared sizes to {total} bytes, more than the bundle's {budget}"
        if problem is not None:
            raise VtreproError(f"{bundle}: member {member.name!r} {problem}; not a vtrepro bundle (refused "
                               "before extracting anything): fetch it again or re-export it")
        members.append(member)
        names.add(member.name)
    return members


def _member_problem(member: tarfile.TarInfo, budget: int) -> str | None:
    """What makes one member unfit for a vector bundle, or None."""
    path = PurePosixPath(member.name)
    if not (member.isfile() or member.isdir()):
        return "is not a plain file or folder (a link, device or FIFO)"
    if member.issparse():
        return f"is a sparse file declaring {member.size} bytes ('export' never writes one)"
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return "has a path that leaves the bundle"
    if member.size > budget:
        return f"declares {member.size} bytes, more than the whole bundle's {budget}"
    cap = JSON_FILE_BYTES["bundle" if path.name == BUNDLE_MANIFEST else "manifest"]
    if path.name in (BUNDLE_MANIFEST, MANIFEST_NAME) and member.size > cap:
        return f"declares {member.size} bytes; this header is read whole and may hold at most {cap}"
    return None


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, staging: Path, bundle: Path) -> None:
    """Stream one checked member under ``staging`` in blocks, verifying its size and that no line is longer
    than :data:`MAX_LINE_BYTES` (a vector line is read whole when it is fingerprinted)."""
    path = staging.joinpath(*PurePosixPath(member.name).parts)
    if member.isdir():
        path.mkdir(parents=True, exist_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    source = archive.extractfile(member)
    assert source is not None  # a checked regular member
    written, open_line = 0, 0
    with source, open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "wb") as handle:
        for block in iter(lambda: source.read(COPY_BLOCK), b""):
            written += len(block)
            open_line = _line_length(block, open_line)
            if open_line > MAX_LINE_BYTES:
                raise VtreproError(f"{bundle}: member {member.name!r} has a line longer than {MAX_LINE_BYTES} bytes; "
                                   "not vectors vtrepro wrote: fetch the bundle again or re-export it")
            handle.write(block)
    if written != member.size:
        raise VtreproError(f"{bundle}: member {member.name!r} holds {written} bytes but declares {member.size}; the "
                           "bundle is damaged or truncated: fetch it again or re-export it")


def _line_length(block: bytes, carried: int) -> int:
    """The length of the line still open after ``block``, or more than the cap when a line in it (with the
    ``carried`` open line before it) is too long; lines within one block are shorter than the cap."""
    first = block.find(b"\n")
    if first == -1:
        return carried + len(block)
    if carried + first > MAX_LINE_BYTES:
        return carried + first
    return len(block) - block.rfind(b"\n") - 1


def read_bundle_manifest(folder: Path, bundle: Path) -> dict[str, Any]:
    """The bundle's header (``bundle.json``) through the one bounded JSON reader; a refusal names the bundle and
    the member, not the cache folder it was extracted into."""
    path = folder / BUNDLE_MANIFEST
    if not os.path.lexists(path):
        raise VtreproError(f"{bundle}: no {BUNDLE_MANIFEST}; not a vtrepro vector bundle")
    try:
        header = read_json_file(path, "not a bundle 'export vectors' wrote: re-export the bundle",
                                JSON_FILE_BYTES["bundle"], folder)
    except VtreproError as error:
        raise VtreproError(str(error).replace(str(path), f"{bundle}: member {BUNDLE_MANIFEST}", 1)) from None
    if not isinstance(header, dict) or header.get("format") != BUNDLE_FORMAT:
        raise VtreproError(f"{bundle}: {BUNDLE_MANIFEST} is not a {BUNDLE_FORMAT} header; re-export the bundle")
    check_fields(header, f"{bundle}: member {BUNDLE_MANIFEST}", "re-export the bundle", {"format": str, "runs": dict})
    for key, recorded in header["runs"].items():
        check_fields(recorded, f"{bundle}: member {BUNDLE_MANIFEST}: run {key[:80]!r}", "re-export the bundle",
                     {"corpus": dict, "queries": dict})
    return header


def verify_runs(folder: Path, header: dict[str, Any], bundle: Path) -> None:
    """Every run's vectors must have the fingerprints the bundle records."""
    for key, recorded in header["runs"].items():
        run_dir = folder / key
        if not run_dir.is_dir():
            raise VtreproError(f"{bundle}: {BUNDLE_MANIFEST} lists {key}, which the archive does not hold")
        for name, summary in run_fingerprints(run_dir).items():
            if asdict(summary) != recorded.get(name):
                raise VtreproError(
                    f"{bundle}: the {name} vectors of {key} have fingerprint {summary.sha256[:12]}... but "
                    f"{BUNDLE_MANIFEST} records {str((recorded.get(name) or {}).get('sha256'))[:12]}...: "
                    "the bundle was altered or damaged; fetch it again")


def open_bundle(bundle: Path, cache_root: Path) -> tuple[Path, dict[str, Any]]:
    """Check a bundle's checksum, extract it once under ``cache_root`` and verify every run's fingerprints."""
    if not bundle.is_file():
        raise VtreproError(f"{bundle}: no such bundle file")
    digest = _check_checksum(bundle)
    target = cache_root / digest[:16]
    if not (target / BUNDLE_MANIFEST).is_file():
        shutil.rmtree(target, ignore_errors=True)
        _extract(bundle, target)
        try:
            verify_runs(target, read_bundle_manifest(target, bundle), bundle)
        except VtreproError:
            shutil.rmtree(target, ignore_errors=True)
            raise
    return target, read_bundle_manifest(target, bundle)
