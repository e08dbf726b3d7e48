"""Scoring runs with pytrec_eval, and paired comparisons of two runs.

``python -m vtrepro evaluate`` runs the evaluate command."""
