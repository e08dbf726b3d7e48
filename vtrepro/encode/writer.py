"""Encode a corpus (and its queries) into quantized Pyserini JSON vectors.

``python -m vtrepro.encode --model M --dataset scifact --output DIR`` writes::

    DIR/manifest.json          settings, shards with checksums, document and impact totals
    DIR/vectors/part-NNNNN.jsonl   JsonVectorCollection shards: {"id", "contents", "vector"}
    DIR/queries.jsonl          the split's queries with integer vectors

Shards are written atomically and recorded in the manifest as they finish; rerunning the same
command after an interruption resumes at the first unfinished shard. The output folder, corpus and
queries are checked before the model is loaded; documents and queries report progress per batch.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from vtrepro.core.cli import add_data_dir, add_model, add_model_dir, cli_entry, command_parser, positive_float, positive_int
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output_folder, check_writable, sha256_file, write_json, write_jsonl
from vtrepro.core.progress import Progress
from vtrepro.data.beir import load_dataset, read_corpus, read_queries
from vtrepro.encode.fingerprint import VectorSetSummary, fingerprint_folder
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, ROUNDINGS, Quantization, escaped_vocabulary, to_impact_vector
from vtrepro.model.loading import find_model

# The SPLADE encoder (torch, transformers) is imported where a model is loaded, on purpose: `--help`,
# argument errors and readers of encoded vectors stay fast.

MANIFEST_NAME = "manifest.json"
TIMINGS_NAME = "timings.json"
"""Beside the manifest: the device and the seconds each shard took to encode. Kept apart, so the
manifest depends on the inputs alone."""
VECTORS_DIRNAME = "vectors"
QUERIES_NAME = "queries.jsonl"
MANIFEST_FORMAT = "vtrepro.encoded-corpus/1"
DEFAULT_SHARD_SIZE = 2000


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
    """SHA-256 over a model's parameter names and bytes: identifies the weights, wherever they came from."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def corpus_fingerprint(documents: Sequence) -> str:
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document.doc_id.encode() + b"\0" + document.contents.encode() + b"\0")
    return digest.hexdigest()


def check_encode_output(out_dir: str | Path) -> None:
    """Fail before any work when ``out_dir`` cannot hold an encoded corpus, without writing anything.

    It must be a folder (or not exist yet) in a writable place, and an existing manifest must be
    readable. ``DIR/vectors/*.jsonl`` files without a manifest were not written by encode: refused,
    since resuming would delete or overwrite them.
    """
    out_dir = Path(out_dir)
    check_output_folder(out_dir)
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


def _finished_shards(out_dir: Path, manifest: dict | None, settings: dict, replace: bool) -> list[dict]:
    """Shards of an earlier run with the same settings whose files are intact, in order.

    A folder encoded with other settings is an error, or with ``replace`` encoded again from the start.
    """
    if manifest is None:
        return []
    if manifest.get("settings") != settings:
        if replace:
            print(f"{out_dir}: encoded with other settings; encoding again", file=sys.stderr)
            return []
        raise VtreproError(
            f"{out_dir / MANIFEST_NAME}: this folder was encoded with other settings (model weights, "
            "vocabulary, corpus, lengths or quantization); delete it or choose another --output"
        )
    finished = []
    for shard in manifest["shards"]:
        path = out_dir / shard["file"]
        if not path.exists() or sha256_file(path) != shard["sha256"]:
            break
        finished.append(shard)
    return finished


