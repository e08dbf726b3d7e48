"""Automatic post-hoc calibration (APC): shift a SPLADE model's decoder bias by one constant.

``python -m vtrepro calibrate --model M --dataset scifact --cut-percent 60 --output DIR`` encodes a
seeded sample of the first ``--limit`` documents, picks ``delta`` and saves the model with
``bias + delta`` (plus its tokenizer and ``calibration_report.json``).

A per-term constant commutes with max-pooling: max over positions of ``logit + delta`` is
``max_logit + delta``. So the max-pooled logits are computed once, stored as float16, and any
delta is evaluated on them exactly: term t is active in document d when ``max_logit[d, t] > -delta``.
"""
from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, cast

from vtrepro.core.checkpoints import check_out, save_checkpoint
from vtrepro.core.errors import VtreproError
from vtrepro.core.options import Options, option
from vtrepro.core.progress import Progress
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Field
from vtrepro.data.texts import corpus_texts, dataset_or_file_texts
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.text_lengths import check_text_lengths, text_length_limit
from vtrepro.vocabulary.presets import PRESET_NAMES

# torch and the encoder (transformers) are imported where they are used, on purpose: `--help` and
# argument errors stay fast.
if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from transformers import PreTrainedModel

    from vtrepro.model.splade import Kind, SpladeEncoder

logger = logging.getLogger(__name__)

CALIBRATION_REPORT = "calibration_report.json"
DEFAULT_CUT_PERCENT = 60.0
DEFAULT_DOCS = 20_000
DEFAULT_MAX_SAMPLE = 10_000
MAX_SAMPLE = 50_000
"""Most documents encoded: their float16 max-pooled logits take sample x vocabulary x 2 bytes (3 GB at 30,522 terms)."""
MAX_DOCS = 10_000_000
"""Most documents read (their texts are held in memory): MS MARCO's 8.8 million passages fit."""
MAX_VOCABULARY = 1_000_000
"""Most target terms a spec or recipe may ask before the model is read (the largest vocabularies hold 262,144
tokens); once it is, at most its vocabulary."""
ENCODE_BATCH = 256
ROW_CHUNK = 256
FLOAT16_PATTERNS = 1 << 16
AUTHORS_SAMPLING = {"group_docs": 64, "per_group": 20_000, "max_samples": 1_000_000, "seed": 42}
"""The released probe's sampling (probe_activation_percentiles.py at 887dd22, its defaults): per batch of
64 documents (one forward pass), 20,000 max-pooled logits drawn with replacement, at most 1,000,000 in
all, seed 42."""


COMMAND_FLAGS = {"--docs": "--limit", "--max-length": "--max-length-doc"}
"""The calibrate command's flags for the options whose spec key names them otherwise."""


@dataclass(frozen=True)
class CalibrationOptions(Options):
    """What a calibration takes, in a spec's ``calibrate:`` block, a recipe's calibrate stage and on the
    command line alike: the documents (exactly one of ``dataset``/``corpus``) and the cut (at most one of
    ``cut_percent``/``target_terms``; neither is a cut of :data:`DEFAULT_CUT_PERCENT`)."""

    preset: str = option(Field(str, "vtrepro", PRESET_NAMES,
                               help="authors: the released probe as run_vt.sh calls it, its --include_zeros mode "
                                    "(document text without title, every vocabulary id with zeros and negatives, "
                                    "its seeded draws and float32 percentile); vtrepro: exact quantile over "
                                    "non-special terms"))
    dataset: str | None = option(Field(str, None, nullable=True))
    corpus: str | None = option(Field(str, None, nullable=True))
    docs: int = option(Field(int, DEFAULT_DOCS, minimum=1, maximum=MAX_DOCS,
                             help=f"calibrate on the first N documents, at most {MAX_DOCS:,}"))
    cut_percent: float | None = option(Field(float, None, above=0, below=100, nullable=True,
                                             help=f"share of document x term entries pushed to <= 0, between 0 and "
                                                  f"100 (default: {DEFAULT_CUT_PERCENT:g})"))
    target_terms: float | None = option(Field(float, None, above=0, maximum=MAX_VOCABULARY, nullable=True,
                                              help="mean active terms per document to reach, at most the model's "
                                                   "vocabulary (its non-special tokens)"))
    max_length: int = option(Field(int, EncoderOptions.max_length_doc, minimum=1, maximum=MAX_TEXT_TOKENS,
                                   help=f"document max length in tokens, at most {MAX_TEXT_TOKENS} and the model's "
                                        "positions"))
    max_sample: int = option(Field(int, DEFAULT_MAX_SAMPLE, minimum=1, maximum=MAX_SAMPLE,
                                   help=f"documents encoded at most, up to {MAX_SAMPLE:,} (a seeded sample; float16 "
                                        "logits, 10,000 x 30k ~ 0.6 GB)"))
    batch_size: int = option(Field(int, 32, minimum=1, maximum=MAX_BATCH_SIZE,
                                   help=f"texts per forward pass, 1 to {MAX_BATCH_SIZE} (preset authors: "
                                        f"{AUTHORS_SAMPLING['group_docs']}, the probe's batch)"))
    seed: int = option(Field(int, 0, minimum=0, help="seed of the document sample"))

    def conflict(self) -> tuple[str | None, str] | None:
        if (self.dataset is None) == (self.corpus is None):
            return None, "needs exactly one of 'dataset' (BEIR name) and 'corpus' (a file)"
        if self.cut_percent is not None and self.target_terms is not None:
            return "target_terms", "takes one of 'cut_percent' and 'target_terms', not both"
        if self.released_probe and self.target_terms is not None:
            return "target_terms", "with preset authors calibrates by 'cut_percent' (the released probe has no target terms)"
        return None

    def to_argv(self, names: Sequence[str] | None = None) -> list[str]:
        return [COMMAND_FLAGS.get(arg, arg) for arg in super().to_argv(names)]

    @property
    def released_probe(self) -> bool:
        """Whether the released probe calibrates: document text without titles, a sampled percentile of every id."""
        return self.preset == "authors"

    @property
    def cut(self) -> float | None:
        """The cut in percent: the given one, else :data:`DEFAULT_CUT_PERCENT` unless target terms are given."""
        if self.target_terms is not None:
            return None
        return DEFAULT_CUT_PERCENT if self.cut_percent is None else self.cut_percent


