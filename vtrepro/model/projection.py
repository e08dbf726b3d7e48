"""The vocabulary projection of SPLADE encoding, max-pooled over each text's tokens: dense, or screened.

Dense computes every token's logit for every vocabulary column in float32. Screened first finds the
columns whose max-pooled logit plus bias can be positive with a cheap low-precision pass, then computes
only those in float32. A trained SPLADE activates about 1% of its columns, and every other column's
weight is zero either way; no column the dense path activates is ever dropped. The kept columns'
float32 products run through another matrix shape than dense's, so a weight may differ in its last
bits (2.4e-7 to 9.6e-7 measured); the quantized vectors were identical in every run measured
(docs/performance.md). Two screens, both rigorous, differ only in speed:
int8 (the screen on CPU: integer products ran 8x float32's with VNNI and 2.8x with oneDNN held to AVX2
on an AVX-512 EPYC, but 24x slower on an AVX2 EPYC without VNNI, where PyTorch runs a reference loop, so
``auto`` takes dense there; bfloat16 on a CPU whose integer kernel the probe finds
inexact) and bfloat16 (the default screen on GPUs; fast on CPUs only where bfloat16 arithmetic is native:
15x slower than float32 on that AVX2 EPYC).

The bfloat16 screen. Let h be a token row and w a column of dimension d, with
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

The int8 screen. Each column w is stored as s q + e (q int8, s = max|w_i| / L, L = 127, or 64 where
the machine's kernel would saturate: see COLUMN_LEVELS) and each token row h of a text as σ p + r
(p int8, σ = max over the text's rows of max|h_i| / 127), so that one text's integer products p.q
compare across its tokens and are max-pooled as exact int32 (|p.q| <= 127 L d < 2^31). Then

    h.w = σ s p.q + σ p.e + s q.r + r.e <= σ s p.q + |σ p||e| + |s q||r| + |r||e|

by Cauchy-Schwarz, and the dense float32 logit is within g |h||w| of h.w. A column is computed exactly
when σ s max(p.q) + max|σ p| |e| + max|r| (|s q| + |e|) + g max|h| |w| + bias is positive after
allowing for float32 rounding of the bound. The norms are computed in float64 and rounded up.
"""
from __future__ import annotations

import functools
import logging
from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from vtrepro.core.errors import VtreproError
from vtrepro.model.encoder_options import SCREENS

logger = logging.getLogger(__name__)

PROJECTION_ROWS = 128
"""Token rows projected onto the vocabulary at once: their logits (~16 MB at 30k terms) stay in cache."""
INT8_PROJECTION_ROWS, INT8_PROJECTION_COLUMNS = 256, 2048
"""Token rows and vocabulary columns per integer product: its int32 block (2 MB) is max-pooled while in
cache. Measured on the AVX2 path: 256 x 2,048 blocks take 0.69x the time of 256 x 30,522 products."""
PROBED_ROW_COUNTS = (1, 2, 3, 8, 17, 64, 129, INT8_PROJECTION_ROWS)
"""Row counts probed when the int8 screen is built: one row may take a matrix-vector path, odd and small
counts the kernels' edges, the largest a full chunk."""
BFLOAT16_UNIT = 2.0**-8
FLOAT32_UNIT = 2.0**-24
ROW_LEVELS, COLUMN_LEVELS = 127, (127, 64)
"""Integer levels of the int8 screen's token rows, and the column levels tried, finest first. x86 int8
kernels without VNNI add pairs of u8 x s8 products in int16 with saturation (rows shifted to u8), which
255 x 64 x 2 <= 2^15 - 1 keeps exact; the kernel is probed before its levels are trusted."""


INT8_INSTRUCTIONS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""CPU flags (``/proc/cpuinfo``) of the instructions that make PyTorch's int8 products fast: with any of them they
ran 2.8-8x float32's (an AVX-512 EPYC with VNNI, oneDNN held to AVX2 included), without them 0.03x (an AVX2
EPYC, where PyTorch runs a reference loop). The screen also quantizes, bounds and recomputes the kept columns,
so it pays only well above 1x (2.8x gave the screened encoder 2.1x dense's rate)."""


def resolve_projection(projection: str, device: torch.device) -> str:
    """The projection ``projection`` names for an encoder on ``device``: ``auto`` resolved (the screened
    projection on a CPU that has one of :data:`INT8_INSTRUCTIONS`, dense elsewhere), any other name as it is.
    The choice follows the processor, never a timing, so every process of a machine (the ranks of a torchrun
    job, a resumed run) makes the same one under any load. Both give the same quantized vectors in every run
    measured, so the choice changes speed, not results; the manifest records it."""
    if projection != "auto":
        return projection
    if device.type != "cpu":
        return "dense"
    found = sorted(set(INT8_INSTRUCTIONS) & cpu_flags())
    chosen = "screened" if found else "dense"
    logger.info(f"projection auto: {chosen} (int8 instructions on this CPU: {', '.join(found) or 'none'})")
    return chosen


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The processor's feature flags as Linux lists them (``/proc/cpuinfo``); empty where it lists none."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def segment_max(rows: Tensor, lengths: list[int], project: Callable[[Tensor], Tensor], columns: int,
                dtype: torch.dtype = torch.float32, chunk_rows: int = PROJECTION_ROWS) -> Tensor:
    """Per segment of consecutive rows, max over its rows of ``project(row)``, never holding more than
    ``chunk_rows`` rows of projections; (segments, columns) of ``dtype``, float32 or an integer type."""
    lowest = float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min
    pooled = torch.full((len(lengths), columns), lowest, dtype=dtype, device=rows.device)
    ends = np.cumsum(lengths).tolist()
    starts = [end - length for end, length in zip(ends, lengths)]
    segment = 0
    for chunk_start in range(0, len(rows), chunk_rows):
        chunk_stop = min(chunk_start + chunk_rows, len(rows))
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
    u, gamma = BFLOAT16_UNIT, _float32_dot_error(dimension)
    return (2 * u + u * u) + gamma * (1 + u) ** 2 + u * (1 + u) ** 2 * (1 + gamma) + gamma


