"""Vector bundles: a regression's encoded corpora and query vectors as one checksummed ``.tar``.

A bundle holds, per run, ``<condition>/<dataset>/`` with ``manifest.json``, ``vectors/*.jsonl`` and
``queries.jsonl``, and at the top ``bundle.json``: the fingerprints of every run's vectors, the spec
and the environment that encoded them. Beside it, ``<bundle>.sha256`` (``sha256sum`` format).
``regress --vectors bundle.tar`` checks both before it uses anything, so figures computed from a
published bundle are exact on any machine.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, sha256_file
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_folder, fingerprint_vectors, vector_files
from vtrepro.search.lucene import read_query_vectors

BUNDLE_FORMAT = "vtrepro.vector-bundle/1"
BUNDLE_MANIFEST = "bundle.json"
QUERIES_NAME = "queries.jsonl"


def run_key(condition: str, dataset: str) -> str:
    return f"{condition}/{dataset}"


def corpus_folder(run_dir: Path) -> Path:
    """The JSON-vector folder of a run: ``vectors/`` of an encoded corpus, else the folder itself."""
    return run_dir / "vectors" if (run_dir / "vectors").is_dir() else run_dir


def run_fingerprints(run_dir: Path) -> dict[str, VectorSetSummary]:
    """Fingerprints of a run folder's corpus vectors and query vectors."""
    return {"corpus": fingerprint_folder(corpus_folder(run_dir)),
            "queries": fingerprint_vectors(read_query_vectors(run_dir / QUERIES_NAME))}


def _members(run_dir: Path, key: str) -> list[tuple[str, Path]]:
    """(name in the bundle, file) of one run, or an error naming what is missing."""
    manifest = run_dir / "manifest.json"
    if not manifest.is_file() or not json.loads(manifest.read_text(encoding="utf-8")).get("complete"):
        raise VtreproError(f"{run_dir}: no complete encoded corpus; run 'python -m vtrepro.regress' for it first")
    if not (run_dir / QUERIES_NAME).is_file():
        raise VtreproError(f"{run_dir / QUERIES_NAME}: missing; run 'python -m vtrepro.regress' for it first")
    files = [manifest, run_dir / QUERIES_NAME, *vector_files(run_dir / "vectors")]
    return [(f"{key}/{path.relative_to(run_dir).as_posix()}", path) for path in files]


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    archive.addfile(info, io.BytesIO(data))


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
        _add_bytes(archive, BUNDLE_MANIFEST, (json.dumps(header, indent=2, ensure_ascii=False) + "\n").encode())
        for name, path in sorted(members):
            _add_bytes(archive, name, path.read_bytes())
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
        recorded = sidecar.read_text(encoding="utf-8").split()[:1]
        if recorded != [digest]:
            raise VtreproError(f"{bundle}: sha256 {digest[:12]}... does not match {sidecar} "
                               f"({(recorded or ['nothing'])[0][:12]}...); the file is damaged or truncated: fetch it again")
    return digest


def _extract(bundle: Path, target: Path) -> None:
    """Extract into a temporary folder beside ``target``, then rename; refuse unsafe or damaged archives."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with tarfile.open(bundle, mode="r:") as archive:
            for member in archive.getmembers():
                if not (member.isfile() or member.isdir()):
                    raise VtreproError(f"{bundle}: member {member.name!r} is not a plain file; not a vtrepro bundle")
            archive.extractall(staging, filter="data")
        os.replace(staging, target)
    except (tarfile.TarError, EOFError) as error:
        raise VtreproError(f"{bundle}: not a readable vector bundle ({error}); it is damaged or truncated: "
                           "fetch it again or re-export it") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def read_bundle_manifest(folder: Path, bundle: Path) -> dict[str, Any]:
    path = folder / BUNDLE_MANIFEST
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise VtreproError(f"{bundle}: no readable {BUNDLE_MANIFEST}; not a vtrepro vector bundle") from None
    if not isinstance(header, dict) or header.get("format") != BUNDLE_FORMAT or not isinstance(header.get("runs"), dict):
        raise VtreproError(f"{bundle}: {BUNDLE_MANIFEST} is not a {BUNDLE_FORMAT} header; re-export the bundle")
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
