"""Time the dense encoder at base size: a BERT-base-shaped masked LM (110M parameters, random weights,
splade-tiny's BERT-uncased tokenizer) on the first documents of a BEIR corpus.

Random weights cost what trained ones do, so the rate and the projection's share of the time hold for
any BERT-base SPLADE model; which columns activate does not, so the screened projection is not timed.

    python scripts/base_size_timing.py --model-dir ../shared/models --data-dir ../shared/data --threads 2
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from vtrepro.data.beir import load_dataset
from vtrepro.model.splade import SpladeEncoder

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="folder holding splade-tiny (its tokenizer)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = [document.contents for document in load_dataset(args.dataset, args.data_dir).corpus()[: args.documents]]
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        BertForMaskedLM(BertConfig()).save_pretrained(folder)  # 768 hidden, 12 layers, 30,522 terms
        for name in TOKENIZER_FILES:
            if (args.model_dir / "splade-tiny" / name).is_file():
                shutil.copy(args.model_dir / "splade-tiny" / name, Path(folder) / name)
        encoder = SpladeEncoder(folder)
        encoder.encode(texts[:8], "doc")  # warm-up
        encoder.projection_seconds = 0.0
        started = time.perf_counter()
        encoder.encode(texts, "doc")
        seconds = time.perf_counter() - started
    parameters = sum(parameter.numel() for parameter in encoder.model.parameters())
    print(f"{parameters / 1e6:.0f}M parameters, {args.threads} threads: {len(texts) / seconds:.2f} docs/s, "
          f"the projection {encoder.projection_seconds / seconds:.0%} of the time")


if __name__ == "__main__":
    main()
