"""The paper's recipe as a smoke run, the last part of the first-GPU check (:mod:`vtrepro.bench.gpu_check`).

A masked LM of ModernBERT-base's shape (149M parameters, random weights) on GPT-2's cased byte-level BPE
vocabulary goes through the chain of ``regressions/recipes/modernbert_vt.yaml`` with the authors' stage code
(every stage ``preset: authors``): vocabulary transfer onto a BERT-uncased vocabulary, MLM adaptation, APC,
SPLADE training. Its sizes are cut so that the MLM and SPLADE steps together make 200 optimizer steps; the
texts are local (MLM and APC on SciFact, SPLADE on NFCorpus train with in-batch negatives: no teacher scores
or Lucene mining needed). What it measures is the code path on the device: seconds per step of each stage
and the peak memory, not quality. ``--cpu`` runs the same chain at a tiny size.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vtrepro.bench.machine import peak_rss_bytes
from vtrepro.core.checkpoints import save_checkpoint
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file


@dataclass(frozen=True)
class SmokeSize:
    """The source model's shape and each stage's size."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    mlm_steps: int
    splade_steps: int
    batch_size: int
    max_length: int
    apc_documents: int
    dtype: str

    def recipe(self, source: Path, target: Path) -> dict[str, Any]:
        """The recipe of the chain: the authors' presets and choices (modernbert_vt.yaml), at this size."""
        return {
            "description": f"paper-recipe smoke ({self.layers} layers x {self.hidden})",
            "model": str(source),
            "stages": [
                {"transfer": {"preset": "authors", "target_tokenizer": str(target), "reference": str(target),
                              "init": "topology", "similarity": "cosine"}},
                {"mlm": {"preset": "authors", "dataset": "scifact", "steps": self.mlm_steps, "max_length": self.max_length,
                         "mask_rate": 0.3, "batch_size": self.batch_size, "lr": 3.0e-4,
                         "warmup_steps": max(1, self.mlm_steps // 5), "schedule": "cosine", "dtype": self.dtype}},
                {"calibrate": {"preset": "authors", "dataset": "scifact", "docs": self.apc_documents,
                               "max_length": self.max_length, "cut_percent": 60}},
            ],
            "data": {"format": "beir", "dataset": "nfcorpus", "split": "train", "mining": "none", "negatives": 0},
            "loss": {"ranking": "infonce", "in_batch_negatives": True, "lambda_q": 0.02, "lambda_d": 0.01,
                     "flops_warmup_steps": max(1, self.splade_steps // 2)},
            "training": {"steps": self.splade_steps, "batch_size": self.batch_size, "lr": 2.0e-5,
                         "lr_warmup_steps": max(1, self.splade_steps // 10), "schedule": "linear",
                         "weight_decay": 0.01, "max_length_query": 32, "max_length_doc": self.max_length,
                         "dtype": self.dtype, "save_every": self.splade_steps, "seed": 42},
        }


MODERNBERT_BASE = dict(hidden=768, layers=22, heads=12, intermediate=1152)
"""ModernBERT-base's shape (answerdotai/ModernBERT-base: 22 layers of 768, 12 heads, GLU of 1152)."""
GPU_SMOKE = SmokeSize(**MODERNBERT_BASE, mlm_steps=100, splade_steps=100, batch_size=32, max_length=128,
                      apc_documents=512, dtype="bfloat16")
CPU_SMOKE = SmokeSize(hidden=64, layers=2, heads=2, intermediate=96, mlm_steps=3, splade_steps=3, batch_size=4,
                      max_length=64, apc_documents=16, dtype="float32")


def write_source(size: SmokeSize, folder: Path) -> Path:
    """A random-weight ModernBERT masked LM of ``size``'s shape on GPT-2's byte-level BPE vocabulary."""
    import torch
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForMaskedLM

    from vtrepro.vocabulary.gpt2 import write_gpt2_bpe_tokenizer

    bpe = AutoTokenizer.from_pretrained(write_gpt2_bpe_tokenizer(folder.with_name(folder.name + ".tokenizer")))
    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=len(bpe), hidden_size=size.hidden, num_hidden_layers=size.layers,
                              num_attention_heads=size.heads, intermediate_size=size.intermediate,
                              pad_token_id=bpe.pad_token_id, bos_token_id=bpe.bos_token_id,
                              eos_token_id=bpe.eos_token_id, cls_token_id=bpe.cls_token_id,
                              sep_token_id=bpe.sep_token_id)
    save_checkpoint(folder, ModernBertForMaskedLM(config), bpe)
    return folder


def run_smoke(size: SmokeSize, target: Path, work: Path, data_dir: str | None) -> dict[str, Any]:
    """Run the chain in this process under ``work``; return its figures: parameters, seconds per stage and
    per step, peak GPU memory (when on a GPU) and this process's peak resident memory."""
    import torch

    from vtrepro.training.recipe import load_recipe
    from vtrepro.training.train import run_recipe

    source = write_source(size, work / "source")
    parameters = _parameters(source)
    recipe_path = work / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(size.recipe(source, target), sort_keys=False), encoding="utf-8")
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    final = run_recipe(load_recipe(recipe_path), work / "run", data_dir)
    seconds = time.perf_counter() - started
    run = final.parent
    transfer = _report(run, "01-transfer", "transfer_report.json")
    mlm = _report(run, "02-mlm", "mlm_report.json")
    calibration = _report(run, "03-calibrate", "calibration_report.json")
    training = _report(final.parent, final.name, "training_report.json")
    return {
        "parameters": parameters, "seconds": round(seconds, 1), "transfer_seconds": transfer["seconds"],
        "mlm_steps": size.mlm_steps, "mlm_seconds_per_step": mlm["seconds"] / size.mlm_steps,
        "apc_seconds": calibration["seconds"]["total"], "splade_steps": size.splade_steps,
        "splade_seconds_per_step": training["train_seconds"] / size.splade_steps, "device": training["device"],
        "dtype": size.dtype, "batch_size": size.batch_size, "max_length": size.max_length,
        "gpu_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "peak_rss_gib": peak_rss_bytes() / 2**30,
    }


def _parameters(folder: Path) -> int:
    """How many weights a saved checkpoint holds (read from its safetensors header)."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as tensors:
        return sum(math.prod(tensors.get_slice(name).get_shape()) for name in tensors.keys())  # noqa: SIM118 - safe_open is not iterable


def _report(run: Path, stage: str, name: str) -> dict[str, Any]:
    report: dict[str, Any] = read_json_file(run / stage / name, "rerun the paper smoke", JSON_FILE_BYTES["model"],
                                            run / stage, {})
    return report
