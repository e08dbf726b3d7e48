"""Writing an encoded corpus shard by shard so that an interrupted run resumes where it stopped.

Each shard is written atomically with a receipt (its record, the settings digest, seconds and
device); any process may write them, in any order. A later run with the same settings keeps every
intact shard the manifest or a receipt names; when all are written the receipts are merged into the
manifest and the timings. Documents are encoded in whole sort windows counted from the corpus start
(:class:`AlignedWindows`), so a vector never depends on the shard size or on where a run resumed.
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_regular_file, sha256_file, write_json, write_jsonl
from vtrepro.core.options import Options, option
from vtrepro.core.progress import Progress
from vtrepro.core.schema import Field
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.manifest import manifest_shards, settings_digest, write_manifest
from vtrepro.encode.scan import scan_folder
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, Quantization, to_impact_vector

logger = logging.getLogger(__name__)

MAX_SHARD_SIZE = 100_000
"""Most documents per shard: a shard's vectors are held in memory until it is written (50 times the default)."""


@dataclass(frozen=True)
class ShardOptions(Options):
    """How an encoded corpus is cut into shards: the encode command's ``--shard-size`` and the default of
    :func:`vtrepro.encode.writer.encode_corpus`. Vectors never depend on it (:class:`AlignedWindows`)."""

    shard_size: int = option(Field(int, 2000, minimum=1, maximum=MAX_SHARD_SIZE,
                                   help=f"documents per shard, 1 to {MAX_SHARD_SIZE}"))


class AlignedWindows:
    """Encodes documents in whole sort windows counted from the corpus start, whatever range is asked.

    Batches are formed inside a window, so a document's vector depends on the corpus order, the
    window and the batch size alone: never on the shard size or on where an interrupted run resumed.
    The last window stays in memory for the next shard. ``progress`` moves per encoded batch.
    """

    def __init__(self, encoder, documents: Sequence, progress: Progress | None = None):
        self.encoder, self.documents, self.size = encoder, documents, encoder.options.sort_window
        self.progress = progress
        self._window = -1
        self._vectors: list = []

    def vectors(self, start: int, stop: int) -> list:
        out = []
        for window in range(start // self.size, (stop - 1) // self.size + 1):
            low = window * self.size
            if window != self._window:
                texts = [document.contents for document in self.documents[low : low + self.size]]
                self._window, self._vectors = window, self.encoder.encode(texts, kind="doc", progress=self.progress)
            out += self._vectors[max(start, low) - low : min(stop, low + self.size) - low]
        return out


def window_documents(shards: list[int], shard_size: int, window: int, documents: int) -> int:
    """How many documents encoding ``shards`` encodes: whole sort windows, each once."""
    windows = {index for shard in shards
               for index in range(shard * shard_size // window, (min((shard + 1) * shard_size, documents) - 1) // window + 1)}
    return sum(min(window, documents - index * window) for index in windows)


def shard_names(documents: int, shard_size: int) -> list[str]:
    """The shard file names of a corpus of ``documents``, in corpus order."""
    return [EncodedFolder.shard_name(index) for index in range(-(-documents // shard_size))]


def write_shard(folder: EncodedFolder, name: str, documents: Sequence, encoded: list, terms: list[str],
                quantization: Quantization) -> dict:
    """Write one shard's vectors (a document without a term gets ``EMPTY_DOCUMENT_TERM``) and return its record."""
    path = folder.shard(name)
    vectors = [to_impact_vector(ids, weights, terms, quantization) or {EMPTY_DOCUMENT_TERM: 1} for ids, weights in encoded]
    write_jsonl(path, ({"id": document.doc_id, "contents": document.contents, "vector": vector}
                       for document, vector in zip(documents, vectors)))
    total_terms = sum(sum(vector.values()) for vector in vectors)
    return {
        "file": folder.shard_entry(name),
        "documents": len(documents),
        "total_terms": total_terms,
        "sha256": sha256_file(path),
    }


def write_receipt(folder: EncodedFolder, record: dict, settings_sha256: str, seconds: float, device: str) -> None:
    """Record a finished shard for the merge: its record, the settings digest, its seconds and device."""
    write_json(folder.receipt(Path(record["file"]).name),
               {**record, "settings_sha256": settings_sha256, "seconds": seconds, "device": device})


def finished_shards(folder: EncodedFolder, manifest: dict | None, settings: dict, replace: bool) -> dict[str, dict]:
    """Shard file name -> record of every shard an earlier run finished with the same settings, whose
    file is intact: from the manifest and from the receipts of unmerged runs.

    A folder encoded with other settings is an error, or with ``replace`` encoded again from the start.
    """
    if manifest is not None and manifest.get("settings") != settings:
        if not replace:
            raise VtreproError(
                f"{folder.manifest_path}: this folder was encoded with other settings (model weights, "
                "vocabulary, corpus, lengths, quantization or precision); delete it or choose another --output"
            )
        logger.warning(f"{folder.root}: encoded with other settings; encoding again")
        manifest = None
    digest = settings_digest(settings)
    records = list(manifest["shards"]) if manifest is not None else []
    for receipt in sorted(folder.receipts.glob("*.json")):
        record = folder.load_receipt(receipt)
        if record.pop("settings_sha256") == digest:
            records.append(record)
    return {Path(record["file"]).name: record for record in records if _intact(folder, record)}


def _intact(folder: EncodedFolder, record: dict) -> bool:
    """Whether the shard file ``record`` names exists with its recorded checksum; one that is not a regular file
    inside the folder (a FIFO, a device, a link leading out) is refused before it is opened."""
    path = folder.entry_path(record["file"])
    if not os.path.lexists(path):
        return False
    check_regular_file(path, 2**62, "remove it, or encode into another --output", folder.root)
    return sha256_file(path) == record["sha256"]


def merge_receipts(folder: EncodedFolder, model: str, settings: dict, expected_files: list[str]) -> dict[str, Any]:
    """The complete manifest and the shard timings from every process's receipts; the receipts go."""
    finished = finished_shards(folder, folder.load_manifest(), settings, replace=False)
    missing = [name for name in expected_files if name not in finished]
    if missing:
        raise VtreproError(f"{folder.root}: shard(s) {', '.join(missing[:3])} were not written (a process failed); "
                           "rerun the same command to encode what is missing")
    earlier = folder.load_timings() or {"device": "", "seconds": {}}
    seconds = {name: earlier["seconds"].get(name) for name in expected_files}
    devices = {earlier["device"]} if earlier["device"] else set()
    for path in folder.receipts.glob("*.json"):
        receipt = folder.load_receipt(path)
        seconds[Path(receipt["file"]).name] = receipt["seconds"]
        devices.add(receipt["device"])
    write_json(folder.timings, {"device": ", ".join(sorted(devices)),
                                "seconds": {name: value for name, value in seconds.items() if value is not None}})
    manifest = write_manifest(folder, model, settings, manifest_shards(finished, expected_files),
                              scan_folder(folder.vectors, folder.scan).fingerprint)
    shutil.rmtree(folder.receipts, ignore_errors=True)
    return manifest
