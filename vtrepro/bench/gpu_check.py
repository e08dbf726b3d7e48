"""The first run on a GPU (``scripts/gpu_check.sh``, ``python -m vtrepro.bench.gpu_check``): within 10 minutes on
one GPU, the figures docs/scale.md waits for, as rows of its tables.

1. **Encode throughput**: ``bench encode`` on the GPU, float32 then bfloat16 body: vtrepro's dense and screened
   encoders against sentence-transformers' ``SparseEncoder`` on the same GPU and documents.
2. **bfloat16 agreement**: the GPU's bfloat16 vectors (and its float32 ones) against CPU float32 vectors of the
   same documents: the share of active terms both keep (Jaccard) and the impact differences at scale 100,
   the figures that revise the bfloat16 tolerance (docs/regression-specs.md, Half precision).
3. **torchrun encode**: ``torchrun --standalone --nproc-per-node P -m vtrepro encode`` (P: the GPUs, at most 2;
   1 with ``--cpu``) against one process: the same fingerprint. One GPU gives a one-process job, which forms
   no process group (nccl refuses two ranks on one GPU), so a collective over nccl on every GPU
   (:mod:`vtrepro.bench.collective`) is checked on its own.
4. **Paper-recipe smoke** (:mod:`vtrepro.bench.paper_smoke`): ModernBERT-base shape, 200 steps.

``--cpu`` runs the same parts at a tiny size on the CPU (gloo; bfloat16 timed by part 2 only), as a test does.
Each part's failure is recorded and the next part runs; the figures file is rewritten after each part, so a
run stopped at its time limit keeps what it measured. Exit status 1 when a part failed or a fingerprint differed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from vtrepro.bench.machine import machine_line
from vtrepro.bench.paper_smoke import CPU_SMOKE, GPU_SMOKE, SmokeSize, run_smoke
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK
from vtrepro.core.io import atomic_write
from vtrepro.core.launch import Job, Mode, command_line
from vtrepro.encode.folder import EncodedFolder


@dataclass(frozen=True)
class CheckSize:
    """How much each part does: on one GPU (the 10-minute check) or at a tiny size on the CPU."""

    device: str
    encode_documents: int  # bench encode's --limit (0: the whole corpus)
    batch_size: int
    max_length_doc: int
    agreement_documents: int
    torchrun_documents: int
    shard_size: int
    smoke: SmokeSize
    encode_dtypes: tuple[str, ...] = ("float32", "bfloat16")


GPU_CHECK = CheckSize("cuda", 0, 64, 512, 1000, 5183, 1000, GPU_SMOKE)
CPU_CHECK = CheckSize("cpu", 16, 8, 128, 16, 40, 20, CPU_SMOKE, ("float32",))
"""On the CPU, bfloat16 is timed by the agreement part only, and torchrun runs one process (as on one GPU)."""


@dataclass
class Figures:
    """The check's rows (figure, value, how measured) in docs/scale.md's table format, and its failures."""

    title: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def add(self, figure: str, value: str, source: str) -> None:
        self.rows.append((figure, value, source))

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", "| figure | value | source |", "|---|---|---|"]
        lines += [f"| {figure} | {value} | {source} |" for figure, value, source in self.rows]
        lines += ["", *(f"- FAILED: {failure}" for failure in self.failures)]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Check:
    """One run of the check: its size, inputs and where it writes (``output``: the figures; ``work``: the
    encoded folders, logs and smoke run)."""

    size: CheckSize
    model: Path
    data_dir: str | None
    output: Path
    work: Path

    def log(self, name: str) -> Path:
        return self.work / "logs" / f"{name}.log"

    def run(self, name: str, command: list[str]) -> str:
        """Run ``command`` (``-m ...`` arguments after this Python) with its output in ``logs/name.log``;
        return that output, raising with its tail when the command fails."""
        self.log(name).parent.mkdir(parents=True, exist_ok=True)
        completed = subprocess.run([sys.executable, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.log(name).write_text(completed.stdout, encoding="utf-8")
        if completed.returncode not in (EXIT_OK, EXIT_MISMATCH):  # a mismatch is a figure, reported by the caller
            raise RuntimeError(f"{' '.join(command[:3])} exited {completed.returncode}: "
                               f"{(completed.stdout.strip().splitlines() or [''])[-1]} (log {self.log(name)})")
        return completed.stdout


def encode_throughput(check: Check, figures: Figures) -> None:
    """``bench encode`` on the device, float32 and bfloat16 bodies: the docs/s of each encoder."""
    size = check.size
    for dtype in size.encode_dtypes:
        output = check.run(f"bench-encode-{dtype}", [
            "-m", "vtrepro", "bench", "encode", "--model", str(check.model), "--dataset", "scifact",
            *(["--data-dir", check.data_dir] if check.data_dir else []), "--limit", str(size.encode_documents),
            "--batch-size", str(size.batch_size), "--max-length-doc", str(size.max_length_doc), "--dtype", dtype,
            "--device", size.device])
        documents = re.search(r"documents: (\d+) of", output)
        source = (f"`bench encode --device {size.device} --dtype {dtype}`, {documents.group(1) if documents else '?'} "
                  f"SciFact documents, batch {size.batch_size}")
        for name, rate in re.findall(r"^(.+?): ([\d.]+) docs/s", output, flags=re.MULTILINE):
            figures.add(f"encode rate, {dtype} body, {name}", f"{rate} docs/s", source)
        speedup = re.search(r"^speedup: ([\d.]+)x", output, flags=re.MULTILINE)
        if speedup:
            figures.add(f"encode, {dtype} body: dense / sentence-transformers", f"{speedup.group(1)}x", source)
        weights = re.search(r"^vectors: max \|weight difference\| (\S+);.*identical for (\d+/\d+)", output,
                            flags=re.MULTILINE)
        if weights:
            figures.add(f"encode, {dtype} body: vectors against sentence-transformers (float32)",
                        f"max weight difference {weights.group(1)}, quantized identical {weights.group(2)}", source)


def bfloat16_agreement(check: Check, figures: Figures) -> None:
    """The device's vectors (bfloat16 body, and float32 on a GPU) against CPU float32 vectors."""
    import numpy as np

    from vtrepro.data.beir import load_dataset
    from vtrepro.model.encoder_options import EncoderOptions
    from vtrepro.model.splade import SpladeEncoder

    size = check.size
    texts = [document.contents
             for document in load_dataset("scifact", check.data_dir).corpus()[:size.agreement_documents]]
    options = EncoderOptions(max_length_doc=size.max_length_doc, batch_size=size.batch_size, projection="dense")
    reference = SpladeEncoder(check.model, options, device="cpu").encode(texts, "doc")
    conditions = [("bfloat16", size.device)] + ([("float32", size.device)] if size.device != "cpu" else [])
    for dtype, device in conditions:
        vectors = SpladeEncoder(check.model, options.replace(dtype=dtype), device=device).encode(texts, "doc")
        shared, impacts = [], []
        for (ref_ids, ref_weights), (ids, weights) in zip(reference, vectors, strict=True):
            ref_terms = dict(zip(ref_ids.tolist(), np.rint(ref_weights * 100).tolist()))
            terms = dict(zip(ids.tolist(), np.rint(weights * 100).tolist()))
            shared.append(len(ref_terms.keys() & terms.keys()) / max(1, len(ref_terms.keys() | terms.keys())))
            impacts += [abs(ref_terms[term] - terms[term]) for term in ref_terms.keys() & terms.keys()]
        identical = sum(a[0].tolist() == b[0].tolist() and np.array_equal(np.rint(a[1] * 100), np.rint(b[1] * 100))
                        for a, b in zip(reference, vectors))
        figures.add(f"{device} {dtype} body against CPU float32: active terms shared (Jaccard)",
                    f"mean {np.mean(shared):.2%}, min {min(shared):.2%}",
                    f"{len(texts)} SciFact documents, max length {size.max_length_doc}, dense projection")
        figures.add(f"{device} {dtype} body against CPU float32: impacts (scale 100) on shared terms",
                    f"mean abs difference {np.mean(impacts) if impacts else 0:.3f}, max {max(impacts, default=0):.0f}; "
                    f"identical quantized vectors {identical}/{len(texts)}", "same documents")


