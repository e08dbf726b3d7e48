"""SPLADE training losses: ranking (InfoNCE, MarginMSE, KL distillation) and sparsity regularizers.

Shapes: ``queries`` (B, V) and ``documents`` (B * G, V) sparse representations, where each query's
group of G documents is stored contiguously, positive first then its G - 1 hard negatives.
Scores are dot products. Formulas are in docs/training.md.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from vtrepro.training.recipe import LossOptions


def group_scores(queries: Tensor, documents: Tensor) -> Tensor:
    """(B, G) scores of each query against its own group [positive, negatives...]."""
    groups = documents.view(queries.shape[0], -1, documents.shape[-1])
    return torch.einsum("bv,bgv->bg", queries, groups)


def info_nce(queries: Tensor, documents: Tensor, temperature: float = LossOptions.temperature, in_batch: bool = True) -> Tensor:
    """Cross-entropy of each query's positive against its hard negatives and, with ``in_batch``,
    every other document of the batch: mean_i -log softmax(s_i / temperature)[positive of i]."""
    batch = queries.shape[0]
    group = documents.shape[0] // batch
    if not in_batch:
        return F.cross_entropy(group_scores(queries, documents) / temperature,
                               torch.zeros(batch, dtype=torch.long, device=queries.device))
    scores = queries @ documents.T / temperature
    targets = torch.arange(batch, device=queries.device) * group
    return F.cross_entropy(scores, targets)


def margin_mse(student: Tensor, teacher: Tensor) -> Tensor:
    """MarginMSE: mean over queries and negatives of ((s_pos - s_neg) - (t_pos - t_neg))^2.

    ``student`` and ``teacher`` are (B, G) group scores, positive in column 0.
    """
    student_margins = student[:, :1] - student[:, 1:]
    teacher_margins = teacher[:, :1] - teacher[:, 1:]
    return F.mse_loss(student_margins, teacher_margins)


def kl_distillation(student: Tensor, teacher: Tensor, temperature: float = LossOptions.temperature) -> Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)) over each query's group, averaged over queries."""
    return F.kl_div(F.log_softmax(student / temperature, dim=1), F.log_softmax(teacher / temperature, dim=1),
                    reduction="batchmean", log_target=True)


def flops(representations: Tensor, positions: int = 1) -> Tensor:
    """FLOPS regularizer (Paria et al. 2020): sum over terms of the squared mean weight, sum_j (mean_i w_ij)^2.

    With ``positions`` G > 1 the rows are the batch's groups of G documents (query-major, positive first)
    and the term is summed over group positions, each averaged over the queries:
    sum_p sum_j (mean_i w_ipj)^2, as the authors' trainer computes the documents' FLOPS
    (``loss.doc_flops_by_position``, docs/training.md)."""
    if positions == 1:
        return representations.abs().mean(dim=0).pow(2).sum()
    grouped = representations.abs().view(-1, positions, representations.shape[-1])
    return grouped.mean(dim=0).pow(2).sum()


def l1(representations: Tensor) -> Tensor:
    """L1 regularizer: mean over texts of sum_j |w_ij|."""
    return representations.abs().sum(dim=1).mean()


def above_length(representations: Tensor, threshold: int | None) -> Tensor:
    """The representations with rows of at most ``threshold`` active terms zeroed (None keeps all):
    only longer documents are then penalized, while means stay over the whole batch."""
    if threshold is None:
        return representations
    keep = (active_terms(representations) > threshold).to(representations.dtype)
    return representations * keep.unsqueeze(1)


def document_regularizer(documents: Tensor, regularizer: str = "flops", threshold: int | None = None,
                         positions: int = 1) -> Tensor:
    """The documents' regularizer before its weight: ``flops`` or ``l1`` of the documents with more than
    ``threshold`` active terms (:func:`above_length`); FLOPS summed over ``positions`` group positions
    (:func:`flops`)."""
    kept = above_length(documents, threshold)
    return flops(kept, positions) if regularizer == "flops" else l1(kept)


def active_terms(representations: Tensor) -> Tensor:
    """(n,) number of non-zero weights per text."""
    return (representations > 0).sum(dim=1)


def used_terms(representations: Tensor) -> Tensor:
    """Vocabulary entries active in at least one of the texts (the rest are inactive on this batch)."""
    return (representations > 0).any(dim=0).sum()


def warmup_weight(weight: float, step: int, warmup_steps: int) -> float:
    """Quadratic warm-up: weight * min(1, (step / warmup_steps)^2); the full weight without warm-up."""
    if warmup_steps <= 0:
        return weight
    return weight * min(1.0, (step / warmup_steps) ** 2)
