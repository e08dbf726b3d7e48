"""DDP training across two torchrun agents on this machine (``--nnodes 2 --nproc_per_node 1``, c10d rendezvous
on 127.0.0.1, gloo) follows the one-process run: the same losses and final weights within float32 rounding.

The tolerances are measured, not guessed. This recipe (splade-tiny, 48 NFCorpus train triples, 6 steps of
batch 4, lr 5e-5, one CPU thread per process), at seeds 42, 1 and 2, 1 process against 2 agents
(2026-12-02): largest relative loss difference 3.1e-7, 9.0e-7, 1.9e-6; largest absolute weight difference
2.0e-6, 1.6e-6, 1.4e-6 (the largest weight update is 1.75e-4); ||w_1 - w_2|| / ||w_1 - w_0|| over all
weights 1.4e-4, 1.0e-4, 1.0e-4. The runs are not bit-identical: gloo sums the two halves' gradients, one
process sums the whole batch's, so the last bits differ (and Adam turns the rounding noise of gradients that
are zero in exact arithmetic, such as the attention key biases', into steps of up to lr). The two agents'
run is bit-identical to ``torchrun --standalone --nproc_per_node 2``. The test allows ten times the largest
difference measured: still under one Adam step (about lr = 5e-5 on every weight), so a lost or repeated
step, or a batch split the wrong way, fails it.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from multinode import run_two_agents
from safetensors.torch import load_file

from helpers import REPO_ROOT, nfcorpus_triples
from vtrepro.core.io import read_jsonl
from vtrepro.training.run_folder import LOG_NAME

pytestmark = pytest.mark.slow
REPO = REPO_ROOT
LOSS_RELATIVE_TOLERANCE = 2e-5
WEIGHT_TOLERANCE = 2e-5
UPDATE_RELATIVE_TOLERANCE = 1.5e-3


def losses_of(run: Path) -> list[float]:
    return [record["loss"] for _, record in read_jsonl(run / LOG_NAME)]


def test_two_agents_train_what_one_process_does(tmp_path, splade_tiny, data_dir) -> None:
    recipe = {
        "model": str(splade_tiny),
        "data": {"format": "triples", "path": str(nfcorpus_triples(tmp_path / "triples.tsv", data_dir, 48))},
        "loss": {"ranking": "infonce", "lambda_q": 0.001, "lambda_d": 0.001, "flops_warmup_steps": 4},
        "training": {"steps": 6, "batch_size": 4, "lr": 5.0e-5, "max_length_query": 16, "max_length_doc": 64,
                     "save_every": 100, "dropout": 0.0, "cpu_threads": 1},
    }
    config = tmp_path / "ddp.yaml"
    config.write_text(yaml.safe_dump(recipe, sort_keys=False))
    train = ["-m", "vtrepro", "train", "--recipe", str(config), "--output"]
    subprocess.run([sys.executable, *train, str(tmp_path / "one")], check=True, cwd=REPO, capture_output=True,
                   timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    agents = run_two_agents([*train, str(tmp_path / "two")], REPO, tmp_path / "logs")

    assert agents.group_ranks() == {0, 1}
    assert json.loads((tmp_path / "two" / "final" / "training_report.json").read_text())["processes"] == 2
    single, double = losses_of(tmp_path / "one"), losses_of(tmp_path / "two")
    assert len(single) == len(double) == 6 and len(set(single)) == 6
    assert double == pytest.approx(single, rel=LOSS_RELATIVE_TOLERANCE, abs=0)
    start = load_file(splade_tiny / "model.safetensors")
    one, two = (load_file(tmp_path / run / "final" / "model.safetensors") for run in ("one", "two"))
    assert one.keys() == two.keys() == start.keys()
    assert max((one[name] - two[name]).abs().max().item() for name in one) <= WEIGHT_TOLERANCE
    difference = sum((one[name] - two[name]).pow(2).sum() for name in one).sqrt()
    update = sum((one[name] - start[name]).pow(2).sum() for name in one).sqrt()
    assert update > 0 and difference / update <= UPDATE_RELATIVE_TOLERANCE
