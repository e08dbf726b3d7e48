"""How closely one condition's vectors agree with another's on the same dataset (``agrees_with``).

A half-precision encoder gives other vectors than float32; a spec pins them as their own condition and
measures here how far they moved: share of vectors identical, share of terms kept, impacts changed.
The figures are fixed by the two sets of vectors, so they are recorded beside the scores, not judged.
"""
from __future__ import annotations

from typing import Mapping

from vtrepro.encode.reader import Vector, load_vectors, read_query_vectors, vector_files
from vtrepro.regress.spec import EncodedVectors

# numpy is imported where vectors are compared, on purpose: `regress --help` stays fast.

AGREEMENT_FIGURES: dict[str, str] = {
    "agreement_documents_identical": "share of document vectors identical to the other condition's",
    "agreement_terms_shared_mean": "mean over documents of the terms both vectors have / terms either has",
    "agreement_terms_shared_min": "least share of shared terms of any document",
    "agreement_impacts_differing": "share of document impacts (over either vector's terms) that differ",
    "agreement_max_impact_delta": "largest difference of one document impact",
    "agreement_queries_identical": "share of query vectors identical to the other condition's",
}
"""Every agreement figure, in report order, with what it means."""


def vector_agreement(ours: EncodedVectors, theirs: EncodedVectors) -> dict[str, float | int]:
    """The agreement figures of two encodings of the same corpus and queries (both held in memory:
    fine for BEIR test corpora; an MS MARCO-sized comparison would want it shard by shard)."""
    documents = _agreement(load_vectors(vector_files(ours.corpus)), load_vectors(vector_files(theirs.corpus)))
    queries = _agreement(read_query_vectors(ours.queries), read_query_vectors(theirs.queries))
    return {
        "agreement_documents_identical": documents["identical"],
        "agreement_terms_shared_mean": documents["shared_mean"],
        "agreement_terms_shared_min": documents["shared_min"],
        "agreement_impacts_differing": documents["impacts_differing"],
        "agreement_max_impact_delta": int(documents["max_delta"]),
        "agreement_queries_identical": queries["identical"],
    }


def _agreement(ours: Mapping[str, Vector], theirs: Mapping[str, Vector]) -> dict[str, float]:
    """Per record id in either set (a missing record is an empty vector): identity, shared terms, impacts."""
    import numpy as np

    shared, identical, differing, terms, max_delta = [], 0, 0, 0, 0
    for record_id in sorted(ours.keys() | theirs.keys()):
        a, b = ours.get(record_id, {}), theirs.get(record_id, {})
        union = a.keys() | b.keys()
        identical += a == b
        shared.append(len(a.keys() & b.keys()) / len(union) if union else 1.0)
        deltas = [abs(a.get(term, 0) - b.get(term, 0)) for term in union]
        differing += sum(delta > 0 for delta in deltas)
        terms += len(union)
        max_delta = max([max_delta, *deltas])
    count = len(shared)
    return {"identical": identical / count if count else 1.0, "shared_mean": float(np.mean(shared)) if count else 1.0,
            "shared_min": min(shared, default=1.0), "impacts_differing": differing / terms if terms else 0.0,
            "max_delta": max_delta}