def sample_texts(texts: Sequence[str], max_sample: int, seed: int) -> list[str]:
    """All texts, or a seeded sample of ``max_sample`` of them in their original order."""
    import torch

    if len(texts) <= max_sample:
        return list(texts)
    chosen = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed))[:max_sample]
    return [texts[index] for index in sorted(chosen.tolist())]


def term_ids(encoder: SpladeEncoder) -> Tensor:
    """Vocabulary ids that count as terms: every tokenizer id except special tokens."""
    import torch

    return torch.tensor([index for index in range(len(encoder.tokenizer)) if index not in encoder.special_ids])


def pooled_logits(encoder: SpladeEncoder, texts: Sequence[str], kind: Kind = "doc") -> Tensor:
    """``(len(texts), terms)`` float16 max-pooled logits over the non-special vocabulary."""
    import torch

    columns = term_ids(encoder)
    pooled = torch.empty(len(texts), len(columns), dtype=torch.float16)
    with Progress(len(texts), "encode documents" if kind == "doc" else "encode queries", kind) as progress:
        for start in range(0, len(texts), ENCODE_BATCH):
            batch = list(texts[start:start + ENCODE_BATCH])
            pooled[start:start + len(batch)] = encoder.max_logits(batch, kind)[:, columns].to(torch.float16)
            progress.update(len(batch))
    return pooled


def _chunks(logits: Tensor) -> list[Tensor]:
    return list(logits.split(ROW_CHUNK))


