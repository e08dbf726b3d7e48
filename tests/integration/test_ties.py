"""Runs do not depend on how the index was built: one Lucene thread or several (impact indexes: one process per part
of the files, their segments joined; or one file divided at line boundaries among the processes), segments merged or
not, documents in another order, PISA or Lucene, one search thread or two. The collection is built to tie at the
cut: 2,000 documents that are 50 distinct vectors (and 40 distinct texts for BM25), each repeated, in 8 files (and
the same in one file)."""
import random
from pathlib import Path

import pytest

from helpers import write_vectors
from vtrepro.core.java import java_class
from vtrepro.index.lucene import build_bm25_index, build_impact_index
from vtrepro.index.pisa import build_pisa_index
from vtrepro.search.lucene import search_bm25, search_impact
from vtrepro.search.pisa import search_pisa
from vtrepro.search.runs import write_trec_run

DOCUMENTS, FILES, KS = 2000, 8, (10, 1000)
WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "olive"]
LUCENE_LAYOUTS = ("1 thread", "2 threads", "4 threads", "4 threads merged", "1 thread, other order",
                  "3 threads, one file")
BM25_LAYOUTS = LUCENE_LAYOUTS[:-1]  # BM25 indexes are built from texts: no vector file to divide
PISA_LAYOUTS = ("collection order", "other order", "one file, 3 processes")


def _collection() -> tuple[list[tuple[str, dict[str, int]]], list[tuple[str, str]], dict, dict]:
    rng = random.Random(33)
    terms = [f"t{number}" for number in range(24)]
    vectors = [{"all": rng.randint(1, 2), **{term: rng.randint(1, 3) for term in rng.sample(terms, rng.randint(1, 4))}}
               for _ in range(50)]  # every document holds "all": a query with it matches them all
    texts = [" ".join(["fruit", *rng.sample(WORDS, rng.randint(1, 3))]) for _ in range(40)]
    ids = [f"d{number:04d}" for number in range(DOCUMENTS)]
    rng.shuffle(ids)  # document ids out of collection order
    impact_documents = [(doc_id, vectors[rng.randrange(len(vectors))]) for doc_id in ids]
    text_documents = [(doc_id, texts[rng.randrange(len(texts))]) for doc_id in ids]
    impact_queries = {f"q{number}": {term: rng.randint(1, 2) for term in rng.sample(terms, rng.randint(1, 3))}
                      | ({"all": 1} if number % 2 else {}) for number in range(40)}
    impact_queries["d0001"] = {"t1": 1}  # a query whose id is a document: removed from its own hits
    text_queries = {f"q{number}": " ".join(rng.sample(WORDS, rng.randint(1, 2)) + ["fruit"] * (number % 2))
                    for number in range(30)}
    return impact_documents, text_documents, impact_queries, text_queries


def _write_files(folder: Path, documents: list[tuple[str, dict[str, int]]]) -> Path:
    """The documents in ``FILES`` vector files, dealt in turn (Anserini's threads index a file each)."""
    for part in range(FILES):
        write_vectors(folder / f"{part}", dict(documents[part::FILES]))
        (folder / f"{part}" / "part-00000.jsonl").rename(folder / f"part-{part:05d}.jsonl")
        (folder / f"{part}").rmdir()
    return folder


def force_merge(index: Path) -> None:
    """Merge a Lucene index's segments into one, as Anserini's ``-optimize`` does."""
    directory = java_class("org.apache.lucene.store.FSDirectory").open(java_class("java.io.File")(str(index)).toPath())
    config = java_class("org.apache.lucene.index.IndexWriterConfig")()
    config.setOpenMode(java_class("org.apache.lucene.index.IndexWriterConfig$OpenMode").APPEND)
    writer = java_class("org.apache.lucene.index.IndexWriter")(directory, config)
    writer.forceMerge(1)
    writer.close()
    directory.close()


