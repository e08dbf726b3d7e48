"""A spec's gap: block is checked whole before anything runs: names, repeats, and pins of figures the study has."""
from __future__ import annotations

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.regress.spec import load_spec

BLOCK = """description: a gap study
gap:
  tokenizers: [gpt2-bpe, splade-tiny]
  corpus_tokenizers: [gpt2-bpe]
  datasets: [nfcorpus]
"""


def _spec(tmp_path, text: str):
    path = tmp_path / "gap.yaml"
    path.write_text(text)
    return path


def test_a_gap_block_alone_is_a_spec(tmp_path):
    spec = load_spec(_spec(tmp_path, BLOCK + "  pins:\n    census: {gpt2-bpe: {marked: 4710}}\n"
                                            "    bm25: {gpt2-bpe/nfcorpus/both: {ndcg@10: 0.2503}}\n"))
    assert spec.conditions == [] and spec.gap is not None
    assert spec.gap.pins["census"]["gpt2-bpe"] == {"marked": 4710}


@pytest.mark.parametrize("change, message", [
    ("  pins:\n    census: {nosuch: {marked: 1}}\n", "is no figure of this study"),
    ("  pins:\n    bm25: {gpt2-bpe/nfcorpus/upper: {ndcg@10: 0.2}}\n", "is no figure of this study"),
    ("  pins:\n    corpus: {gpt2-bpe/nfcorpus: {exact_match: -1}}\n", "exact_match"),
    ("  pins:\n    census: {gpt2-bpe: {nosuch: 1}}\n", "nosuch"),
])
def test_pins_of_figures_the_study_does_not_make_are_refused_at_their_line(tmp_path, change, message):
    with pytest.raises(VtreproError, match=message) as error:
        load_spec(_spec(tmp_path, BLOCK + change))
    assert "gap.yaml:" in str(error.value)


@pytest.mark.parametrize("tokenizers, message", [
    ("[gpt2-bpe, gpt2-bpe]", "listed twice"),
    ("[a/b]", "is not a tokenizer name"),
    ("['..']", "is not a tokenizer name"),
])
def test_tokenizer_names_are_names_listed_once(tmp_path, tokenizers, message):
    with pytest.raises(VtreproError, match=message):
        load_spec(_spec(tmp_path, BLOCK.replace("[gpt2-bpe, splade-tiny]", tokenizers)))
