"""`query_encoder: idf` in a spec: documents by the MLM encoder, queries by the model's IDF table."""
import json
import shutil

from transformers import AutoTokenizer

from vtrepro.idf import IdfQueryEncoder
from vtrepro.regress import main as regress

DOCS = {"d1": "heart attack causes and risk factors", "d2": "protein folding in yeast cells", "d3": "heart rate"}


def test_inference_free_condition_runs_end_to_end(tmp_path, splade_tiny):
    model = tmp_path / "model"
    shutil.copytree(splade_tiny, model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    IdfQueryEncoder.from_corpus(tokenizer, DOCS.values()).save(model)
    folder = tmp_path / "beir" / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in DOCS.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what causes heart attacks"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"conditions:\n  free:\n    model: {model}\n    query_encoder: idf\n    datasets:\n      mini:\n")
    regress(["--spec", str(spec), "--data-dir", str(tmp_path), "--output", str(tmp_path / "runs")])
    query = json.loads((tmp_path / "runs" / "spec" / "free" / "mini" / "queries.jsonl").read_text())
    assert set(query["vector"]) == {"what", "causes", "heart", "attacks"}  # only the query's own tokens
    run = (tmp_path / "runs" / "spec" / "free" / "mini" / "run.trec").read_text().splitlines()
    assert run[0].split()[2] == "d1"
