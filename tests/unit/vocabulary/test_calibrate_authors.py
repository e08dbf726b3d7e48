"""``calibrate --preset authors`` is the released probe bit for bit: probe_activation_percentiles.py
(zhichao-aws/opensearch-sparse-model-tuning-sample at 887dd22) as run_vt.sh calls it (``--cut_percent 60
--include_zeros``), its arithmetic written out here on CPU, on real NFCorpus documents with splade-tiny."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForMaskedLM, AutoTokenizer

from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import load_dataset
from vtrepro.vocabulary.calibrate import CALIBRATION_REPORT, CalibrationOptions, calibrate_bias, probe_generator
from vtrepro.vocabulary.command import calibrate_main as main

MAX_LENGTH = 32  # the probe's --max_length: short documents keep both encodings of 640 documents within seconds


def released_probe_cutoff(model_dir: Path, texts: list[str], cut_percent: float) -> float:
    """The probe's cutoff: seed 42 (its set_seed), the DataLoader iterator's int64 base seed drawn from the
    global generator, then per batch of 64 documents (padded to the longest) the full MLM logits
    max-pooled over non-padding positions, all B x V values flattened (--include_zeros), 20,000 of them
    drawn with replacement by torch.randint, kept as float32 up to 1,000,000, and numpy's percentile."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForMaskedLM.from_pretrained(model_dir).eval()
        torch.empty((), dtype=torch.int64).random_()
        kept: list[np.ndarray] = []
        for start in range(0, len(texts), 64):
            batch = tokenizer.pad(tokenizer(texts[start:start + 64], truncation=True, max_length=MAX_LENGTH),
                                  return_tensors="pt")
            with torch.no_grad():
                logits = model(**batch).logits
            pooled = logits.masked_fill((batch["attention_mask"] == 0).unsqueeze(-1), -torch.inf).max(dim=1).values
            values = pooled.reshape(-1)
            index = torch.randint(0, values.numel(), (min(20_000, values.numel()),))
            kept.append(values[index].to(torch.float32).numpy()[:1_000_000 - sum(map(len, kept))])
    return float(np.percentile(np.concatenate(kept), cut_percent))


@pytest.fixture(scope="module")
def nfcorpus(data_dir: Path) -> list[str]:
    return [document.text for document in load_dataset("nfcorpus", data_dir).corpus()[:640]]


@pytest.mark.slow  # about 10 s a setting: the probe's arithmetic and vtrepro's encoding of the same documents
@pytest.mark.parametrize(("docs", "cut"), [(640, 60.0), (200, 80.0)])
def test_authors_preset_is_the_released_probe(docs: int, cut: float, splade_tiny: Path, data_dir: Path,
                                             nfcorpus: list[str], tmp_path: Path) -> None:
    out = tmp_path / "apc"
    assert main(["--preset", "authors", "--model", str(splade_tiny), "--dataset", "nfcorpus", "--data-dir",
                 str(data_dir), "--limit", str(docs), "--cut-percent", f"{cut:g}", "--max-length-doc", str(MAX_LENGTH),
                 "--output", str(out)]) == 0
    cutoff = released_probe_cutoff(splade_tiny, nfcorpus[:docs], cut)
    report = json.loads((out / CALIBRATION_REPORT).read_text())
    assert report["delta"] == -cutoff
    shifted = AutoModelForMaskedLM.from_pretrained(out).get_output_embeddings().bias
    original = AutoModelForMaskedLM.from_pretrained(splade_tiny).get_output_embeddings().bias
    with torch.no_grad():
        original -= cutoff  # the probe's in-place float32 subtraction
    assert torch.equal(shifted, original)


def test_the_draws_continue_torchs_stream_after_the_probe_starts_its_dataloader() -> None:
    """The probe's first torch.randint comes after its DataLoader iterator drew the workers' base seed (one
    int64: two 32-bit words of the generator's stream); the written-out probe above assumes it, a real
    DataLoader shows it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(42)
        for _ in DataLoader(range(128), batch_size=64):
            break
        expected = torch.randint(0, 64 * 30_522, (20_000,))
    drawn = torch.randint(0, 64 * 30_522, (20_000,), generator=probe_generator(torch.device("cpu"), 42))
    assert torch.equal(drawn, expected)
    unshifted = torch.randint(0, 64 * 30_522, (20_000,), generator=torch.Generator().manual_seed(42))
    assert not torch.equal(unshifted, expected)
    # Shifted by two words, the draws of two equal-sized groups share all but a few values: the sampled
    # percentile of the unshifted stream is often the same, and differs when those values straddle it.
    assert torch.equal(unshifted[2:], expected[:-2])


def test_authors_preset_needs_one_forward_pass_per_probe_batch(tiny_encoder) -> None:
    assert tiny_encoder.options.batch_size < 64  # its batches would pad 64 documents otherwise than the probe
    with pytest.raises(VtreproError, match="encodes 64 documents per forward pass"):
        calibrate_bias(tiny_encoder, ["heart rate", "protein folding"],
                       CalibrationOptions(preset="authors", dataset="nfcorpus"))