def torchrun_encode(check: Check, figures: Figures) -> None:
    """One process against ``torchrun --standalone --nproc_per_node P``: the same fingerprint; then a collective
    over the device's backend on every GPU (gloo on the CPU)."""
    import json

    import torch

    from vtrepro.data.beir import load_dataset

    size = check.size
    corpus = check.work / "torchrun-corpus.jsonl"
    documents = load_dataset("scifact", check.data_dir).corpus()[:size.torchrun_documents]
    corpus.write_text("".join(json.dumps({"_id": document.doc_id, "text": document.contents}) + "\n"
                              for document in documents), encoding="utf-8")
    gpus = torch.cuda.device_count() if size.device == "cuda" else 1
    processes = min(2, gpus)
    options = ["--model", str(check.model), "--corpus", str(corpus), "--shard-size", str(size.shard_size),
               "--sort-window", str(size.shard_size), "--batch-size", str(size.batch_size),
               "--max-length-doc", str(size.max_length_doc), "--device", size.device]
    modes: dict[str, Mode] = {"one": "subprocess", "torchrun": "torchrun"}
    timings = {}
    for name, mode in modes.items():
        started = time.perf_counter()
        job = Job("encode", (*options, "--output", str(check.work / f"encode-{name}")))
        check.run(f"encode-{name}", command_line(job, mode=mode, processes=processes)[1:])  # after this Python
        timings[name] = time.perf_counter() - started
    one, many = (EncodedFolder(check.work / f"encode-{name}").load_manifest() or {} for name in ("one", "torchrun"))
    equal = one["fingerprint"] == many["fingerprint"] and one["shards"] == many["shards"]
    figures.add(f"torchrun encode, {processes} process(es) on {size.device}, against one process",
                f"fingerprint {'equal' if equal else 'DIFFERENT'} ({many['fingerprint'][:12]}); "
                f"{timings['one']:.0f} s and {timings['torchrun']:.0f} s wall",
                f"{len(documents)} SciFact documents, shards of {size.shard_size}")
    if not equal:
        figures.failures.append(f"torchrun encode: fingerprint {many['fingerprint']} != one process {one['fingerprint']}")
    output = check.run("collective", ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                                      "-m", "vtrepro.bench.collective"])
    figures.add("collective (all_reduce, barrier)", " ".join(output.strip().splitlines()[-1:]),
                f"`torchrun --standalone --nproc_per_node {gpus} -m vtrepro.bench.collective`")