def segments(index: Path) -> int:
    return len(list(index.glob("*.si")))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every layout's Lucene impact, Lucene BM25 and PISA index of the collection, and the queries."""
    root = tmp_path_factory.mktemp("ties")
    impact_documents, text_documents, impact_queries, text_queries = _collection()
    in_order = _write_files(root / "vectors", impact_documents)
    reordered = _write_files(root / "vectors-reordered", impact_documents[::-1])
    layouts: dict[str, dict[str, Path]] = {"impact": {}, "bm25": {}, "pisa": {}}
    for name, threads in (("1 thread", 1), ("2 threads", 2), ("4 threads", 4), ("4 threads merged", 4)):
        layouts["impact"][name] = root / f"impact {name}"
        build_impact_index(in_order, layouts["impact"][name], threads=threads, min_part_bytes=1)  # a part per thread
        layouts["bm25"][name] = root / f"bm25 {name}"
        build_bm25_index(text_documents, layouts["bm25"][name], threads=threads)
    for kind in ("impact", "bm25"):
        force_merge(layouts[kind]["4 threads merged"])
    layouts["impact"]["1 thread, other order"] = root / "impact reordered"
    build_impact_index(reordered, layouts["impact"]["1 thread, other order"], threads=1)
    layouts["bm25"]["1 thread, other order"] = root / "bm25 reordered"
    build_bm25_index(text_documents[::-1], layouts["bm25"]["1 thread, other order"], threads=1)
    one_file = root / "vectors-one-file"  # the 8 files joined: the processes divide it at line boundaries
    one_file.mkdir()
    with open(one_file / "all.jsonl", "wb") as joined:
        for path in sorted(in_order.glob("*.jsonl")):
            joined.write(path.read_bytes())
    layouts["impact"]["3 threads, one file"] = root / "impact one file"
    build_impact_index(one_file, layouts["impact"]["3 threads, one file"], threads=3, min_part_bytes=1)
    for name, vectors, threads in zip(PISA_LAYOUTS, (in_order, reordered, one_file), (2, 2, 3)):
        layouts["pisa"][name] = root / f"pisa {name}"
        build_pisa_index(vectors, layouts["pisa"][name], threads=threads)
    return root, layouts, impact_queries, text_queries


def test_the_layouts_differ(built):
    """The indexes really differ: merged ones hold one segment, and the reordered index numbers the documents
    otherwise inside Lucene. An impact index built by 4 processes holds each part's segment. (How many segments
    Anserini's BM25 threads write depends on which thread takes which file when: often more than one, not always,
    so no test counts on it.)"""
    _, layouts, _, _ = built
    impact = layouts["impact"]
    assert segments(impact["1 thread"]) == 1 and segments(impact["4 threads merged"]) == 1
    assert segments(impact["2 threads"]) == 2 and segments(impact["4 threads"]) == 4
    assert segments(impact["3 threads, one file"]) == 3  # one file, three ranges, three JVMs
    assert segments(layouts["bm25"]["4 threads merged"]) == 1
    internal = {}
    for name in ("1 thread", "1 thread, other order"):
        searcher = java_class("io.anserini.search.SimpleImpactSearcher")(str(impact[name]))
        internal[name] = {hit.docid: hit.lucene_docid for hit in searcher.search(_as_java({"t1": 1}), DOCUMENTS)}
        searcher.close()
    assert internal["1 thread"] != internal["1 thread, other order"]


def _as_java(query: dict[str, int]):
    java_query = java_class("java.util.HashMap")()
    for term, weight in query.items():
        java_query.put(term, java_class("java.lang.Integer")(weight))
    return java_query


def _run_bytes(path: Path, run: dict) -> bytes:
    write_trec_run(run, path)
    return path.read_bytes()


@pytest.mark.parametrize("k", KS)
def test_impact_runs_are_byte_identical_in_every_layout_and_engine(built, k):
    root, layouts, queries, _ = built
    runs = {}
    for threads in (1, 2):
        for name in LUCENE_LAYOUTS:
            run = search_impact(layouts["impact"][name], queries, k, threads)
            runs[f"lucene, {name}, {threads} search threads"] = _run_bytes(root / "run.trec", run)
        for name in PISA_LAYOUTS:
            run = search_pisa(layouts["pisa"][name], queries, k, threads)
            runs[f"pisa, {name}, {threads} search threads"] = _run_bytes(root / "run.trec", run)
    reference = runs["lucene, 1 thread, 1 search threads"]
    assert {name for name, data in runs.items() if data != reference} == set()
    assert len(_tied_at_cut(search_impact(layouts["impact"]["1 thread"], queries, k + 1, 1), k)) >= 10


def _tied_at_cut(run: dict, k: int) -> list[str]:
    """The queries whose k-th and (k+1)-th hits tie: the cut splits a tie (so the test tests something)."""
    return [qid for qid, hits in run.items() if len(hits) > k and list(hits.values())[k - 1] == list(hits.values())[k]]


@pytest.mark.parametrize("k", KS)
def test_bm25_runs_are_byte_identical_in_every_layout(built, k):
    root, layouts, _, queries = built
    runs = {f"{name}, {threads} search threads": _run_bytes(root / "run.trec", search_bm25(layouts["bm25"][name],
                                                                                          queries, k, threads))
            for threads in (1, 2) for name in BM25_LAYOUTS}
    reference = runs["1 thread, 1 search threads"]
    assert {name for name, data in runs.items() if data != reference} == set()
    tied = [qid for qid, hits in search_bm25(layouts["bm25"]["1 thread"], queries, k + 1, 1).items()
            if len(hits) > k and list(hits.values())[k - 1] - list(hits.values())[k] < 1e-4]
    assert len(tied) >= 5  # Anserini lowers each tied BM25 score 1e-6 below the one before: ties differ by < 1e-4
