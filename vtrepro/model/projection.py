"""The vocabulary projection of SPLADE encoding, max-pooled over each text's tokens: dense, or screened.

Dense computes every token's logit for every vocabulary column in float32. Screened first finds the
columns whose max-pooled logit plus bias can be positive with a bfloat16 pass, then computes only those
in float32 exactly as dense does. A trained SPLADE activates about 1% of its columns, and every other
column's weight is zero either way.

The bfloat16 pass is a rigorous screen. Let h be a token row and w a column of dimension d, with
u = 2^-8 the unit roundoff of bfloat16 and g = d 2^-24 / (1 - d 2^-24). Rounding h and w to bfloat16
moves each product by at most (2u + u^2)|h_i||w_i|. Float32 accumulation adds at most g(1 + u)^2
sum|h_i||w_i|, and rounding the result to bfloat16 a further u(1 + u)^2(1 + g) sum|h_i||w_i|. The
dense float32 value itself lies within g sum|h_i||w_i| of the exact product. By Cauchy-Schwarz,
sum|h_i||w_i| <= |h||w|. So the dense logit is at most the bfloat16 logit + c|h||w|, with c the sum
of these factors (about 0.012 at d = 128). A column is computed exactly when

    max over tokens of the bfloat16 logit + c (max token norm) |w| + bias

is positive after allowing for float32 rounding of the bound itself. The screen therefore never
drops a column the dense path activates. The bound assumes bfloat16 products are accumulated in
float32, as oneDNN and PyTorch's CPU kernels do.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

PROJECTION_ROWS = 128
"""Token rows projected onto the vocabulary at once: their logits (~16 MB at 30k terms) stay in cache."""
BFLOAT16_UNIT = 2.0**-8
FLOAT32_UNIT = 2.0**-24
PROJECTIONS = ("dense", "screened")


def segment_max(rows: Tensor, lengths: list[int], project: Callable[[Tensor], Tensor], columns: int) -> Tensor:
    """Per segment of consecutive rows, max over its rows of ``project(row)``, never holding more than
    PROJECTION_ROWS rows of projections; float32 (segments, columns)."""
    pooled = torch.full((len(lengths), columns), float("-inf"), dtype=torch.float32, device=rows.device)
    ends = np.cumsum(lengths).tolist()
    starts = [end - length for end, length in zip(ends, lengths)]
    segment = 0
    for chunk_start in range(0, len(rows), PROJECTION_ROWS):
        chunk_stop = min(chunk_start + PROJECTION_ROWS, len(rows))
        logits = project(rows[chunk_start:chunk_stop])
        while segment < len(lengths) and starts[segment] < chunk_stop:
            low, high = max(starts[segment], chunk_start), min(ends[segment], chunk_stop)
            if high > low:
                torch.maximum(pooled[segment], logits[low - chunk_start : high - chunk_start].amax(dim=0),
                              out=pooled[segment])
            if ends[segment] > chunk_stop:
                break
            segment += 1
    return pooled


def dense_max_logits(rows: Tensor, lengths: list[int], decoder: nn.Linear) -> Tensor:
    """Max-pooled raw logits of every column. The bias is added after pooling: max(x + b) = max(x) + b."""
    pooled = segment_max(rows, lengths, lambda chunk: chunk @ decoder.weight.T, decoder.out_features)
    if decoder.bias is not None:
        pooled += decoder.bias
    return pooled


def screen_factor(dimension: int) -> float:
    """c of the module's bound: |dense logit - bfloat16 logit| <= c |h| |w| for rows of this dimension."""
    u, gamma = BFLOAT16_UNIT, dimension * FLOAT32_UNIT / (1 - dimension * FLOAT32_UNIT)
    return (2 * u + u * u) + gamma * (1 + u) ** 2 + u * (1 + u) ** 2 * (1 + gamma) + gamma


class ScreenedProjection:
    """Max-pooled logits of the columns that can activate (exact, float32, bias added); -inf elsewhere."""

    def __init__(self, decoder: nn.Linear):
        weight = decoder.weight.detach()
        self.weight = weight
        self.bias = decoder.bias.detach() if decoder.bias is not None else torch.zeros(weight.shape[0], device=weight.device)
        self.screen = weight.to(torch.bfloat16)
        self.norms = _rounded_up(weight.double().norm(dim=1))
        self.factor = screen_factor(weight.shape[1]) * (1 + 16 * FLOAT32_UNIT)  # the factor's own rounding
        self.kept = self.columns = 0  # columns computed exactly, and columns screened, since creation

    def __call__(self, rows: Tensor, lengths: list[int]) -> Tensor:
        approximate = segment_max(rows.to(torch.bfloat16), lengths, lambda chunk: (chunk @ self.screen.T).float(),
                                  self.weight.shape[0])
        ends = np.cumsum(lengths).tolist()
        row_norms = _rounded_up(rows.double().norm(dim=1))
        largest = torch.stack([row_norms[end - length:end].max() for end, length in zip(ends, lengths)])
        margin = self.factor * largest[:, None] * self.norms[None, :]
        bound = approximate + margin + self.bias
        slack = 4 * FLOAT32_UNIT * (approximate.abs() + margin + self.bias.abs())  # the bound's own rounding
        keep = (bound + slack) > 0
        pooled = torch.full_like(approximate, float("-inf"))
        for segment, (end, length) in enumerate(zip(ends, lengths)):
            columns = torch.nonzero(keep[segment]).squeeze(1)
            if len(columns):
                exact = (rows[end - length:end] @ self.weight[columns].T).amax(dim=0)
                pooled[segment, columns] = exact + self.bias[columns]
        self.kept += int(keep.sum())
        self.columns += keep.numel()
        return pooled


def _rounded_up(values: Tensor) -> Tensor:
    """Float64 values as float32, never below their true value."""
    rounded = values.float()
    return torch.where(rounded.double() < values, torch.nextafter(rounded, torch.full_like(rounded, float("inf"))),
                       rounded)
