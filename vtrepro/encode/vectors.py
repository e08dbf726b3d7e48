"""Quantized, Anserini-safe sparse vectors: the JSON-vector format shared by documents and queries.

Anserini splits pretokenized terms on whitespace and truncates float weights silently, so
weights are quantized to integers here under an explicit policy, and every term with
whitespace, control characters or ``%`` is percent-escaped (UTF-8 bytes, reversibly).
"""
from __future__ import annotations

import functools
import math
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from vtrepro.core.errors import VtreproError
from vtrepro.core.options import Options, option
from vtrepro.core.schema import Field

# numpy is imported where weights are quantized, on purpose: every command's `--help` stays fast.
if TYPE_CHECKING:
    import numpy as np

Rounding = Literal["half-even", "half-up", "truncate"]
ROUNDINGS: tuple[str, ...] = ("half-even", "half-up", "truncate")
MIN_SCALE, MAX_SCALE = 1.0, 10_000.0
"""The quantization scales a command line or spec takes. SPLADE weights are a few units at most: below 1 nearly
all of them round to 0; 10,000 is 100 times the usual scale (Anserini's and SPLADE's 100, splade-v3's 51.2) and
keeps the impacts of weights up to 200,000 within Lucene's 2^31 - 1."""

# Never produced by `escape_term` (its '%' is always followed by two hex digits), so it cannot
# collide with a vocabulary term; it keeps documents with no active term in the index.
EMPTY_DOCUMENT_TERM = "%empty"


@dataclass(frozen=True)
class Quantization(Options):
    """Float weight -> integer impact: ``round(weight * scale)`` with the given rounding; zeros dropped.

    Specs and command lines take the scales the field declares (:data:`MIN_SCALE` to :data:`MAX_SCALE`),
    refused at their line or flag. Built in Python, any positive finite scale is taken: tests quantize
    below 1 on purpose, to leave documents without a term.
    """

    scale: float = option(Field(
        float, 100.0, minimum=MIN_SCALE, maximum=MAX_SCALE,
        help=f"quantization scale: impact = round(weight x scale), {MIN_SCALE:g} to {MAX_SCALE:g} (100 as Anserini's "
             "SPLADE indexes): below 1 nearly every SPLADE weight rounds to 0; a scale that leaves every document or "
             "every query without a term is refused"))
    rounding: Rounding = option(Field(str, "half-even", ROUNDINGS, help="weight rounding"))

    def __post_init__(self) -> None:  # in place of the declared bounds: see the class docstring
        if not math.isfinite(self.scale) or self.scale <= 0:
            raise VtreproError(f"quantization scale must be a positive finite number, got {self.scale}")
        if self.rounding not in ROUNDINGS:
            raise VtreproError(f"unknown rounding '{self.rounding}': use one of {', '.join(ROUNDINGS)}")

    def apply(self, weights: np.ndarray) -> np.ndarray:
        """Integer impacts (int64) for float weights, computed in float64."""
        import numpy as np

        scaled = np.asarray(weights, dtype=np.float64) * self.scale
        if self.rounding == "half-even":
            return np.rint(scaled).astype(np.int64)
        if self.rounding == "half-up":
            return np.floor(scaled + 0.5).astype(np.int64)
        return np.trunc(scaled).astype(np.int64)


def _needs_escape(char: str) -> bool:
    return char == "%" or char.isspace() or unicodedata.category(char).startswith("C")


def escape_term(term: str) -> str:
    """Percent-escape whitespace, control characters and '%' so Anserini keeps the term whole."""
    if not any(_needs_escape(char) for char in term):
        return term
    return "".join(
        "".join(f"%{byte:02X}" for byte in char.encode("utf-8")) if _needs_escape(char) else char
        for char in term
    )


def unescape_term(term: str) -> str:
    """Inverse of :func:`escape_term`."""
    if "%" not in term:
        return term
    out = bytearray()
    index = 0
    while index < len(term):
        if term[index] == "%":
            out.append(int(term[index + 1 : index + 3], 16))
            index += 3
        else:
            out.extend(term[index].encode("utf-8"))
            index += 1
    return out.decode("utf-8")


def escaped_vocabulary(vocabulary: Sequence[str]) -> list[str]:
    """Escape every vocabulary term once; an empty term or two terms escaping alike is an error. Computed once
    per vocabulary in a process (a regression encodes a corpus and its queries per dataset with one model)."""
    return list(_escaped_vocabulary(tuple(vocabulary)))


@functools.lru_cache(maxsize=4)
def _escaped_vocabulary(vocabulary: tuple[str, ...]) -> tuple[str, ...]:
    escaped = [escape_term(term) for term in vocabulary]
    if "" in escaped:
        raise VtreproError(f"vocabulary has an empty token at id {escaped.index('')}: it cannot be indexed")
    if len(set(escaped)) != len(escaped):
        raise VtreproError("vocabulary has duplicate tokens: term ids would collide in the index")
    return tuple(escaped)


def to_impact_vector(
    ids: np.ndarray, weights: np.ndarray, terms: Sequence[str], quantization: Quantization
) -> dict[str, int]:
    """``{escaped term: integer impact}`` for one text, zero impacts dropped, in term-id order."""
    impacts = quantization.apply(weights)
    return {terms[int(term_id)]: int(impact) for term_id, impact in zip(ids, impacts) if impact > 0}
