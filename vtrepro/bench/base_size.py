"""``python -m vtrepro bench base-size``: the dense encoder at BERT-base size.

A BERT-base-shaped masked LM (110M parameters, random weights, with the tokenizer of a small BERT-uncased
model such as splade-tiny) encodes the first documents of a BEIR corpus. Random weights cost what
trained ones do, so the rate and the projection's share of the time hold for any BERT-base SPLADE
model; which columns activate does not, so the screened projection is not timed.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from vtrepro.bench.machine import machine_line
from vtrepro.core.errors import EXIT_OK
from vtrepro.data.beir import load_dataset
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.loading import resolve_model

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
WARM_UP_DOCUMENTS = 8


def bench_base_size(tokenizer_model: str, dataset: str, data_dir: str | None, documents: int,
                    threads: int | None = None) -> int:
    """Encode the first ``documents`` of ``dataset`` with a random BERT-base masked LM carrying
    ``tokenizer_model``'s tokenizer, on ``threads`` torch threads (default: torch's), and print the rate
    and the projection's share of the time."""
    # torch and transformers are imported here, on purpose: `--help` and argument errors stay fast.
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from vtrepro.model.splade import SpladeEncoder

    if threads is not None:
        torch.set_num_threads(threads)
    tokenizer_folder = Path(resolve_model(tokenizer_model))
    texts = [document.contents for document in load_dataset(dataset, data_dir).corpus()[:documents]]
    print(machine_line(with_torch=True))
    with tempfile.TemporaryDirectory(prefix="vtrepro-bench-") as folder:
        torch.manual_seed(0)
        BertForMaskedLM(BertConfig()).save_pretrained(folder)  # 768 hidden, 12 layers, 30,522 terms
        for name in TOKENIZER_FILES:
            if (tokenizer_folder / name).is_file():
                shutil.copy(tokenizer_folder / name, Path(folder) / name)
        encoder = SpladeEncoder(folder, EncoderOptions(projection="dense"))  # the screen depends on trained weights
        encoder.encode(texts[:WARM_UP_DOCUMENTS], "doc")
        encoder.projection_seconds = 0.0
        started = time.perf_counter()
        encoder.encode(texts, "doc")
        seconds = time.perf_counter() - started
    parameters = sum(parameter.numel() for parameter in encoder.model.parameters())
    print(f"{parameters / 1e6:.0f}M parameters, {torch.get_num_threads()} threads: {len(texts) / seconds:.2f} docs/s, "
          f"the projection {encoder.projection_seconds / seconds:.0%} of the time")
    return EXIT_OK
