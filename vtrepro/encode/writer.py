"""Encode a corpus (and its queries) into quantized Pyserini JSON vectors.

``python -m vtrepro.encode --model M --dataset scifact --output DIR`` writes::

    DIR/manifest.json          settings, shards with checksums, document and impact totals
    DIR/vectors/part-NNNNN.jsonl   JsonVectorCollection shards: {"id", "contents", "vector"}
    DIR/queries.jsonl          the split's queries with integer vectors

Shards are written atomically, each with a receipt, and merged into the manifest when all are done;
rerunning the same command after an interruption encodes only the unfinished shards. Under
``torchrun --nproc_per_node N -m vtrepro.encode ...`` each process encodes every N-th shard (on its
own GPU when there is one) and rank 0 merges them: the vectors, fingerprint and index are those of a
one-process run, since a document's vector does not depend on the process that encodes it. The
output folder, corpus and queries are checked before the model is loaded; documents and queries
report progress per batch.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vtrepro.core.cli import add_data_dir, add_model, add_model_dir, cli_entry, command_parser, number_in
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output, check_writable, sha256_file, write_json, write_jsonl
from vtrepro.core.progress import Progress
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS
from vtrepro.data.beir import load_dataset, read_corpus, read_queries
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_folder, read_vectors, vector_files
from vtrepro.encode.vectors import (
    EMPTY_DOCUMENT_TERM,
    MAX_SCALE,
    MIN_SCALE,
    ROUNDINGS,
    SCALE_HELP,
    Quantization,
    escaped_vocabulary,
    to_impact_vector,
)
from vtrepro.model.loading import find_model, resolve_model
from vtrepro.model.options import PRECISIONS, PROJECTIONS

SORT_WINDOW = 2000
"""The encoder's default sort window (``model.splade.SORT_WINDOW``), repeated so that ``--help`` stays light."""

# The SPLADE encoder (torch, transformers) is imported where a model is loaded, on purpose: `--help`,
# argument errors and readers of encoded vectors stay fast.

MANIFEST_NAME = "manifest.json"
TIMINGS_NAME = "timings.json"
"""Beside the manifest: the device and the seconds each shard took to encode. Kept apart, so the
manifest depends on the inputs alone."""
RECEIPTS_DIRNAME = ".shards"
"""While encoding, one receipt per finished shard (its record, settings digest, seconds and device);
merged into the manifest when every shard is done. Any process may write them, in any order."""


@dataclass(frozen=True)
class Part:
    """The share of a corpus one process encodes: shard ``i`` when ``i % world == rank`` (torchrun's
    ``RANK`` and ``WORLD_SIZE``). A document's vector does not depend on which process encodes it."""

    rank: int = 0
    world: int = 1

    def owns(self, shard: int) -> bool:
        return shard % self.world == self.rank

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
VECTORS_DIRNAME = "vectors"
QUERIES_NAME = "queries.jsonl"
MANIFEST_FORMAT = "vtrepro.encoded-corpus/1"
DEFAULT_SHARD_SIZE = 2000
MAX_SHARD_SIZE = 100_000
"""Most documents per shard: a shard's vectors are held in memory until it is written (50 times the default)."""
MAX_SORT_WINDOW = 100_000
"""Most texts per sort window: a window is tokenized at once and its vectors held in memory (50 times the default)."""


def vectors_folder(encoded_dir: str | Path) -> Path:
    """The folder Anserini indexes: ``DIR/vectors`` for an encoded corpus, else DIR itself."""
    encoded_dir = Path(encoded_dir)
    return encoded_dir / VECTORS_DIRNAME if (encoded_dir / MANIFEST_NAME).exists() else encoded_dir


