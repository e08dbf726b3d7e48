"""MLM adaptation: continue masked-language-model training of a checkpoint on a text corpus.

``python -m vtrepro mlm --model M --dataset msmarco --steps 20000 --out DIR`` trains with the model's
own tokenizer (BERT masking: of the ``--mask-rate`` selected tokens, 80% become the mask token, 10% a
random token, 10% stay) and saves an HF folder (model, tokenizer, ``mlm_report.json``) to ``DIR``.
Texts are visited in seeded per-epoch permutations and masks are drawn from a generator seeded by
(seed, step), so a run is reproducible.

``--preset authors`` trains as the paper's ``run_vt.sh`` does (Hugging Face ``run_mlm.py``): texts
tokenized with their special tokens, concatenated per 1,000 texts and cut into blocks of
``--max-length`` tokens (each group's remainder dropped); target tokens the transfer found no match
for (``new_ids`` of the model's ``transfer_report.json``) selected twice as often as the others, the
rate renormalized per batch so the overall masking rate stays ``--mask-rate``; and
``--schedule cosine`` as its recipe sets it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from vtrepro.core.checkpoints import check_out, save_checkpoint
from vtrepro.core.cli import (
    add_checkpoint_arguments,
    add_options,
    cli_entry,
    command_parser,
    options_from,
    positive_int,
    quiet_transformers,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.core.progress import Progress
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Field
from vtrepro.data.texts import dataset_or_file_texts
from vtrepro.model.loading import check_text_lengths, load_masked_lm, resolve_model, text_length_limit
from vtrepro.training.data import permutation
from vtrepro.training.schedule import SCHEDULES, lr_factor

# torch, the model loader (transformers) and the trainer are imported where they are used, on
# purpose: `--help` and argument errors stay fast.
if TYPE_CHECKING:
    import torch
    from torch import Tensor

REPORT_NAME = "mlm_report.json"
RANDOM_SHARE = 0.1
KEEP_SHARE = 0.1
PRESETS = ("vtrepro", "authors")
GROUP_TEXTS = 1000
"""Texts concatenated together before cutting blocks (Hugging Face ``run_mlm.py``'s map batch)."""
AUTHORS_NEW_TOKEN_WEIGHT = 2.0
TRANSFER_REPORT = "transfer_report.json"

MLM_OPTIONS = {
    "dataset": Field(str, None, nullable=True),
    "corpus": Field(str, None, nullable=True),
    "steps": Field(int, 1000, minimum=1, help="optimizer steps"),
    "mask_rate": Field(float, 0.15, above=0, maximum=1, help="share of tokens masked, in (0, 1]"),
    "max_length": Field(int, 128, minimum=8, maximum=MAX_TEXT_TOKENS,
                        help=f"tokens per text, 8 to {MAX_TEXT_TOKENS} and at most the model's positions"),
    "lr": Field(float, 5e-5, above=0, help="peak learning rate"),
    "batch_size": Field(int, 32, minimum=1, maximum=MAX_BATCH_SIZE, help=f"texts per step, 1 to {MAX_BATCH_SIZE}"),
    "warmup_steps": Field(int, 0, minimum=0, help="linear warm-up steps"),
    "precision": Field(str, "fp32", ("fp32", "bf16"), help="autocast precision"),
    "seed": Field(int, 0, minimum=0, help="seed of text order and masks"),
    "schedule": Field(str, "linear", SCHEDULES, help="learning-rate decay after the warm-up"),
    "preset": Field(str, "vtrepro", PRESETS,
                    help="authors: 128-token blocks of concatenated texts and new tokens masked twice as often "
                         "(run_vt.sh); vtrepro: one truncated text per row, uniform masking"),
}
"""What MLM adaptation takes, in a recipe's mlm stage and on the command line alike (:func:`run_mlm`'s
keywords; one of ``dataset``/``corpus``)."""


def selection_rates(input_ids: Tensor, special: Tensor, mask_rate: float, new_ids: Tensor | None = None,
                    new_token_weight: float = 1.0) -> Tensor:
    """Per position, the chance to be selected for masking: ``mask_rate`` for every non-special token, or
    with ``new_ids`` those tokens ``new_token_weight`` times as often as the others, renormalized over the
    batch's non-special tokens so the mean stays ``mask_rate`` (each rate capped at 1); 0 for specials."""
    import torch

    weight = torch.ones(input_ids.shape)
    if new_ids is not None:
        weight[torch.isin(input_ids, new_ids)] = new_token_weight
    weight[special] = 0.0
    ordinary = ~special
    scale = mask_rate / weight[ordinary].mean() if bool(ordinary.any()) else 0.0
    return (weight * scale).clamp(max=1.0)


def mask_tokens(input_ids: Tensor, special: Tensor, rates: Tensor | float, mask_id: int, vocab_size: int,
                generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(masked inputs, labels): non-special tokens are selected with probability ``rates`` (one rate, or one
    per position); 80% of those become ``mask_id``, 10% a random token, 10% stay. Labels are -100 except
    at selected positions."""
    import torch

    selected = (torch.rand(input_ids.shape, generator=generator) < rates) & ~special
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    draw = torch.rand(input_ids.shape, generator=generator)
    masked = input_ids.clone()
    masked[selected & (draw < 1 - RANDOM_SHARE - KEEP_SHARE)] = mask_id
    replace = selected & (draw >= 1 - RANDOM_SHARE - KEEP_SHARE) & (draw < 1 - KEEP_SHARE)
    masked[replace] = torch.randint(vocab_size, input_ids.shape, generator=generator)[replace]
    return masked, labels


def group_texts(tokenizer: Any, texts: Sequence[str], block_size: int) -> Tensor:
    """``(blocks, block_size)`` token ids: every text tokenized with its special tokens, concatenated per
    :data:`GROUP_TEXTS` texts and cut into blocks, each group's remainder dropped (``run_mlm.py``)."""
    import torch

    blocks: list[list[int]] = []
    for start in range(0, len(texts), GROUP_TEXTS):
        with quiet_transformers():  # texts longer than the model's maximum are expected here: they are cut below
            rows = tokenizer(list(texts[start:start + GROUP_TEXTS]))["input_ids"]
        ids = [index for row in rows for index in row]
        blocks += [ids[offset:offset + block_size] for offset in range(0, len(ids) - block_size + 1, block_size)]
    if not blocks:
        raise VtreproError(f"the texts hold fewer than {block_size} tokens: no block to train on")
    return torch.tensor(blocks)


def new_token_ids(model: str | Path, model_dir: str | Path | None) -> list[int]:
    """The target ids without a source match, from the ``transfer_report.json`` beside a transferred model."""
    report = Path(resolve_model(model, model_dir)) / TRANSFER_REPORT
    if not report.is_file():
        raise VtreproError(f"{report} not found: --preset authors masks the tokens the vocabulary transfer added "
                           "twice as often; give a model written by 'python -m vtrepro transfer'")
    return [int(index) for index in json.loads(report.read_text(encoding="utf-8"))["new_ids"]]


def train_mlm(model: Any, tokenizer: Any, texts: Sequence[str], steps: int, mask_rate: float = 0.15,
              max_length: int = 128, lr: float = 5e-5, batch_size: int = 32, warmup_steps: int = 0,
              weight_decay: float = 0.01, precision: str = "fp32", seed: int = 0, show_progress: bool = True,
              schedule: str = "linear", new_ids: Sequence[int] | None = None, grouped: bool = False,
              ) -> list[float]:
    """Train ``model`` in place for ``steps`` batches of ``texts`` (or, ``grouped``, of blocks of
    concatenated texts); with ``new_ids`` those tokens are masked twice as often. Returns every step's loss."""
    import torch

    if tokenizer.mask_token_id is None:
        raise VtreproError("the tokenizer has no mask token: MLM training needs one")
    if not texts:
        raise VtreproError("MLM training needs at least one text")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(schedule, warmup_steps, steps))
    vocab_size = len(tokenizer)
    blocks = group_texts(tokenizer, texts, max_length) if grouped else None
    rows = len(blocks) if blocks is not None else len(texts)
    new = torch.tensor(sorted(new_ids)) if new_ids is not None else None
    special_ids = torch.tensor(sorted(tokenizer.all_special_ids))
    history = []
    with Progress(steps, "mlm", "step", enabled=show_progress) as progress:
        for step in range(steps):
            positions = range(step * batch_size, (step + 1) * batch_size)
            chosen = [int(permutation(rows, seed, p // rows)[p % rows]) for p in positions]
            if blocks is not None:
                input_ids = blocks[chosen]
                encoded = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
                special = torch.isin(input_ids, special_ids)
            else:
                encoded = tokenizer([texts[index] for index in chosen], padding=True, truncation=True,
                                    max_length=max_length, return_special_tokens_mask=True, return_tensors="pt")
                special = encoded.pop("special_tokens_mask").bool() | ~encoded["attention_mask"].bool()
            generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
            rates = selection_rates(encoded["input_ids"], special, mask_rate, new, AUTHORS_NEW_TOKEN_WEIGHT)
            encoded["input_ids"], labels = mask_tokens(encoded["input_ids"], special, rates,
                                                       tokenizer.mask_token_id, vocab_size, generator)
            inputs = {key: value.to(device) for key, value in encoded.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(**inputs, labels=labels.to(device)).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            history.append(loss.item())
            progress.set_postfix(loss=f"{history[-1]:.3f}")
            progress.update()
    return history


def run_mlm(
    model: str | Path,
    out: str | Path,
    *,
    steps: int = 1000,
    dataset: str | None = None,
    corpus: str | Path | None = None,
    data_dir: str | Path | None = None,
    mask_rate: float = 0.15,
    max_length: int = 128,
    lr: float = 5e-5,
    batch_size: int = 32,
    warmup_steps: int = 0,
    precision: str = "fp32",
    seed: int = 0,
    schedule: str = "linear",
    preset: str = "vtrepro",
    max_texts: int | None = None,
    model_dir: str | Path | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Adapt ``model`` on a BEIR corpus or a corpus file and save it with ``mlm_report.json`` to ``out``."""
    if (dataset is None) == (corpus is None):
        raise VtreproError("give exactly one of --dataset and --corpus")
    if steps < 1 or batch_size < 1 or max_length < 8 or not 0 < mask_rate <= 1:
        raise VtreproError("need steps >= 1, batch size >= 1, max length >= 8 and 0 < mask rate <= 1")
    if corpus is not None and not Path(corpus).is_file():
        raise VtreproError(f"corpus file {corpus} not found")
    if preset not in PRESETS or schedule not in SCHEDULES:
        raise VtreproError(f"--preset must be one of {', '.join(PRESETS)} and --schedule one of {', '.join(SCHEDULES)}")
    check_text_lengths({"max length": max_length}, text_length_limit(model, model_dir), model)
    authors = preset == "authors"
    new_ids = new_token_ids(model, model_dir) if authors else None
    check_out(out)
    texts = list(dataset_or_file_texts(str(corpus if corpus is not None else dataset), data_dir))[:max_texts]
    mlm, tokenizer = load_masked_lm(model, model_dir, trust_remote_code)
    started = time.perf_counter()
    history = train_mlm(mlm, tokenizer, texts, steps, mask_rate, max_length, lr, batch_size, warmup_steps,
                        precision=precision, seed=seed, schedule=schedule, new_ids=new_ids, grouped=authors)
    tenth = max(1, steps // 10)
    report = {
        "model": str(model), "dataset": dataset, "corpus": None if corpus is None else str(corpus), "texts": len(texts),
        "steps": steps, "mask_rate": mask_rate, "max_length": max_length, "lr": lr, "batch_size": batch_size,
        "warmup_steps": warmup_steps, "precision": precision, "seed": seed, "schedule": schedule, "preset": preset,
        "rows": "blocks of concatenated texts" if authors else "one truncated text each",
        "new_token_weight": AUTHORS_NEW_TOKEN_WEIGHT if authors else 1.0,
        "loss_first_10_percent": round(sum(history[:tenth]) / tenth, 4),
        "loss_last_10_percent": round(sum(history[-tenth:]) / tenth, 4),
        "seconds": round(time.perf_counter() - started, 1), "losses": [round(value, 4) for value in history],
    }
    save_checkpoint(out, mlm.cpu().eval(), tokenizer, {REPORT_NAME: report})
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("mlm", __doc__)
    add_checkpoint_arguments(parser, "masked-LM checkpoint", "the training texts")
    add_options(parser, MLM_OPTIONS, [name for name in MLM_OPTIONS if name not in ("dataset", "corpus")])
    parser.add_argument("--max-texts", type=positive_int, default=None, help="use only the first N texts of the corpus")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the model's own code to run")
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_output(args.out, [resolve_model(args.model, args.model_dir), args.dataset, args.corpus], kind="folder")
    report = run_mlm(args.model, args.out, data_dir=args.data_dir, max_texts=args.max_texts, model_dir=args.model_dir,
                     trust_remote_code=args.trust_remote_code, **options_from(args, MLM_OPTIONS))
    print(f"{args.out}: {report['steps']} steps on {report['texts']} texts, loss {report['loss_first_10_percent']} -> "
          f"{report['loss_last_10_percent']} in {report['seconds']} s", file=sys.stderr)
    return 0
