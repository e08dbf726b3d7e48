"""Rows of the target tokens without a source match, by ``--init``: topology or an ablation.

``topology`` combines overlap rows with sparsemax weights from the reference geometry
(:mod:`vtrepro.vocabulary.topology`); ``subword-mean`` averages the source rows of the pieces that
spell the token in the source vocabulary (the mean of the overlap rows where none do); ``mean`` is
the mean overlap row; ``random`` draws rows from N(0, initializer_range) and gives the bias its
mean overlap value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from vtrepro.vocabulary.matching import (
    BYTE_ENCODER,
    TokenForm,
    VocabularyMatch,
    fast_backend,
    text_normalizer,
    token_forms,
    vocabulary_scheme,
)
from vtrepro.vocabulary.topology import DEFAULT_CHUNK_SIZE, combine_rows, sparse_matrix, topology_weights
from vtrepro.vocabulary.weight_tables import as_matrix, as_table

# torch and transformers are imported inside the functions, so importing this module stays fast (see transfer.py).
if TYPE_CHECKING:
    from torch import Tensor
    from transformers import PreTrainedTokenizerBase

def _wordpiece(word: str, vocab: dict[str, int], prefix: str, continuation: bool) -> list[int]:
    """Greedy longest-match-first WordPiece ids of one word; [] when a piece is missing."""
    ids, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = (prefix if start or continuation else "") + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                start = end
                break
        else:
            return []
    return ids


def source_speller(source_tokenizer: PreTrainedTokenizerBase) -> Callable[[TokenForm], list[int]]:
    """A function giving the source ids that spell a target token's text at its position."""
    scheme = vocabulary_scheme(source_tokenizer)
    normalize = text_normalizer(source_tokenizer)
    vocab = source_tokenizer.get_vocab()
    model = fast_backend(source_tokenizer).model
    unknown = source_tokenizer.unk_token_id

    def spell(form: TokenForm) -> list[int]:
        text = normalize(form.text)
        if not text:
            return []
        if scheme.continuation_prefix and scheme.word_start_marker is None:
            return _wordpiece(text, vocab, scheme.continuation_prefix, not form.word_start)
        if form.word_start and scheme.word_start_marker:
            text = scheme.word_start_marker + text
        if scheme.byte_level:
            text = "".join(BYTE_ENCODER[byte] for byte in text.encode("utf-8"))
        return [token.id for token in model.tokenize(text) if token.id != unknown]

    return spell


def subword_weights(
    source_tokenizer: PreTrainedTokenizerBase, target_tokenizer: PreTrainedTokenizerBase, new: list[int], size: int
) -> tuple[Tensor, list[int]]:
    """Sparse ``(len(new), size)`` equal weights over each token's source pieces, and the rows without any."""
    forms = token_forms(target_tokenizer, text_normalizer(target_tokenizer))
    spell = source_speller(source_tokenizer)
    rows, columns, values, missing = [], [], [], []
    for row, index in enumerate(new):
        pieces = [piece for piece in spell(forms[index]) if piece < size] if index in forms else []
        if not pieces:
            missing.append(row)
        for piece in pieces:
            rows.append(row)
            columns.append(piece)
            values.append(1.0 / len(pieces))
    return sparse_matrix(rows, columns, values, (len(new), size)), missing


def _summary(values: Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {
        "mean": round(values.mean().item(), 4),
        "median": round(values.median().item(), 4),
        "p90": round(values.quantile(0.9).item(), 4),
        "min": round(values.min().item(), 4),
        "max": round(values.max().item(), 4),
    }


@dataclass(frozen=True)
class NewRows:
    """How the rows of target tokens without a source match are made (``init`` and what it reads)."""

    init: str  # topology, subword-mean, mean or random
    temperature: float = 1.0  # topology: sparsemax temperature
    similarity: str = "cosine"  # topology: cosine, zscore or pmi
    chunk_size: int = DEFAULT_CHUNK_SIZE  # topology: target tokens per similarity chunk (memory, not results)
    seed: int = 0  # random: seed of the draws
    keep_norm: bool = True  # topology: rescale each row to the weighted norm of the overlap rows it combines
    random_std: float = 0.02  # random: standard deviation of the draws (the model's initializer_range)


def initialize_new(
    tables: dict[str, Tensor],
    source_tables: dict[str, Tensor],
    match: VocabularyMatch,
    source_tokenizer: PreTrainedTokenizerBase,
    target_tokenizer: PreTrainedTokenizerBase,
    reference: Tensor | None,
    rows: NewRows,
) -> dict[str, Any]:
    """Fill the rows of ``match.new`` in every table (in place) as ``rows`` says."""
    import torch

    overlap, new = match.overlap, match.new
    report: dict[str, Any] = {}
    if rows.init == "topology":
        assert reference is not None, "topology needs reference embeddings (transfer refuses it without --reference)"
        weights = topology_weights(reference[:len(target_tokenizer)], overlap, new, rows.temperature, rows.similarity,
                                   rows.chunk_size)
        support = torch.bincount(weights.coalesce().indices()[0], minlength=len(new))
        report["support"] = _summary(support)
        for name, table in tables.items():
            keep_norm = rows.keep_norm and table.dim() == 2
            tables[name][new] = as_table(combine_rows(weights, as_matrix(table[overlap]), keep_norm), table)
    elif rows.init == "subword-mean":
        size = source_tables["embeddings"].shape[0]
        weights, missing = subword_weights(source_tokenizer, target_tokenizer, new, size)
        report["subword_fallback_to_mean"] = len(missing)
        for name, table in tables.items():
            combined = as_table(combine_rows(weights, as_matrix(source_tables[name]), False), table)
            combined[missing] = table[overlap].mean(0)
            tables[name][new] = combined
    elif rows.init == "mean":
        for name, table in tables.items():
            tables[name][new] = table[overlap].mean(0)
    else:
        generator = torch.Generator().manual_seed(rows.seed)
        for name, table in tables.items():
            tables[name][new] = (torch.normal(0.0, rows.random_std, (len(new), *table.shape[1:]), generator=generator)
                                 if table.dim() == 2 else table[overlap].mean())
    return report
