"""Document vectors read back from a Lucene impact index's postings: a prebuilt index gives its vectors again.

In an impact index (``-impact -pretokenized``) a term's frequency in a document is its integer impact, so
walking every term's postings recovers each document's ``{term: impact}`` exactly; their fingerprint
(:mod:`vtrepro.encode.fingerprint`) then equals that of the vectors the index was built from. This walks
the postings through Lucene's API one call at a time (about 20 microseconds a posting here: scifact's
1.5 million in half a minute), so it suits BEIR-sized corpora, not MS MARCO's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from vtrepro.core.io import write_jsonl
from vtrepro.core.java import java_class, start_jvm
from vtrepro.core.progress import Progress
from vtrepro.encode.reader import Vector
from vtrepro.index.lucene_checks import CONTENTS_FIELD, ID_FIELD, check_index_folder, index_errors

NO_MORE_DOCS = 2**31 - 1  # Lucene's DocIdSetIterator.NO_MORE_DOCS


def _leaf_vectors(leaf) -> Iterator[tuple[str, Vector]]:
    """``(id, vector)`` of every live document in one index segment."""
    stored = leaf.storedFields()
    live = leaf.getLiveDocs()
    vectors: list[Vector] = [{} for _ in range(leaf.maxDoc())]
    terms = leaf.terms(CONTENTS_FIELD)
    postings_flag = java_class("org.apache.lucene.index.PostingsEnum").FREQS
    if terms is not None:
        terms_enum, postings = terms.iterator(), None
        term = terms_enum.next()
        while term is not None:
            text = term.utf8ToString()
            postings = terms_enum.postings(postings, postings_flag)
            doc = postings.nextDoc()
            while doc != NO_MORE_DOCS:
                vectors[doc][text] = int(postings.freq())
                doc = postings.nextDoc()
            term = terms_enum.next()
    for doc, vector in enumerate(vectors):
        if live is None or live.get(doc):
            yield str(stored.document(doc).get(ID_FIELD)), vector


def index_vectors(index_dir: Path) -> Iterator[tuple[str, Vector]]:
    """Every document's ``(id, {term: impact})`` recovered from the postings of the impact index ``index_dir``."""
    start_jvm()
    path = check_index_folder(index_dir)
    with index_errors(index_dir):
        reader = java_class("io.anserini.index.IndexReaderUtils").getReader(path)
    try:
        leaves = reader.leaves().toArray()
        with Progress(int(reader.numDocs()), "read postings", "doc") as progress:
            for leaf in leaves:
                yield from _leaf_vectors(leaf.reader())
                progress.update(int(leaf.reader().numDocs()))
    finally:
        reader.close()


def write_index_vectors(index_dir: Path, output: Path) -> int:
    """Write the vectors of ``index_dir`` as one JsonVectorCollection file ``output``; returns the documents."""
    return write_jsonl(output, ({"id": doc_id, "contents": "", "vector": vector}
                                for doc_id, vector in index_vectors(index_dir)))
