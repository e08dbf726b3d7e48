"""MLM adaptation: continue masked-language-model training of a checkpoint on a text corpus.

``python -m vtrepro mlm --model M --dataset msmarco --steps 20000 --output DIR`` trains with the model's
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

``--train-only-embeddings`` trains the input and output embeddings only (the authors' later
``run_mlm.py --train_only_embeddings``): every other parameter is frozen.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from vtrepro.core.checkpoints import check_out, save_checkpoint
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file
from vtrepro.core.log import quiet_transformers
from vtrepro.core.options import Options, option
from vtrepro.core.progress import Progress
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Field
from vtrepro.data.texts import dataset_or_file_texts
from vtrepro.model.loading import load_masked_lm, resolve_model
from vtrepro.model.text_lengths import check_text_lengths, text_length_limit
from vtrepro.training.examples import permutation
from vtrepro.training.schedule import SCHEDULES, lr_factor
from vtrepro.vocabulary.presets import PRESET_NAMES

# torch, the model loader (transformers) and the trainer are imported where they are used, on
# purpose: `--help` and argument errors stay fast.
if TYPE_CHECKING:
    import torch
    from torch import Tensor

logger = logging.getLogger(__name__)

MLM_REPORT = "mlm_report.json"
RANDOM_SHARE = 0.1
KEEP_SHARE = 0.1
GROUP_TEXTS = 1000
"""Texts concatenated together before cutting blocks (Hugging Face ``run_mlm.py``'s map batch)."""
AUTHORS_NEW_TOKEN_WEIGHT = 2.0
TRANSFER_REPORT = "transfer_report.json"
MLM_WEIGHT_DECAY = 0.01
"""AdamW weight decay of MLM adaptation (Hugging Face ``run_mlm.py``'s value in the authors' ``run_vt.sh``)."""

DTYPES = ("float32", "bfloat16")
"""Training precisions: float32, or bfloat16 autocast (float32 weights)."""
OLD_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
"""The old spelling of each dtype (``precision: fp32|bf16``), read with a deprecation notice."""


@dataclass(frozen=True)
class MlmOptions(Options):
    """What MLM adaptation takes, in a recipe's mlm stage and on the command line alike (exactly one of
    ``dataset``/``corpus``)."""

    RENAMED = {"precision": "dtype"}
    RENAMED_VALUES = {"dtype": OLD_DTYPES}

    dataset: str | None = option(Field(str, None, nullable=True))
    corpus: str | None = option(Field(str, None, nullable=True))
    steps: int = option(Field(int, 1000, minimum=1, help="optimizer steps"))
    mask_rate: float = option(Field(float, 0.15, above=0, maximum=1, help="share of tokens masked, in (0, 1]"))
    max_length: int = option(Field(int, 128, minimum=8, maximum=MAX_TEXT_TOKENS,
                                   help=f"tokens per text, 8 to {MAX_TEXT_TOKENS} and at most the model's positions"))
    lr: float = option(Field(float, 5e-5, above=0, help="peak learning rate"))
    batch_size: int = option(Field(int, 32, minimum=1, maximum=MAX_BATCH_SIZE,
                                   help=f"texts per step, 1 to {MAX_BATCH_SIZE}"))
    warmup_steps: int = option(Field(int, 0, minimum=0, help="linear warm-up steps"))
    dtype: str = option(Field(str, "float32", DTYPES, help="float32, or bfloat16 autocast"))
    seed: int = option(Field(int, 0, minimum=0, help="seed of text order and masks"))
    schedule: str = option(Field(str, "linear", SCHEDULES, help="learning-rate decay after the warm-up"))
    preset: str = option(Field(str, "vtrepro", PRESET_NAMES,
                               help="authors: 128-token blocks of concatenated texts and new tokens masked twice as "
                                    "often (run_vt.sh); vtrepro: one truncated text per row, uniform masking"))
    train_only_embeddings: bool = option(Field(
        bool, False, help="train only the input embeddings and the output embeddings (the decoder: its weight, "
                          "tied or not, and its bias); freeze every other parameter"))

    def conflict(self) -> tuple[str | None, str] | None:
        if (self.dataset is None) == (self.corpus is None):
            return None, "needs exactly one of 'dataset' (BEIR name) and 'corpus' (a file)"
        return None

    @property
    def released_recipe(self) -> bool:
        """Whether it trains as the paper's run_vt.sh: blocks of concatenated texts, new tokens masked twice as often."""
        return self.preset == "authors"


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
    folder = Path(resolve_model(model, model_dir))
    report = folder / TRANSFER_REPORT
    if not os.path.lexists(report):
        raise VtreproError(f"{report} not found: --preset authors masks the tokens the vocabulary transfer added "
                           "twice as often; give a model written by 'python -m vtrepro transfer'")
    fix = "give a model written by 'python -m vtrepro transfer', its report as written"
    new_ids = read_json_file(report, fix, JSON_FILE_BYTES["model"], folder, {"new_ids": list})["new_ids"]
    if not all(type(index) is int and 0 <= index < 2**31 for index in new_ids):
        raise VtreproError(f"{report}: new_ids holds a value that is not a token id (an integer from 0 below 2^31); "
                           f"{fix}")
    return new_ids


def embedding_parameters(model: Any) -> list[torch.nn.Parameter]:
    """The parameters of the input and output embedding modules (the decoder's weight and bias), each once
    (a tied decoder shares the input embeddings' weight): what ``train_only_embeddings`` trains. As the
    authors' run_mlm.py (branch mdbert) unfreezes them: ``get_input_embeddings().parameters()`` and
    ``get_output_embeddings().parameters()``."""
    modules = [module for module in (model.get_input_embeddings(), model.get_output_embeddings()) if module is not None]
    return list({id(parameter): parameter for module in modules for parameter in module.parameters()}.values())


def freeze_all_but_embeddings(model: Any) -> list[torch.nn.Parameter]:
    """Set ``requires_grad`` on the embedding parameters (:func:`embedding_parameters`) only; returns them."""
    trained = embedding_parameters(model)
    for parameter in model.parameters():
        parameter.requires_grad = False
    for parameter in trained:
        parameter.requires_grad = True
    return trained


def train_mlm(model: Any, tokenizer: Any, texts: Sequence[str], options: MlmOptions,
              new_ids: Sequence[int] | None = None, *, weight_decay: float = MLM_WEIGHT_DECAY, show_progress: bool = True,
              ) -> list[float]:
    """Train ``model`` in place for ``options.steps`` batches of ``texts`` (or, for the released recipe, of
    blocks of concatenated texts); with ``new_ids`` those tokens are masked twice as often. Returns every
    step's loss."""
    import torch

    if tokenizer.mask_token_id is None:
        raise VtreproError("the tokenizer has no mask token: MLM training needs one")
    if not texts:
        raise VtreproError("MLM training needs at least one text")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).train()
    steps, batch_size, max_length, seed = options.steps, options.batch_size, options.max_length, options.seed
    trained = freeze_all_but_embeddings(model) if options.train_only_embeddings else list(model.parameters())
    optimizer = torch.optim.AdamW(trained, lr=options.lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(options.schedule, options.warmup_steps, steps))
    vocab_size = len(tokenizer)
    blocks = group_texts(tokenizer, texts, max_length) if options.released_recipe else None
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
            rates = selection_rates(encoded["input_ids"], special, options.mask_rate, new, AUTHORS_NEW_TOKEN_WEIGHT)
            encoded["input_ids"], labels = mask_tokens(encoded["input_ids"], special, rates,
                                                       tokenizer.mask_token_id, vocab_size, generator)
            inputs = {key: value.to(device) for key, value in encoded.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=options.dtype == "bfloat16"):
                loss = model(**inputs, labels=labels.to(device)).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            optimizer.step()
            scheduler.step()
            history.append(loss.item())
            progress.set_postfix(loss=f"{history[-1]:.3f}")
            progress.update()
    return history


