"""FOCUS matching: the overlap rule of the paper's released transfer code.

The released ``vocab_trans/transform.py`` (zhichao-aws/opensearch-sparse-model-tuning-sample,
commit 887dd22) takes its overlap from the ``deepfocus`` package (``get_overlapping_tokens`` with
``match_symbols=True, exact_match_all=True, fuzzy_match_all=False``). This module applies the same
rules, written from their description; ``tests/unit/vocabulary/test_focus.py`` checks them against
``deepfocus`` itself on real vocabularies.

Every entry gets a *canonical form* from its tokenizer's own decoding: a word-start marker ``▁``
plus the decoded text for a WordPiece entry without ``##``, a byte-level entry with ``Ġ`` or a
SentencePiece entry with ``▁``; the decoded text alone otherwise. Case and accents are kept. Its
*fuzzy form* drops the marker and lowercases. A target entry matches the source entry with the same
canonical form; numbers, punctuation, whitespace and the target's own special tokens also match on
the fuzzy form. Each match copies one source row (never a blend); special tokens are matched like
any other entry.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from vtrepro.vocabulary.matching import VocabularyMatch

# transformers is only a type hint here, so importing this module stays fast (see transfer.py).
if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

WORD_START = "▁"
BYTE_LEVEL_WORD_START = "Ġ"
MARKED_ENTRIES_FOR_A_SCHEME = 100
"""More than this many entries with a marker decide the scheme (SentencePiece ``▁``, WordPiece ``##``)."""


@dataclass(frozen=True)
class FocusForm:
    """One vocabulary entry: its id and canonical form."""

    id: int
    canonical: str

    @property
    def fuzzy(self) -> str:
        return self.canonical.replace(WORD_START, "").lower()


def _scheme(vocabulary: dict[str, int]) -> str:
    if sum(token[:1] == WORD_START for token in vocabulary) > MARKED_ENTRIES_FOR_A_SCHEME:
        return "sentencepiece"
    if sum(token[:2] == "##" for token in vocabulary) > MARKED_ENTRIES_FOR_A_SCHEME:
        return "wordpiece"
    return "decoded"


def _canonical(tokenizer: PreTrainedTokenizerBase, token: str, index: int, scheme: str) -> str:
    decoded = cast(str, tokenizer.decode(index))  # one id decodes to one string
    if scheme == "wordpiece":
        return decoded[2:] if decoded.startswith("##") else WORD_START + decoded
    if scheme == "sentencepiece" and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return token  # a byte-fallback entry stands for itself
    marker = WORD_START if scheme == "sentencepiece" else BYTE_LEVEL_WORD_START
    return (WORD_START if token.startswith(marker) else "") + decoded.lstrip()


def focus_forms(tokenizer: PreTrainedTokenizerBase) -> list[FocusForm]:
    """The canonical form of every entry of ``tokenizer.get_vocab()``, added and special tokens included."""
    vocabulary = tokenizer.get_vocab()
    scheme = _scheme(vocabulary)
    return [FocusForm(index, _canonical(tokenizer, token, index, scheme)) for token, index in vocabulary.items()]


def _exact_choice(forms: list[FocusForm]) -> dict[str, int]:
    """Canonical form -> the source id a match copies: the highest id of that form (FOCUS lists each
    new entry of a form before the earlier ones)."""
    return {form.canonical: form.id for form in sorted(forms, key=lambda form: form.id)}


def _fuzzy_choice(forms: list[FocusForm]) -> dict[str, int]:
    """Fuzzy form -> the source id a match copies: the highest id whose canonical form already is the
    fuzzy form, else the lowest id of that fuzzy form."""
    chosen: dict[str, int] = {}
    for form in sorted(forms, key=lambda form: form.id):
        if form.fuzzy not in chosen or form.fuzzy == form.canonical:
            chosen[form.fuzzy] = form.id
    return chosen


def is_symbol(fuzzy: str, tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether a fuzzy form also matches on its fuzzy form: a special token of ``tokenizer``, a number,
    punctuation only (the empty form included) or whitespace."""
    return (fuzzy in tokenizer.all_special_tokens or fuzzy.isnumeric()
            or all(character in string.punctuation for character in fuzzy) or fuzzy.isspace())


def focus_match(source_tokenizer: PreTrainedTokenizerBase, target_tokenizer: PreTrainedTokenizerBase) -> VocabularyMatch:
    """Every target id with the one source id whose row it copies (``exact``), or ``new``."""
    source = focus_forms(source_tokenizer)
    exact, fuzzy = _exact_choice(source), _fuzzy_choice(source)
    match = VocabularyMatch()
    for form in focus_forms(target_tokenizer):
        if form.canonical in exact:
            match.exact[form.id] = exact[form.canonical]
        elif form.fuzzy in fuzzy and is_symbol(form.fuzzy, target_tokenizer):
            match.exact[form.id] = fuzzy[form.fuzzy]
    match.new = [index for index in range(len(target_tokenizer)) if index not in match.exact]
    return match
