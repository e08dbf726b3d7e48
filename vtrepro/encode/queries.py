"""Encoding queries into integer vectors, written as ``{"id", "contents", "vector"}`` lines (an encoded
corpus's ``queries.jsonl``); a query may be left without a term, but not every one of them."""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import write_jsonl
from vtrepro.core.progress import Progress
from vtrepro.encode.vectors import Quantization, escaped_vocabulary, to_impact_vector


def encode_queries(
    encoder, queries: dict[str, str], path: str | Path, quantization: Quantization = Quantization(),
    show_progress: bool = True,
) -> dict[str, dict[str, int]]:
    """Encode queries to integer vectors and write them as ``{"id", "contents", "vector"}`` lines; when
    quantization leaves every query without a term, nothing is written and the queries are refused."""
    terms = escaped_vocabulary(encoder.vocabulary)
    with Progress(len(queries), "encode queries", "query", enabled=show_progress) as progress:
        encoded = encoder.encode(list(queries.values()), kind="query", progress=progress)
    vectors = {
        qid: to_impact_vector(ids, weights, terms, quantization) for qid, (ids, weights) in zip(queries, encoded)
    }
    if vectors and not any(vectors.values()):
        raise VtreproError(f"{path}: quantization x{quantization.scale:g} ({quantization.rounding}) leaves every one of "
                           f"the {len(vectors)} queries without a term (no weight x scale rounds to 1 or more, or the model "
                           "activates no term); raise the scale (--scale, or quantization.scale in a spec; default 100)")
    write_jsonl(path, ({"id": qid, "contents": text, "vector": vectors[qid]} for qid, text in queries.items()))
    return vectors
