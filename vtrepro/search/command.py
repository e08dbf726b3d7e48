"""Batch impact search into a TREC run, with Lucene (Anserini) or PISA.

``python -m vtrepro search --index INDEX --queries queries.jsonl --output run.trec`` runs impact
search with the integer query vectors of an encoded ``queries.jsonl`` (``{"id", "vector"}``).
Hits are ordered by score, ties by document id; a query's own id is removed from its hits
(the BEIR convention); the top ``k`` (default 1000, at most 10,000) are kept. Impact scores are exact
integer dot products, with either engine.

``--index`` also takes a prebuilt index from ``python -m vtrepro export index`` (``.tar.gz``): its
checksums and every file are verified, it is extracted into a temporary folder beside ``--output``
(removed after the search), and its topics are the queries unless ``--queries`` is given.

``--engine pisa`` gives the same run with PISA (:mod:`vtrepro.search.pisa`) from a PISA index
folder that ``python -m vtrepro index --engine pisa`` built (the old ``--vectors`` here, which built it
first, still works with a notice).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from vtrepro.core.cli import (
    add_k,
    add_option_flags,
    add_output_file,
    add_path,
    add_threads,
    add_vectors,
    cli_entry,
    command_parser,
    options_from_args,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import read_query_vectors
from vtrepro.index.lucene import check_index_folder
from vtrepro.index.prebuilt import PrebuiltIndex, is_prebuilt, named_members, open_prebuilt, read_topics
from vtrepro.search import anserini_program, pyserini_module
from vtrepro.search.anserini_program import run_anserini
from vtrepro.search.lucene import search_impact
from vtrepro.search.pyserini_module import EXAMPLE_MODULES, run_pyserini_module
from vtrepro.search.runs import SearchOptions, write_trec_run

# vtrepro.search.pisa (numpy) is imported where PISA searches, on purpose: `search --help` and Lucene searches
# stay fast.

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("search", __doc__)
    add_path(parser, "--index", "input path", required=True,
             help="Lucene impact index folder, or a prebuilt index .tar.gz from 'export index' (a PISA index folder "
                  "with --engine pisa)")
    add_option_flags(parser, SearchOptions, ["engine"])
    add_vectors(parser, argparse.SUPPRESS)  # deprecated: 'index --engine pisa' builds the PISA index
    add_path(parser, "--queries", "input file",
             help="encoded queries.jsonl ({id, vector}); with a prebuilt index, default its topics")
    add_output_file(parser, "TREC run file to write")
    add_k(parser, SearchOptions)
    add_threads(parser, "search threads")
    add_option_flags(parser, SearchOptions, ["keep_query_id"])
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    search = options_from_args(SearchOptions, args)
    if args.vectors is not None and search.engine == "pisa":
        logger.warning(f"'search --engine pisa --vectors' is deprecated; build the index with 'index --engine pisa "
                       f"--vectors {args.vectors} --output {args.index}', then search it")
    if args.vectors is not None and search.engine != "pisa":
        raise VtreproError("--vectors builds a PISA index: use it with --engine pisa (build Lucene indexes with "
                           "'python -m vtrepro index')")
    prebuilt = is_prebuilt(args.index)
    if prebuilt and search.engine != "lucene":
        raise VtreproError(f"{args.index}: a prebuilt index holds a Lucene index; search it with --engine lucene")
    if args.queries is None and not prebuilt:
        raise VtreproError("--queries is required (only a prebuilt index .tar.gz brings its own topics)")
    vectors = None if args.vectors is None else EncodedFolder(args.vectors).collection
    check_output(args.output, [args.queries, args.index, vectors])
    if vectors is not None:  # the PISA index built from them is an output too
        check_output(args.index, [vectors, args.queries], kind="folder")
    if prebuilt:
        queries = read_query_vectors(args.queries) if args.queries else None
        with _extracted(args.index, args.output) as opened, named_members(opened, args.index):
            if queries is None:
                queries = read_topics(opened.topics, opened.header.get("queries_fingerprint"))
            run = search_impact(check_index_folder(opened.index), queries, search.k, search.threads,
                                not search.keep_query_id)
    elif search.engine == "pisa":
        from vtrepro.index.pisa import ensure_pisa_index
        from vtrepro.search.pisa import search_pisa

        if vectors is not None:
            ensure_pisa_index(vectors, args.index, search.threads)
        run = search_pisa(args.index, read_query_vectors(args.queries), search.k, search.threads,
                          not search.keep_query_id)
    else:
        run = search_impact(check_index_folder(args.index), read_query_vectors(args.queries), search.k, search.threads,
                            not search.keep_query_id)
    write_trec_run(run, args.output)
    print(f"{sum(map(len, run.values()))} hits for {len(run)} queries -> {args.output}")
    return 0


@contextlib.contextmanager
def _extracted(tarball: Path, output: Path) -> Iterator[PrebuiltIndex]:
    """A prebuilt index checked and extracted into a temporary folder beside ``output`` (removed afterwards)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.prebuilt-", dir=output.parent))
    try:
        yield open_prebuilt(tarball, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@cli_entry
def pyserini_main(argv: list[str] | None = None) -> int:
    args = build_pyserini_parser().parse_args(argv)
    return run_pyserini_module(args.module, args.arguments)


def build_pyserini_parser() -> argparse.ArgumentParser:
    parser = command_parser("pyserini", pyserini_module.__doc__)
    parser.add_argument("module", help=f"a Pyserini module run as a program, without 'pyserini.' ({EXAMPLE_MODULES})")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="its arguments, passed on as they are")
    return parser


@cli_entry
def anserini_main(argv: list[str] | None = None) -> int:
    args = build_anserini_parser().parse_args(argv)
    return run_anserini(args.program, args.arguments)


def build_anserini_parser() -> argparse.ArgumentParser:
    parser = command_parser("anserini", anserini_program.__doc__)
    parser.add_argument("program", metavar="CLASS", help="an Anserini main class, e.g. io.anserini.search.SearchCollection "
                                                         "(the io.anserini. prefix may be left out)")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="its arguments, passed on as they are")
    return parser
