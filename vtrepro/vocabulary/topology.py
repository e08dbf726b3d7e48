"""Topology initialization: sparsemax weights over reference-space similarities, and row combination.

A new target token gets ``sparsemax`` weights over its similarities (cosine, z-scored cosine or
cosine minus a log prior) to the overlap tokens in the reference embedding space; its rows are the
norm-preserving weighted combination of the transferred overlap rows (:func:`combine_rows`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from vtrepro.core.progress import Progress

# torch is imported inside the functions, so importing this module stays fast (see transfer.py).
if TYPE_CHECKING:
    from torch import Tensor

DEFAULT_CHUNK_SIZE = 512


def _sparsemax_threshold(ordered: Tensor) -> tuple[Tensor, Tensor]:
    """Threshold tau and support size from scores sorted descending along the last dim.

    A sorted prefix is enough when it is longer than the support.
    """
    import torch

    cumulative = ordered.cumsum(dim=-1) - 1
    ranks = torch.arange(1, ordered.shape[-1] + 1, dtype=ordered.dtype, device=ordered.device)
    support = (ranks * ordered > cumulative).sum(dim=-1, keepdim=True)
    return cumulative.gather(-1, support - 1) / support, support


def sparsemax(scores: Tensor, dim: int = -1) -> Tensor:
    """Euclidean projection onto the probability simplex (Martins & Astudillo 2016), by sorting:
    ``max(z - tau, 0)`` with ``tau`` such that the result sums to 1.

    Rows are independent, so a large score matrix can be processed chunk by chunk.
    """
    z = scores.movedim(dim, -1)
    threshold, _ = _sparsemax_threshold(z.sort(dim=-1, descending=True).values)
    return (z - threshold).clamp_min(0).movedim(-1, dim)


def sparse_sparsemax(scores: Tensor, candidates: int = 256) -> tuple[Tensor, Tensor, Tensor]:
    """Row-wise sparsemax of a 2-D tensor as ``(rows, columns, values)`` of its non-zeros.

    Sorts only the top ``candidates`` scores per row (doubling them while some support fills
    them), which gives the same result as :func:`sparsemax` without sorting whole rows.
    """
    import torch

    width = min(candidates, scores.shape[-1])
    while True:
        top, columns = scores.topk(width, dim=-1)
        threshold, support = _sparsemax_threshold(top)
        if width == scores.shape[-1] or bool((support < width).all()):
            break
        width = min(2 * width, scores.shape[-1])
    rows, ranks = (torch.arange(width) < support).nonzero(as_tuple=True)
    return rows, columns[rows, ranks], (top - threshold)[rows, ranks]


def _scores(queries: Tensor, keys: Tensor, temperature: float, similarity: str, log_prior: Tensor | None) -> Tensor:
    """Similarity logits of unit-norm ``queries`` to unit-norm ``keys``, divided by the temperature."""
    cosine = queries @ keys.T
    if similarity == "zscore":
        cosine = (cosine - cosine.mean(-1, keepdim=True)) / cosine.std(-1, keepdim=True).clamp_min(1e-6)
    logits = cosine / temperature
    return logits - log_prior if log_prior is not None else logits


def topology_weights(
    reference: Tensor,
    overlap: list[int],
    new: list[int],
    temperature: float,
    similarity: str,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Tensor:
    """Sparse ``(len(new), len(overlap))`` sparsemax weights from cosine similarity in ``reference`` space.

    ``pmi`` subtracts ``log p(j)``, the mean over new tokens of ``softmax(cos/T)``, from the logits
    (one extra pass), down-weighting overlap tokens that are close to everything.
    """
    import torch
    import torch.nn.functional as F

    unit = F.normalize(reference.float(), dim=-1)
    keys = unit[overlap]
    chunks = [new[start:start + chunk_size] for start in range(0, len(new), chunk_size)]
    log_prior = None
    if similarity == "pmi":
        prior = torch.zeros(len(overlap))
        with Progress(len(new), "topology prior (pmi)", "token") as progress:
            for chunk in chunks:
                prior += _scores(unit[chunk], keys, temperature, "cosine", None).softmax(-1).sum(0)
                progress.update(len(chunk))
        log_prior = (prior / len(new)).log()
    rows, columns, values = [], [], []
    offset = 0
    with Progress(len(new), "topology weights", "token") as progress:
        for chunk in chunks:
            row, column, value = sparse_sparsemax(_scores(unit[chunk], keys, temperature, similarity, log_prior))
            rows.append(row + offset)
            columns.append(column)
            values.append(value)
            offset += len(chunk)
            progress.update(len(chunk))
    indices = torch.stack([torch.cat(rows), torch.cat(columns)]) if rows else torch.zeros(2, 0, dtype=torch.long)
    data = torch.cat(values) if values else torch.zeros(0)
    return torch.sparse_coo_tensor(indices, data, (len(new), len(overlap)), check_invariants=False)


def sparse_matrix(rows: list[int], columns: list[int], values: list[float], shape: tuple[int, int]) -> Tensor:
    import torch

    indices = torch.tensor([rows, columns], dtype=torch.long)
    return torch.sparse_coo_tensor(indices, torch.tensor(values), shape, check_invariants=False)


def combine_rows(weights: Tensor, table: Tensor, keep_norm: bool) -> Tensor:
    """``weights @ table`` (sparse weights summing to 1 per row); with ``keep_norm`` each result is
    rescaled to the weighted mean norm of the rows it combines."""
    import torch

    combined = torch.sparse.mm(weights, table)
    if keep_norm:
        norms = torch.sparse.mm(weights, table.norm(dim=1, keepdim=True))
        combined = combined * (norms / combined.norm(dim=1, keepdim=True).clamp_min(1e-12))
    return combined