def paper_smoke(check: Check, figures: Figures) -> None:
    """The paper recipe's chain at the check's size (:mod:`vtrepro.bench.paper_smoke`)."""
    smoke = check.size.smoke
    result = run_smoke(smoke, check.model, check.work / "smoke", check.data_dir)
    source = (f"random ModernBERT {smoke.layers}x{smoke.hidden} ({result['parameters'] / 1e6:.0f}M parameters), "
              f"GPT-2 BPE -> authors' transfer -> MLM -> APC -> SPLADE; {result['device']}, {smoke.dtype}, "
              f"batch {smoke.batch_size}, length {smoke.max_length}")
    figures.add("paper smoke: transfer (authors' preset)", f"{result['transfer_seconds']:.1f} s", source)
    figures.add(f"paper smoke: MLM, {smoke.mlm_steps} steps", f"{result['mlm_seconds_per_step']:.3f} s/step", source)
    figures.add("paper smoke: APC", f"{result['apc_seconds']:.1f} s ({smoke.apc_documents} documents)", source)
    figures.add(f"paper smoke: SPLADE, {smoke.splade_steps} steps", f"{result['splade_seconds_per_step']:.3f} s/step",
                source)
    memory = f"process peak RSS {result['peak_rss_gib']:.2f} GiB"
    if result["gpu_peak_gib"] is not None:
        memory = f"GPU peak allocated {result['gpu_peak_gib']:.2f} GiB; {memory}"
    figures.add("paper smoke: peak memory, whole chain", memory, f"{result['seconds']:.0f} s in all")


WORK_MARK = ".gpu-check"
"""The file marking a work folder this check made (and may therefore replace)."""
PARTS: tuple[tuple[str, Callable[[Check, Figures], None]], ...] = (
    ("encode throughput", encode_throughput), ("bfloat16 agreement", bfloat16_agreement),
    ("torchrun encode", torchrun_encode), ("paper smoke", paper_smoke))


def run_check(check: Check) -> int:
    """Every part in turn, the figures file rewritten after each; returns the exit status."""
    import torch

    device = torch.cuda.get_device_name(0) if check.size.device == "cuda" else "CPU (--cpu, tiny size)"
    figures = Figures(f"First GPU check, {time.strftime('%Y-%m-%d')}: {device}; {machine_line(with_torch=True)}")
    if (check.work / WORK_MARK).is_file():  # a folder an earlier check left: start afresh
        shutil.rmtree(check.work)
    check.work.mkdir(parents=True)
    (check.work / WORK_MARK).write_text("work folder of vtrepro.bench.gpu_check, replaced by the next run\n")
    for name, part in PARTS:
        started = time.perf_counter()
        try:
            part(check, figures)
        except Exception as error:  # noqa: BLE001 - a part's failure is a finding; the next part still runs
            figures.failures.append(f"{name}: {type(error).__name__}: {error}")
        figures.add(f"check part: {name}", f"{time.perf_counter() - started:.0f} s", "wall")
        with atomic_write(check.output) as handle:
            handle.write(figures.markdown())
    print(figures.markdown())
    return EXIT_MISMATCH if figures.failures else EXIT_OK
