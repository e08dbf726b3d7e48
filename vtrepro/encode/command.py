"""``vtrepro encode``, ``vtrepro fingerprint`` and ``vtrepro export vectors``: their parsers and runs.

The command layer of the encode stage: argv becomes the stage's typed options, then the stage's functions run
(:mod:`vtrepro.encode.writer` encodes, :mod:`vtrepro.encode.fingerprint` fingerprints and compares,
:func:`vtrepro.regress.export.export_vectors` bundles a spec's runs). Nothing below this module sees argparse.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from vtrepro.core.cli import (
    add_data_dir,
    add_datasets,
    add_device,
    add_model,
    add_model_dir,
    add_option_flags,
    add_output_file,
    add_output_folder,
    add_path,
    add_reference_vectors,
    add_runs,
    add_spec,
    add_split,
    add_text_source,
    add_trust_remote_code,
    add_vectors,
    cli_entry,
    command_parser,
    options_from_args,
    positional_fallback,
)
from vtrepro.core.io import check_output
from vtrepro.data.beir import load_dataset, read_corpus, read_queries
from vtrepro.encode import fingerprint, writer
from vtrepro.encode.fingerprint import _files, compare_vectors, fingerprint_files
from vtrepro.encode.folder import EncodedFolder, check_encode_output
from vtrepro.encode.queries import encode_queries
from vtrepro.encode.reader import load_vectors
from vtrepro.encode.shards import (
    ShardOptions,
)
from vtrepro.encode.vectors import Quantization
from vtrepro.encode.writer import _start_processes, encode_corpus
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.loading import find_model, resolve_model


def build_fingerprint_parser() -> argparse.ArgumentParser:
    parser = command_parser("fingerprint", fingerprint.__doc__)
    add_vectors(parser, "encoded corpus folder, JSON-vector folder, or vector file (e.g. queries.jsonl)")
    add_reference_vectors(parser, "a second one: count the records and impacts that differ from --vectors")
    parser.add_argument("paths", type=Path, nargs="*", help=argparse.SUPPRESS)  # the old positional spelling
    return parser


@cli_entry
def fingerprint_main(argv: list[str] | None = None) -> int:
    parser = build_fingerprint_parser()
    args = parser.parse_args(argv)
    positional_fallback(parser, args, "paths", ["--vectors", "--reference-vectors"])
    if args.vectors is None:
        parser.error("--vectors is required")
    first = fingerprint_files(_files(args.vectors), allow_empty=True)
    print(f"{first.sha256}  {first.count} records, total impact {first.total_impact}  {args.vectors}")
    if args.reference_vectors is None:
        return 0
    second = fingerprint_files(_files(args.reference_vectors), allow_empty=True)
    print(f"{second.sha256}  {second.count} records, total impact {second.total_impact}  {args.reference_vectors}")
    diff = compare_vectors(load_vectors(_files(args.vectors), True), load_vectors(_files(args.reference_vectors), True))
    print(json.dumps({"identical": diff.identical, **diff.__dict__}))
    return 0


def build_encode_parser() -> argparse.ArgumentParser:
    """The encode command's arguments: the encoder's and quantization's options come from their declarations."""
    parser = command_parser("encode", writer.__doc__)
    add_model(parser, "masked-LM SPLADE model")
    add_model_dir(parser)
    add_text_source(parser, "the documents (with --dataset, also the queries of --split)")
    add_path(parser, "--queries", "input file", help="queries JSONL ({_id|id, text}) to encode with --corpus")
    add_data_dir(parser)
    add_split(parser, "queries encoded with --dataset")
    add_output_folder(parser, "encoded corpus folder")
    add_option_flags(parser, EncoderOptions)
    add_option_flags(parser, Quantization)
    add_option_flags(parser, ShardOptions)
    add_device(parser, "; under torchrun, each process its LOCAL_RANK's GPU")
    add_trust_remote_code(parser)
    return parser


@cli_entry
def encode_main(argv: list[str] | None = None) -> int:
    parser = build_encode_parser()
    args = parser.parse_args(argv)

    if args.queries and not args.corpus:
        parser.error("--queries goes with --corpus (--dataset encodes the queries of --split)")
    check_encode_output(args.output, [args.corpus, args.queries, resolve_model(args.model, args.model_dir)])
    find_model(args.model, args.model_dir)

    from vtrepro.model.splade import SpladeEncoder, check_device

    check_device(args.device)
    quantization = options_from_args(Quantization, args)
    if args.dataset:
        dataset = load_dataset(args.dataset, args.data_dir)
        check_output(args.output, [dataset.path], kind="folder")  # a dataset name is a folder only now
        documents, queries = dataset.corpus(), dataset.queries(args.split)
    else:
        documents = read_corpus(args.corpus)
        queries = read_queries(args.queries) if args.queries else {}
    part, device = _start_processes(args.device)
    encoder = SpladeEncoder(args.model, options_from_args(EncoderOptions, args), model_dir=args.model_dir, device=device,
                            trust_remote_code=args.trust_remote_code)
    manifest = encode_corpus(encoder, documents, args.output, quantization, options_from_args(ShardOptions, args).shard_size,
                             part=part)
    part.close()
    if manifest is None:  # another process of a torchrun job: rank 0 merged the shards
        return 0
    if queries:
        encode_queries(encoder, queries, EncodedFolder(args.output).queries, quantization)
    print(f"{manifest['documents']} documents, {manifest['total_terms']} impact total, {len(queries)} queries -> {args.output}")
    return 0


EXPORT_VECTORS = "bundle a spec's encoded vectors with their fingerprints"
"""``export vectors`` in one line (its help and description)."""


def add_export_vectors_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``export vectors``: a spec's runs into one bundle (:mod:`vtrepro.encode.bundle`)."""
    add_spec(parser)
    add_runs(parser, "the --runs folder regress used")
    add_datasets(parser)
    add_output_file(parser, "bundle file to write (.tar); <output>.sha256 beside it")


def export_vectors_main(args: argparse.Namespace) -> int:
    """``export vectors`` with its parsed arguments: the exit status."""
    from vtrepro.regress.export import export_vectors

    return export_vectors(args.spec, args.runs, args.datasets, args.output)
