"""`query_encoder: idf` in a spec: documents by the MLM encoder, queries by the model's IDF table."""
import json
import shutil

import pytest
from transformers import AutoTokenizer

from vtrepro.model.idf import IdfQueryEncoder
from vtrepro.regress.command import main as regress


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_inference_free_condition_runs_end_to_end(tmp_path, splade_tiny, mini_beir):
    model = tmp_path / "model"
    shutil.copytree(splade_tiny, model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    corpus = (mini_beir / "beir" / "mini" / "corpus.jsonl").read_text().splitlines()
    IdfQueryEncoder.from_corpus(tokenizer, [json.loads(line)["text"] for line in corpus]).save(model)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"conditions:\n  free:\n    model: {model}\n    query_encoder: idf\n    datasets:\n      mini:\n")
    regress(["--spec", str(spec), "--data-dir", str(mini_beir), "--runs", str(tmp_path / "runs")])
    query = json.loads((tmp_path / "runs" / "spec" / "free" / "mini" / "queries.jsonl").read_text())
    assert set(query["vector"]) == {"what", "causes", "heart", "attacks"}  # only the query's own tokens
    run = (tmp_path / "runs" / "spec" / "free" / "mini" / "run.trec").read_text().splitlines()
    assert run[0].split()[2] == "d1"
