"""The layout of an encoded corpus folder, known here alone::

    DIR/manifest.json              settings, shards with checksums, document and impact totals
    DIR/vectors/part-NNNNN.jsonl   JsonVectorCollection shards: {"id", "contents", "vector"}
    DIR/queries.jsonl              the split's queries with integer vectors
    DIR/timings.json               the device and the seconds each shard took to encode
    DIR/scan.json                  what one pass over the vectors found (:mod:`vtrepro.encode.scan`)
    DIR/.shards/part-NNNNN.jsonl.json   while encoding, the receipt of each finished shard

Every module that reads or writes such a folder (encode, index, search, regress, bench) asks
:class:`EncodedFolder` for its paths and its manifest.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, FieldTypes, JsonKind, check_fields, check_output, check_writable, read_json_file

MANIFEST_NAME = "manifest.json"
VECTORS_DIRNAME = "vectors"
QUERIES_NAME = "queries.jsonl"
TIMINGS_NAME = "timings.json"
"""Beside the manifest: the device and the seconds each shard took to encode. Kept apart, so the
manifest depends on the inputs alone."""
SCAN_NAME = "scan.json"
"""Where vtrepro records one pass over vectors it wrote or was given: beside the manifest of a folder it encoded,
in a regression's artifacts folder for vectors from elsewhere (:func:`vtrepro.encode.scan.scan_folder`)."""
RECEIPTS_DIRNAME = ".shards"
"""While encoding, one receipt per finished shard (its record, settings digest, seconds and device);
merged into the manifest when every shard is done. Any process may write them, in any order."""
SHARD_FIELDS: FieldTypes = {"file": str, "documents": int, "total_terms": int, "sha256": str}
"""A shard's record, in the manifest and in its receipt: the fields every reader uses, with their types."""
MANIFEST_FIELDS: FieldTypes = {"settings": dict, "complete": bool, "documents": int, "total_terms": int,
                               "shards": list, "fingerprint": (str, type(None))}
RECEIPT_FIELDS: FieldTypes = {**SHARD_FIELDS, "settings_sha256": str, "seconds": (int, float), "device": str}
TIMINGS_FIELDS: FieldTypes = {"device": str, "seconds": dict}
_SHARD_ENTRY = re.compile(rf"{VECTORS_DIRNAME}/part-\d{{5,}}\.jsonl")
MANIFEST_FIX = "delete the folder and encode again, or give the vector folder as 'encode' wrote it"


