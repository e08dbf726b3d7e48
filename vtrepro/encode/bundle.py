"""Vector bundles: a regression's encoded corpora and query vectors as one checksummed ``.tar``.

A bundle holds, per run, ``<condition>/<dataset>/`` with ``manifest.json``, ``vectors/*.jsonl`` and
``queries.jsonl``, and at the top ``bundle.json``: the fingerprints of every run's vectors, the spec
and the environment that encoded them. Beside it, ``<bundle>.sha256`` (``sha256sum`` format).
``regress --vectors bundle.tar`` checks both before it uses anything, so figures computed from a
published bundle are exact on any machine.

A bundle comes from elsewhere, so it is opened as hostile input, through the one tar reader
(:func:`vtrepro.core.archives.extract_tar`, which prebuilt indexes share): every member's header is checked
before anything is extracted (plain files and folders only, paths inside the bundle, no sparse
members, each declared size and their total within the bundle's own size, the JSON headers and the
member count within stated caps, their total within the disk's free space; long-name and PAX headers
bounded before ``tarfile`` reads them), then members are streamed to disk in blocks, their sizes and line
lengths verified as they are written; nothing is read whole into memory. The checksum sidecar is checked
first (:func:`vtrepro.core.archives.check_sidecar`).
"""
from __future__ import annotations

import functools
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
from vtrepro.core.archives import TarRules, check_sidecar, extract_tar, new_tar
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
    with atomic_write(output, "wb") as handle, new_tar(handle, tarfile.PAX_FORMAT) as archive:
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


def _extract(bundle: Path, target: Path) -> None:
    """Extract the bundle through the one tar reader (:func:`~vtrepro.core.archives.extract_tar`: every header
    checked before anything is extracted) into a temporary folder beside ``target``, then rename it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        budget = bundle.stat().st_size
        rules = TarRules(noun="bundle", kind="not a vtrepro bundle", remedy="fetch it again or re-export it",
                         budget=budget, why="the bundle's own size: a .tar stores its members' bytes, nothing expands",
                         max_members=MAX_MEMBERS, member_problem=functools.partial(_member_problem, budget),
                         max_line_bytes=MAX_LINE_BYTES)
        extract_tar(bundle, "r:", staging, rules)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _member_problem(budget: int, member: tarfile.TarInfo, first: str | None) -> str | None:
    """What makes one member unfit for a vector bundle beyond what every archive is checked for, or None: a size
    above the whole bundle's (a member's bytes are stored in it) or a JSON header above its cap (read whole)."""
    if member.size > budget:
        return f"declares {member.size} bytes, more than the whole bundle's {budget}"
    name = PurePosixPath(member.name).name
    cap = JSON_FILE_BYTES["bundle" if name == BUNDLE_MANIFEST else "manifest"]
    if name in (BUNDLE_MANIFEST, MANIFEST_NAME) and member.size > cap:
        return f"declares {member.size} bytes; this header is read whole and may hold at most {cap}"
    return None


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
    digest = check_sidecar(bundle, checksum_path(bundle))
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
