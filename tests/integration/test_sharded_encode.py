"""Sharded encoding with torchrun (2 CPU processes, gloo): the same vectors, fingerprint and index as one
process, and a rank killed mid-way resumes without duplicates. Real model (splade-tiny), real SciFact text."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from vtrepro.core.launch import Job, Shared, command_line
from vtrepro.encode.fingerprint import fingerprint_folder
from vtrepro.index.lucene import build_impact_index
from vtrepro.model.encoder_options import EncoderOptions

pytestmark = pytest.mark.slow
DOCUMENTS, SHARD = 240, 40  # 6 shards of whole sort windows: each process encodes its own windows


def _encode_command(corpus: Path, output: Path, models_dir: Path, processes: int) -> list[str]:
    """The command line regress launches (:func:`vtrepro.core.launch.command_line`): one process, or torchrun."""
    options = EncoderOptions(max_length_doc=128, batch_size=8, sort_window=SHARD)
    job = Job("encode", ("--model", "splade-tiny", "--corpus", str(corpus), "--output", str(output),
                         "--shard-size", str(SHARD)), (options,))
    return command_line(job, Shared(model_dir=models_dir), "torchrun" if processes > 1 else "subprocess", processes)


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _rank_processes(parent: int) -> dict[int, int]:
    """RANK -> pid of the workers torchrun started (read from /proc)."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != parent:
            continue
        for variable in environ:
            if variable.startswith(b"RANK="):
                ranks[int(variable[5:])] = int(entry.name)
    return ranks


def test_two_processes_encode_what_one_does_and_a_killed_rank_resumes(tmp_path, data_dir, models_dir):
    from vtrepro.data.beir import load_dataset

    documents = load_dataset("scifact", data_dir).corpus()[:DOCUMENTS]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": document.doc_id, "text": document.contents}) + "\n"
                              for document in documents))
    single, sharded = tmp_path / "one", tmp_path / "two"
    subprocess.run(_encode_command(corpus, single, models_dir, 1), check=True, env=_environment(), capture_output=True)
    subprocess.run(_encode_command(corpus, sharded, models_dir, 2), check=True, env=_environment(), capture_output=True)
    one, two = (json.loads((folder / "manifest.json").read_text()) for folder in (single, sharded))
    assert one["fingerprint"] == two["fingerprint"] and one["shards"] == two["shards"] and two["complete"]
    assert not (sharded / ".shards").exists()
    timings = json.loads((sharded / "timings.json").read_text())
    assert timings["device"] == "cpu" and len(timings["seconds"]) == DOCUMENTS // SHARD
    assert build_impact_index(single / "vectors", tmp_path / "i1") == build_impact_index(sharded / "vectors", tmp_path / "i2")

    killed = tmp_path / "killed"
    job = subprocess.Popen(_encode_command(corpus, killed, models_dir, 2), env=_environment(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list((killed / ".shards").glob("part-00001.jsonl.json")) and time.monotonic() < deadline:
        time.sleep(0.2)  # rank 1 finished its first shard
    ranks = _rank_processes(job.pid)
    os.kill(ranks[1], signal.SIGKILL)
    assert job.wait(timeout=300) != 0
    assert not (killed / "manifest.json").exists() or not json.loads((killed / "manifest.json").read_text())["complete"]
    subprocess.run(_encode_command(corpus, killed, models_dir, 2), check=True, env=_environment(), capture_output=True)
    resumed = json.loads((killed / "manifest.json").read_text())
    assert resumed["fingerprint"] == one["fingerprint"] and resumed["shards"] == one["shards"]
    assert fingerprint_folder(killed / "vectors").count == DOCUMENTS  # no duplicate ids (they would be refused)
