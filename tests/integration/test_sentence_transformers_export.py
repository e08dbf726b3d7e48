"""export model: sentence-transformers' own SparseEncoder loads the exported folder as it is and gives vtrepro's
quantized vectors exactly (documents and queries; an inference-free model's IDF queries), through the very code
the model card prints."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from vtrepro.encode.vectors import Quantization, escaped_vocabulary, to_impact_vector
from vtrepro.model.command import export_model_main
from vtrepro.model.idf import IdfQueryEncoder
from vtrepro.regress.command import build_export_parser as export_parser

pytestmark = pytest.mark.slow

DOCUMENTS = 16
QUERIES = 40


def export(argv: list[str]) -> int:
    return export_model_main(export_parser().parse_args(["model", *argv]))


def card_code(folder: Path) -> dict:
    """Run the Python block of the folder's model card; its names (model, impact_vectors)."""
    card = (folder / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)\n```", card, re.S).group(1)
    names: dict = {}
    exec(compile(code, str(folder / "README.md"), "exec"), names)  # noqa: S102 - the card vtrepro just wrote
    return names


def vtrepro_vectors(encoder, texts: list[str], kind: str) -> list[dict[str, int]]:
    terms = escaped_vocabulary(encoder.vocabulary)
    return [to_impact_vector(ids, weights, terms, Quantization()) for ids, weights in encoder.encode(texts, kind)]


def test_sentence_transformers_gives_vtrepros_vectors(tmp_path, splade_tiny, tiny_encoder, scifact_sample, data_dir):
    from vtrepro.data.beir import load_dataset

    out = tmp_path / "splade-tiny-st"
    assert export(["--model", str(splade_tiny), "--output", str(out), "--max-length-doc", "256"]) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "1_SpladePooling", "README.md", "config.json", "config_sentence_transformers.json", "model.safetensors",
        "modules.json", "sentence_bert_config.json", "tokenizer.json", "tokenizer_config.json", "vtrepro_export.json"]
    assert not list(out.rglob("*.bin"))
    names = card_code(out)
    assert type(names["model"]).__name__ == "SparseEncoder" and names["model"].max_seq_length == 256
    documents = [document.contents for document in scifact_sample[:DOCUMENTS]]
    queries = list(load_dataset("scifact", data_dir).queries().values())[:QUERIES]
    assert names["impact_vectors"](documents) == vtrepro_vectors(tiny_encoder, documents, "doc")
    assert names["impact_vectors"](queries, "query") == vtrepro_vectors(tiny_encoder, queries, "query")


def test_inference_free_queries_are_vtrepros_idf(tmp_path, splade_tiny, tiny_encoder, scifact_sample, data_dir):
    from vtrepro.data.beir import load_dataset

    corpus = [document.contents for document in scifact_sample]
    idf = IdfQueryEncoder.from_corpus(tiny_encoder.tokenizer, corpus, max_length_query=16)
    table = tmp_path / "idf.json"
    idf.save(tmp_path)
    out = tmp_path / "inference-free"
    assert export(["--model", str(splade_tiny), "--output", str(out), "--idf", str(table),
                   "--max-length-doc", "256", "--max-length-query", "16"]) == 0
    assert json.loads((out / "modules.json").read_text())[0]["type"].endswith("Router")
    assert json.loads((out / "idf.json").read_text()) == json.loads(table.read_text())
    names = card_code(out)
    queries = list(load_dataset("scifact", data_dir).queries().values())[:QUERIES]
    assert names["impact_vectors"](queries, "query") == vtrepro_vectors(idf, queries, "query")
    documents = [document.contents for document in scifact_sample[:4]]
    assert names["impact_vectors"](documents) == vtrepro_vectors(tiny_encoder, documents, "doc")
    weights = names["model"].encode_query(queries[:3], convert_to_tensor=True).to_dense().numpy()
    for row, (ids, values) in zip(weights, idf.encode(queries[:3])):
        assert np.array_equal(np.flatnonzero(row), ids) and np.array_equal(row[ids], values)


def test_card_escapes_names_and_takes_the_spec(tmp_path, splade_tiny):
    out = tmp_path / "evil_[x](javascript:alert)<b>#"
    assert export(["--model", str(splade_tiny), "--output", str(out), "--spec", "beir_splade_tiny",
                   "--condition", "splade-tiny"]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", card, flags=re.S)  # names in code blocks are literals (JSON, shell-quoted)
    assert "# evil\\_\\[x\\]\\(javascript:alert\\)&lt;b&gt;\\#" in prose and "<b>" not in prose
    assert "| scifact | test | ndcg@10 | 0.6473 | - |" in card
    config = json.loads((out / "sentence_bert_config.json").read_text())
    assert (config["document_length"], config["query_length"]) == (512, 64)
