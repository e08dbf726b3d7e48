"""FOCUS matching (the authors' overlap rule) against the deepfocus package, on real vocabularies."""
from __future__ import annotations

from pathlib import Path

import pytest
from deepfocus.focus import get_overlapping_tokens
from transformers import AutoTokenizer

from vtrepro.vocabulary.focus import focus_match
from vtrepro.vocabulary.gpt2 import GPT2_BPE_SIZE
from vtrepro.vocabulary.matching import match_vocabularies


@pytest.fixture(scope="module")
def tokenizers(gpt2_bpe: Path, splade_tiny: Path) -> dict:
    return {"gpt2-bpe": AutoTokenizer.from_pretrained(gpt2_bpe), "bert-uncased": AutoTokenizer.from_pretrained(splade_tiny)}


def deepfocus_overlap(source, target) -> dict[int, int]:
    """Target id -> copied source id, as the released transfer reads deepfocus's overlap."""
    overlap, _ = get_overlapping_tokens(target, source, match_symbols=True, exact_match_all=True, fuzzy_match_all=False)
    return {target.convert_tokens_to_ids(token): source.convert_tokens_to_ids(entry.source[0].native_form)
            for token, entry in overlap.items()}


def test_the_gpt2_asset_is_a_cased_bpe_vocabulary_in_roberta_layout(tokenizers: dict) -> None:
    bpe = tokenizers["gpt2-bpe"]
    assert len(bpe) == GPT2_BPE_SIZE
    assert bpe.convert_ids_to_tokens([0, 1, 2, 3, GPT2_BPE_SIZE - 1]) == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert bpe.tokenize("Paris Paris") == ["Paris", "ĠParis"]
    assert len({bpe.convert_tokens_to_ids(token) for token in ("Paris", "ĠParis", "the", "Ġthe", "ĠThe")}) == 5


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
@pytest.mark.parametrize(("source", "target"), [("gpt2-bpe", "bert-uncased"), ("bert-uncased", "gpt2-bpe"),
                                                ("bert-uncased", "bert-uncased")])
def test_focus_match_is_deepfocus_overlap(tokenizers: dict, source: str, target: str) -> None:
    match = focus_match(tokenizers[source], tokenizers[target])
    assert match.exact == deepfocus_overlap(tokenizers[source], tokenizers[target])
    assert sorted([*match.exact, *match.new]) == list(range(len(tokenizers[target])))
    assert not match.merged and not match.special


@pytest.mark.slow  # 2.4 s on the AVX2 EPYC: two whole vocabularies matched
def test_named_examples_from_cased_bpe_onto_bert_uncased(tokenizers: dict) -> None:
    bpe, bert = tokenizers["gpt2-bpe"], tokenizers["bert-uncased"]
    focus = focus_match(bpe, bert)
    normalized = match_vocabularies(bpe, bert)

    def source_of(match, token: str):
        index = bert.convert_tokens_to_ids(token)
        if index in match.exact:
            return bpe.convert_ids_to_tokens(match.exact[index])
        return sorted(bpe.convert_ids_to_tokens([source for source, _ in match.merged.get(index, [])])) or None

    # FOCUS is case-sensitive and copies one row: GPT-2 has only "Paris"/"ĠParis", so BERT's "paris" is a new
    # row there; vtrepro's matcher folds case and blends both spellings.
    assert source_of(focus, "paris") is None
    assert source_of(normalized, "paris") == ["Paris", "ĠParis"]
    assert source_of(focus, "the") == "Ġthe" and len(source_of(normalized, "the")) == 6
    assert source_of(focus, "##ris") == "ris" and source_of(focus, "1990") == "Ġ1990" and source_of(focus, "##90") == "90"
    assert source_of(focus, "!") == "Ġ!"  # punctuation: the word-start form, exactly as the target marks it
    # Special tokens go through the same matching in FOCUS (BERT's [CLS] has no BPE spelling: a new row);
    # vtrepro copies them by role (<s> for [CLS]).
    assert source_of(focus, "[CLS]") is None and bert.convert_tokens_to_ids("[CLS]") in focus.new
    assert normalized.special[bert.convert_tokens_to_ids("[CLS]")] == bpe.convert_tokens_to_ids("<s>")


@pytest.mark.slow  # 1.4 s on the AVX2 EPYC: whole vocabularies matched
def test_normalized_matching_skips_invalid_text_and_prefers_the_same_letters(tokenizers: dict) -> None:
    bpe, bert = tokenizers["gpt2-bpe"], tokenizers["bert-uncased"]
    match = match_vocabularies(bpe, bert)

    def sources(token: str) -> list[str]:
        index = bert.convert_tokens_to_ids(token)
        ids = [match.exact[index]] if index in match.exact else [source for source, _ in match.merged[index]]
        return sorted(bpe.convert_ids_to_tokens(ids))

    # GPT-2's ".ï¿½" is "." followed by U+FFFD, which BERT's normalizer would drop: it must not join ".".
    assert sources(".") == [".", "Ġ."] and sources("##.") == ["."]
    # "š" and "ş" fold to "s" in BERT-uncased, but a source "s"/"S" exists: only those are blended.
    assert sources("##s") == ["S", "s"]
