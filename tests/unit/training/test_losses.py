"""Training losses and schedules on small hand-computed tensors."""
from __future__ import annotations

import math

import pytest
import torch

from vtrepro.training import losses
from vtrepro.training.schedule import lr_factor

QUERIES = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
# Groups of two per query, positive first: q0 -> [1, 0] (score 1), [0, 1] (0); q1 -> [0, 2] (2), [1, 0] (0).
DOCUMENTS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [1.0, 0.0]])


def test_info_nce_with_in_batch_negatives() -> None:
    # q0 scores all four documents [1, 0, 0, 1], target 0; q1 scores [0, 1, 2, 0], target 2.
    expected = ((-1 + math.log(2 * math.e + 2)) + (-2 + math.log(2 + math.e + math.e**2))) / 2
    assert losses.info_nce(QUERIES, DOCUMENTS).item() == pytest.approx(expected, rel=1e-6)


def test_info_nce_with_own_group_only_and_temperature() -> None:
    expected = ((-1 + math.log(math.e + 1)) + (-2 + math.log(math.e**2 + 1))) / 2
    assert losses.info_nce(QUERIES, DOCUMENTS, in_batch=False).item() == pytest.approx(expected, rel=1e-6)
    halved = ((-2 + math.log(math.e**2 + 1)) + (-4 + math.log(math.e**4 + 1))) / 2
    assert losses.info_nce(QUERIES, DOCUMENTS, temperature=0.5, in_batch=False).item() == pytest.approx(halved, rel=1e-6)


def test_group_scores() -> None:
    assert losses.group_scores(QUERIES, DOCUMENTS).tolist() == [[1.0, 0.0], [2.0, 0.0]]


def test_margin_mse() -> None:
    student = torch.tensor([[3.0, 1.0, 2.0]])  # margins 2, 1
    teacher = torch.tensor([[5.0, 4.0, 1.0]])  # margins 1, 4
    assert losses.margin_mse(student, teacher).item() == pytest.approx((1 + 9) / 2)


def test_kl_distillation() -> None:
    student = torch.tensor([[0.0, 0.0]])  # p_s = (1/2, 1/2)
    teacher = torch.tensor([[math.log(3.0), 0.0]])  # p_t = (3/4, 1/4)
    expected = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert losses.kl_distillation(student, teacher).item() == pytest.approx(expected, rel=1e-6)
    assert losses.kl_distillation(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)


def test_flops_l1_and_length_threshold() -> None:
    reps = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert losses.flops(reps).item() == pytest.approx(2.0**2 + 0.0 + 1.0**2)  # column means 2, 0, 1
    assert losses.l1(reps).item() == pytest.approx(3.0)
    assert losses.active_terms(reps).tolist() == [2, 1]
    # Threshold 1: only the first document (2 active terms) is penalized; the mean stays over both rows.
    assert losses.flops(losses.above_length(reps, 1)).item() == pytest.approx(0.5**2 + 1.0**2)
    assert torch.equal(losses.above_length(reps, None), reps)


def test_flops_gradient_pushes_shared_terms_hardest() -> None:
    reps = torch.tensor([[1.0, 1.0], [1.0, 0.5]], requires_grad=True)
    losses.flops(reps).backward()
    # d/dw_ij of sum_j (mean_i w_ij)^2 = 2 mean_j / n: the term with the larger mean gets the larger push.
    assert reps.grad.tolist() == [[1.0, 0.75], [1.0, 0.75]]


def test_quadratic_warmup() -> None:
    assert losses.warmup_weight(1.0, 0, 10) == 0.0
    assert losses.warmup_weight(1.0, 5, 10) == pytest.approx(0.25)
    assert losses.warmup_weight(0.1, 10, 10) == pytest.approx(0.1)
    assert losses.warmup_weight(0.1, 50, 10) == pytest.approx(0.1)
    assert losses.warmup_weight(0.1, 1, 0) == pytest.approx(0.1)


def test_learning_rate_schedule() -> None:
    linear = lr_factor("linear", 2, 6)
    assert [linear(step) for step in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    constant = lr_factor("constant", 0, 4)
    assert [constant(step) for step in range(4)] == [1.0] * 4
