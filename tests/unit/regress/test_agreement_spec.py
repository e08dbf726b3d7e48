"""A half-precision condition as its own tier: encoded with its own settings, its vectors measured against
the float32 condition's (``agrees_with``); a screened projection gives the float32 vectors exactly."""
import json

import pytest

from vtrepro.regress.agreement import AGREEMENT_FIGURES, vector_agreement
from vtrepro.regress.command import main as regress
from vtrepro.regress.spec import EncodedVectors

SPEC = """\
conditions:
  tiny:
    model: {model}
    encoder: {{projection: dense}}
    datasets:
      mini:
  tiny-bfloat16:
    model: {model}
    encoder: {{dtype: bfloat16, projection: dense}}
    agrees_with: tiny
    datasets:
      mini:
  tiny-screened:
    model: {model}
    encoder: {{projection: screened}}
    agrees_with: tiny
    datasets:
      mini:
"""


@pytest.fixture
def agreement_run(tmp_path, splade_tiny, mini_beir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(model=splade_tiny))
    regress(["--spec", str(spec), "--data-dir", str(mini_beir), "--runs", str(tmp_path / "runs")])
    return tmp_path / "runs" / "spec"


@pytest.mark.slow
def test_each_condition_encodes_with_its_own_settings_and_is_measured_against_float32(agreement_run):
    rows = json.loads((agreement_run / "results.json").read_text())["rows"]
    agreement = {(row["condition"], row["metric"]): row for row in rows if row["kind"] == "agreement"}
    assert {condition for condition, _ in agreement} == {"tiny-bfloat16", "tiny-screened"}
    assert {metric for _, metric in agreement} == set(AGREEMENT_FIGURES)
    assert all(row["status"] == "MEASURED" and row["note"] == "against tiny's vectors" for row in agreement.values())
    settings = {condition: json.loads((agreement_run / condition / "mini" / "manifest.json").read_text())["settings"]
                for condition in ("tiny", "tiny-bfloat16", "tiny-screened")}
    assert [settings[name]["dtype"] for name in settings] == ["float32", "bfloat16", "float32"]
    assert [settings[name]["projection"] for name in settings] == ["dense", "dense", "screened"]
    # The screened projection computes every column that can activate exactly: the same vectors.
    assert agreement["tiny-screened", "agreement_documents_identical"]["observed"] == 1.0
    assert agreement["tiny-screened", "agreement_max_impact_delta"]["observed"] == 0
    # bfloat16 moves impacts but keeps most terms.
    assert agreement["tiny-bfloat16", "agreement_impacts_differing"]["observed"] > 0
    assert 0.8 < agreement["tiny-bfloat16", "agreement_terms_shared_mean"]["observed"] <= 1


def test_agreement_counts_records_terms_and_impacts(tmp_path):
    """Against a hand count: one identical record, one with a changed and a lost term, one only on one side."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder, documents, query in ((ours, {"a": {"x": 5}, "b": {"x": 3, "y": 2}, "c": {"z": 1}}, {"x": 1}),
                                     (theirs, {"a": {"x": 5}, "b": {"x": 4}}, {"x": 1})):
        (folder / "vectors").mkdir(parents=True)
        (folder / "vectors" / "part-00000.jsonl").write_text(
            "".join(json.dumps({"id": key, "vector": vector}) + "\n" for key, vector in documents.items()))
        (folder / "queries.jsonl").write_text(json.dumps({"id": "q", "vector": query}) + "\n")
    figures = vector_agreement(EncodedVectors(ours / "vectors", ours / "queries.jsonl"),
                               EncodedVectors(theirs / "vectors", theirs / "queries.jsonl"))
    assert figures == {
        "agreement_documents_identical": 1 / 3,
        "agreement_terms_shared_mean": pytest.approx((1 + 1 / 2 + 0) / 3),
        "agreement_terms_shared_min": 0.0,
        "agreement_impacts_differing": 3 / 4,  # b: x 3->4, y 2->0; c: z 1->0 (of 1 + 2 + 1 terms)
        "agreement_max_impact_delta": 2,
        "agreement_queries_identical": 1.0,
    }