class ScreenedProjection:
    """Max-pooled logits of the columns that can activate (exact, float32, bias added); -inf elsewhere.

    ``screen`` is ``int8``, ``bfloat16`` or ``auto``: int8 on CPU where its integer products are exact
    (probed), bfloat16 elsewhere.
    """

    def __init__(self, decoder: nn.Linear, screen: str = "auto"):
        weight = decoder.weight.detach()
        self.weight = weight
        self.bias = decoder.bias.detach() if decoder.bias is not None else torch.zeros(weight.shape[0], device=weight.device)
        if screen not in SCREENS:
            raise ValueError(f"screen must be one of {', '.join(SCREENS)}, got {screen!r}")
        self.screen = screen if screen != "auto" else "int8" if weight.device.type == "cpu" else "bfloat16"
        try:
            self.upper_bounds = SCREEN_CLASSES[self.screen](weight, self.bias)
        except VtreproError:
            if screen != "auto":
                raise
            self.screen, self.upper_bounds = "bfloat16", BFloat16Screen(weight, self.bias)
        self.kept = self.columns = 0  # columns computed exactly, and columns screened, since creation

    def __call__(self, rows: Tensor, lengths: list[int]) -> Tensor:
        keep = ~(self.upper_bounds(rows, lengths) <= 0)  # a NaN bound keeps its column: dense gives NaN too
        ends = np.cumsum(lengths).tolist()
        pooled = torch.full(keep.shape, float("-inf"), dtype=torch.float32, device=rows.device)
        for segment, (end, length) in enumerate(zip(ends, lengths)):
            columns = torch.nonzero(keep[segment]).squeeze(1)
            if len(columns):
                exact = (rows[end - length:end] @ self.weight[columns].T).amax(dim=0)
                pooled[segment, columns] = exact + self.bias[columns]
        self.kept += int(keep.sum())
        self.columns += keep.numel()
        return pooled


class BFloat16Screen:
    """Per text, an upper bound of every column's dense max-pooled logit plus bias, from a bfloat16 pass."""

    def __init__(self, weight: Tensor, bias: Tensor):
        self.weight, self.bias = weight.to(torch.bfloat16), bias
        self.norms = _rounded_up(weight.double().norm(dim=1))
        self.factor = screen_factor(weight.shape[1]) * (1 + 16 * FLOAT32_UNIT)  # the factor's own rounding

    def __call__(self, rows: Tensor, lengths: list[int]) -> Tensor:
        approximate = segment_max(rows.to(torch.bfloat16), lengths, lambda chunk: (chunk @ self.weight.T).float(),
                                  self.weight.shape[0])
        largest = _segment_values(_rounded_up(rows.double().norm(dim=1)), lengths)
        margin = self.factor * largest[:, None] * self.norms[None, :]
        return _upper_bound(approximate, margin, self.bias)