def run_mlm(
    model: str | Path,
    out: str | Path,
    options: MlmOptions,
    *,
    data_dir: str | Path | None = None,
    max_texts: int | None = None,
    model_dir: str | Path | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Adapt ``model`` on the BEIR corpus or corpus file ``options`` name (its first ``max_texts`` texts) and
    save it with ``mlm_report.json`` to ``out``."""
    if options.corpus is not None and not Path(options.corpus).is_file():
        raise VtreproError(f"corpus file {options.corpus} not found")
    check_text_lengths({"max length": options.max_length}, text_length_limit(model, model_dir), model)
    authors = options.released_recipe
    new_ids = new_token_ids(model, model_dir) if authors else None
    check_out(out)
    source = options.corpus if options.corpus is not None else str(options.dataset)
    texts = list(dataset_or_file_texts(source, data_dir))[:max_texts]
    mlm, tokenizer = load_masked_lm(model, model_dir, trust_remote_code)
    started = time.perf_counter()
    history = train_mlm(mlm, tokenizer, texts, options, new_ids)
    tenth = max(1, options.steps // 10)
    report = {
        "model": str(model), **{key: getattr(options, key) for key in ("dataset", "corpus")}, "texts": len(texts),
        **{key: getattr(options, key) for key in ("steps", "mask_rate", "max_length", "lr", "batch_size",
                                                  "warmup_steps", "dtype", "seed", "schedule", "preset",
                                                  "train_only_embeddings")},
        "rows": "blocks of concatenated texts" if authors else "one truncated text each",
        "new_token_weight": AUTHORS_NEW_TOKEN_WEIGHT if authors else 1.0,
        "loss_first_10_percent": round(sum(history[:tenth]) / tenth, 4),
        "loss_last_10_percent": round(sum(history[-tenth:]) / tenth, 4),
        "seconds": round(time.perf_counter() - started, 1), "losses": [round(value, 4) for value in history],
    }
    save_checkpoint(out, mlm.cpu().eval(), tokenizer, {MLM_REPORT: report})
    return report
