"""What the vocabulary gap costs on a corpus (docs/vocabulary-gap.md, "Corpus"): how much of the text falls on
units of several forms, how uncertain the form is given the unit, and the query-document matches that ids miss
and units find.

Every figure counts token occurrences of ``title + " " + text`` (the contents BEIR's BM25 indexes) and of the
split's queries, tokenized without special tokens, padding or truncation; the pairs are the split's qrels of
relevance above 0.
"""
from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import TEST_SPLIT, BeirDataset
from vtrepro.gap.census import unit_groups
from vtrepro.gap.units import NORMALIZATIONS
from vtrepro.gap.vocabularies import Vocabulary

logger = logging.getLogger(__name__)

EXAMPLES = 12
"""Pairs of forms shown as matches that ids miss and units find."""
ENCODE_BATCH = 1_000


@dataclass
class TokenizedDataset:
    """A dataset's documents and split queries as token ids of one vocabulary, with the split's relevant pairs."""

    vocabulary: Vocabulary
    dataset: str
    split: str
    documents: dict[str, list[int]]
    queries: dict[str, list[int]]
    qrels: dict[str, dict[str, int]]  # the split's judgements, as pytrec_eval scores them
    relevant: list[tuple[str, str]]  # (query id, document id), relevance above 0, in qrels order

    def keys(self, normalization: str) -> list[int]:
        """Per vocabulary id, the smallest id that ``normalization`` merges it with (``raw``: the id itself)."""
        first: dict[Any, int] = {}
        return [first.setdefault(form.key(normalization), index) for index, form in enumerate(self.vocabulary.forms)]


def tokenize_dataset(vocabulary: Vocabulary, dataset: BeirDataset, split: str = TEST_SPLIT) -> TokenizedDataset:
    """Tokenize ``dataset``'s corpus and ``split``'s queries with ``vocabulary``; the split must have qrels."""
    tokenizer = vocabulary.tokenizer()
    queries = dataset.queries(split)
    qrels = dataset.qrels(split)
    relevant = [(qid, doc_id) for qid, judged in qrels.items() for doc_id, score in judged.items() if score > 0]
    if not relevant:
        raise VtreproError(f"{dataset.path}: qrels/{split}.tsv judges no document relevant (score above 0); "
                           "the corpus figures need relevant pairs: choose a split that has them")
    documents: dict[str, list[int]] = {}
    corpus = dataset.corpus()
    for start in range(0, len(corpus), ENCODE_BATCH):
        batch = corpus[start:start + ENCODE_BATCH]
        encoded = _encode(tokenizer, [document.contents for document in batch], vocabulary)
        documents.update((document.doc_id, list(encoding.ids)) for document, encoding in zip(batch, encoded))
    encoded_queries = _encode(tokenizer, list(queries.values()), vocabulary)
    tokenized = TokenizedDataset(vocabulary, dataset.name, split, documents,
                                 {qid: list(encoding.ids) for qid, encoding in zip(queries, encoded_queries)}, qrels,
                                 [(qid, doc_id) for qid, doc_id in relevant if doc_id in documents and qid in queries])
    _check_ids(tokenized)
    logger.info(f"[{vocabulary.name} / {dataset.name}] {len(documents):,} documents, {len(queries):,} {split} "
                f"queries, {len(tokenized.relevant):,} relevant pairs tokenized")
    return tokenized


def _encode(tokenizer: Any, texts: list[str], vocabulary: Vocabulary) -> list[Any]:
    """``texts`` tokenized without special tokens; the library's own failure (a regex past its match limit panics in
    Rust) is one line naming the tokenizer."""
    try:
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # pyo3's PanicException derives from BaseException
        raise VtreproError(f"--tokenizer {vocabulary.name} ({vocabulary.source}): the tokenizers library failed on "
                           f"the text ({type(error).__name__}: {' '.join(str(error).split())[:160]}); use another "
                           "tokenizer") from None


def _check_ids(tokenized: TokenizedDataset) -> None:
    """Every id the tokenizer gave is an entry of the vocabulary (a tokenizer with added ids beyond it is refused)."""
    size = len(tokenized.vocabulary.entries)
    for where, texts in (("documents", tokenized.documents), ("queries", tokenized.queries)):
        for text_id, ids in texts.items():
            if ids and max(ids) >= size:
                raise VtreproError(f"--tokenizer {tokenized.vocabulary.name}: it gave id {max(ids)} in {where} "
                                   f"'{text_id}', beyond its vocabulary of {size:,}; the tokenizer and its "
                                   "vocabulary do not match")