@dataclass(frozen=True)
class EncodedFolder:
    """An encoded corpus folder (``root``), or a path that may be one: its files' paths and its manifest."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @classmethod
    def around(cls, path: str | Path) -> EncodedFolder:
        """The encoded folder of ``path``: the folder itself, or the folder holding it when it is ``vectors/``."""
        path = Path(path)
        return cls(path.parent if path.name == VECTORS_DIRNAME else path)

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def vectors(self) -> Path:
        """The shards' folder, ``vectors/``."""
        return self.root / VECTORS_DIRNAME

    @property
    def queries(self) -> Path:
        return self.root / QUERIES_NAME

    @property
    def timings(self) -> Path:
        return self.root / TIMINGS_NAME

    @property
    def scan(self) -> Path:
        return self.root / SCAN_NAME

    @property
    def receipts(self) -> Path:
        return self.root / RECEIPTS_DIRNAME

    @property
    def collection(self) -> Path:
        """The folder Anserini indexes: ``vectors/`` of an encoded corpus (one with a manifest), else the
        folder itself (any JsonVectorCollection)."""
        return self.vectors if self.manifest_path.exists() else self.root

    @property
    def vectors_or_root(self) -> Path:
        """``vectors/`` when the folder has one, else the folder itself: the corpus vectors of a run folder
        laid out like an encoded corpus, whether or not it has a manifest."""
        return self.vectors if self.vectors.is_dir() else self.root

    @staticmethod
    def shard_name(index: int) -> str:
        """The file name of shard ``index`` (from 0), in corpus order when sorted."""
        return f"part-{index:05d}.jsonl"

    def shard(self, name: str) -> Path:
        return self.vectors / name

    def shard_entry(self, name: str) -> str:
        """How the manifest names shard file ``name``: its path from the root, ``vectors/part-NNNNN.jsonl``."""
        return f"{VECTORS_DIRNAME}/{name}"

    def entry_path(self, entry: str) -> Path:
        """The file a manifest or receipt entry (:meth:`shard_entry`) names."""
        return self.root / entry

    def receipt(self, name: str) -> Path:
        """The receipt of shard file ``name``."""
        return self.receipts / f"{name}.json"

    def _read(self, path: Path, kind: JsonKind, fields: FieldTypes) -> dict[str, Any]:
        """One of the folder's JSON files through the one bounded reader: a regular file inside the folder, of at
        most its kind's cap, its ``fields`` typed."""
        return read_json_file(path, MANIFEST_FIX, JSON_FILE_BYTES[kind], self.root, fields)

    @staticmethod
    def _check_shards(path: Path, shards: list) -> None:
        """Each shard record of ``path`` typed (:data:`SHARD_FIELDS`), its entry naming a file of ``vectors/``."""
        for shard in shards:
            check_fields(shard, f"{path}: a shard", MANIFEST_FIX, SHARD_FIELDS)
            if not _SHARD_ENTRY.fullmatch(shard["file"]):
                raise VtreproError(f"{path}: names the shard file {shard['file'][:80]!r}, not vectors/part-NNNNN.jsonl; "
                                   f"{MANIFEST_FIX}")

    def load_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None for a plain vector folder (no ``manifest.json``; a dangling link is an error)."""
        if not os.path.lexists(self.manifest_path):
            return None
        manifest = self._read(self.manifest_path, "manifest", MANIFEST_FIELDS)
        self._check_shards(self.manifest_path, manifest["shards"])
        return manifest

    def load_receipt(self, path: Path) -> dict[str, Any]:
        """One shard's receipt (:data:`RECEIPT_FIELDS`)."""
        receipt = self._read(path, "receipt", RECEIPT_FIELDS)
        self._check_shards(path, [receipt])
        return receipt

    def load_timings(self) -> dict[str, Any] | None:
        """The device and seconds of each shard (:data:`TIMINGS_FIELDS`), or None when the folder has none."""
        if not os.path.lexists(self.timings):
            return None
        timings = self._read(self.timings, "manifest", TIMINGS_FIELDS)
        for name, seconds in timings["seconds"].items():
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                raise VtreproError(f"{self.timings}: shard {name[:80]!r} took {str(seconds)[:40]} seconds, not a "
                                   f"number of seconds; {MANIFEST_FIX}")
        return timings

    def is_complete(self) -> bool:
        """Whether a manifest marks the encoding finished."""
        manifest = self.load_manifest()
        return manifest is not None and manifest["complete"]

    def remove_leftovers(self, expected_shards: set[str]) -> None:
        """Delete shards beyond the corpus and the temporary files of writes a killed run left behind."""
        leftovers = [path for path in self.vectors.glob("*.jsonl") if path.name not in expected_shards]
        leftovers += self.vectors.glob(".part-*.jsonl.*.tmp")
        for name in (MANIFEST_NAME, QUERIES_NAME, SCAN_NAME):
            leftovers += self.root.glob(f".{name}.*.tmp")
        for path in leftovers:
            path.unlink(missing_ok=True)


def check_encode_output(out_dir: str | Path, inputs: Sequence[str | Path | None] = ()) -> None:
    """Fail before any work when ``out_dir`` cannot hold an encoded corpus, without writing anything.

    It must be a folder (or not exist yet) in a writable place, apart from the ``inputs`` (see
    :func:`vtrepro.core.io.check_output`), and an existing manifest must be readable.
    ``DIR/vectors/*.jsonl`` files without a manifest were not written by encode: refused, since
    resuming would delete or overwrite them.
    """
    folder = EncodedFolder(Path(out_dir))
    check_output(folder.root, inputs, kind="folder")
    if folder.vectors.is_dir():
        check_writable(folder.vectors)
    if folder.load_manifest() is None and any(folder.vectors.glob("*.jsonl")):
        raise VtreproError(
            f"{folder.vectors}: holds .jsonl files but no {MANIFEST_NAME} is beside it, so encode did "
            "not write them; move them away or choose another --output"
        )
