"""Benchmarks: encoding throughput, Lucene vs PISA search, vocabulary transfer at scale, BERT-base encoding.

``python -m vtrepro bench <benchmark>``:

- ``encode`` times :class:`~vtrepro.model.splade.SpladeEncoder` against sentence-transformers'
  ``SparseEncoder`` on the same documents and checks their vectors agree (:mod:`vtrepro.bench.encode`);
- ``search`` compares Lucene and PISA on the same vectors and checks their runs are identical
  (:mod:`vtrepro.bench.search`);
- ``transfer`` times a full-scale topology transfer against its time and memory limits
  (:mod:`vtrepro.bench.transfer`);
- ``base-size`` times the dense encoder at BERT-base size (:mod:`vtrepro.bench.base_size`);
- ``scale`` runs every stage after encoding on synthetic collections of growing size fitted to a real
  encoding (:mod:`vtrepro.bench.scale`).

Exit status 1 when vectors or runs differ or a limit is passed.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from vtrepro.bench import gpu_check
from vtrepro.bench.gpu_check import CPU_CHECK, GPU_CHECK, Check, run_check
from vtrepro.core.cli import (
    DEFAULT_THREADS,
    add_data_dir,
    add_dataset,
    add_device,
    add_k,
    add_limit,
    add_model_dir,
    add_option_flags,
    add_output_file,
    add_output_folder,
    add_path,
    add_renamed,
    add_threads,
    add_trust_remote_code,
    add_vectors,
    cli_entry,
    command_parser,
    options_from_args,
    positive_int,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.encode.folder import EncodedFolder
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.search.runs import ALL_ENGINES, ENGINES, SearchOptions

# Each benchmark's module is imported once it is chosen, on purpose: torch, transformers, Anserini and
# PISA load only for the benchmark that needs them, and `--help` and argument errors stay fast.


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("bench", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    encode = commands.add_parser("encode", help="document encoding throughput vs sentence-transformers SparseEncoder")
    encode.add_argument("--model", help="model folder (default: $VTREPRO_MODELS/splade-tiny)")
    add_data_dir(encode)
    add_dataset(encode, default="scifact", help="BEIR dataset name or folder (default scifact)")
    add_limit(encode, "documents", default=ENCODE_DOCUMENTS)
    add_option_flags(encode, EncoderOptions, ["batch_size", "max_length_doc", "dtype", "projection"])
    add_renamed(encode, "--max-length", "--max-length-doc")
    add_renamed(encode, "--screen", "--projection", values=OLD_SCREENS)
    encode.add_argument("--repeat", type=positive_int, default=1,
                        help="timed runs of each encoder, best kept (default 1)")
    add_device(encode)
    add_trust_remote_code(encode)
    search = commands.add_parser("search", help="Lucene vs PISA search on the same vectors: speed and identical runs")
    add_vectors(search, "encoded corpus or JsonVectorCollection folder", required=True)
    add_path(search, "--queries", "input file", required=True, help="encoded queries.jsonl ({id, vector})")
    add_k(search, SearchOptions)
    add_threads(search, "threads of the many-thread runs")
    add_path(search, "--index-dir", "root",
             help="folder keeping both indexes (lucene/, pisa/), reused while they hold these vectors "
                  "(default: a temporary folder, both built)")
    search.add_argument("--engines", type=_engines, default=list(ENGINES),
                        help=f"comma-separated engines among {','.join(ALL_ENGINES)} (default {','.join(ENGINES)}: "
                             "both exact ones are always measured; seismic and bmp are measured against Lucene's run)")
    scale = commands.add_parser("scale", help="every stage after encoding on synthetic collections of growing size, "
                                              "fitted to a real encoding")
    add_vectors(scale, "encoded corpus the collections are fitted to", required=True)
    add_path(scale, "--queries", "input file", required=True, help="encoded queries.jsonl searched at every size")
    scale.add_argument("--sizes", type=_sizes, default=[10_000, 100_000],
                       help=f"comma-separated collection sizes, each 1 to {MAX_SCALE_DOCUMENTS:,} (default 10000,100000)")
    scale.add_argument("--build-threads", type=_thread_counts, default=_powers_of_two(DEFAULT_THREADS),
                       help="comma-separated thread counts of the Lucene and PISA builds, 1 always among them (the baseline of "
                            f"speed-up and runs; default 1, 2, 4, ... up to all {DEFAULT_THREADS} cores this process may use)")
    scale.add_argument("--engines", type=_engines, default=list(ENGINES),
                       help=f"comma-separated engines whose builds and searches are measured, among {','.join(ALL_ENGINES)} "
                            f"(default {','.join(ENGINES)}; both exact ones are needed to compare their runs, and one "
                            "for the approximate ones' recall against exact)")
    add_output_folder(scale, "folder for scale.json and the work folders, removed after each size", required=False,
                      default=Path("runs/bench-scale"), rule="its scale.json is replaced")
    commands.add_parser("transfer", help="topology transfer of a 50k-token source onto a 30k-token target: "
                                         "exit 1 at 60 s or 4 GB peak memory")
    base_size = commands.add_parser("base-size", help="dense encoding rate of a BERT-base-sized model (random weights)")
    base_size.add_argument("--model", help="model folder whose BERT-uncased tokenizer is used "
                                           "(default: $VTREPRO_MODELS/splade-tiny)")
    add_data_dir(base_size)
    add_dataset(base_size, default="scifact", help="BEIR dataset name or folder (default scifact)")
    add_limit(base_size, "documents", default=BASE_SIZE_DOCUMENTS)
    add_renamed(base_size, "--documents", "--limit")
    add_threads(base_size, "torch threads")
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "search":
        from vtrepro.bench.search import bench_search

        if args.index_dir is not None:
            check_output(args.index_dir, [args.vectors, EncodedFolder(args.vectors).collection, args.queries],
                         kind="folder")
        return bench_search(args.vectors, args.queries, args.k, args.threads, args.index_dir, args.engines)
    if args.command == "scale":
        from vtrepro.bench.scale import bench_scale

        check_output(args.output, [args.vectors, EncodedFolder(args.vectors).collection, args.queries], kind="folder")
        return bench_scale(args.vectors, args.queries, args.sizes, args.output, args.build_threads, args.engines)
    if args.command == "transfer":
        from vtrepro.bench.transfer import run_transfer_bench

        return run_transfer_bench()
    if args.command == "base-size":
        from vtrepro.bench.base_size import bench_base_size

        return bench_base_size(_default_model(args.model), args.dataset, args.data_dir, args.limit, args.threads)
    if args.projection == "dense":
        raise VtreproError("--projection dense: bench encode times a screened projection against the dense one; "
                       "choose auto, screened, screened-int8 or screened-bfloat16")
    from vtrepro.bench.encode import EncodeBench, bench_encode

    return bench_encode(EncodeBench(_default_model(args.model), args.dataset, args.data_dir, args.limit,
                                    options_from_args(EncoderOptions, args), args.repeat, args.device, args.trust_remote_code))


ENCODE_DOCUMENTS = 500
"""Documents ``bench encode`` times by default."""
BASE_SIZE_DOCUMENTS = 64
"""Documents ``bench base-size`` encodes by default."""
OLD_SCREENS = {"auto": "auto", "int8": "screened-int8", "bfloat16": "screened-bfloat16"}
"""``bench encode --screen``'s values, the old spelling of ``--projection``."""