def _mass_and_entropy(tokenized: TokenizedDataset, texts: dict[str, list[int]], units: list[int],
                      multi: set[int]) -> tuple[float, float]:
    """The share of occurrences on units of several forms, and H(form | unit) in bits over the occurrences."""
    specials = tokenized.vocabulary.specials
    forms = Counter(index for ids in texts.values() for index in ids if index not in specials)
    total = sum(forms.values())
    if not total:
        return 0.0, 0.0
    by_unit: dict[int, list[int]] = {}
    for index, count in forms.items():
        by_unit.setdefault(units[index], []).append(count)
    on_multi = sum(count for index, count in forms.items() if units[index] in multi)
    entropy = 0.0
    for counts in by_unit.values():
        unit_total = sum(counts)
        entropy += sum(count * math.log2(unit_total / count) for count in counts)
    return on_multi / total, entropy / total


def corpus_figures(tokenized: TokenizedDataset) -> dict:
    """The corpus figures of one tokenizer on one dataset, as written into ``corpus.json``."""
    vocabulary = tokenized.vocabulary
    groups = unit_groups(vocabulary)
    unit_ids = {unit: number for number, unit in enumerate(sorted(groups.by_unit))}
    units = [unit_ids.get(form.unit, -1) for form in vocabulary.forms]
    multi = {unit_ids[unit] for unit in groups.multi_form_units()}
    mass_documents, entropy_documents = _mass_and_entropy(tokenized, tokenized.documents, units, multi)
    mass_queries, entropy_queries = _mass_and_entropy(tokenized, tokenized.queries, units, multi)
    matches = _matches(tokenized)
    return {
        "tokenizer": vocabulary.name,
        "dataset": tokenized.dataset,
        "split": tokenized.split,
        "documents": len(tokenized.documents),
        "queries": len(tokenized.queries),
        "relevant_pairs": len(tokenized.relevant),
        "document_tokens": sum(map(len, tokenized.documents.values())),
        "query_tokens": sum(map(len, tokenized.queries.values())),
        "variant_mass_documents": round(mass_documents, 4),
        "variant_mass_queries": round(mass_queries, 4),
        "form_entropy_documents": round(entropy_documents, 4),
        "form_entropy_queries": round(entropy_queries, 4),
        **matches,
    }


def _matches(tokenized: TokenizedDataset) -> dict:
    """Per normalization, the mean share of a query's distinct tokens found in a relevant document; the share of
    pairs where units find a match that ids miss; and the commonest such pairs of forms, with an example pair."""
    specials = tokenized.vocabulary.specials
    keys = {normalization: tokenized.keys(normalization) for normalization in NORMALIZATIONS}
    rates: dict[str, float] = dict.fromkeys(NORMALIZATIONS, 0.0)
    gained = 0
    found_pairs: Counter[tuple[int, int]] = Counter()
    first_seen: dict[tuple[int, int], tuple[str, str]] = {}
    document_sets: dict[str, dict[int, int]] = {}
    counted = 0
    for qid, doc_id in tokenized.relevant:
        query = {index for index in tokenized.queries[qid] if index not in specials}
        if not query:
            continue
        counted += 1
        if doc_id not in document_sets:  # unit -> one of the document's forms of it
            document_sets[doc_id] = {keys["both"][index]: index for index in tokenized.documents[doc_id]}
        document_ids = set(tokenized.documents[doc_id])
        for normalization in NORMALIZATIONS:
            key = keys[normalization]
            in_document = {key[index] for index in document_ids}
            rates[normalization] += sum(key[index] in in_document for index in query) / len(query)
        units_only = [index for index in sorted(query)
                      if index not in document_ids and keys["both"][index] in document_sets[doc_id]]
        gained += bool(units_only)
        for index in units_only:
            pair = (index, document_sets[doc_id][keys["both"][index]])
            found_pairs[pair] += 1
            first_seen.setdefault(pair, (qid, doc_id))
    if not counted:
        raise VtreproError(f"{tokenized.dataset}: none of the split's relevant pairs has a query with tokens and a "
                           "document in the corpus; nothing to match (check the qrels against the corpus and queries)")
    entries = tokenized.vocabulary.entries
    examples = [{"query_form": entries[query_index], "document_form": entries[document_index],
                 "unit": tokenized.vocabulary.forms[query_index].unit, "pairs": count,
                 "query_id": first_seen[(query_index, document_index)][0],
                 "document_id": first_seen[(query_index, document_index)][1]}
                for (query_index, document_index), count in
                sorted(found_pairs.items(), key=lambda item: (-item[1], item[0]))[:EXAMPLES]]
    return {
        "match_rate": {normalization: round(total / counted, 4) for normalization, total in rates.items()},
        "exact_match": round(rates["raw"] / counted, 4),
        "unit_match": round(rates["both"] / counted, 4),
        "pairs_gained_by_units": round(gained / counted, 4),
        "examples": examples,
    }
