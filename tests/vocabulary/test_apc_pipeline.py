"""APC through the whole pipeline: a +-2 decoder-bias shift, calibrated, retrieves like the original.

The three SciFact encodings use the default projection, the fastest exact one on this CPU (screened where
int8 products are fast, 2.7-3.8x dense's rate; dense where they are not): what is tested is the calibration,
not the projection."""
import json

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from vtrepro.data.beir import load_dataset
from vtrepro.model.options import EncoderOptions
from vtrepro.model.splade import SpladeEncoder
from vtrepro.regress.runner import main as regress
from vtrepro.vocabulary.calibrate import activity, pooled_logits

pytestmark = pytest.mark.slow

MAX_LENGTH = 256
CALIBRATION_DOCS = 500


def shifted_copy(source, shift: float, folder):
    model = AutoModelForMaskedLM.from_pretrained(source)
    with torch.no_grad():
        model.get_output_embeddings().bias += shift
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def test_calibrated_shifted_models_match_the_original(tmp_path, splade_tiny, data_dir):
    texts = [document.contents for document in load_dataset("scifact", data_dir).corpus()[:CALIBRATION_DOCS]]
    original = activity(pooled_logits(SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=MAX_LENGTH)), texts), 0.0)
    cut = round(100 * (1 - original["positive_share"]), 4)
    conditions = {"original": f"    model: {splade_tiny}\n"}
    for name, shift in (("dense", 2.0), ("dead", -2.0)):
        folder = shifted_copy(splade_tiny, shift, tmp_path / name)
        conditions[name] = (
            f"    model: {folder}\n"
            f"    calibrate: {{dataset: scifact, docs: {CALIBRATION_DOCS}, cut_percent: {cut}, max_length: {MAX_LENGTH}}}\n"
        )
    spec = tmp_path / "apc.yaml"
    spec.write_text("defaults: {metrics: [ndcg@10]}\nconditions:\n" + "".join(
        f"  {name}:\n{block}    encoder: {{max_length_doc: {MAX_LENGTH}}}\n"
        "    datasets:\n      scifact:\n"
        for name, block in conditions.items()
    ))
    regress(["--spec", str(spec), "--data-dir", str(data_dir), "--output", str(tmp_path / "runs")])
    rows = json.loads((tmp_path / "runs" / "apc" / "results.json").read_text())["rows"]
    ndcg = {row["condition"]: row["observed"] for row in rows if row["metric"] == "ndcg@10"}
    for name in ("dense", "dead"):
        report = json.loads((tmp_path / "runs" / "apc" / name / "01-calibrate" / "calibration_report.json").read_text())
        assert abs(report["after"]["active_mean"] - original["active_mean"]) <= 0.2 * original["active_mean"]
        assert abs(ndcg[name] - ndcg["original"]) <= 0.01, ndcg
    print("APC nDCG@10 on scifact:", ndcg, "active terms (original):", original["active_mean"])
