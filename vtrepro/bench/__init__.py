"""Benchmarks: encoding throughput against sentence-transformers, Lucene against PISA, vocabulary
transfer at full scale, and the dense encoder at BERT-base size; each prints the machine it ran on
(:mod:`vtrepro.bench.machine`).

``python -m vtrepro bench`` runs them (:mod:`vtrepro.bench.command`)."""
