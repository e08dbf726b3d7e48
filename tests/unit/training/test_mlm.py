"""MLM adaptation as the authors ran it: grouped blocks, new tokens masked twice as often, cosine decay."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from vtrepro.core.cli import options_from_args
from vtrepro.training.command import build_mlm_parser as build_parser
from vtrepro.training.mlm import (
    GROUP_TEXTS,
    MlmOptions,
    embedding_parameters,
    group_texts,
    mask_tokens,
    run_mlm,
    selection_rates,
    train_mlm,
)
from vtrepro.training.schedule import lr_factor
from vtrepro.vocabulary.transfer import TransferOptions, run_transfer


def test_new_tokens_are_selected_twice_as_often_at_the_same_overall_rate() -> None:
    input_ids = torch.tensor([[101, 5, 6, 7, 8, 9, 10, 102]])
    special = torch.tensor([[True, False, False, False, False, False, False, True]])
    rates = selection_rates(input_ids, special, 0.3, torch.tensor([7, 8]), 2.0)
    assert rates[0, 0] == 0 and rates[0, -1] == 0
    assert torch.isclose(rates[0, 3], 2 * rates[0, 1]) and torch.isclose(rates[special.logical_not()].mean(), torch.tensor(0.3))
    uniform = selection_rates(input_ids, special, 0.3)
    assert torch.equal(uniform[~special], torch.full((6,), 0.3))
    generator = torch.Generator().manual_seed(0)
    many = input_ids.repeat(20_000, 1)
    masked, labels = mask_tokens(many, special.repeat(20_000, 1), rates.repeat(20_000, 1), 103, 200, generator)
    chosen = (labels != -100).float()
    assert abs(chosen[:, 3].mean().item() / chosen[:, 1].mean().item() - 2.0) < 0.05
    assert abs(chosen[:, 1:-1].mean().item() - 0.3) < 0.005


def test_texts_are_concatenated_with_their_special_tokens_and_cut_into_blocks(splade_tiny: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(splade_tiny)
    texts = ["heart attack risk", "protein folding in yeast cells", "heart rate"] * 5
    ids = [index for row in tokenizer(texts)["input_ids"] for index in row]
    blocks = group_texts(tokenizer, texts, 8)
    assert blocks.shape == (len(ids) // 8, 8) and blocks.flatten().tolist() == ids[:len(ids) // 8 * 8]
    assert GROUP_TEXTS == 1000


def test_cosine_schedule_after_the_warm_up() -> None:
    factor = lr_factor("cosine", 4, 12)
    assert [factor(step) for step in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert factor(8) == 0.5 and abs(factor(11) - 0.5 * (1 + math.cos(7 / 8 * math.pi))) < 1e-12


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_authors_preset_reads_the_new_tokens_of_a_transfer(splade_tiny: Path, data_dir: Path, tmp_path: Path) -> None:
    transferred = tmp_path / "vt"
    report = run_transfer(splade_tiny, transferred, TransferOptions(str(splade_tiny), str(splade_tiny), "topology",
                                                                    leaveout={"fraction": 0.1, "seed": 0}))
    assert report["new_ids"]
    options = MlmOptions(preset="authors", schedule="cosine", dataset="scifact", steps=3, max_length=64, batch_size=4,
                         mask_rate=0.3, warmup_steps=1)
    mlm = run_mlm(transferred, tmp_path / "mlm", options, data_dir=data_dir, max_texts=60)
    assert (mlm["preset"], mlm["rows"], mlm["new_token_weight"], mlm["schedule"]) == (
        "authors", "blocks of concatenated texts", 2.0, "cosine")
    assert json.loads((tmp_path / "mlm" / "mlm_report.json").read_text())["steps"] == 3


TEXTS = ["heart attack risk in older adults", "protein folding in yeast cells", "the heart rate of mice",
         "vitamin d and bone density"] * 2


def _trained_names(encoder, options: MlmOptions) -> tuple[set[str], list[str]]:
    """Every named parameter of a copy of the shared splade-tiny (tied ones under each name) that ``options``'
    MLM steps changed, and the names of the parameters :func:`embedding_parameters` gives."""
    model = copy.deepcopy(encoder.model)
    embedding_ids = {id(parameter) for parameter in embedding_parameters(model)}
    named = dict(model.named_parameters(remove_duplicate=False))
    before = {name: parameter.detach().clone() for name, parameter in named.items()}
    train_mlm(model, encoder.tokenizer, TEXTS, options, show_progress=False)
    changed = {name for name, parameter in named.items() if not torch.equal(parameter.detach(), before[name])}
    return changed, sorted(name for name, parameter in named.items() if id(parameter) in embedding_ids)


def test_train_only_embeddings_changes_the_embeddings_and_nothing_else(tiny_encoder) -> None:
    # The authors' run_mlm.py (mdbert 65b2e82, lines 526-549) freezes every parameter, then unfreezes
    # get_input_embeddings().parameters() and get_output_embeddings().parameters(): for BERT the word
    # embeddings, the decoder's weight (tied to them) and the decoder's bias (cls.predictions.bias).
    options = MlmOptions(dataset="d", steps=2, batch_size=4, max_length=16, lr=1e-3, mask_rate=0.3,
                         train_only_embeddings=True)
    changed, embeddings = _trained_names(tiny_encoder, options)
    assert embeddings == ["bert.embeddings.word_embeddings.weight", "cls.predictions.bias",
                          "cls.predictions.decoder.bias", "cls.predictions.decoder.weight"]
    assert changed == set(embeddings)
    everything, _ = _trained_names(tiny_encoder, options.replace(train_only_embeddings=False, steps=1))
    assert "bert.encoder.layer.0.attention.self.query.weight" in everything and len(everything) > len(changed)


def test_train_only_embeddings_is_a_flag_of_the_mlm_command() -> None:
    args = build_parser().parse_args(["--model", "m", "--dataset", "d", "--output", "o", "--train-only-embeddings"])
    assert options_from_args(MlmOptions, args).train_only_embeddings is True
    assert MlmOptions(dataset="d", train_only_embeddings=True).to_argv(["train_only_embeddings"]) == [
        "--train-only-embeddings"]
