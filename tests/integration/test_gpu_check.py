"""scripts/gpu_check.sh --cpu: every part of the first-GPU check at a tiny size on the CPU, with real models and
data (splade-tiny, SciFact, NFCorpus, GPT-2's BPE files), its figures in docs/scale.md's table format."""
import os
import subprocess

import pytest
import torch

from helpers import REPO_ROOT
from vtrepro.bench.gpu_check import PARTS

pytestmark = pytest.mark.slow
REPO = REPO_ROOT


def test_the_gpu_check_runs_every_part_on_the_cpu(tmp_path, data_dir, models_dir) -> None:
    output = tmp_path / "check" / "figures.md"
    completed = subprocess.run([str(REPO / "scripts" / "gpu_check.sh"), "--cpu", "--output", str(output),
                                "--data-dir", str(data_dir), "--model-dir", str(models_dir)],
                               capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    figures = output.read_text()
    assert figures in completed.stdout and "FAILED" not in figures
    rows = [line for line in figures.splitlines() if line.startswith("| ") and not line.startswith("| figure")]
    assert all(line.count(" | ") == 2 for line in rows)  # figure | value | source, as docs/scale.md's tables
    assert {f"| check part: {name} |" for name, _ in PARTS} <= {line[:line.index(" |", 2) + 2] for line in rows}
    assert "| encode rate, float32 body, sentence-transformers SparseEncoder | " in figures
    assert "quantized identical 16/16" in figures  # float32 vtrepro = sentence-transformers on the CPU
    assert "cpu bfloat16 body against CPU float32: active terms shared (Jaccard) | mean 9" in figures
    assert "fingerprint equal" in figures and "all_reduce 1 (expected 1), barrier passed" in figures
    for stage in ("MLM, 3 steps", "SPLADE, 3 steps"):
        assert f"paper smoke: {stage} | " in figures and " s/step | " in figures
    assert "process peak RSS" in figures
    assert (output.parent / "figures.work" / ".gpu-check").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the check would run in full")
def test_without_cuda_the_gpu_check_says_how_to_run_it_on_the_cpu(tmp_path) -> None:
    completed = subprocess.run([str(REPO / "scripts" / "gpu_check.sh"), "--output", str(tmp_path / "f.md")],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and "no CUDA device" in completed.stderr and "--cpu" in completed.stderr
