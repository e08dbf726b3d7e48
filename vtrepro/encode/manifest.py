"""The manifest of an encoded corpus: the settings that made its vectors, its shards with their
checksums, its document and impact totals, and (once every shard is written) the vectors' fingerprint.

The devices and seconds of encoding are kept beside it (``timings.json``), so it depends on the inputs
alone: one process or several write the same manifest.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from vtrepro.core.io import write_json
from vtrepro.encode.fingerprint import VectorSetSummary
from vtrepro.encode.folder import EncodedFolder

MANIFEST_FORMAT = "vtrepro.encoded-corpus/1"
SHARD_KEYS = ("file", "documents", "total_terms", "sha256")
"""What the manifest keeps of a shard's record (a receipt holds more)."""


def corpus_fingerprint(documents: Sequence) -> str:
    """SHA-256 over the documents' ids and texts, in corpus order."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document.doc_id.encode() + b"\0" + document.contents.encode() + b"\0")
    return digest.hexdigest()


def settings_digest(settings: dict) -> str:
    """SHA-256 of the settings, which a receipt carries to show what it was encoded with."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def manifest_shards(finished: dict[str, dict], expected_files: list[str]) -> list[dict]:
    """The finished shards' records in corpus order, without the receipts' extra keys."""
    return [{key: finished[name][key] for key in SHARD_KEYS} for name in expected_files if name in finished]


def write_manifest(folder: EncodedFolder, model: str, settings: dict, shards: list[dict],
                   fingerprint: VectorSetSummary | None = None) -> dict[str, Any]:
    """Write and return the manifest; ``fingerprint`` (the vectors' content hash) marks it complete."""
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": model,
        "settings": settings,
        "complete": fingerprint is not None,
        "documents": sum(shard["documents"] for shard in shards),
        "total_terms": sum(shard["total_terms"] for shard in shards),
        "shards": shards,
    }
    if fingerprint is not None:
        manifest["fingerprint"] = fingerprint.sha256
    write_json(folder.manifest_path, manifest)
    return manifest
