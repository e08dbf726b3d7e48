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

``--engine seismic`` or ``bmp`` searches an approximate index (:mod:`vtrepro.search.approximate`), one thread,
and writes beside the run ``<run>.agreement.json``: its recall@10 and recall@1000 against the exact run on the
same vectors (from ``--exact-index``, a PISA or Lucene index of them, or a given ``--exact-run``), with
``--qrels`` the nDCG@10 of both and their difference, and the search's queries/s and latency; recall@10 against
exact is printed.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

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
from vtrepro.index.approximate import APPROXIMATE_ENGINES, SEARCH_OPTIONS, engine_options
from vtrepro.index.lucene_checks import check_index_folder
from vtrepro.index.prebuilt import PrebuiltIndex, is_prebuilt, named_members, open_prebuilt, read_topics
from vtrepro.search import anserini_program, pyserini_module
from vtrepro.search.anserini_program import run_anserini
from vtrepro.search.lucene import search_impact
from vtrepro.search.pyserini_module import EXAMPLE_MODULES, run_pyserini_module
from vtrepro.search.runs import Run, SearchOptions, read_trec_run, write_trec_run

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
    add_threads(parser, "search threads (an approximate engine searches with one; its exact reference with these)")
    add_option_flags(parser, SearchOptions, ["keep_query_id"])
    for options in SEARCH_OPTIONS.values():
        add_option_flags(parser, options)
    add_path(parser, "--exact-index", "input folder",
             help="seismic, bmp: the PISA or Lucene index of the same vectors, searched for the exact run the "
                  "approximate one is measured against")
    add_path(parser, "--exact-run", "input file",
             help="seismic, bmp: an exact engine's TREC run of the same queries on the same vectors, in place of "
                  "--exact-index")
    add_path(parser, "--qrels", "input file",
             help="seismic, bmp: judgments (BEIR TSV with header, or TREC 4-column): the agreement then holds the "
                  "nDCG@10 of both runs and their difference")
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    search = options_from_args(SearchOptions, args)
    knobs = engine_options(SEARCH_OPTIONS, search.engine, vars(args))
    if search.engine in APPROXIMATE_ENGINES:
        return _approximate(args, search, knobs)
    for flag in ("exact_index", "exact_run", "qrels"):
        if getattr(args, flag) is not None:
            raise VtreproError(f"--{flag.replace('_', '-')} measures an approximate run: use it with --engine "
                               f"{' or '.join(APPROXIMATE_ENGINES)}")
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


def _approximate(args: argparse.Namespace, search: SearchOptions, knobs: Any) -> int:
    """``search --engine seismic|bmp``: the run, then its agreement with the exact run beside it."""
    from vtrepro.data.beir import read_qrels
    from vtrepro.evaluate.against_exact import agreement, write_agreement
    from vtrepro.search.approximate import ApproximateSearcher, search_approximate
    from vtrepro.search.runs import SearchTiming

    if args.vectors is not None:
        raise VtreproError(f"--vectors builds a PISA index; build the {search.engine} index with 'python -m vtrepro index "
                           f"--engine {search.engine} --vectors FOLDER --output DIR'")
    if args.queries is None:
        raise VtreproError("--queries is required")
    if (args.exact_index is None) == (args.exact_run is None):
        raise VtreproError(f"--engine {search.engine} is approximate: its run is measured against the exact run on the "
                           "same vectors; give one of --exact-index (their PISA or Lucene index) and --exact-run")
    check_output(args.output, [args.queries, args.index, args.exact_index, args.exact_run, args.qrels])
    queries = read_query_vectors(args.queries)
    qrels = read_qrels(args.qrels) if args.qrels is not None else None
    searcher = ApproximateSearcher(search.engine, args.index)
    exact, exact_k, source = _exact_run(args, search, searcher.opened.meta, queries)
    timing = SearchTiming()
    run = search_approximate(search.engine, args.index, queries, search.k, knobs, not search.keep_query_id, timing,
                             searcher)
    write_trec_run(run, args.output)
    figures = {"engine": search.engine, "index": str(args.index), "library": searcher.opened.meta["library"],
               "index_options": searcher.opened.options.to_dict(), "search_options": knobs.to_dict(),
               "exact": source, **agreement(run, exact, search.k, exact_k, qrels), **timing.figures()}
    path = write_agreement(args.output, figures)
    print(f"{sum(map(len, run.values()))} hits for {len(run)} queries -> {args.output}")
    shown = {name: figures[name] for name in ("recall@10_vs_exact", "recall@1000_vs_exact", "ndcg@10_difference")
             if figures.get(name) is not None}
    print(f"{search.engine} against exact ({source['engine']}): "
          + ", ".join(f"{name.replace('_vs_exact', '')} {value:.4f}" for name, value in shown.items())
          + f"; {figures['search_queries_per_s']:.1f} queries/s, one thread -> {path}")
    return 0


def _exact_run(args: argparse.Namespace, search: SearchOptions, meta: dict, queries: dict) -> tuple[Run, int, dict]:
    """The exact run an approximate one is measured against, its depth, and where it came from: ``--exact-run``
    as given, or ``--exact-index`` (a PISA index of the same fingerprint, or a Lucene index of the same
    documents and impact total) searched at the same ``k``."""
    from vtrepro.index.lucene_checks import index_stats
    from vtrepro.index.pisa import read_pisa_meta

    if args.exact_run is not None:
        run = read_trec_run(args.exact_run)
        if queries and not set(run) & set(queries):
            raise VtreproError(f"{args.exact_run}: holds none of the queries of {args.queries}; give the exact run of "
                               "these queries")
        return run, max(map(len, run.values()), default=0), {"engine": "a given run", "run": str(args.exact_run)}
    pisa = read_pisa_meta(args.exact_index)
    if pisa is not None:
        from vtrepro.search.pisa import search_pisa

        if pisa["vectors_sha256"] != meta["vectors_sha256"]:
            raise VtreproError(f"{args.exact_index}: a PISA index of other vectors (fingerprint "
                               f"{pisa['vectors_sha256'][:12]}, the {search.engine} index's {meta['vectors_sha256'][:12]}); "
                               "give the exact index of the same vectors")
        run = search_pisa(args.exact_index, queries, search.k, search.threads, not search.keep_query_id)
        return run, search.k, {"engine": "pisa", "index": str(args.exact_index)}
    stats = index_stats(args.exact_index)
    if (stats["documents"], stats["total_terms"]) != (meta["documents"], meta["total_terms"]):
        raise VtreproError(f"{args.exact_index}: a Lucene index of {stats['documents']} documents and impact total "
                           f"{stats['total_terms']}, the {search.engine} index's vectors {meta['documents']} and "
                           f"{meta['total_terms']}; give the exact index of the same vectors")
    run = search_impact(check_index_folder(args.exact_index), queries, search.k, search.threads,
                        not search.keep_query_id)
    return run, search.k, {"engine": "lucene", "index": str(args.exact_index)}


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
