"""``vtrepro index`` (either engine) and ``vtrepro export index``: their parsers and runs.

The build is :mod:`vtrepro.index.lucene` (Anserini) or :mod:`vtrepro.index.pisa`; the prebuilt tarballs are
:mod:`vtrepro.index.prebuilt`, written for a spec's runs by :func:`vtrepro.regress.export.export_index`.
"""
from __future__ import annotations

import argparse
import json

from vtrepro.core.cli import (
    add_data_dir,
    add_datasets,
    add_option_flags,
    add_output_folder,
    add_renamed,
    add_runs,
    add_spec,
    add_threads,
    add_vectors,
    cli_entry,
    command_parser,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.encode.fingerprint import VectorSetSummary
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import vector_files
from vtrepro.index import lucene
from vtrepro.index.approximate import APPROXIMATE_ENGINES, INDEX_OPTIONS, engine_options
from vtrepro.index.lucene import build_impact_index, check_index_target
from vtrepro.index.lucene_checks import check_against_manifest
from vtrepro.index.parts import fingerprint_in_parts
from vtrepro.index.prebuilt import METADATA_NAME

ENGINES = ("lucene", "pisa", *APPROXIMATE_ENGINES)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("index", lucene.__doc__)
    add_vectors(parser, "encoded corpus folder (with manifest.json) or a folder of JsonVectorCollection *.jsonl",
                required=True)
    add_output_folder(parser, "index folder", rule="an existing index of the same engine is replaced once the new "
                                                   "one is complete")
    add_renamed(parser, "--index", "--output")
    parser.add_argument("--engine", choices=ENGINES, default="lucene",
                        help="lucene: an Anserini impact index (default); pisa: a PISA index, kept when it already "
                             "holds these vectors; seismic or bmp: an approximate index (the 'approximate' extra)")
    add_threads(parser, "indexing threads: Lucene impact and PISA indexes run one process per part of the vector files; "
                        "Seismic's build its threads; BMP's build is one thread")
    for options in INDEX_OPTIONS.values():
        add_option_flags(parser, options)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    knobs = engine_options(INDEX_OPTIONS, args.engine, vars(args))
    encoded = EncodedFolder(args.vectors)
    if args.engine in APPROXIMATE_ENGINES:
        from vtrepro.index.build_approximate import build_approximate_index

        check_output(args.output, [encoded.collection, encoded.manifest_path], kind="folder")
        summary = _checked_summary(encoded, args.threads)
        meta = build_approximate_index(args.engine, encoded.collection, args.output, knobs, args.threads, summary)  # type: ignore[arg-type]
        print(json.dumps(meta))
        return 0
    if args.engine == "pisa":
        from vtrepro.index.pisa import ensure_pisa_index

        check_output(args.output, [encoded.collection], kind="folder")
        meta, seconds = ensure_pisa_index(encoded.collection, args.output, args.threads)
        print(json.dumps({**meta, "built_seconds": seconds}))
        return 0
    check_index_target(args.output)
    check_output(args.output, [encoded.collection, encoded.manifest_path], kind="folder")
    check_output(args.output.parent, kind="folder")  # the build works beside the index
    summary = _checked_summary(encoded, args.threads)
    stats = build_impact_index(encoded.collection, args.output, args.threads, expected=summary)
    print(json.dumps(stats))
    return 0


def _checked_summary(encoded: EncodedFolder, threads: int) -> VectorSetSummary:
    """The fingerprint of an encoded folder's vectors (read by ``threads`` processes), checked against its manifest
    when it has one."""
    manifest = encoded.load_manifest()
    summary = fingerprint_in_parts(vector_files(encoded.collection), threads)
    if manifest is not None:
        if not manifest.get("complete"):
            raise VtreproError(f"{encoded.manifest_path}: the encoding is not finished; "
                               "rerun the same 'python -m vtrepro encode' command to complete it")
        check_against_manifest({"documents": summary.count, "total_terms": summary.total_impact}, manifest)
    return summary


EXPORT_INDEX = "prebuilt Lucene impact indexes (.tar.gz) with topics, qrels and a README, per run"
"""``export index`` in one line (its help and description)."""


def add_export_index_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``export index``: a spec's impact runs as prebuilt indexes (:mod:`vtrepro.index.prebuilt`)."""
    add_spec(parser)
    add_runs(parser, "the --runs folder regress used")
    add_datasets(parser)
    add_data_dir(parser)
    add_output_folder(parser, f"folder for the .tar.gz files, their .sha256 and .md5, and {METADATA_NAME}",
                      rule=f"an earlier export's {METADATA_NAME} there is added to")


def export_index_main(args: argparse.Namespace) -> int:
    """``export index`` with its parsed arguments: the exit status."""
    from vtrepro.regress.export import export_index

    return export_index(args.spec, args.runs, args.datasets, args.output, args.data_dir)