MAX_SCALE_DOCUMENTS = 10_000_000
"""Largest synthetic collection: above MS MARCO's 8,841,823 passages."""


def _sizes(text: str) -> list[int]:
    """``--sizes``: comma-separated document counts, each within 1 to :data:`MAX_SCALE_DOCUMENTS`."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated whole numbers, e.g. 10000,100000") from None
    if not sizes or not all(1 <= size <= MAX_SCALE_DOCUMENTS for size in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: each size must be 1 to {MAX_SCALE_DOCUMENTS:,}")
    return sizes


MAX_BUILD_THREADS = 1024


def _engines(text: str) -> list[str]:
    """``--engines``: comma-separated engines among :data:`vtrepro.search.runs.ALL_ENGINES`, in that order."""
    named = set(text.split(","))
    if not named or not named <= set(ALL_ENGINES):
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated engines among {','.join(ALL_ENGINES)}")
    return [engine for engine in ALL_ENGINES if engine in named]


_engines.__name__ = f"comma-separated, among {', '.join(ALL_ENGINES)}"  # its type in docs/flags.md


def _thread_counts(text: str) -> list[int]:
    """``--build-threads``: comma-separated thread counts, each within 1 to :data:`MAX_BUILD_THREADS`."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated whole numbers, e.g. 1,2,4") from None
    if not all(1 <= count <= MAX_BUILD_THREADS for count in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: each thread count must be 1 to {MAX_BUILD_THREADS}")
    return counts


def _powers_of_two(cores: int) -> list[int]:
    """1, 2, 4, ... below ``cores``, then ``cores``."""
    return [2**power for power in range(cores.bit_length()) if 2**power < cores] + [cores]


def _default_model(model: str | None) -> str:
    """``--model``, else ``$VTREPRO_MODELS/splade-tiny``."""
    if model:
        return model
    models = os.environ.get("VTREPRO_MODELS")
    if not models:
        raise VtreproError("no model: pass --model or set VTREPRO_MODELS to a folder holding splade-tiny")
    return str(Path(models) / "splade-tiny")


def build_gpu_check_parser() -> argparse.ArgumentParser:
    parser = command_parser("", gpu_check.__doc__)
    parser.prog = "scripts/gpu_check.sh"  # the check's one command line: it is no subcommand of bench
    parser.add_argument("--cpu", action="store_true", help="the same parts at a tiny size on the CPU (a test runs it)")
    parser.add_argument("--model", metavar="MODEL", help="SPLADE model folder (default: splade-tiny under --model-dir)")
    add_model_dir(parser)
    add_data_dir(parser)
    add_output_file(parser, "figures file (default runs/gpu-check/figures.md, runs/cpu-check/figures.md with --cpu); "
                            "work files go beside it", required=False)
    return parser


@cli_entry
def gpu_check_main(argv: list[str] | None = None) -> int:
    parser = build_gpu_check_parser()
    args = parser.parse_args(argv)
    size = CPU_CHECK if args.cpu else GPU_CHECK
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device: this check is for a GPU (--cpu runs it at a tiny size on the CPU)")
    models = args.model_dir or os.environ.get("VTREPRO_MODELS")
    model = args.model or (Path(models) / "splade-tiny" if models else None)
    if model is None:
        parser.error("no model: pass --model or --model-dir, or set VTREPRO_MODELS to a folder holding splade-tiny")
    output = args.output or Path("runs") / ("cpu-check" if args.cpu else "gpu-check") / "figures.md"
    check_output(output, [model, args.data_dir])
    work = output.with_name(output.stem + ".work")
    check_output(work, [model, args.data_dir], kind="folder")
    return run_check(Check(size, Path(model).resolve(), args.data_dir, output, work))