class Int8Screen:
    """Per text, an upper bound of every column's dense max-pooled logit plus bias, from an int8 pass."""

    def __init__(self, weight: Tensor, bias: Tensor):
        self.bias = bias
        if weight.device.type != "cpu":
            raise VtreproError("the int8 screen runs on CPU only: use --projection screened or screened-bfloat16")
        widths = sorted({len(block) for block in torch.arange(weight.shape[0]).split(INT8_PROJECTION_COLUMNS)})
        self.levels = exact_column_levels(weight.shape[1], widths)
        self.verified = {(count, width) for count in PROBED_ROW_COUNTS for width in widths}  # exact shapes
        self.scales = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / self.levels
        codes = torch.round(weight / self.scales[:, None]).clamp(-self.levels, self.levels)
        # Column-major views: the layout the integer kernels run fastest on.
        self.blocks = [block.T for block in codes.to(torch.int8).split(INT8_PROJECTION_COLUMNS)]
        quantized = codes.double() * self.scales.double()[:, None]
        self.quantized_norms = _rounded_up(quantized.norm(dim=1))
        self.residual_norms = _rounded_up((weight.double() - quantized).norm(dim=1))
        self.float32_error = _rounded_up(_float32_dot_error(weight.shape[1]) * weight.double().norm(dim=1))

    def __call__(self, rows: Tensor, lengths: list[int]) -> Tensor:
        text_scales = _segment_values(rows.abs().amax(dim=1), lengths).clamp(min=torch.finfo(torch.float32).tiny)
        text_scales = text_scales / ROW_LEVELS
        row_scales = torch.repeat_interleave(text_scales, torch.tensor(lengths, device=rows.device))
        codes = torch.round(rows / row_scales[:, None]).clamp(-ROW_LEVELS, ROW_LEVELS)
        codes8 = codes.to(torch.int8)
        products = torch.cat([segment_max(codes8, lengths, functools.partial(self._products, block=block), block.shape[1],
                                          dtype=torch.int32, chunk_rows=INT8_PROJECTION_ROWS) for block in self.blocks],
                             dim=1)
        quantized = codes.double() * row_scales.double()[:, None]
        approximate = text_scales[:, None] * self.scales[None, :] * products.float()
        quantized_norm = _segment_values(_rounded_up(quantized.norm(dim=1)), lengths)[:, None]
        residual_norm = _segment_values(_rounded_up((rows.double() - quantized).norm(dim=1)), lengths)[:, None]
        row_norm = _segment_values(_rounded_up(rows.double().norm(dim=1)), lengths)[:, None]
        margin = (quantized_norm * self.residual_norms + residual_norm * (self.quantized_norms + self.residual_norms)
                  + row_norm * self.float32_error)
        return _upper_bound(approximate, margin, self.bias)

    def _products(self, chunk: Tensor, block: Tensor) -> Tensor:
        """The exact int32 products of a chunk of row codes with a block of column codes; a shape the
        kernel has not run before is probed first (its path may differ)."""
        shape = (len(chunk), block.shape[1])
        if shape not in self.verified:
            if not _exact_products(*shape, block.shape[0], self.levels):
                raise VtreproError(f"int8 matrix products of shape {shape} are not exact on this CPU: use "
                                   "--projection screened-bfloat16")
            self.verified.add(shape)
        return torch._int_mm(chunk, block)


SCREEN_CLASSES: dict[str, Callable[[Tensor, Tensor], Callable[[Tensor, list[int]], Tensor]]] = {
    "int8": Int8Screen, "bfloat16": BFloat16Screen,
}


def exact_column_levels(dimension: int, widths: list[int]) -> int:
    """The most int8 column levels (COLUMN_LEVELS, finest first) at which this machine's integer matrix
    product is exact at PROBED_ROW_COUNTS rows times each width of column block (other row counts are
    probed when they first occur). Saturation grows with the magnitude of same-sign products, so rows and
    columns of extreme values of both signs are the worst case."""
    for levels in COLUMN_LEVELS:
        if all(_exact_products(count, width, dimension, levels) for width in widths for count in PROBED_ROW_COUNTS):
            return levels
    raise VtreproError("int8 matrix products are not exact on this CPU: use --projection screened-bfloat16")


def _exact_products(count: int, width: int, dimension: int, column_levels: int) -> bool:
    """Whether ``count`` rows of +-ROW_LEVELS times ``width`` columns of +-column_levels (alternating
    signs) give the exact products, in the column-major layout the screen uses."""
    row_signs, column_signs = torch.ones(count, dtype=torch.int64), torch.ones(width, dtype=torch.int64)
    row_signs[1::2], column_signs[1::2] = -1, -1
    rows = (row_signs[:, None] * ROW_LEVELS).to(torch.int8).expand(count, dimension).contiguous()
    columns = (column_signs[:, None] * column_levels).to(torch.int8).expand(width, dimension).contiguous()
    expected = torch.outer(row_signs, column_signs) * (ROW_LEVELS * column_levels * dimension)
    return torch.equal(torch._int_mm(rows, columns.T).long(), expected)


def _upper_bound(approximate: Tensor, margin: Tensor, bias: Tensor) -> Tensor:
    """approximate + margin + bias, widened by the float32 rounding of the bound's own terms."""
    return approximate + margin + bias + 8 * FLOAT32_UNIT * (approximate.abs() + margin + bias.abs())


def _segment_values(values: Tensor, lengths: list[int]) -> Tensor:
    """Max of ``values`` over each segment of consecutive rows."""
    ends = np.cumsum(lengths).tolist()
    return torch.stack([values[end - length:end].max() for end, length in zip(ends, lengths)])


def _float32_dot_error(dimension: int) -> float:
    """g: a float32 dot product of this dimension is within g sum|h_i||w_i| of the exact one."""
    return dimension * FLOAT32_UNIT / (1 - dimension * FLOAT32_UNIT)


def _rounded_up(values: Tensor) -> Tensor:
    """Float64 values as float32, never below their true value."""
    rounded = values.float()
    return torch.where(rounded.double() < values, torch.nextafter(rounded, torch.full_like(rounded, float("inf"))),
                       rounded)
