"""vtrepro: reproducible Vocabulary Transfer for learned sparse retrieval.

The public API, in pipeline order; each name is imported from its module on first use, so that
``import vtrepro`` (and every command's ``--help``) stays light::

    from vtrepro import load_dataset, SpladeEncoder, run_transfer, encode_corpus, build_impact_index

An older Python is refused here, first, in one line (exit 2): the package and every command import this module
before anything else, and these lines parse on any Python 3 (no ``from __future__`` import, no f-string), so
the line is shown where the rest of vtrepro would fail to compile.
"""
import sys

MINIMUM_PYTHON = (3, 11)
"""The oldest Python vtrepro runs on (``requires-python`` in pyproject.toml); 3.11, 3.12 and 3.13 are tested."""

if sys.version_info < MINIMUM_PYTHON:
    # Not the package's logger: vtrepro.core.log is written for Python 3.11 and cannot even be compiled here.
    sys.stderr.write("error: vtrepro needs Python %d.%d or newer (3.11, 3.12 and 3.13 are tested), but %s is Python %s; "
                     "make an environment with a newer one (e.g. python3.13 -m venv .venv) and install vtrepro there\n"
                     % (MINIMUM_PYTHON + (sys.executable, sys.version.split()[0])))
    raise SystemExit(2)

import importlib  # noqa: E402  (after the version check, on purpose)
from typing import Any  # noqa: E402

from vtrepro import old_command_modules  # noqa: E402

old_command_modules.install()  # `python -m vtrepro.train` and the other old spellings still run, with a deprecation line

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
