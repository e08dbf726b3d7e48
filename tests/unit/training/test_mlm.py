"""MLM adaptation as the authors ran it: grouped blocks, new tokens masked twice as often, cosine decay."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from vtrepro.training.mlm import GROUP_TEXTS, MlmOptions, group_texts, mask_tokens, run_mlm, selection_rates
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
