"""Batch impact search with Lucene (Anserini) or PISA, and the engine-neutral TREC runs both return.

``python -m vtrepro search`` runs the search command."""
