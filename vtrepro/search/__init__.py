"""Batch search with Anserini and TREC run files.

``python -m vtrepro.search`` runs the search command."""
