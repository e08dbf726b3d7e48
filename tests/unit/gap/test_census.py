"""The census: units read in each position scheme, and the variant classes against the one published count."""
from __future__ import annotations

import pytest

from vtrepro.gap.census import census, variant_classes
from vtrepro.gap.units import BYTE_LEVEL, END_OF_WORD, SENTENCEPIECE, WORDPIECE, read_form
from vtrepro.gap.vocabularies import Vocabulary, load_vocabulary


@pytest.fixture(scope="module")
def gpt2():
    return load_vocabulary("gpt2-bpe")


def test_a_form_is_its_mark_its_text_and_its_units():
    paris = read_form("ĠParis", BYTE_LEVEL)
    assert (paris.marked, paris.text, paris.unit) == (True, "Paris", "paris")
    assert read_form("Ã©", BYTE_LEVEL).text == "é"  # GPT-2's byte alphabet decoded
    assert read_form("Ã", BYTE_LEVEL).unit == "<bytes:c3>"  # half a character keeps its bytes
    assert read_form("##Café", WORDPIECE).unit_without_accents == "cafe"
    assert read_form("▁Apple", SENTENCEPIECE).key("case") == (True, "apple")
    assert read_form("apple</w>", END_OF_WORD).key("markers") == "apple"
    assert read_form("Ġ", BYTE_LEVEL).marked is False  # the marker alone is an entry, not a marked empty one


def test_gpt2_variant_classes_equal_the_published_count(gpt2):
    """irhum/captoken, notebooks/GPT2 Tokenizer.ipynb@438e88e: 4,710 spaced, 4,385 spaced and capitalized, 2,355
    capitalized duplicates in GPT-2's vocabulary."""
    variants = variant_classes(gpt2)
    assert (variants["marked"], variants["marked_capitalized"], variants["capitalized"]) == (4710, 4385, 2355)


def test_gpt2_census(gpt2):
    figures = census(gpt2)
    assert figures["entries"] == 50_257 and figures["specials"] == 1
    assert sum(figures["forms_per_unit"].values()) == figures["units"]
    assert figures["coarse_graining"] == round((50_257 - 1) / figures["units"], 4)
    assert any(set(group["forms"]) >= {"it", "Ġit", "It", "ĠIt", "IT"} for group in figures["largest_groups"])


def test_bert_uncased_has_no_case_variants_and_only_position_twins(splade_tiny):
    figures = census(load_vocabulary(str(splade_tiny)))
    assert figures["variants"]["case_variants"] == 0
    assert figures["variants"]["marked"] is None and figures["variants"]["position_twins"] == 2709
    assert figures["forms_per_unit"]["2"] == 2709 and figures["forms_per_unit"]["3"] == 0


def test_a_hand_made_vocabulary_counts_each_class_once():
    entries = ["[PAD]", "apple", "Ġapple", "ĠApple", "Apple", "APPLE", "10", "Ġ10", "Ġ"]
    vocabulary = Vocabulary("toy", "test", BYTE_LEVEL, entries, frozenset({0}))
    assert variant_classes(vocabulary) == {"marked": 2, "marked_capitalized": 2, "capitalized": 1, "case_variants": 3}
    figures = census(vocabulary)
    assert figures["units"] == 3 and figures["forms_per_unit"] == {"1": 1, "2": 1, "3": 0, "4": 0, "5+": 1}


def test_a_tokenizer_json_and_its_vocab_txt_give_one_census(splade_tiny, tmp_path):
    """Specials are the declared ones and WordPiece's bracketed reserved entries, whatever the file format."""
    folder = tmp_path / "vocab-txt"
    folder.mkdir()
    from_json = load_vocabulary(str(splade_tiny))
    (folder / "vocab.txt").write_text("".join(entry + "\n" for entry in from_json.entries))
    first, second = census(from_json), census(load_vocabulary(str(folder)))
    for figure in ("specials", "units", "coarse_graining", "variants", "forms_per_unit"):
        assert first[figure] == second[figure], figure


def test_contexts_never_count_a_special_neighbour():
    import numpy as np

    from vtrepro.gap.corpus import TokenizedDataset
    from vtrepro.gap.integrity import _contexts

    vocabulary = Vocabulary("toy", "test", WORDPIECE, ["[SEP]", "apple", "Apple", "pie"], frozenset({0}))
    tokenized = TokenizedDataset(vocabulary, "toy", "test", {"d": [2, 0, 3]}, {}, {}, [])
    contexts = _contexts(tokenized, {1, 2}, np.array([-1, 0, 0, 1]))
    assert dict(contexts) == {2: {1: 1}}  # Apple sees pie (unit 1) two places on; the special is no unit
