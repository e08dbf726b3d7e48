"""vtrepro: reproducible Vocabulary Transfer for learned sparse retrieval.

The public API, in pipeline order; each name is imported from its module on first use, so that
``import vtrepro`` (and every command's ``--help``) stays light::

    from vtrepro import load_dataset, SpladeEncoder, run_transfer, encode_corpus, build_impact_index
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "VtreproError": "vtrepro.core.errors",
    "load_dataset": "vtrepro.data.beir",
    "SpladeEncoder": "vtrepro.model.splade",
    "IdfQueryEncoder": "vtrepro.model.idf",
    "run_transfer": "vtrepro.vocabulary.transfer",
    "run_calibration": "vtrepro.vocabulary.calibrate",
    "Quantization": "vtrepro.encode.vectors",
    "encode_corpus": "vtrepro.encode.writer",
    "encode_queries": "vtrepro.encode.queries",
    "fingerprint_folder": "vtrepro.encode.fingerprint",
    "build_impact_index": "vtrepro.index.lucene",
    "build_bm25_index": "vtrepro.index.lucene",
    "search_impact": "vtrepro.search.lucene",
    "search_bm25": "vtrepro.search.lucene",
    "read_trec_run": "vtrepro.search.runs",
    "write_trec_run": "vtrepro.search.runs",
    "evaluate_run": "vtrepro.evaluate.trec",
    "compare_runs": "vtrepro.evaluate.trec",
    "load_recipe": "vtrepro.training.recipe",
    "run_recipe": "vtrepro.training.train",
    "load_spec": "vtrepro.regress.spec",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'vtrepro' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
