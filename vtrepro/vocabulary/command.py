"""``vtrepro transfer`` and ``vtrepro calibrate``: their parsers and runs, and the transfer and calibration
options read from a command line; the work is :mod:`vtrepro.vocabulary.transfer` and
:mod:`vtrepro.vocabulary.calibrate`."""
from __future__ import annotations

import argparse
from typing import Any, Sequence

from vtrepro.core.cli import (
    add_checkpoint_arguments,
    add_limit,
    add_option_flags,
    add_path,
    add_renamed,
    cli_entry,
    command_parser,
    number_in,
    options_from_args,
    positive_int,
)
from vtrepro.core.io import check_output
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.loading import resolve_model
from vtrepro.vocabulary import calibrate, transfer
from vtrepro.vocabulary.calibrate import MAX_DOCS, CalibrationOptions, run_calibration
from vtrepro.vocabulary.topology import DEFAULT_CHUNK_SIZE
from vtrepro.vocabulary.transfer import LeaveoutOptions, TransferOptions, run_transfer


def build_transfer_parser() -> argparse.ArgumentParser:
    parser = command_parser("transfer", transfer.__doc__)
    add_checkpoint_arguments(parser, "masked-LM checkpoint to transfer", old_model_spelling="--source")
    add_transfer_flags(parser, [name for name in TransferOptions.schema() if name != "leaveout"])
    parser.add_argument("--chunk-size", type=positive_int, default=DEFAULT_CHUNK_SIZE,
                        help="target tokens per similarity chunk (default: %(default)s)")
    add_transfer_flags(parser, ["leaveout"])
    return parser


@cli_entry
def transfer_main(argv: list[str] | None = None) -> int:
    args = build_transfer_parser().parse_args(argv)
    options = transfer_options(args)
    models = (args.model, options.target_tokenizer, options.reference)
    check_output(args.output, [resolve_model(name, args.model_dir) for name in models if name], kind="folder")
    report = run_transfer(args.model, args.output, options, chunk_size=args.chunk_size, model_dir=args.model_dir,
                          trust_remote_code=args.trust_remote_code)
    counts = report["counts"]
    transfer.logger.info(f"{args.output}: {report['vocabulary']['source']} -> {report['vocabulary']['target']} tokens "
                f"(exact {counts['exact']}, merged {counts['merged']}, new {counts['new']}, special {counts['special']}) "
                f"in {report['seconds']} s")
    return 0


def build_calibrate_parser() -> argparse.ArgumentParser:
    parser = command_parser("calibrate", calibrate.__doc__)
    add_checkpoint_arguments(parser, "SPLADE / masked-LM checkpoint", "the calibration documents (e.g. scifact)")
    add_option_flags(parser, CalibrationOptions, ["preset"])
    docs = CalibrationOptions.schema()["docs"]
    add_limit(parser, "documents", default=docs.default, maximum=MAX_DOCS, dest="docs")
    add_renamed(parser, "--docs", "--limit")
    add_option_flags(parser.add_mutually_exclusive_group(), CalibrationOptions, ["cut_percent", "target_terms"])
    add_option_flags(parser, EncoderOptions, ["max_length_doc"])  # a spec's calibrate block calls it max_length
    add_renamed(parser, "--max-length", "--max-length-doc")
    add_option_flags(parser, CalibrationOptions, ["max_sample", "batch_size", "seed"])
    add_path(parser, "--queries", "input file", help="queries JSONL ('text') for query-side FLOPS")
    return parser


@cli_entry
def calibrate_main(argv: list[str] | None = None) -> int:
    args = build_calibrate_parser().parse_args(argv)
    check_output(args.output, [resolve_model(args.model, args.model_dir), args.dataset, args.corpus, args.queries],
                 kind="folder")
    args.corpus = None if args.corpus is None else str(args.corpus)  # a path in words, as a spec or recipe gives it
    options = calibration_options(args)
    report = run_calibration(args.model, args.output, options, queries=args.queries, data_dir=args.data_dir,
                             model_dir=args.model_dir, trust_remote_code=args.trust_remote_code)
    before, after = report["before"], report["after"]
    calibrate.logger.info(f"{args.output}: delta {report['delta']:+.4f}; active terms per doc {before['active_mean']} -> "
                f"{after['active_mean']}, dead {before['dead_share']:.1%} -> {after['dead_share']:.1%}, "
                f"FLOPS {before['flops']} -> {after['flops']}")
    return 0


def add_transfer_flags(parser: argparse._ActionsContainer, names: Sequence[str] | None = None) -> None:
    """The transfer options' flags; ``leaveout`` is ``--leaveout FRACTION`` with ``--leaveout-seed``."""
    names = list(TransferOptions.schema() if names is None else names)
    if any(name != "leaveout" for name in names):
        add_option_flags(parser, TransferOptions, [name for name in names if name != "leaveout"])
    if "leaveout" in names:
        fraction, seed = LeaveoutOptions.schema()["fraction"], LeaveoutOptions.schema()["seed"]
        parser.add_argument("--leaveout", dest="leaveout_fraction", type=number_in(float, *fraction.bounds),
                            default=None, metavar="FRACTION",
                            help="leave-out experiment: first remove this seeded share (0 < FRACTION < 1) of the "
                                 "source's ordinary WordPiece tokens, then transfer back onto the target")
        parser.add_argument("--leaveout-seed", type=number_in(int, *seed.bounds), default=seed.default,
                            help="seed of --leaveout (default: %(default)s)")


def transfer_options(args: argparse.Namespace, **given: Any) -> TransferOptions:
    """The :class:`TransferOptions` of a command line :func:`add_transfer_flags` declared."""
    if getattr(args, "leaveout_fraction", None) is not None:
        given = {**given, "leaveout": LeaveoutOptions(fraction=args.leaveout_fraction, seed=args.leaveout_seed)}
    return options_from_args(TransferOptions, args, **given)


def calibration_options(args: argparse.Namespace, **given: Any) -> CalibrationOptions:
    """The options of calibrate's command line, where ``max_length`` is ``--max-length-doc`` (and ``docs``
    ``--limit``, stored as ``docs``)."""
    if hasattr(args, "max_length_doc"):
        given = {**given, "max_length": args.max_length_doc}
    return options_from_args(CalibrationOptions, args, **given)
