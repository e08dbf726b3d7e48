"""Quantization policy and Anserini-safe term escaping."""
import numpy as np
import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.encode.vectors import (
    EMPTY_DOCUMENT_TERM,
    Quantization,
    escape_term,
    escaped_vocabulary,
    to_impact_vector,
    unescape_term,
)

TRICKY = ["paris", "Ġparis", "##ing", "new york", "tab\there", "line\nbreak", "100%", "%", "%20", "\x00", "é", "\u200b", " "]


@pytest.mark.parametrize("term", TRICKY)
def test_escape_round_trips_and_leaves_no_separator(term):
    escaped = escape_term(term)
    assert unescape_term(escaped) == term
    assert not any(char.isspace() for char in escaped)
    assert escaped.isprintable()


def test_plain_terms_are_unchanged_and_escapes_never_collide():
    assert escape_term("paris") == "paris" and escape_term("##ing") == "##ing"
    escaped = [escape_term(term) for term in TRICKY]
    assert len(set(escaped)) == len(TRICKY)
    assert EMPTY_DOCUMENT_TERM not in escaped
    assert unescape_term(escape_term(EMPTY_DOCUMENT_TERM)) == EMPTY_DOCUMENT_TERM


def test_rounding_policies():
    weights = np.array([0.125, 0.135, 0.994, 0.004], dtype=np.float32)
    assert Quantization(100, "half-even").apply(np.array([0.125])).tolist() == [12]
    assert Quantization(100, "half-up").apply(np.array([0.125])).tolist() == [13]
    assert Quantization(100, "truncate").apply(weights).tolist() == [12, 13, 99, 0]
    assert Quantization(10, "half-even").apply(np.array([0.25, 0.35])).tolist() == [2, 4]


def test_impact_vector_drops_zeros_and_keeps_id_order():
    terms = escaped_vocabulary(["a", "b c", "d"])
    vector = to_impact_vector(np.array([0, 1, 2]), np.array([0.004, 1.5, 0.2], dtype=np.float32), terms, Quantization())
    assert vector == {"b%20c": 150, "d": 20}
    assert list(vector) == ["b%20c", "d"]


def test_bad_policies_and_vocabularies_are_one_line_errors():
    with pytest.raises(VtreproError, match="rounding"):
        Quantization(100, "nearest")
    with pytest.raises(VtreproError, match="positive"):
        Quantization(0)
    with pytest.raises(VtreproError, match="duplicate"):
        escaped_vocabulary(["a", "a"])
    with pytest.raises(VtreproError, match="empty token"):
        escaped_vocabulary(["a", ""])


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_quantization_scale_must_be_positive_and_finite(scale):
    with pytest.raises(VtreproError, match="positive finite"):
        Quantization(scale=scale)
