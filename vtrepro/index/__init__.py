"""Lucene indexes built with Anserini: impact indexes from JSON vectors, BM25 indexes from text.

``python -m vtrepro index`` runs the index command."""
