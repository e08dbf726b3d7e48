"""Multi-node encoding proven on one machine: two torchrun agents (``--nnodes 2 --nproc_per_node 1``, c10d
rendezvous on 127.0.0.1), one rank each, encode exactly the vectors of one process. Real model (splade-tiny),
real SciFact text, gloo on CPU."""
import json

import pytest
from multinode import run_two_agents

from helpers import REPO_ROOT
from vtrepro.encode.command import encode_main as encode
from vtrepro.encode.fingerprint import fingerprint_folder

pytestmark = pytest.mark.slow
DOCUMENTS, SHARD = 160, 40  # 4 shards of whole sort windows: node 0 encodes 0 and 2, node 1 encodes 1 and 3
REPO = REPO_ROOT


def test_two_agents_encode_the_one_process_vectors(tmp_path, data_dir, models_dir) -> None:
    from vtrepro.data.beir import load_dataset

    documents = load_dataset("scifact", data_dir).corpus()[:DOCUMENTS]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": document.doc_id, "text": document.contents}) + "\n"
                              for document in documents))
    options = ["--model", "splade-tiny", "--model-dir", str(models_dir), "--corpus", str(corpus),
               "--shard-size", str(SHARD), "--sort-window", str(SHARD), "--batch-size", "8", "--max-length-doc", "96"]
    single, nodes = tmp_path / "one", tmp_path / "two-nodes"
    assert encode([*options, "--output", str(single)]) == 0  # one process: this one
    agents = run_two_agents(["-m", "vtrepro", "encode", *options, "--output", str(nodes)], REPO, tmp_path / "logs")

    assert agents.group_ranks() == {0, 1}  # two nodes joined the job, one worker each
    one, two = (json.loads((folder / "manifest.json").read_text()) for folder in (single, nodes))
    assert two["complete"] and one["fingerprint"] == two["fingerprint"] and one["shards"] == two["shards"]
    assert fingerprint_folder(nodes / "vectors") == fingerprint_folder(single / "vectors")
    for shard in one["shards"]:  # byte for byte, shard by shard
        assert (nodes / shard["file"]).read_bytes() == (single / shard["file"]).read_bytes()
    assert not (nodes / ".shards").exists()