def encode_corpus(
    encoder,
    documents: Sequence,
    out_dir: str | Path,
    quantization: Quantization = Quantization(),
    shard_size: int = DEFAULT_SHARD_SIZE,
    show_progress: bool = True,
    replace_other_settings: bool = False,
) -> dict[str, Any]:
    """Encode ``documents`` into ``out_dir`` (resuming a partial run) and return the manifest.

    ``replace_other_settings`` re-encodes a folder left by other settings instead of refusing it
    (for folders the caller owns, such as a regression's artifacts).
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
    }
    shards = _finished_shards(out_dir, load_manifest(out_dir), settings, replace_other_settings)
    model_name = str(getattr(encoder.model, "name_or_path", ""))
    terms = escaped_vocabulary(encoder.vocabulary)
    vectors_dir = out_dir / VECTORS_DIRNAME
    vectors_dir.mkdir(parents=True, exist_ok=True)
    expected_files = [f"part-{index:05d}.jsonl" for index in range(-(-len(documents) // shard_size))]
    _remove_leftovers(out_dir, set(expected_files))

    resume_at = min(len(shards) * shard_size, len(documents))
    if resume_at < len(documents):
        resume_at -= resume_at % encoder.sort_window  # the window holding it is encoded whole again
    timings = _shard_timings(out_dir, shards, str(next(encoder.model.parameters()).device))
    with _stage_progress(show_progress, len(documents), "encode documents", "doc", resume_at) as progress:
        windows = _AlignedWindows(encoder, documents, progress)
        for index in range(len(shards), len(expected_files)):
            start, stop = index * shard_size, min((index + 1) * shard_size, len(documents))
            path = vectors_dir / expected_files[index]
            began = time.perf_counter()
            shards.append(_write_shard(documents[start:stop], windows.vectors(start, stop), terms, quantization, path))
            timings["seconds"][expected_files[index]] = round(time.perf_counter() - began, 3)
            write_json(out_dir / TIMINGS_NAME, timings)
            _write_manifest(out_dir, model_name, settings, shards)
    return _write_manifest(out_dir, model_name, settings, shards, fingerprint_folder(vectors_dir))


def _shard_timings(out_dir: Path, finished: list[dict], device: str) -> dict[str, Any]:
    """The timings of the shards kept from an earlier run (when encoded on ``device``), to be extended."""
    path = out_dir / TIMINGS_NAME
    earlier = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    kept = {Path(shard["file"]).name for shard in finished}
    seconds = earlier.get("seconds", {}) if earlier.get("device") == device else {}
    return {"device": device, "seconds": {name: value for name, value in seconds.items() if name in kept}}


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
    """Encode queries to integer vectors and write them as ``{"id", "contents", "vector"}`` lines."""
    terms = escaped_vocabulary(encoder.vocabulary)
    with _stage_progress(show_progress, len(queries), "encode queries", "query") as progress:
        encoded = encoder.encode(list(queries.values()), kind="query", progress=progress)
    vectors = {
        qid: to_impact_vector(ids, weights, terms, quantization) for qid, (ids, weights) in zip(queries, encoded)
    }
    write_jsonl(path, ({"id": qid, "contents": text, "vector": vectors[qid]} for qid, text in queries.items()))
    return vectors


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
    parser.add_argument("--max-length-doc", type=positive_int, default=512, help="tokens per document (default 512)")
    parser.add_argument("--max-length-query", type=positive_int, default=64, help="tokens per query (default 64)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="texts per batch (default 32)")
    parser.add_argument("--scale", type=positive_float, default=100.0, help="quantization scale (default 100)")
    parser.add_argument("--rounding", default="half-even", choices=ROUNDINGS, help="weight rounding (default half-even)")
    parser.add_argument("--shard-size", type=positive_int, default=DEFAULT_SHARD_SIZE,
                        help=f"documents per shard (default {DEFAULT_SHARD_SIZE})")
    args = parser.parse_args(argv)

    if args.queries and not args.corpus:
        parser.error("--queries goes with --corpus (--dataset encodes the queries of --split)")
    check_encode_output(args.output)
    find_model(args.model, args.model_dir)

    from vtrepro.model.splade import SpladeEncoder

    quantization = Quantization(args.scale, args.rounding)
    if args.dataset:
        dataset = load_dataset(args.dataset, args.data_dir)
        documents, queries = dataset.corpus(), dataset.queries(args.split)
    else:
        documents = read_corpus(args.corpus)
        queries = read_queries(args.queries) if args.queries else {}
    encoder = SpladeEncoder(
        args.model,
        model_dir=args.model_dir,
        max_length_doc=args.max_length_doc,
        max_length_query=args.max_length_query,
        batch_size=args.batch_size,
    )
    manifest = encode_corpus(encoder, documents, args.output, quantization, args.shard_size)
    if queries:
        encode_queries(encoder, queries, args.output / QUERIES_NAME, quantization)
    print(f"{manifest['documents']} documents, {manifest['total_terms']} impact total, {len(queries)} queries -> {args.output}")
    return 0
