"""Training examples for SPLADE: (query, positive, hard negatives, optional teacher scores), in a seeded order.

Sources:

- BEIR layout: positives from ``qrels/<split>.tsv``, hard negatives mined with BM25 (Anserini)
  over the corpus and cached as JSONL beside the run;
- MS MARCO triples TSV: ``query<TAB>positive<TAB>negative`` texts, read by line offset;
- pairs (query, positive) with in-batch negatives only, from a local JSONL / JSON file or a Hugging Face
  dataset (sentence-transformers' anchor / positive data, e.g. ``BASF-AI/dolma-chem-only-query-generated``);
- MS MARCO hard negatives (the ``sentence-transformers/msmarco-hard-negatives`` layout):
  ``msmarco-hard-negatives.jsonl.gz`` lines ``{"qid", "pos": [pid], "neg": {system: [pid]}}`` with
  ``collection.tsv`` (``pid<TAB>text``) and ``queries.train.tsv`` (``qid<TAB>text``).

Teacher scores come from a JSONL file of ``{"qid", "docid", "score"}`` lines (optionally gzipped). A
pickled dict (``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz``) is refused unopened: vtrepro never
unpickles a file it is given; docs/training.md shows the one line that converts a pickle the user trusts.

The order is a pure function of the seed and the step: step ``s`` takes examples
``s * B .. s * B + B - 1`` of the endless sequence of seeded per-epoch permutations, and each
example's negatives are drawn with a generator seeded by (seed, epoch, example), so a resumed or
distributed run sees exactly the batches of an uninterrupted single-process run.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, check_regular_file, read_json_file, read_jsonl
from vtrepro.core.pickled import read_plain_pickle
from vtrepro.data.beir import load_dataset
from vtrepro.data.texts import read_tsv_texts
from vtrepro.index.lucene import build_bm25_index
from vtrepro.search.lucene import search_bm25

# numpy is imported where offsets and orders are built, on purpose: `train --help` and `mlm --help` stay fast.
if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

NEGATIVES_FORMAT = "vtrepro.bm25-negatives/1"
MINING_CHUNK = 256


@dataclass(frozen=True)
class Example:
    """One training example: the query, its documents (positive first) and their teacher scores."""

    query: str
    documents: list[str]
    teacher: list[float] | None = None


class TrainingSet(Protocol):
    def __len__(self) -> int: ...

    def example(self, index: int, rng: random.Random) -> Example: ...


@dataclass
class PairTrainingSet:
    """One example per (query, positive) pair, negatives sampled from the query's pool."""

    queries: dict[str, str]
    documents: dict[str, str]
    pairs: list[tuple[str, str]]
    pools: dict[str, list[str]]
    negatives: int
    teacher: dict[str, dict[str, float]] | None = None
    summary: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.pairs)

    def example(self, index: int, rng: random.Random) -> Example:
        qid, positive = self.pairs[index]
        pool = self.pools.get(qid, [])
        if self.negatives == 0:
            chosen = []
        elif len(pool) >= self.negatives:
            chosen = rng.sample(pool, self.negatives)
        else:
            chosen = rng.choices(pool, k=self.negatives)
        ids = [positive, *chosen]
        teacher = [self.teacher[qid][doc_id] for doc_id in ids] if self.teacher is not None else None
        return Example(self.queries[qid], [self.documents[doc_id] for doc_id in ids], teacher)


