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
folder, built there from ``--vectors`` when given (kept when it already holds those vectors).
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from vtrepro.core.cli import add_threads, cli_entry, command_parser
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import read_query_vectors
from vtrepro.index.lucene import check_index_folder
from vtrepro.index.prebuilt import PrebuiltIndex, is_prebuilt, named_members, open_prebuilt, read_topics
from vtrepro.search.lucene import search_impact
from vtrepro.search.runs import add_k, write_trec_run

# vtrepro.search.pisa (numpy) is imported where PISA searches, on purpose: `search --help` and Lucene searches
# stay fast.

ENGINES = ("lucene", "pisa")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("search", __doc__)
    parser.add_argument("--index", required=True, type=Path,
                        help="Lucene impact index, or a prebuilt index .tar.gz from 'export index' (PISA index with "
                             "--engine pisa)")
    parser.add_argument("--engine", choices=ENGINES, default="lucene",
                        help="lucene (default) or pisa: the same run, PISA's MaxScore is faster")
    parser.add_argument("--vectors", type=Path,
                        help="with --engine pisa: build the PISA index at --index from this JsonVectorCollection folder "
                             "(kept when it already holds these vectors)")
    parser.add_argument("--queries", type=Path,
                        help="encoded queries.jsonl ({id, vector}); with a prebuilt index, default its topics")
    parser.add_argument("--output", required=True, type=Path, help="TREC run file to write (replaced when complete)")
    add_k(parser)
    add_threads(parser, "search threads")
    parser.add_argument("--keep-query-id", action="store_true", help="keep hits whose docid equals the query id")
    args = parser.parse_args(argv)
    if args.vectors is not None and args.engine != "pisa":
        raise VtreproError("--vectors builds a PISA index: use it with --engine pisa (build Lucene indexes with "
                           "'python -m vtrepro index')")
    prebuilt = is_prebuilt(args.index)
    if prebuilt and args.engine != "lucene":
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
            run = search_impact(check_index_folder(opened.index), queries, args.k, args.threads,
                                not args.keep_query_id)
    elif args.engine == "pisa":
        from vtrepro.search.pisa import ensure_pisa_index, search_pisa

        if vectors is not None:
            ensure_pisa_index(vectors, args.index)
        run = search_pisa(args.index, read_query_vectors(args.queries), args.k, args.threads, not args.keep_query_id)
    else:
        run = search_impact(check_index_folder(args.index), read_query_vectors(args.queries), args.k, args.threads,
                            not args.keep_query_id)
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
