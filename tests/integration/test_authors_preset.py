"""The authors preset reproduces the released transform (its arithmetic written out here from the
description, with deepfocus's overlap) on real vocabularies, for tied, untied and ModernBERT sources."""
from __future__ import annotations

import json
from pathlib import Path

import entmax
import pytest
import torch
import torch.nn.functional as F
from deepfocus.focus import get_overlapping_tokens
from transformers import AutoModelForMaskedLM, AutoTokenizer, ModernBertConfig, ModernBertForMaskedLM

from vtrepro.core.checkpoints import save_checkpoint
from vtrepro.vocabulary.command import transfer_main as main
from vtrepro.vocabulary.gpt2 import write_round_trip_source
from vtrepro.vocabulary.presets import AUTHORS_CONFIG_TOKENS
from vtrepro.vocabulary.transfer import TRANSFER_REPORT

pytestmark = pytest.mark.slow  # three real transfers of a 50k-token vocabulary, each checked against the reference

TOLERANCE = 1e-5
SPARSEMAX_K = 128
"""entmax's ``k``: sparsemax partial-sorts the top ``k`` of each row instead of all ~16,000 (a row whose support is
larger is redone with 2k, so the result is exact: bitwise equal to the full sort here, where supports hold at
most 79 entries); the full sort of the ~14,000 x 16,000 cosine matrix took most of each case's time."""


@pytest.fixture(scope="module")
def bpe_sources(gpt2_bpe: Path, splade_tiny: Path, tmp_path_factory) -> dict[str, Path]:
    """Masked LMs on the cased GPT-2 BPE vocabulary: splade-tiny's weights moved onto it (subword-mean rows),
    an untied copy of it, and a random-weight ModernBERT."""
    bpe = AutoTokenizer.from_pretrained(gpt2_bpe)
    folders = {name: tmp_path_factory.mktemp(name) for name in ("tied", "untied", "modernbert")}
    write_round_trip_source(splade_tiny, folders["tied"])
    untied = AutoModelForMaskedLM.from_pretrained(folders["tied"], tie_word_embeddings=False)
    with torch.no_grad():
        untied.get_output_embeddings().weight.mul_(1.5)
    save_checkpoint(folders["untied"], untied, bpe)
    torch.manual_seed(0)
    modernbert = ModernBertForMaskedLM(ModernBertConfig(
        vocab_size=len(bpe), hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
        max_position_embeddings=128, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2))
    save_checkpoint(folders["modernbert"], modernbert, bpe)
    return folders


def released_transform(source_dir: Path, target_dir: Path) -> dict:
    """The released transform's tensors: FOCUS overlap (deepfocus), copied rows, cosine sparsemax sums of the
    overlap rows for the rest, the target bias z-mapped over all rows, then the target-norm rescale."""
    source, target = AutoModelForMaskedLM.from_pretrained(source_dir), AutoModelForMaskedLM.from_pretrained(target_dir)
    source_tokenizer, target_tokenizer = AutoTokenizer.from_pretrained(source_dir), AutoTokenizer.from_pretrained(target_dir)
    overlap, _ = get_overlapping_tokens(target_tokenizer, source_tokenizer, match_symbols=True, exact_match_all=True,
                                        fuzzy_match_all=False)
    target_ids = [target_tokenizer.convert_tokens_to_ids(token) for token in overlap]
    source_ids = [source_tokenizer.convert_tokens_to_ids(entry.source[0].native_form) for entry in overlap.values()]
    rows = source.get_input_embeddings().weight.detach()
    reference = target.get_input_embeddings().weight.detach()
    size = len(target_tokenizer)
    embeddings = torch.zeros(size, rows.shape[1])
    embeddings[target_ids] = rows[source_ids]
    overlapping = set(target_ids)
    new = [index for index in range(size) if index not in overlapping]
    cosine = F.normalize(reference[new].double(), dim=1) @ F.normalize(reference[target_ids].double(), dim=1).T
    embeddings[new] = entmax.sparsemax(cosine.float(), dim=-1, k=SPARSEMAX_K) @ rows[source_ids]
    target_bias, source_bias = target.get_output_embeddings().bias.detach(), source.get_output_embeddings().bias.detach()
    bias = (target_bias - target_bias.mean()) / (target_bias.std() + 1e-8) * source_bias.std() + source_bias.mean()
    scale = reference[target_ids].norm(dim=1).mean() / (embeddings[target_ids].norm(dim=1).mean() + 1e-8)
    config_ids = {key: target_tokenizer.convert_tokens_to_ids(name) for key, name in AUTHORS_CONFIG_TOKENS.items()}
    return {"embeddings": embeddings * scale, "bias": bias * scale, "new": new, "config_ids": config_ids}


@pytest.mark.parametrize("source", ["tied", "untied", "modernbert"])
def test_authors_preset_reproduces_the_released_transform(source: str, bpe_sources: dict, splade_tiny: Path,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["--preset", "authors", "--model", str(bpe_sources[source]), "--target-tokenizer", str(splade_tiny),
                 "--reference", str(splade_tiny), "--output", str(out)])
    assert code == 0
    expected = released_transform(bpe_sources[source], splade_tiny)
    model = AutoModelForMaskedLM.from_pretrained(out)
    report = json.loads((out / TRANSFER_REPORT).read_text())
    assert report["new_ids"] == expected["new"]  # the same overlap set
    assert report["options"]["preset"] == "authors" and report["options"]["matching"] == "focus"
    got = {"embeddings": model.get_input_embeddings().weight, "decoder": model.get_output_embeddings().weight,
           "bias": model.get_output_embeddings().bias}
    for name, tensor in got.items():
        want = expected["bias" if name == "bias" else "embeddings"]
        assert (tensor.detach() - want).abs().max().item() <= TOLERANCE, name
    assert {key: getattr(model.config, key) for key in AUTHORS_CONFIG_TOKENS} == expected["config_ids"]
    original = AutoModelForMaskedLM.from_pretrained(bpe_sources[source]).state_dict()
    for name, tensor in model.state_dict().items():  # every tensor not indexed by the vocabulary is the source's
        if name in original and original[name].shape == tensor.shape:
            assert torch.equal(tensor, original[name]), name