class TriplesTrainingSet:
    """``query<TAB>positive<TAB>negative`` lines of an uncompressed TSV, read by byte offset."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise VtreproError(f"{self.path}: triples file not found")
        if self.path.suffix == ".gz":
            raise VtreproError(f"{self.path}: triples are read by line offset; decompress it first (gunzip -k)")
        self.offsets = _line_offsets(self.path)
        if len(self.offsets) == 0:
            raise VtreproError(f"{self.path}: no triples (expected query<TAB>positive<TAB>negative lines)")
        self.summary = {"examples": len(self.offsets)}

    def __len__(self) -> int:
        return len(self.offsets)

    def example(self, index: int, rng: random.Random) -> Example:
        with open(self.path, "rb") as handle:
            handle.seek(int(self.offsets[index]))
            line = handle.readline().decode("utf-8").rstrip("\r\n")
        fields = line.split("\t")
        if len(fields) != 3 or not all(fields):
            raise VtreproError(f"{self.path}: line {index + 1}: expected query<TAB>positive<TAB>negative, got {line!r:.80}")
        return Example(fields[0], fields[1:])


def _line_offsets(path: Path) -> np.ndarray:
    """Byte offsets of the non-blank lines of a file."""
    import numpy as np

    offsets = []
    position = 0
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                offsets.append(position)
            position += len(line)
    return np.asarray(offsets, dtype=np.int64)


# ---------------------------------------------------------------------------- order


@functools.lru_cache(maxsize=4)
def permutation(size: int, seed: int, epoch: int) -> np.ndarray:
    """The seeded order of ``size`` examples in ``epoch``."""
    import numpy as np

    return np.random.Generator(np.random.PCG64([seed, epoch])).permutation(size)


def batch_examples(data: TrainingSet, step: int, batch_size: int, seed: int,
                   part: tuple[int, int] = (0, 1)) -> list[Example]:
    """The examples of 0-based ``step`` (``part`` = (rank, world size): that rank's contiguous slice)."""
    rank, world = part
    local = batch_size // world
    examples = []
    for position in range(step * batch_size + rank * local, step * batch_size + (rank + 1) * local):
        epoch, offset = divmod(position, len(data))
        index = int(permutation(len(data), seed, epoch)[offset])
        examples.append(data.example(index, random.Random(f"{seed}:{epoch}:{index}")))
    return examples


# ---------------------------------------------------------------------------- teacher scores


PICKLE_SUFFIXES = (".pkl", ".pkl.gz", ".pickle", ".pickle.gz")


def read_teacher_scores(path: str | Path, wanted: dict[str, set[str]] | None = None) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` from JSONL lines ``{"qid", "docid", "score"}``, or from a pickled dict
    ``{qid: {docid: score}}`` as sentence-transformers publishes its cross-encoder scores (``*.pkl.gz``), read as
    plain data without unpickling (:func:`vtrepro.core.pickled.read_plain_pickle`); ids as strings.

    With ``wanted``, only those query / document pairs are kept (a pickle's other queries are dropped as read).
    """
    path = Path(path)
    if not path.is_file():
        raise VtreproError(f"{path}: teacher scores file not found")
    if path.name.endswith(PICKLE_SUFFIXES):
        return _pickled_teacher_scores(path, wanted)
    scores: dict[str, dict[str, float]] = {}
    for line, record in read_jsonl(path):
        qid, docid, score = record.get("qid"), record.get("docid"), record.get("score")
        if qid is None or docid is None or isinstance(score, bool) or not isinstance(score, (int, float)):
            raise VtreproError(f"{path}:{line}: expected {{\"qid\", \"docid\", \"score\": number}}, got {record!r:.80}")
        qid, docid = str(qid), str(docid)
        if wanted is None or docid in wanted.get(qid, ()):
            scores.setdefault(qid, {})[docid] = float(score)
    return scores


def _pickled_teacher_scores(path: Path, wanted: dict[str, set[str]] | None) -> dict[str, dict[str, float]]:
    """The published ``{qid: {pid: score}}`` pickle (integer or string ids), its shape checked entry by entry."""
    data = read_plain_pickle(path, keep=None if wanted is None else lambda qid: str(qid) in wanted)
    if not isinstance(data, dict):
        raise VtreproError(f"{path}: expected a pickled dict {{qid: {{passage id: score}}}}, got a {type(data).__name__}")
    scores: dict[str, dict[str, float]] = {}
    for qid, hits in data.items():
        if not isinstance(qid, (int, str)) or isinstance(qid, bool) or not isinstance(hits, dict):
            raise VtreproError(f"{path}: query {qid!r:.40}: expected {{qid: {{passage id: score}}}} with int or str "
                               f"ids, got a {type(hits).__name__} under a {type(qid).__name__} key")
        kept = wanted.get(str(qid), set()) if wanted is not None else None
        for pid, score in hits.items():
            if not isinstance(pid, (int, str)) or isinstance(pid, bool) or isinstance(score, bool) \
                    or not isinstance(score, (int, float)):
                raise VtreproError(f"{path}: query {qid!r:.40}, passage {pid!r:.40}: expected an int or str id "
                                   f"and a number, got {type(pid).__name__} and {type(score).__name__}")
            if kept is None or str(pid) in kept:
                scores.setdefault(str(qid), {})[str(pid)] = float(score)
    return scores


def with_teacher(data: PairTrainingSet, path: str | Path) -> PairTrainingSet:
    """Attach teacher scores, keeping only pairs and negatives that have one; report what was dropped."""
    wanted: dict[str, set[str]] = {}
    for qid, positive in data.pairs:
        wanted.setdefault(qid, set()).add(positive)
    for qid, pool in data.pools.items():
        wanted.setdefault(qid, set()).update(pool)
    teacher = read_teacher_scores(path, wanted)
    pairs = [(qid, positive) for qid, positive in data.pairs if positive in teacher.get(qid, {})]
    pools = {qid: [doc_id for doc_id in pool if doc_id in teacher.get(qid, {})] for qid, pool in data.pools.items()}
    if data.negatives:
        pairs = [(qid, positive) for qid, positive in pairs if pools.get(qid)]
    if not pairs:
        raise VtreproError(f"{path}: no training pair has teacher scores for its positive and negatives; "
                           "check that its query and document ids match the training data")
    summary = {**data.summary, "examples": len(pairs), "dropped_without_teacher": len(data.pairs) - len(pairs)}
    return PairTrainingSet(data.queries, data.documents, pairs, pools, data.negatives, teacher, summary)


# ---------------------------------------------------------------------------- BEIR


@dataclass(frozen=True)
class BeirPairs:
    """Which pairs a BEIR split's qrels give and how their hard negatives are found (a recipe's beir data)."""

    negatives: int  # hard negatives per query
    mining: str = "bm25"  # "bm25": the top BM25 hits minus the judged documents; "none": no negatives
    depth: int = 100  # BM25 hits mined per query
    min_relevance: int = 1  # the least qrels relevance of a positive pair
    bm25: tuple[float, float] = (0.9, 0.4)  # k1 and b of the mining index


def beir_training_set(dataset: str, data_dir: str | Path | None, split: str, pairs_from: BeirPairs,
                      cache_dir: Path) -> PairTrainingSet:
    """Pairs from a BEIR split's qrels with BM25-mined (or no) negatives, as ``pairs_from`` says (mined
    negatives cached in ``cache_dir``)."""
    negatives, min_relevance = pairs_from.negatives, pairs_from.min_relevance
    beir = load_dataset(dataset, data_dir)
    qrels = beir.qrels(split)
    queries = beir.queries(split)
    corpus = beir.corpus()
    documents = {document.doc_id: document.contents for document in corpus}
    pairs = [(qid, doc_id) for qid, judged in qrels.items() for doc_id, relevance in judged.items()
             if relevance >= min_relevance and doc_id in documents]
    if not pairs:
        raise VtreproError(f"dataset {dataset}: qrels/{split}.tsv has no pair with relevance >= {min_relevance} "
                           "whose document is in the corpus")
    pools: dict[str, list[str]] = {}
    if pairs_from.mining == "bm25":
        pools = mine_bm25_negatives(beir.name, corpus, queries, qrels, pairs_from.depth, cache_dir, pairs_from.bm25)
        if negatives:
            pairs = [(qid, doc_id) for qid, doc_id in pairs if pools.get(qid)]
    summary = {"examples": len(pairs), "queries": len({qid for qid, _ in pairs}), "documents": len(documents)}
    return PairTrainingSet(queries, documents, pairs, pools, negatives, summary=summary)


def mine_bm25_negatives(
    name: str, corpus: list, queries: dict[str, str], qrels: dict[str, dict[str, int]], depth: int,
    cache_dir: Path, bm25: tuple[float, float],
) -> dict[str, list[str]]:
    """The top ``depth`` BM25 hits of each query minus its judged documents, cached in ``cache_dir``."""
    k1, b = bm25
    cache = cache_dir / f"bm25-negatives-{name.replace('/', '_')}-depth{depth}-k1_{k1}-b_{b}.jsonl"
    settings = {"format": NEGATIVES_FORMAT, "dataset": name, "depth": depth, "k1": k1, "b": b}
    if cache.is_file():
        lines = read_jsonl(cache)
        _, header = next(lines, (0, {}))
        if header == settings:
            return {record["qid"]: record["negatives"] for _, record in lines}

    index_dir = cache_dir / f"bm25-index-{name.replace('/', '_')}"
    if not index_dir.is_dir():  # indexes are built beside and renamed into place: present = complete
        logger.info(f"mining BM25 negatives: indexing {len(corpus)} documents")
        build_bm25_index(((document.doc_id, document.contents) for document in corpus), index_dir)
    wanted = [(qid, text) for qid, text in queries.items() if qid in qrels]
    pools = {}
    for start in range(0, len(wanted), MINING_CHUNK):  # bounded batches: each hit carries its stored document
        chunk = dict(wanted[start:start + MINING_CHUNK])
        k = depth + max(len(qrels[qid]) for qid in chunk)
        for qid, hits in search_bm25(index_dir, chunk, k=k, k1=k1, b=b).items():
            pools[qid] = [doc_id for doc_id in hits if doc_id not in qrels[qid]][:depth]
    with atomic_write(cache) as handle:
        handle.write(json.dumps(settings) + "\n")
        for qid, pool in pools.items():
            handle.write(json.dumps({"qid": qid, "negatives": pool}) + "\n")
    return pools


# ---------------------------------------------------------------------------- MS MARCO


def msmarco_training_set(
    hard_negatives: str | Path,
    collection: str | Path,
    queries: str | Path,
    negatives: int,
    systems: Sequence[str] | None = None,
    per_system: int | None = None,
) -> PairTrainingSet:
    """Pairs (qid, positive pid) with negatives pooled from the chosen ``systems`` (all by default),
    the first ``per_system`` of each, from ``msmarco-hard-negatives.jsonl.gz``."""
    pairs, pools = [], {}
    for line, record in read_jsonl(hard_negatives):
        qid, positives, mined = record.get("qid"), record.get("pos"), record.get("neg")
        if qid is None or not isinstance(positives, list) or not isinstance(mined, dict):
            raise VtreproError(f"{hard_negatives}:{line}: expected {{\"qid\", \"pos\": [...], \"neg\": {{system: [...]}}}}")
        qid = str(qid)
        pool = dict.fromkeys(
            str(pid) for system, pids in mined.items() if systems is None or system in systems
            for pid in (pids if per_system is None else pids[:per_system])
        )
        for positive in map(str, positives):
            pool.pop(positive, None)
        if negatives and not pool:
            continue
        pools[qid] = list(pool)
        pairs += [(qid, str(positive)) for positive in positives]
    if not pairs:
        raise VtreproError(f"{hard_negatives}: no query with positives and negatives from systems {systems}")
    query_texts = read_tsv_texts(queries, {qid for qid, _ in pairs})
    wanted = {pid for _, pid in pairs} | {pid for pool in pools.values() for pid in pool}
    documents = read_tsv_texts(collection, wanted)
    missing_query = next((qid for qid, _ in pairs if qid not in query_texts), None)
    if missing_query is not None:
        raise VtreproError(f"{queries}: no text for query {missing_query} named in {hard_negatives}")
    missing = next((pid for pid in wanted if pid not in documents), None)
    if missing is not None:
        raise VtreproError(f"{collection}: no passage {missing} named in {hard_negatives}")
    summary = {"examples": len(pairs), "queries": len(pools), "documents": len(documents)}
    return PairTrainingSet(query_texts, documents, pairs, pools, negatives, summary=summary)


# ---------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class PairsSource:
    """Where a recipe's ``pairs`` data comes from and which of its rows train (a recipe's pairs data)."""

    path: Path | None  # a local JSONL file, or JSON (an array of objects, or JSON lines)
    hub: str | None  # else a Hugging Face dataset id, read with `datasets`
    split: str = "train"
    fields: tuple[str, str] = ("query", "positive")  # the query's and the positive document's keys
    max_examples: int | None = None  # keep this many after a seeded shuffle (None: all)
    held_out: int = 0  # then split off min(held_out, rows // 20) rows that do not train


def pairs_training_set(source: PairsSource, seed: int) -> PairTrainingSet:
    """One example per (query, positive) row, no hard negatives: the batch's other positives are the negatives.

    The rows kept are those of the authors' chemistry script (``chem/train_chem.py`` @6addf32, lines 150-158):
    `datasets`' ``shuffle(seed).select(range(max_examples + held_out))`` when the data is larger, then
    ``train_test_split(test_size=min(held_out, rows // 20), seed)``'s train part. Both depend only on the
    number of rows and the seed, so a local copy of a Hub dataset selects the same rows.
    """
    queries, documents = _read_pairs(source)
    rows = _selected_rows(len(queries), source.max_examples, source.held_out, seed)
    ids = [str(row) for row in rows]
    summary = {"examples": len(ids), "rows": len(queries)}
    return PairTrainingSet({key: queries[int(key)] for key in ids}, {key: documents[int(key)] for key in ids},
                           [(key, key) for key in ids], {}, 0, summary=summary)


def _selected_rows(size: int, max_examples: int | None, held_out: int, seed: int) -> list[int]:
    from datasets import Dataset

    rows = Dataset.from_dict({"row": list(range(size))})
    if max_examples is not None and max_examples < size:
        rows = rows.shuffle(seed=seed).select(range(min(max_examples + held_out, size)))
    test_size = min(held_out, len(rows) // 20)
    if test_size:
        rows = rows.train_test_split(test_size=test_size, seed=seed)["train"]
    return list(rows["row"])


def _read_pairs(source: PairsSource) -> tuple[list[str], list[str]]:
    """The query and positive texts of every row, in file (or dataset) order."""
    query_key, document_key = source.fields
    if source.path is None:
        return _hub_pairs(str(source.hub), source.split, source.fields)
    path = source.path
    if not os.path.lexists(path):
        raise VtreproError(f"{path}: pairs file not found")
    fix = f"expected an array of {{\"{query_key}\", \"{document_key}\"}} objects or JSON lines"
    check_regular_file(path, 2**62, fix)  # a FIFO would block the sniff; JSON lines are read line by line
    with open(path, "rb") as handle:  # bytes: the sniff decodes nothing, each reader below checks UTF-8
        array = handle.read(4096).lstrip().startswith(b"[")
    if array:
        document = read_json_file(path, fix, JSON_FILE_BYTES["pairs"])  # read whole; JSON lines line by line
        if not isinstance(document, list):
            raise VtreproError(f"{path}: {fix}")
        records = list(enumerate(document, 1))
    else:
        records = list(read_jsonl(path))
    queries, documents = [], []
    for line, record in records:
        texts = [record.get(key) if isinstance(record, dict) else None for key in source.fields]
        if not all(isinstance(text, str) and text.strip() for text in texts):
            where = "line" if not array else "item"
            raise VtreproError(f"{path}: {where} {line}: expected {{\"{query_key}\": text, \"{document_key}\": text}} "
                               f"(set data.query_field / data.document_field), got {record!r:.80}")
        queries.append(str(texts[0]))
        documents.append(str(texts[1]))
    if not queries:
        raise VtreproError(f"{path}: no pairs")
    return queries, documents


def _hub_pairs(repo: str, split: str, fields: tuple[str, str]) -> tuple[list[str], list[str]]:
    from datasets import load_dataset as hf_load_dataset

    try:
        rows = hf_load_dataset(repo, split=split)
    except Exception as error:  # datasets raises many types; any of them means the data is not here
        raise VtreproError(f"Hugging Face dataset {repo} (split {split}) could not be loaded "
                           f"({' '.join(str(error).split())[:160]}); download it as JSONL and set data.path") from None
    missing = [key for key in fields if key not in rows.column_names]
    if missing:
        raise VtreproError(f"Hugging Face dataset {repo}: no column {missing[0]!r} (columns: "
                           f"{', '.join(rows.column_names)}); set data.query_field / data.document_field")
    return list(rows[fields[0]]), list(rows[fields[1]])
