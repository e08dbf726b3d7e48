"""Regression specs and their runner: every figure checked against its pinned value; vector bundles.

``python -m vtrepro regress`` runs the regress command."""
