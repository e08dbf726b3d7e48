"""Benchmarks: encoding throughput against sentence-transformers, Lucene against PISA, vocabulary
transfer at full scale, and the dense encoder at BERT-base size; each prints the machine it ran on
(:mod:`vtrepro.bench.machine`).

``python -m vtrepro bench`` (or ``python -m vtrepro.bench``) runs them (:mod:`vtrepro.bench.__main__`).
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The bench command (:func:`vtrepro.bench.__main__.main`), imported when called: importing it here
    would load ``__main__`` twice under ``python -m vtrepro.bench``."""
    from vtrepro.bench.__main__ import main as bench_main

    return bench_main(argv)


__all__ = ["main"]