def load_manifest(encoded_dir: str | Path) -> dict[str, Any] | None:
    """The manifest of an encoded corpus folder, or None for a plain vector folder."""
    path = Path(encoded_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise VtreproError(f"{path}:{error.lineno}: corrupt manifest ({error.msg}); delete the folder and re-encode") from None


def model_fingerprint(model) -> str:
    """SHA-256 over a model's parameter names and bytes: identifies the weights, wherever they came from
    (in the precision they are used in: numpy has no bfloat16, so the raw bytes are read)."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def corpus_fingerprint(documents: Sequence) -> str:
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document.doc_id.encode() + b"\0" + document.contents.encode() + b"\0")
    return digest.hexdigest()


def check_encode_output(out_dir: str | Path, inputs: Sequence[str | Path | None] = ()) -> None:
    """Fail before any work when ``out_dir`` cannot hold an encoded corpus, without writing anything.

    It must be a folder (or not exist yet) in a writable place, apart from the ``inputs`` (see
    :func:`vtrepro.core.io.check_output`), and an existing manifest must be readable.
    ``DIR/vectors/*.jsonl`` files without a manifest were not written by encode: refused, since
    resuming would delete or overwrite them.
    """
    out_dir = Path(out_dir)
    check_output(out_dir, inputs, kind="folder")
    if (out_dir / VECTORS_DIRNAME).is_dir():
        check_writable(out_dir / VECTORS_DIRNAME)
    if load_manifest(out_dir) is None and any((out_dir / VECTORS_DIRNAME).glob("*.jsonl")):
        raise VtreproError(
            f"{out_dir / VECTORS_DIRNAME}: holds .jsonl files but no {MANIFEST_NAME} is beside it, so encode did "
            "not write them; move them away or choose another --output"
        )


def _remove_leftovers(out_dir: Path, expected_shards: set[str]) -> None:
    """Delete shards beyond the corpus and the temporary files of writes a killed run left behind."""
    vectors_dir = out_dir / VECTORS_DIRNAME
    leftovers = [path for path in vectors_dir.glob("*.jsonl") if path.name not in expected_shards]
    leftovers += vectors_dir.glob(".part-*.jsonl.*.tmp")
    for name in (MANIFEST_NAME, QUERIES_NAME):
        leftovers += out_dir.glob(f".{name}.*.tmp")
    for path in leftovers:
        path.unlink(missing_ok=True)


class _AlignedWindows:
    """Encodes documents in whole sort windows counted from the corpus start, whatever range is asked.

    Batches are formed inside a window, so a document's vector depends on the corpus order, the
    window and the batch size alone: never on the shard size or on where an interrupted run resumed.
    The last window stays in memory for the next shard. ``progress`` moves per encoded batch.
    """

    def __init__(self, encoder, documents: Sequence, progress: Progress | None = None):
        self.encoder, self.documents, self.size = encoder, documents, encoder.sort_window
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


def _write_shard(documents: Sequence, encoded: list, terms: list[str], quantization: Quantization, path: Path) -> dict:
    vectors = [to_impact_vector(ids, weights, terms, quantization) or {EMPTY_DOCUMENT_TERM: 1} for ids, weights in encoded]
    write_jsonl(path, ({"id": document.doc_id, "contents": document.contents, "vector": vector}
                       for document, vector in zip(documents, vectors)))
    total_terms = sum(sum(vector.values()) for vector in vectors)
    return {
        "file": f"{VECTORS_DIRNAME}/{path.name}",
        "documents": len(documents),
        "total_terms": total_terms,
        "sha256": sha256_file(path),
    }


def _settings_digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _finished_shards(out_dir: Path, manifest: dict | None, settings: dict, replace: bool) -> dict[str, dict]:
    """Shard file name -> record of every shard an earlier run finished with the same settings, whose
    file is intact: from the manifest and from the receipts of unmerged runs.

    A folder encoded with other settings is an error, or with ``replace`` encoded again from the start.
    """
    if manifest is not None and manifest.get("settings") != settings:
        if not replace:
            raise VtreproError(
                f"{out_dir / MANIFEST_NAME}: this folder was encoded with other settings (model weights, "
                "vocabulary, corpus, lengths, quantization or precision); delete it or choose another --output"
            )
        print(f"{out_dir}: encoded with other settings; encoding again", file=sys.stderr)
        manifest = None
    digest = _settings_digest(settings)
    records = list(manifest["shards"]) if manifest is not None else []
    for receipt in sorted((out_dir / RECEIPTS_DIRNAME).glob("*.json")):
        record = json.loads(receipt.read_text(encoding="utf-8"))
        if record.pop("settings_sha256", None) == digest:
            records.append(record)
    return {Path(record["file"]).name: record for record in records
            if (out_dir / record["file"]).is_file() and sha256_file(out_dir / record["file"]) == record["sha256"]}


def encode_corpus(
    encoder,
    documents: Sequence,
    out_dir: str | Path,
    quantization: Quantization = Quantization(),
    shard_size: int = DEFAULT_SHARD_SIZE,
    show_progress: bool = True,
    replace_other_settings: bool = False,
    part: Part = Part(),
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
    settings = {
        "model_sha256": model_fingerprint(encoder.model),
        "vocabulary_sha256": hashlib.sha256("\n".join(encoder.vocabulary).encode()).hexdigest(),
        "max_length_doc": encoder.max_length_doc,
        "quantization": quantization.to_dict(),
        "corpus_sha256": corpus_fingerprint(documents),
        "batch_size": encoder.batch_size,
        "sort_window": encoder.sort_window,
        "shard_size": shard_size,
        "dtype": encoder.dtype,
        "projection": encoder.projection,
    }
    model_name = str(getattr(encoder.model, "name_or_path", ""))
    vectors_dir = out_dir / VECTORS_DIRNAME
    expected_files = [f"part-{index:05d}.jsonl" for index in range(-(-len(documents) // shard_size))]
    finished = _finished_shards(out_dir, load_manifest(out_dir), settings, replace_other_settings)
    if part.rank == 0:  # before any process writes: the others' temporary files are not leftovers yet
        vectors_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / RECEIPTS_DIRNAME).mkdir(exist_ok=True)
        _remove_leftovers(out_dir, set(expected_files))
        _write_manifest(out_dir, model_name, settings, _in_order(finished, expected_files))
    part.barrier()
    mine = [index for index, name in enumerate(expected_files) if part.owns(index) and name not in finished]
    todo = _window_documents(mine, shard_size, encoder.sort_window, len(documents))
    total, done = (len(documents), len(documents) - todo) if part.world == 1 else (todo, 0)
    device, digest = str(encoder.device), _settings_digest(settings)
    terms = escaped_vocabulary(encoder.vocabulary)
    with _stage_progress(show_progress and part.rank == 0, total, "encode documents", "doc", done) as progress:
        windows = _AlignedWindows(encoder, documents, progress)
        for index in mine:
            start, stop = index * shard_size, min((index + 1) * shard_size, len(documents))
            began = time.perf_counter()
            record = _write_shard(documents[start:stop], windows.vectors(start, stop), terms, quantization,
                                  vectors_dir / expected_files[index])
            write_json(out_dir / RECEIPTS_DIRNAME / f"{expected_files[index]}.json",
                       {**record, "settings_sha256": digest, "seconds": round(time.perf_counter() - began, 3),
                        "device": device})
            finished[expected_files[index]] = record
            if part.world == 1:
                _write_manifest(out_dir, model_name, settings, _in_order(finished, expected_files))
    part.barrier()
    if part.rank != 0:
        return None
    manifest = _merge(out_dir, model_name, settings, expected_files)
    _refuse_all_empty(out_dir, manifest, quantization)
    return manifest


def _refuse_all_empty(out_dir: Path, manifest: dict[str, Any], quantization: Quantization) -> None:
    """Refuse a corpus that quantization left with no term in any document (each is then written as
    ``{EMPTY_DOCUMENT_TERM: 1}``): its index ranks nothing. Only a corpus whose every document totals
    impact 1 can be one, so the vectors are read only then."""
    if manifest["total_terms"] > manifest["documents"]:
        return
    if any(EMPTY_DOCUMENT_TERM not in vector for _, _, _, vector in read_vectors(vector_files(out_dir / VECTORS_DIRNAME))):
        return
    raise VtreproError(f"{out_dir}: quantization x{quantization.scale:g} ({quantization.rounding}) leaves every one of "
                       f"the {manifest['documents']} documents without a term (no weight x scale rounds to 1 or more, "
                       "or the model activates no term); raise the scale (--scale, or quantization.scale in a spec; "
                       "default 100) and encode into another folder")


def _window_documents(shards: list[int], shard_size: int, window: int, documents: int) -> int:
    """How many documents encoding ``shards`` encodes: whole sort windows, each once."""
    windows = {index for shard in shards
               for index in range(shard * shard_size // window, (min((shard + 1) * shard_size, documents) - 1) // window + 1)}
    return sum(min(window, documents - index * window) for index in windows)


def _in_order(finished: dict[str, dict], expected_files: list[str]) -> list[dict]:
    """The finished shards' records in corpus order, without the receipts' extra keys."""
    keys = ("file", "documents", "total_terms", "sha256")
    return [{key: finished[name][key] for key in keys} for name in expected_files if name in finished]


def _merge(out_dir: Path, model: str, settings: dict, expected_files: list[str]) -> dict[str, Any]:
    """The complete manifest and the shard timings from every process's receipts; the receipts go."""
    receipts = out_dir / RECEIPTS_DIRNAME
    finished = _finished_shards(out_dir, load_manifest(out_dir), settings, replace=False)
    missing = [name for name in expected_files if name not in finished]
    if missing:
        raise VtreproError(f"{out_dir}: shard(s) {', '.join(missing[:3])} were not written (a process failed); "
                           "rerun the same command to encode what is missing")
    timings_path = out_dir / TIMINGS_NAME
    earlier = json.loads(timings_path.read_text(encoding="utf-8")) if timings_path.is_file() else {}
    seconds = {name: earlier.get("seconds", {}).get(name) for name in expected_files}
    devices = {earlier["device"]} if earlier.get("device") else set()
    for path in receipts.glob("*.json"):
        receipt = json.loads(path.read_text(encoding="utf-8"))
        seconds[Path(receipt["file"]).name] = receipt["seconds"]
        devices.add(receipt["device"])
    write_json(timings_path, {"device": ", ".join(sorted(devices)),
                              "seconds": {name: value for name, value in seconds.items() if value is not None}})
    manifest = _write_manifest(out_dir, model, settings, _in_order(finished, expected_files),
                               fingerprint_folder(out_dir / VECTORS_DIRNAME))
    shutil.rmtree(receipts, ignore_errors=True)
    return manifest


def _stage_progress(
    show: bool, total: int, desc: str, unit: str, initial: int = 0
) -> contextlib.AbstractContextManager[Progress | None]:
    """A :class:`Progress` for a stage, or a context yielding None when progress is not shown."""
    return Progress(total, desc, unit, initial) if show else contextlib.nullcontext()


def _write_manifest(out_dir: Path, model: str, settings: dict, shards: list[dict],
                    fingerprint: VectorSetSummary | None = None) -> dict[str, Any]:
    """The manifest; ``fingerprint`` (the vectors' content hash) marks it complete."""
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
    write_json(out_dir / MANIFEST_NAME, manifest)
    return manifest


def encode_queries(
    encoder, queries: dict[str, str], path: str | Path, quantization: Quantization = Quantization(),
    show_progress: bool = True,
) -> dict[str, dict[str, int]]:
    """Encode queries to integer vectors and write them as ``{"id", "contents", "vector"}`` lines; when
    quantization leaves every query without a term, nothing is written and the queries are refused."""
    terms = escaped_vocabulary(encoder.vocabulary)
    with _stage_progress(show_progress, len(queries), "encode queries", "query") as progress:
        encoded = encoder.encode(list(queries.values()), kind="query", progress=progress)
    vectors = {
        qid: to_impact_vector(ids, weights, terms, quantization) for qid, (ids, weights) in zip(queries, encoded)
    }
    if vectors and not any(vectors.values()):
        raise VtreproError(f"{path}: quantization x{quantization.scale:g} ({quantization.rounding}) leaves every one of "
                           f"the {len(vectors)} queries without a term (no weight x scale rounds to 1 or more, or the model "
                           "activates no term); raise the scale (--scale, or quantization.scale in a spec; default 100)")
    write_jsonl(path, ({"id": qid, "contents": text, "vector": vectors[qid]} for qid, text in queries.items()))
    return vectors


def _start_processes(device: str | None) -> tuple[Part, str | None]:
    """This process's part of a torchrun job (gloo on CPU, nccl on GPU) and its device; a lone process
    encodes everything."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Part(), device
    import torch
    import torch.distributed as dist

    if device is None and torch.cuda.is_available():
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device and device.startswith("cuda") else "gloo")
    return Part(dist.get_rank(), world), device


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("encode", __doc__)
    add_model(parser, "masked-LM SPLADE model")
    add_model_dir(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="BEIR dataset name or folder")
    source.add_argument("--corpus", type=Path, help="JSONL corpus ({_id|id, title?, text|contents})")
    parser.add_argument("--queries", type=Path, help="JSONL queries to encode with --corpus ({_id|id, text})")
    add_data_dir(parser)
    parser.add_argument("--split", default="test", help="query split to encode with --dataset (default test)")
    parser.add_argument("--output", required=True, type=Path, help="encoded corpus folder")
    tokens = number_in(int, minimum=1, maximum=MAX_TEXT_TOKENS)
    parser.add_argument("--max-length-doc", type=tokens, default=512,
                        help=f"tokens per document, at most {MAX_TEXT_TOKENS} and the model's positions (default 512)")
    parser.add_argument("--max-length-query", type=tokens, default=64,
                        help=f"tokens per query, at most {MAX_TEXT_TOKENS} and the model's positions (default 64)")
    parser.add_argument("--batch-size", type=number_in(int, minimum=1, maximum=MAX_BATCH_SIZE), default=32,
                        help=f"texts per batch, 1 to {MAX_BATCH_SIZE} (default 32)")
    parser.add_argument("--scale", type=number_in(float, minimum=MIN_SCALE, maximum=MAX_SCALE), default=100.0,
                        help=SCALE_HELP)
    parser.add_argument("--rounding", default="half-even", choices=ROUNDINGS, help="weight rounding (default half-even)")
    parser.add_argument("--shard-size", type=number_in(int, minimum=1, maximum=MAX_SHARD_SIZE), default=DEFAULT_SHARD_SIZE,
                        help=f"documents per shard, 1 to {MAX_SHARD_SIZE} (default {DEFAULT_SHARD_SIZE})")
    parser.add_argument("--sort-window", type=number_in(int, minimum=1, maximum=MAX_SORT_WINDOW), default=SORT_WINDOW,
                        help=f"texts sorted by length into batches together, 1 to {MAX_SORT_WINDOW} (default {SORT_WINDOW}); "
                             "vectors depend on it, so it is part of the settings. Give processes whole windows: a "
                             "multiple of it as --shard-size")
    parser.add_argument("--projection", default="dense", choices=PROJECTIONS,
                        help="screened: a low-precision pass with a rigorous error bound picks the columns that "
                             "can activate, computed exactly in float32; its screen is int8 on CPU and bfloat16 on "
                             "GPUs, or named (screened-int8, screened-bfloat16); see docs/performance.md. "
                             "Default dense")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: CUDA when present; under torchrun, "
                                         "each process its LOCAL_RANK's GPU)")
    parser.add_argument("--dtype", default="float32", choices=PRECISIONS,
                        help="precision of the encoder body; head, pooling and bias stay float32 (default float32)")
    args = parser.parse_args(argv)

    if args.queries and not args.corpus:
        parser.error("--queries goes with --corpus (--dataset encodes the queries of --split)")
    check_encode_output(args.output, [args.corpus, args.queries, resolve_model(args.model, args.model_dir)])
    find_model(args.model, args.model_dir)

    from vtrepro.model.splade import SpladeEncoder, check_device

    check_device(args.device)
    quantization = Quantization(args.scale, args.rounding)
    if args.dataset:
        dataset = load_dataset(args.dataset, args.data_dir)
        check_output(args.output, [dataset.path], kind="folder")  # a dataset name is a folder only now
        documents, queries = dataset.corpus(), dataset.queries(args.split)
    else:
        documents = read_corpus(args.corpus)
        queries = read_queries(args.queries) if args.queries else {}
    part, device = _start_processes(args.device)
    encoder = SpladeEncoder(
        args.model,
        model_dir=args.model_dir,
        max_length_doc=args.max_length_doc,
        max_length_query=args.max_length_query,
        batch_size=args.batch_size,
        sort_window=args.sort_window,
        device=device,
        dtype=args.dtype,
        projection=args.projection,
    )
    manifest = encode_corpus(encoder, documents, args.output, quantization, args.shard_size, part=part)
    if part.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    if manifest is None:  # another process of a torchrun job: rank 0 merged the shards
        return 0
    if queries:
        encode_queries(encoder, queries, args.output / QUERIES_NAME, quantization)
    print(f"{manifest['documents']} documents, {manifest['total_terms']} impact total, {len(queries)} queries -> {args.output}")
    return 0
