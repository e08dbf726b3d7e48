"""``vtrepro regress`` and ``vtrepro export``: their parsers and runs.

``regress`` turns its command line into a :class:`~vtrepro.regress.context.RunContext` (and, with
``--rehearse``, the stand-ins of :func:`~vtrepro.regress.runner.rehearse_spec`) and runs
:func:`~vtrepro.regress.runner.run_regression`. ``export`` assembles its subcommands from the stages that own
what each exports: ``vectors`` (:mod:`vtrepro.encode.command`), ``index`` (:mod:`vtrepro.index.command`) and
``model`` (:mod:`vtrepro.model.command`).
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Callable

from vtrepro.core.cli import (
    DEFAULT_RUNS,
    add_data_dir,
    add_datasets,
    add_dry_run,
    add_model_dir,
    add_path,
    add_reference_vectors,
    add_rehearse,
    add_renamed,
    add_spec,
    add_threads,
    add_trust_remote_code,
    add_vectors,
    cli_entry,
    command_parser,
    positive_int,
)
from vtrepro.regress import export, runner
from vtrepro.regress.context import RunContext
from vtrepro.regress.runner import rehearse_spec, run_regression
from vtrepro.regress.spec import load_spec

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("regress", runner.__doc__)
    add_spec(parser)
    add_datasets(parser)
    add_data_dir(parser)
    add_model_dir(parser)
    add_path(parser, "--runs", "root", help="root of the runs: artifacts and reports go to <runs>/<spec>/ "
                                             "(default runs/, with --rehearse runs/rehearse/)")
    add_renamed(parser, "--output", "--runs")
    add_threads(parser, "indexing and search threads")
    parser.add_argument("--encode-procs", type=positive_int, default=1,
                        help="encode each corpus with this many local processes (torchrun; one GPU each when "
                             "there are GPUs); the vectors are those of one process")
    add_vectors(parser, "use these encoded vectors instead of encoding: a bundle from 'python -m vtrepro export', "
                        "a folder laid out <condition>/<dataset>/, one encoded corpus folder for one run, or a "
                        "prebuilt index .tar.gz (or the folder of them) from 'export index' (vectors read back "
                        "from its postings and topics)")
    add_reference_vectors(parser, "a bundle or folder like --vectors to count the documents whose vectors differ")
    parser.add_argument("--strict", action="store_true", help="OKISH (within tolerance, not exact) counts as FAIL")
    parser.add_argument("--record", action="store_true", help="write observed values into the spec as expected")
    add_dry_run(parser, help="validate the spec, print the plan, run nothing")
    add_rehearse(parser,
                 help="run every condition and dataset at miniature size on stand-in models and data (recipes "
                             "scaled down, nothing compared with pins); prints what it replaced and the real run's cost")
    add_trust_remote_code(parser)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    spec = load_spec(args.spec)
    rehearsal = None
    runs, data_dir, model_dir = args.runs, args.data_dir, args.model_dir
    if args.rehearse:
        runs = runs or DEFAULT_RUNS / "rehearse"
        spec, rehearsal = rehearse_spec(spec, runs, args.datasets, model_dir, {
            "--record": args.record, "--vectors": bool(args.vectors), "--reference-vectors": bool(args.reference_vectors)})
        data_dir, model_dir = str(rehearsal[0].data_dir), str(rehearsal[0].model_dir)
    context = RunContext(output=runs or DEFAULT_RUNS, datasets=args.datasets, model_dir=model_dir, data_dir=data_dir,
                         threads=args.threads, encode_processes=args.encode_procs, vectors=args.vectors,
                         reference_vectors=args.reference_vectors, record=args.record, strict=args.strict,
                         trust_remote_code=args.trust_remote_code, command=tuple(argv))
    return run_regression(spec, context, dry_run=args.dry_run, rehearsal=rehearsal)


EXPORT_SUBCOMMANDS = ("vectors", "index", "model")


def export_subcommands() -> dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[Any], int]]]:
    """``export``'s subcommands, each declared by the stage that owns what it exports: its line, arguments and
    run (imported here, not above: ``regress --help`` loads none of them)."""
    from vtrepro.encode.command import EXPORT_VECTORS, add_export_vectors_arguments, export_vectors_main
    from vtrepro.index.command import EXPORT_INDEX, add_export_index_arguments, export_index_main
    from vtrepro.model.command import EXPORT_MODEL, add_export_model_arguments, export_model_main

    return {"vectors": (EXPORT_VECTORS, add_export_vectors_arguments, export_vectors_main),
            "index": (EXPORT_INDEX, add_export_index_arguments, export_index_main),
            "model": (EXPORT_MODEL, add_export_model_arguments, export_model_main)}


def build_export_parser() -> argparse.ArgumentParser:
    """``export`` and its subcommands' arguments."""
    parser = command_parser("export", export.__doc__)
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="{vectors,index,model}")
    for name, (summary, add_arguments, _) in export_subcommands().items():
        add_arguments(subcommands.add_parser(name, help=summary, description=summary))
    return parser


@cli_entry
def export_main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] not in (*EXPORT_SUBCOMMANDS, "-h", "--help"):  # the old spelling of 'export vectors'
        logger.warning(f"'export {argv[0]}' without a subcommand is deprecated; write 'export vectors {argv[0]}'")
        argv.insert(0, "vectors")
    args = build_export_parser().parse_args(argv)
    return export_subcommands()[args.command][2](args)
