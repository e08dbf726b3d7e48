"""``python -m vtrepro bench transfer``: topology vocabulary transfer at full scale on synthetic vocabularies.

It transfers a 50k-token cased byte-level BPE source (768-d, random weights) onto a 30k-token uncased
WordPiece target with a random 768-d reference, with about 60% of the target tokens found in the
source. It prints a JSON line and exits 1 when the transfer takes :data:`SECONDS_LIMIT` seconds or
more, or the process peaks at :data:`RSS_LIMIT_GB` GB RSS or more.
"""
from __future__ import annotations

import json
import random
import string
import time
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from vtrepro.bench.machine import peak_rss_bytes
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK
from vtrepro.vocabulary.transfer import TransferOptions, transfer_vocabulary

SECONDS_LIMIT = 60.0
RSS_LIMIT_GB = 4.0
TOKENIZER_SEED = 0
"""Seed of the synthetic vocabularies and of the reference embeddings."""
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _words(count: int, rng: random.Random, exclude: set[str]) -> list[str]:
    """``count`` distinct random lowercase strings of 3-10 letters, none in ``exclude``."""
    words: dict[str, None] = {}
    while len(words) < count:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10)))
        if word not in exclude:
            words[word] = None
    return list(words)


def synthetic_tokenizers(
    source_size: int, target_size: int, overlap: float, seed: int
) -> tuple[PreTrainedTokenizerFast, PreTrainedTokenizerFast]:
    """A cased byte-level BPE source and an uncased WordPiece target sharing ``overlap`` of the target's texts.

    A fifth of the target's words are ``##`` continuations; a third of the shared word starts also
    appear capitalized in the source, so they are merged from two rows.
    """
    rng = random.Random(seed)
    texts = _words(target_size - len(BERT_SPECIALS), rng, set())
    target_vocab = BERT_SPECIALS + [("##" if rng.random() < 0.2 else "") + text for text in texts]
    source_vocab = list(BPE_SPECIALS)
    for token in rng.sample(target_vocab[len(BERT_SPECIALS):], round(overlap * target_size)):
        if token.startswith("##"):
            source_vocab.append(token[2:])
        else:
            source_vocab.append("Ġ" + token)
            if rng.random() < 1 / 3:
                source_vocab.append("Ġ" + token.capitalize())
    fillers = _words(source_size - len(source_vocab), rng, set(texts))
    source_vocab += [("Ġ" if rng.random() < 0.7 else "") + word for word in fillers]

    target = Tokenizer(models.WordPiece({token: i for i, token in enumerate(target_vocab)}, unk_token="[UNK]"))
    target.normalizer = normalizers.BertNormalizer(lowercase=True)
    target.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    target.add_special_tokens(BERT_SPECIALS)
    source = Tokenizer(models.BPE({token: i for i, token in enumerate(source_vocab)}, [], unk_token="<unk>"))
    source.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    source.decoder = decoders.ByteLevel()
    source.add_special_tokens(BPE_SPECIALS)
    return (
        PreTrainedTokenizerFast(tokenizer_object=source, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                unk_token="<unk>", mask_token="<mask>"),
        PreTrainedTokenizerFast(tokenizer_object=target, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                sep_token="[SEP]", mask_token="[MASK]"),
    )


def peak_rss_gb() -> float:
    """Peak resident memory of this process, GiB."""
    return peak_rss_bytes() / 2**30


def bench_transfer(
    source_size: int = 50_000, target_size: int = 30_000, dim: int = 768, overlap: float = 0.6, seed: int = TOKENIZER_SEED
) -> dict[str, Any]:
    """Time one topology transfer (untied decoder, bias transferred like the rows) and report peak RSS."""
    started = time.perf_counter()
    source_tokenizer, target_tokenizer = synthetic_tokenizers(source_size, target_size, overlap, seed)
    torch.manual_seed(seed)
    model = BertForMaskedLM(BertConfig(vocab_size=len(source_tokenizer), hidden_size=dim, num_hidden_layers=1,
                                       num_attention_heads=12, intermediate_size=dim, pad_token_id=1,
                                       tie_word_embeddings=False))
    reference = torch.randn(len(target_tokenizer), dim)
    prepared = time.perf_counter()
    _, report = transfer_vocabulary(model, source_tokenizer, target_tokenizer, reference, None,
                                    TransferOptions(init="topology"))
    seconds = time.perf_counter() - prepared
    return {
        "source_tokens": len(source_tokenizer),
        "target_tokens": len(target_tokenizer),
        "dim": dim,
        "counts": report["counts"],
        "support": report["support"],
        "setup_seconds": round(prepared - started, 1),
        "transfer_seconds": round(seconds, 1),
        "peak_rss_gb": round(peak_rss_gb(), 2),
        "threads": torch.get_num_threads(),
    }


def within_limits(result: dict[str, Any]) -> bool:
    """Whether a :func:`bench_transfer` result stayed under both limits."""
    return result["transfer_seconds"] < SECONDS_LIMIT and result["peak_rss_gb"] < RSS_LIMIT_GB


def run_transfer_bench() -> int:
    """Run :func:`bench_transfer` at full scale, print its JSON line; exit status 1 past either limit."""
    result = bench_transfer()
    print(json.dumps(result))
    return EXIT_OK if within_limits(result) else EXIT_MISMATCH
