"""Encode a corpus (and its queries) into quantized Pyserini JSON vectors.

``python -m vtrepro encode --model M --dataset scifact --output DIR`` writes::

    DIR/manifest.json          settings, shards with checksums, document and impact totals
    DIR/vectors/part-NNNNN.jsonl   JsonVectorCollection shards: {"id", "contents", "vector"}
    DIR/queries.jsonl          the split's queries with integer vectors

Shards are written atomically, each with a receipt, and merged into the manifest when all are done;
rerunning the same command after an interruption encodes only the unfinished shards. Under
``torchrun --nproc-per-node N -m vtrepro encode ...`` each process encodes every N-th shard (on its
own GPU when there is one) and rank 0 merges them: the vectors, fingerprint and index are those of a
one-process run, since a document's vector does not depend on the process that encodes it. The
output folder, corpus and queries are checked before the model is loaded; documents and queries
report progress per batch.
"""
from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any, Sequence

from vtrepro.core.errors import VtreproError
from vtrepro.core.processes import ProcessGroup, local_gpu, world_size
from vtrepro.core.progress import Progress
from vtrepro.encode.folder import EncodedFolder, check_encode_output
from vtrepro.encode.manifest import corpus_fingerprint, manifest_shards, settings_digest, write_manifest
from vtrepro.encode.reader import read_vectors, vector_files
from vtrepro.encode.shards import (
    AlignedWindows,
    ShardOptions,
    finished_shards,
    merge_receipts,
    shard_names,
    window_documents,
    write_receipt,
    write_shard,
)
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, Quantization, escaped_vocabulary
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.identity import model_fingerprint

logger = logging.getLogger(__name__)

# The SPLADE encoder (torch, transformers) is imported where a model is loaded, on purpose: `--help`,
# argument errors and readers of encoded vectors stay fast.

def encode_corpus(
    encoder,
    documents: Sequence,
    out_dir: str | Path,
    quantization: Quantization = Quantization(),
    shard_size: int = ShardOptions.shard_size,
    show_progress: bool = True,
    replace_other_settings: bool = False,
    part: ProcessGroup = ProcessGroup(),
) -> dict[str, Any] | None:
    """Encode ``documents`` into ``out_dir`` (resuming a partial run) and return the manifest; a corpus that
    quantization leaves without a term in any document is refused once encoded (:func:`_refuse_all_empty`).

    ``replace_other_settings`` re-encodes a folder left by other settings instead of refusing it
    (for folders the caller owns, such as a regression's artifacts). With several processes
    (``part``), each encodes its own shards; rank 0 merges them and returns the manifest, the others None.
    """
    out_dir = Path(out_dir)
    if not replace_other_settings:
        check_encode_output(out_dir)
    settings = encoding_settings(encoder, documents, quantization, shard_size)
    model_name = str(getattr(encoder.model, "name_or_path", ""))
    folder = EncodedFolder(out_dir)
    expected_files = shard_names(len(documents), shard_size)
    finished = finished_shards(folder, folder.load_manifest(), settings, replace_other_settings)
    if part.main:  # before any process writes: the others' temporary files are not leftovers yet
        folder.vectors.mkdir(parents=True, exist_ok=True)
        folder.receipts.mkdir(exist_ok=True)
        folder.remove_leftovers(set(expected_files))
        write_manifest(folder, model_name, settings, manifest_shards(finished, expected_files))
    part.barrier()
    mine = [index for index, name in enumerate(expected_files) if part.owns(index) and name not in finished]
    todo = window_documents(mine, shard_size, encoder.options.sort_window, len(documents))
    total, done = (len(documents), len(documents) - todo) if part.world == 1 else (todo, 0)
    device, digest = str(encoder.device), settings_digest(settings)
    terms = escaped_vocabulary(encoder.vocabulary)
    with Progress(total, "encode documents", "doc", done, enabled=show_progress and part.main) as progress:
        windows = AlignedWindows(encoder, documents, progress)
        for index in mine:
            start, stop = index * shard_size, min((index + 1) * shard_size, len(documents))
            began = time.perf_counter()
            record = write_shard(folder, expected_files[index], documents[start:stop], windows.vectors(start, stop),
                                 terms, quantization)
            write_receipt(folder, record, digest, round(time.perf_counter() - began, 3), device)
            finished[expected_files[index]] = record
            if part.world == 1:
                write_manifest(folder, model_name, settings, manifest_shards(finished, expected_files))
    part.barrier()
    if not part.main:
        return None
    manifest = merge_receipts(folder, model_name, settings, expected_files)
    _refuse_all_empty(folder, manifest, quantization)
    return manifest


def encoding_settings(encoder, documents: Sequence, quantization: Quantization = Quantization(),
                      shard_size: int = ShardOptions.shard_size) -> dict[str, Any]:
    """What makes an encoded folder's vectors, as its manifest records them (in this order: resuming compares
    them, and their digest, as written): the model's weights and vocabulary, the corpus and every setting."""
    options: EncoderOptions = encoder.options
    return {
        "model_sha256": model_fingerprint(encoder.model),
        "vocabulary_sha256": hashlib.sha256("\n".join(encoder.vocabulary).encode()).hexdigest(),
        "max_length_doc": options.max_length_doc,
        "quantization": quantization.to_dict(),
        "corpus_sha256": corpus_fingerprint(documents),
        "batch_size": options.batch_size,
        "sort_window": options.sort_window,
        "shard_size": shard_size,
        "dtype": options.dtype,
        "projection": encoder.projection,
        **({"activation": options.activation} if options.activation != "log1p" else {}),
    }


def _refuse_all_empty(folder: EncodedFolder, manifest: dict[str, Any], quantization: Quantization) -> None:
    """Refuse a corpus that quantization left with no term in any document (each is then written as
    ``{EMPTY_DOCUMENT_TERM: 1}``): its index ranks nothing. Only a corpus whose every document totals
    impact 1 can be one, so the vectors are read only then."""
    if manifest["total_terms"] > manifest["documents"]:
        return
    if any(EMPTY_DOCUMENT_TERM not in vector for _, _, _, vector in read_vectors(vector_files(folder.vectors))):
        return
    raise VtreproError(f"{folder.root}: quantization x{quantization.scale:g} ({quantization.rounding}) leaves every one of "
                       f"the {manifest['documents']} documents without a term (no weight x scale rounds to 1 or more, "
                       "or the model activates no term); raise the scale (--scale, or quantization.scale in a spec; "
                       "default 100) and encode into another folder")


def _start_processes(device: str | None) -> tuple[ProcessGroup, str | None]:
    """This process's part of a torchrun job (gloo on CPU, nccl on GPU) and its device: without ``--device``,
    its LOCAL_RANK's GPU when there is one; a lone process encodes everything."""
    if device is None and world_size() > 1:
        device = local_gpu()
    return ProcessGroup.join(device), device
