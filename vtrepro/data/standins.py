"""Miniature data files in their published formats, for rehearsals (``train``/``regress --rehearse``).

Each writer makes a small, seeded, self-consistent file (or folder) in exactly the layout the real
download has, so a rehearsal runs every reader the real run will: a BEIR folder (``corpus.jsonl``,
``queries.jsonl``, ``qrels/<split>.tsv``), MS MARCO's ``collection.tsv`` and ``queries.*.tsv``,
sentence-transformers' ``msmarco-hard-negatives.jsonl.gz`` and its teacher scores pickle
(``{qid: {pid: score}}``, gzip'd, ids as integers, as published), a JSONL text corpus (WikiBook's
``{"text"}`` lines) and a JSONL file of query/passage pairs. The texts are drawn from a few topics, so
queries share words with the documents judged relevant to them and retrieval scores are not all zero.
"""
from __future__ import annotations

import gzip
import json
import pickle
import random
from dataclasses import dataclass
from pathlib import Path

from vtrepro.core.io import atomic_write, write_jsonl
from vtrepro.data.beir import QRELS_HEADER

TOPICS: tuple[tuple[str, ...], ...] = (
    ("Paris", "France", "river", "Seine", "museum", "Louvre", "city", "bridge"),
    ("protein", "cell", "enzyme", "membrane", "gene", "DNA", "mutation", "receptor"),
    ("vaccine", "virus", "infection", "COVID-19", "immune", "antibody", "trial", "dose"),
    ("stock", "market", "bond", "interest", "inflation", "bank", "loan", "dividend"),
    ("football", "league", "goal", "season", "coach", "Champions", "stadium", "transfer"),
    ("climate", "carbon", "emission", "warming", "glacier", "ocean", "drought", "policy"),
    ("Python", "compiler", "memory", "thread", "kernel", "GPU", "index", "query"),
    ("molecule", "catalyst", "polymer", "solvent", "reaction", "ion", "oxide", "synthesis"),
)
"""Topic words, some cased and some with digits, so cased and uncased tokenizers split them differently."""
FILLER: tuple[str, ...] = ("the", "of", "and", "a", "in", "is", "for", "with", "on", "that", "by", "new", "study",
                           "results", "shows", "between", "after", "high", "low", "effect")
DOCUMENTS, QUERIES = 32, 8
"""Documents and test queries of a stand-in collection: enough for every stage to run, seconds to index."""
TEACHER_SYSTEMS: tuple[str, ...] = ("bm25", "msmarco-distilbert-base-tas-b", "msmarco-MiniLM-L-6-v3")
"""Systems named in the published hard-negatives file (a few of its 13)."""


def standin_words() -> list[str]:
    """Every word a stand-in text is made of."""
    return [word for topic in TOPICS for word in topic] + list(FILLER)


def _text(rng: random.Random, topic: tuple[str, ...], words: int) -> str:
    chosen = [rng.choice(topic) if rng.random() < 0.5 else rng.choice(FILLER) for _ in range(words)]
    return " ".join(chosen).capitalize() + "."


@dataclass(frozen=True)
class Collection:
    """Documents and queries with one relevant document per query: the content every stand-in file shares."""

    documents: dict[int, str]
    queries: dict[int, str]
    relevant: dict[int, int]  # query id -> its relevant document id

    @classmethod
    def make(cls, seed: str, documents: int = DOCUMENTS, queries: int = QUERIES) -> Collection:
        rng = random.Random(seed)
        texts = {index: _text(rng, TOPICS[index % len(TOPICS)], 24) for index in range(documents)}
        relevant = {index: rng.randrange(documents) for index in range(queries)}
        asked = {index: " ".join(rng.sample(texts[doc].rstrip(".").lower().split(), 4)) for index, doc in relevant.items()}
        return cls(texts, asked, relevant)


def write_beir_folder(folder: Path, seed: str, splits: tuple[str, ...] = ("test",)) -> Path:
    """A BEIR dataset folder: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` and
    ``qrels/<split>.tsv`` for each split (its own queries per split, relevance 1)."""
    collection = Collection.make(seed, queries=QUERIES * len(splits))
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", [{"_id": f"d{doc}", "title": text.split()[1].title(), "text": text}
                                          for doc, text in collection.documents.items()])
    write_jsonl(folder / "queries.jsonl", [{"_id": f"q{query}", "text": text}
                                           for query, text in collection.queries.items()])
    for index, split in enumerate(splits):
        judged = sorted(collection.relevant.items())[index * QUERIES:(index + 1) * QUERIES]
        with atomic_write(folder / "qrels" / f"{split}.tsv") as handle:
            handle.write(QRELS_HEADER + "\n" + "".join(f"q{query}\td{doc}\t1\n" for query, doc in judged))
    return folder


def write_tsv(path: Path, texts: dict[int, str]) -> Path:
    """``id<TAB>text`` lines: MS MARCO's ``collection.tsv`` and ``queries.*.tsv``."""
    with atomic_write(path) as handle:
        handle.writelines(f"{key}\t{text}\n" for key, text in texts.items())
    return path


def _gzip(path: Path, data: bytes) -> Path:
    with atomic_write(path, "wb", encoding=None) as handle:
        handle.write(gzip.compress(data, mtime=0))
    return path


def _negatives(collection: Collection, query: int, rng: random.Random) -> dict[str, list[int]]:
    others = [doc for doc in collection.documents if doc != collection.relevant[query]]
    return {system: rng.sample(others, 4) for system in TEACHER_SYSTEMS}


def write_hard_negatives(path: Path, collection: Collection, seed: str) -> Path:
    """sentence-transformers' ``msmarco-hard-negatives.jsonl.gz``: ``{"qid", "pos": [pid], "neg": {system: [pid]}}``."""
    rng = random.Random(seed)
    lines = [json.dumps({"qid": query, "pos": [collection.relevant[query]], "neg": _negatives(collection, query, rng)})
             for query in collection.queries]
    return _gzip(path, ("\n".join(lines) + "\n").encode())


def write_teacher_scores(path: Path, collection: Collection) -> Path:
    """The cross-encoder scores as published: a gzip'd pickle of ``{qid: {pid: score}}`` (integer ids), a
    score for every query with every document (the real file scores each query's positives and mined
    negatives; a superset reads the same)."""
    scores = {query: {doc: (8.0 if doc == relevant else -4.0 + (doc % 7)) for doc in collection.documents}
              for query, relevant in collection.relevant.items()}
    return _gzip(path, pickle.dumps(scores, protocol=4))


def write_text_corpus(path: Path, collection: Collection) -> Path:
    """A JSONL text corpus (WikiBook's ``{"text"}`` lines; gzip'd when the name ends in ``.gz``), or
    ``id<TAB>text`` lines for a ``.tsv`` name."""
    if path.name.endswith(".tsv"):
        return write_tsv(path, collection.documents)
    lines = "".join(json.dumps({"text": text}) + "\n" for text in collection.documents.values())
    if path.name.endswith(".gz"):
        return _gzip(path, lines.encode())
    with atomic_write(path) as handle:
        handle.write(lines)
    return path


def write_pairs(path: Path, collection: Collection, query_field: str, document_field: str) -> Path:
    """A JSONL file of ``{query_field, document_field}`` pairs: a Hub pairs dataset's rows, saved locally."""
    write_jsonl(path, [{query_field: collection.queries[query], document_field: collection.documents[doc]}
                       for query, doc in collection.relevant.items()])
    return path