def value_counts(logits: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct finite float16 values of ``logits`` (ascending, as float32) and how often each occurs."""
    import torch

    counts = torch.zeros(FLOAT16_PATTERNS, dtype=torch.long)
    for chunk in _chunks(logits):
        counts += torch.bincount(chunk.view(torch.int16).flatten().long() + FLOAT16_PATTERNS // 2,
                                 minlength=FLOAT16_PATTERNS)
    patterns = torch.arange(FLOAT16_PATTERNS, dtype=torch.int32) - FLOAT16_PATTERNS // 2
    values = patterns.to(torch.int16).view(torch.float16).float()
    keep = (counts > 0) & values.isfinite()
    values, counts = values[keep], counts[keep]
    order = values.argsort()
    return values[order], counts[order]


def threshold_for_cut(logits: Tensor, cut_percent: float) -> float:
    """The ``cut_percent`` quantile of all document x term entries: entries above it stay positive."""
    import torch

    values, counts = value_counts(logits)
    at_or_below = counts.cumsum(0)
    index = int(torch.searchsorted(at_or_below, torch.tensor(cut_percent / 100 * logits.numel())))
    return values[min(index, len(values) - 1)].item()


def threshold_for_terms(logits: Tensor, target_terms: float) -> float:
    """The threshold whose mean number of entries above it per document is closest to ``target_terms``."""
    values, counts = value_counts(logits)
    above = counts.sum() - counts.cumsum(0)
    index = int((above.double() / logits.shape[0] - target_terms).abs().argmin())
    return values[index].item()


def activity(logits: Tensor, threshold: float, query_logits: Tensor | None = None) -> dict[str, float]:
    """Sparsity with terms active where ``logits > threshold``: per-document active terms, dead terms, FLOPS.

    FLOPS is ``sum_t p_d(t)^2`` (``p_d(t)``: share of documents where t is active), or
    ``sum_t p_q(t) p_d(t)`` with query logits.
    """
    import torch

    active, frequency = [], torch.zeros(logits.shape[1], dtype=torch.long)
    for chunk in _chunks(logits):
        mask = chunk > threshold
        active.append(mask.sum(1))
        frequency += mask.sum(0)
    per_document = torch.cat(active).double()
    document_share = frequency.double() / logits.shape[0]
    query_share = document_share
    if query_logits is not None:
        query_share = (query_logits > threshold).sum(0).double() / query_logits.shape[0]
    return {
        "active_mean": round(per_document.mean().item(), 2),
        "active_p50": round(per_document.quantile(0.5).item(), 2),
        "active_p90": round(per_document.quantile(0.9).item(), 2),
        "positive_share": round(per_document.sum().item() / logits.numel(), 5),
        "dead_share": round((frequency == 0).double().mean().item(), 5),
        "flops": round((query_share * document_share).sum().item(), 4),
    }


def probe_generator(device: torch.device, seed: int) -> torch.Generator:
    """The generator the released probe's draws come from, in the state of its first draw.

    The probe seeds torch's global generators and draws with ``torch.randint`` on the logits' device.
    On CPU, creating its DataLoader iterator first draws one int64 (the workers' base seed) from the
    global generator, so that draw is made here too; on CUDA its draws come from the CUDA generator,
    which that int64 does not touch. Other devices: the probe runs on CPU there.
    """
    import torch

    if device.type == "cuda":
        return torch.Generator(device=device).manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    torch.empty((), dtype=torch.int64).random_(generator=generator)
    return generator


def sampled_percentile(encoder: SpladeEncoder, texts: Sequence[str], cut_percent: float, group_docs: int,
                       per_group: int, max_samples: int, seed: int) -> tuple[float, Tensor]:
    """The released probe's estimate of the ``cut_percent`` percentile, and the float16 max-pooled logits
    over the non-special vocabulary of the documents it read (for the before/after report).

    Per group of ``group_docs`` documents in corpus order (one forward pass, padded to its longest
    document, as the probe's DataLoader batches), ``per_group`` values are drawn with replacement from
    all their max-pooled logits (every vocabulary id, special tokens, zeros and negatives included;
    the probe's ``--include_zeros``) by the generator of :func:`probe_generator`, until ``max_samples``
    are kept; the percentile is numpy's (linear interpolation) over the float32 values, as the probe
    takes it.
    """
    import numpy as np
    import torch

    if min(encoder.options.batch_size, encoder.options.sort_window) < group_docs:
        raise VtreproError(f"the authors preset encodes {group_docs} documents per forward pass, as the probe does; "
                           f"this encoder batches {encoder.options.batch_size} (sort window "
                           f"{encoder.options.sort_window}): give batch size and sort window of at least {group_docs}")
    generator = probe_generator(encoder.device, seed)
    columns = term_ids(encoder)
    samples: list[Tensor] = []
    read: list[Tensor] = []
    kept, start = 0, 0
    # The documents it reads: each group yields per_group values (its logits hold far more, any real vocabulary).
    expected = min(len(texts), group_docs * -(-max_samples // per_group))
    with Progress(expected, "encode documents", "doc") as progress:
        while kept < max_samples and start < len(texts):
            logits = encoder.max_logits(list(texts[start:start + group_docs]))
            values = logits.flatten()
            drawn = torch.randint(0, values.numel(), (min(per_group, values.numel()),), generator=generator,
                                  device=generator.device)
            samples.append(values[drawn.cpu()][:max_samples - kept])
            read.append(logits[:, columns].to(torch.float16))
            kept += len(samples[-1])
            start += group_docs
            progress.update(len(logits))
    return float(np.percentile(torch.cat(samples).numpy(), cut_percent)), torch.cat(read)


def encoding_batch(options: CalibrationOptions) -> int:
    """Texts per forward pass: the options' batch size, or the probe's batch with the authors preset."""
    return int(AUTHORS_SAMPLING["group_docs"]) if options.released_probe else options.batch_size


def calibrate_bias(
    encoder_or_model: SpladeEncoder | str | Path,
    texts: Sequence[str],
    options: CalibrationOptions,
    query_texts: Sequence[str] | None = None,
) -> tuple[float, dict[str, Any]]:
    """The bias shift ``delta`` and a before/after report on a seeded sample of ``texts`` (the documents
    ``options`` name, already read; a model is loaded with ``options.max_length``).

    A cut: ``delta = -quantile(max_logits, cut/100)``, so ``100 - cut`` % of the document x term
    entries are positive. ``target_terms``: the delta whose mean number of active terms per document
    is closest to it. Special tokens are never counted. The authors' preset takes the cut from
    :func:`sampled_percentile` instead (as the released probe does); the report's before/after figures
    are then measured on the documents it read.
    """
    from vtrepro.model.splade import SpladeEncoder

    if not texts:
        raise VtreproError("no documents to calibrate on")
    cut_percent, target_terms = options.cut, options.target_terms
    started = time.perf_counter()
    encoder = encoder_or_model if isinstance(encoder_or_model, SpladeEncoder) else SpladeEncoder(
        encoder_or_model, EncoderOptions(max_length_doc=options.max_length, batch_size=encoding_batch(options)))
    terms = len(term_ids(encoder))
    if target_terms is not None and target_terms > terms:
        raise VtreproError(f"--target-terms {target_terms:g} is more than the {terms} terms of the model's vocabulary "
                           f"(its non-special tokens), which no document can reach; use at most {terms}")
    cut = cast(float, cut_percent)  # the cut when target_terms is None (options.cut)
    if options.released_probe:  # the logits the sampling read serve the report too: each document is encoded once
        threshold, logits = sampled_percentile(encoder, texts, cut, **AUTHORS_SAMPLING)
        sampling = {"preset": options.preset, **AUTHORS_SAMPLING, "documents_read": len(logits)}
    else:
        sampling = {"preset": options.preset, "max_sample": options.max_sample, "seed": options.seed}
        logits = pooled_logits(encoder, sample_texts(texts, options.max_sample, options.seed))
    query_logits = pooled_logits(encoder, list(query_texts), "query") if query_texts else None
    encoded = time.perf_counter()
    if not options.released_probe:
        threshold = threshold_for_terms(logits, target_terms) if target_terms is not None else threshold_for_cut(logits, cut)
    delta = -threshold
    report = {
        "documents": len(texts),
        "sample_documents": len(logits),
        "queries": len(query_texts) if query_texts else 0,
        "terms": logits.shape[1],
        "cut_percent": cut_percent,
        "target_terms": target_terms,
        "delta": delta,
        "sampling": sampling,
        "before": activity(logits, 0.0, query_logits),
        "after": activity(logits, threshold, query_logits),
        "seconds": {"encode": round(encoded - started, 2), "total": round(time.perf_counter() - started, 2)},
    }
    return delta, report


def shift_bias(model: PreTrainedModel, delta: float) -> None:
    """Add ``delta`` to the decoder bias (in place; a bias shared with the head moves with it)."""
    import torch

    bias = model.get_output_embeddings().bias
    if bias is None:
        raise VtreproError("the model's vocabulary projection has no bias to shift")
    with torch.no_grad():
        bias += delta


def run_calibration(
    model: str | Path,
    out: str | Path,
    options: CalibrationOptions,
    *,
    queries: str | Path | None = None,
    data_dir: str | Path | None = None,
    model_dir: str | Path | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Calibrate ``model`` (running its own code only with ``trust_remote_code``) on the documents ``options``
    name and save the shifted checkpoint with its report to ``out``; ``queries`` (a JSONL file) adds
    query-side FLOPS to the report."""
    from vtrepro.model.splade import SpladeEncoder

    max_length, batch_size = options.max_length, encoding_batch(options)
    check_text_lengths({"max length": max_length}, text_length_limit(model, model_dir), model)
    check_out(out)
    source = options.corpus if options.corpus is not None else str(options.dataset)
    texts = list(itertools.islice(dataset_or_file_texts(source, data_dir, titles=not options.released_probe),
                                  options.docs))
    query_texts = list(corpus_texts(queries)) if queries else None
    encoder = SpladeEncoder(model, EncoderOptions(max_length_doc=max_length, batch_size=batch_size), model_dir=model_dir,
                            trust_remote_code=trust_remote_code)
    delta, report = calibrate_bias(encoder, texts, options, query_texts)
    report = {"model": str(model), "dataset": options.dataset, "corpus": options.corpus, "max_length": max_length,
              "seed": options.seed, **report}
    shift_bias(encoder.model, delta)
    save_checkpoint(out, encoder.model, encoder.tokenizer, {CALIBRATION_REPORT: report})
    return report
