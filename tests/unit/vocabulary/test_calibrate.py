"""APC bias calibration on the real splade-tiny model and SciFact documents."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from vtrepro.data.beir import load_dataset
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.splade import SpladeEncoder
from vtrepro.vocabulary.calibrate import (
    CALIBRATION_REPORT,
    CalibrationOptions,
    activity,
    calibrate_bias,
    pooled_logits,
    threshold_for_cut,
    threshold_for_terms,
)
from vtrepro.vocabulary.command import calibrate_main as main

DOCS = 500
MAX_LENGTH = 128


@pytest.fixture(scope="module")
def texts(data_dir: Path) -> list[str]:
    return [document.contents for document in load_dataset("scifact", data_dir).corpus()[:DOCS]]


@pytest.fixture(scope="module")
def encoder(splade_tiny: Path) -> SpladeEncoder:
    return SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=MAX_LENGTH, batch_size=64))


def test_thresholds_and_activity_on_known_logits() -> None:
    logits = torch.tensor([[3.0, 1.0, -1.0, -2.0], [2.0, 0.5, -0.5, -3.0]], dtype=torch.float16)
    assert threshold_for_cut(logits, 50) == -0.5  # 4 of 8 entries at or below it
    assert threshold_for_cut(logits, 75) == 1.0
    assert threshold_for_terms(logits, 1) == 1.0  # 2 and 3 stay above: one term per document
    assert threshold_for_terms(logits, 3) == -2.0
    stats = activity(logits, 0.0)
    assert stats == {"active_mean": 2.0, "active_p50": 2.0, "active_p90": 2.0, "positive_share": 0.5,
                     "dead_share": 0.5, "flops": 2.0}
    assert activity(logits, 0.0, query_logits=logits[:1] - 2)["flops"] == 1.0  # only term 0 in queries


@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_apc_brings_shifted_biases_back(encoder: SpladeEncoder, texts: list[str]) -> None:
    original = activity(pooled_logits(encoder, texts), 0.0)
    cut = 100 * (1 - original["positive_share"])
    bias = encoder.model.get_output_embeddings().bias
    saved = bias.detach().clone()
    rows = []
    try:
        for shift in (2.0, -2.0):
            with torch.no_grad():
                bias.copy_(saved + shift)
            delta, report = calibrate_bias(encoder, texts, CalibrationOptions(dataset="scifact", cut_percent=cut))
            before, after = report["before"]["active_mean"], report["after"]["active_mean"]
            rows.append(f"{shift:+.0f}: {before} -> {after} (delta {delta:+.3f}, "
                        f"dead {report['before']['dead_share']:.3f} -> {report['after']['dead_share']:.3f})")
            assert (before > original["active_mean"]) == (shift > 0)
            assert abs(after / original["active_mean"] - 1) < 0.2
            assert delta == pytest.approx(-shift, abs=0.05)
    finally:
        with torch.no_grad():
            bias.copy_(saved)
    print(f"\nAPC on {DOCS} SciFact docs, original {original['active_mean']} active terms/doc, "
          f"cut {cut:.2f}%:\n  " + "\n  ".join(rows))


def test_command_line_saves_the_shifted_checkpoint(
    splade_tiny: Path, texts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "title": "", "text": text}) + "\n"
                              for i, text in enumerate(texts[:40])))
    out = tmp_path / "calibrated"
    args = ["--model", str(splade_tiny), "--corpus", str(corpus), "--limit", "30", "--max-length-doc", "64"]
    assert main([*args, "--target-terms", "40", "--output", str(out)]) == 0
    assert re.search(r"^encode documents: 30 doc in [\d.]+ s \([\d.]+ doc/s\)$", capsys.readouterr().err, re.MULTILINE)
    report = json.loads((out / CALIBRATION_REPORT).read_text())
    assert report["documents"] == report["sample_documents"] == 30
    assert report["after"]["active_mean"] == pytest.approx(40, abs=1)
    calibrated = AutoModelForMaskedLM.from_pretrained(out).get_output_embeddings().bias
    original = AutoModelForMaskedLM.from_pretrained(splade_tiny).get_output_embeddings().bias
    torch.testing.assert_close(calibrated, original + report["delta"])
    assert len(AutoTokenizer.from_pretrained(out)) == 30522

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--cut-percent", "120", "--output", str(tmp_path / "bad")])
    assert exited.value.code == 2
    assert "argument --cut-percent: expected a number in (0, 100)" in capsys.readouterr().err
    assert main([*args, "--output", str(out)]) == 2  # not empty
    with pytest.raises(SystemExit):
        main([*args, "--cut-percent", "60", "--target-terms", "40", "--output", str(tmp_path / "both")])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["calibrated", "corpus.jsonl"]


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_authors_preset_cuts_at_the_sampled_percentile_of_every_logit(splade_tiny: Path, data_dir: Path,
                                                                      tmp_path: Path) -> None:
    """The released probe: document text without title, all vocabulary ids (specials included), zeros and
    negatives included, 20,000 values drawn per 64 documents; its percentile estimates the exact one."""
    code = main(["--preset", "authors", "--model", str(splade_tiny), "--dataset", "scifact", "--data-dir",
                 str(data_dir), "--limit", "128", "--cut-percent", "60", "--max-length-doc", str(MAX_LENGTH),
                 "--output", str(tmp_path / "apc")])
    assert code == 0
    report = json.loads((tmp_path / "apc" / CALIBRATION_REPORT).read_text())
    assert report["sampling"] == {"preset": "authors", "group_docs": 64, "per_group": 20_000,
                                  "max_samples": 1_000_000, "seed": 42, "documents_read": 128}
    texts = [document.text for document in load_dataset("scifact", data_dir).corpus()[:128]]
    every_logit = SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=MAX_LENGTH)).max_logits(texts).flatten().double()
    exact = torch.quantile(every_logit, 0.6).item()
    # 40,000 draws: the 60th percentile's sampling error is about 0.02 logits here (0.018 measured at 80,000)
    assert abs(-report["delta"] - exact) < 0.06
    shifted = AutoModelForMaskedLM.from_pretrained(tmp_path / "apc").get_output_embeddings().bias
    original = AutoModelForMaskedLM.from_pretrained(splade_tiny).get_output_embeddings().bias
    assert torch.allclose(shifted - original, torch.full_like(original, report["delta"]), atol=1e-5)
