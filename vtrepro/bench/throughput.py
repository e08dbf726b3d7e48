"""What an encoder's arithmetic achieves against the hardware (``bench encode``): floating-point work per
document, and the rate of a plain matrix product at the vocabulary projection's shapes, measured on the
same device."""
from __future__ import annotations

import time

import torch

from vtrepro.model.projection import PROJECTION_ROWS
from vtrepro.model.splade import SpladeEncoder


def projection_flops(tokens: int, encoder: SpladeEncoder) -> float:
    """Multiply-adds x 2 of the dense vocabulary projection over ``tokens`` real tokens."""
    columns, dimension = encoder.model.get_output_embeddings().weight.shape
    return 2.0 * tokens * dimension * columns


def encoder_flops(tokens: int, encoder: SpladeEncoder) -> float:
    """Approximate floating-point work of encoding ``tokens`` real tokens: 2 x the body's non-embedding
    parameters per token (attention's quadratic term left out), the head transform and the projection."""
    body = encoder.model.base_model
    embeddings = sum(parameter.numel() for name, parameter in body.named_parameters() if "embeddings" in name)
    body_parameters = sum(parameter.numel() for parameter in body.parameters()) - embeddings
    head = sum(parameter.numel() for parameter in encoder._head_transform.parameters())
    return 2.0 * tokens * (body_parameters + head) + projection_flops(tokens, encoder)


def matmul_rate(encoder: SpladeEncoder, repeats: int = 20) -> float:
    """GFLOP/s of float32 (PROJECTION_ROWS x d) @ (d x vocabulary) on the encoder's device: the dense
    projection's shapes, so the ceiling its kernel can reach here."""
    weight = encoder.model.get_output_embeddings().weight.detach()
    rows = torch.randn(PROJECTION_ROWS, weight.shape[1], device=weight.device)
    for _ in range(3):
        rows @ weight.T
    _synchronize(weight)
    started = time.perf_counter()
    for _ in range(repeats):
        rows @ weight.T
    _synchronize(weight)
    seconds = (time.perf_counter() - started) / repeats
    return 2.0 * PROJECTION_ROWS * weight.shape[1] * weight.shape[0] / seconds / 1e9


def _synchronize(tensor: torch.Tensor) -> None:
    """Wait for the accelerator's queued work (kernels run asynchronously there)."""
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
