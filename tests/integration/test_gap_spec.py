"""The shipped vocabulary-gap spec's pins hold: a spec of part of its study (two tokenizers' census, GPT-2's corpus,
BM25 and integrity on NFCorpus) is run and recorded through regress, and every recorded figure equals the shipped
pin (the whole spec takes minutes: its full run is in docs/vocabulary-gap.md)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from vtrepro.core.shipped import SHIPPED_DIR

pytestmark = pytest.mark.slow

SHIPPED = SHIPPED_DIR / "diagnosis_vocabulary_gap.yaml"


def test_part_of_the_shipped_study_records_the_shipped_pins(tmp_path, data_dir, models_dir):
    spec = tmp_path / "gap_part.yaml"
    spec.write_text("# part of the shipped spec\ndescription: part of the vocabulary-gap study\ngap:\n"
                    "  tokenizers: [gpt2-bpe, splade-tiny]\n  corpus_tokenizers: [gpt2-bpe]\n  datasets: [nfcorpus]\n")
    # in a process of its own: the study's tokenizers and corpora are not kept by the suite's one process
    done = subprocess.run([sys.executable, "-m", "vtrepro", "regress", "--spec", str(spec), "--record", "--runs",
                           str(tmp_path / "runs"), "--data-dir", str(data_dir), "--model-dir", str(models_dir),
                           "--threads", "2"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = yaml.safe_load(spec.read_text())["gap"]["pins"]
    shipped = yaml.safe_load(SHIPPED.read_text())["gap"]["pins"]
    assert set(recorded) == {"census", "corpus", "bm25", "integrity"}
    assert len(recorded["bm25"]) == 4  # raw, markers, case, both
    for part, entries in recorded.items():
        for key, figures in entries.items():
            assert figures == shipped[part][key], (part, key)
    assert spec.read_text().startswith("# part of the shipped spec")  # comments kept
    folder = tmp_path / "runs" / "gap_part"
    census = json.loads((folder / "gap" / "census.json").read_text())["tokenizers"]
    assert [entry["name"] for entry in census] == ["gpt2-bpe", "splade-tiny"]
    assert "Vocabulary gap" in (folder / "report.md").read_text()
    rows = json.loads((folder / "results.json").read_text())["rows"]
    assert {row["status"] for row in rows if row["kind"] == "gap"} <= {"OK", "MEASURED"}
