"""Inference-free queries: a query vector is its tokens, each weighted by its IDF on a corpus.

Used with a SPLADE document encoder trained for it (``query_encoder: idf`` in a training recipe):
the score of a document is the sum over the query's distinct tokens of ``idf(t) * w_d(t)``, and no
model runs at query time. The weights live in ``idf.json`` (``{token: idf}``) beside the model.
IDF is BM25's ``log(1 + (N - df + 0.5) / (df + 0.5))``, always positive.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import torch
from huggingface_hub import hf_hub_download

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file, write_json
from vtrepro.core.progress import Progress
from vtrepro.model.encoder_options import IDF_NAME, EncoderOptions
from vtrepro.model.loading import resolve_model

# transformers is imported where a tokenizer is loaded, on purpose: training code imports this module and
# `train --help` stays fast.
if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TOKENIZE_BATCH = 1000
MAX_IDF = 100.0
"""The largest IDF an IDF table may hold: BM25's IDF of a token in one of N documents is log(1 + 2N - 1), 100
only for N near 10^43 (scifact's largest is 8.6). Past it (1e300 used to become Infinity in float32 and in
an exported idf.json) a table is refused, as is a negative or non-finite value (once clamped to 0 silently)."""
IDF_FIX = "expected {token: idf} with every idf a number in [0, 100] (BM25's IDF, as 'train' writes it)"


def check_idf_value(token: object, value: object, where: str) -> float:
    """One IDF of a table: a finite number in [0, :data:`MAX_IDF`], else one line naming ``where`` and the token."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_IDF:
        raise VtreproError(f"{where}: token {token!r} has IDF {value!r}; {IDF_FIX}")
    return float(value)


def read_idf_table(path: Path, folder: Path | None = None) -> dict[str, float]:
    """An ``idf.json`` ({token: idf}, every value checked by :func:`check_idf_value`) through the one bounded
    JSON reader (inside ``folder`` when given)."""
    table = read_json_file(path, IDF_FIX, JSON_FILE_BYTES["model"], folder)
    if not isinstance(table, dict):
        raise VtreproError(f"{path}: expected a JSON object {{token: idf}}")
    return {token: check_idf_value(token, value, str(path)) for token, value in table.items()}

SparseVector = tuple[np.ndarray, np.ndarray]


def document_frequencies(tokenizer: PreTrainedTokenizerBase, texts: Iterable[str]) -> tuple[np.ndarray, int]:
    """(document frequency per token id, number of texts); texts are tokenized whole, without special tokens."""
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    total = 0
    batch: list[str] = []
    for text in [*texts, None]:
        if text is not None:
            batch.append(text)
            if len(batch) < TOKENIZE_BATCH:
                continue
        if batch:
            for ids in tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]:
                counts[np.unique(np.asarray(ids, dtype=np.int64))] += 1
            total += len(batch)
            batch = []
    return counts, total


class IdfQueryEncoder:
    """Encode queries as ``{token id: idf}`` over their distinct non-special tokens; same interface as
    :class:`vtrepro.model.splade.SpladeEncoder` for ``kind="query"``."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, idf: dict[str, float],
                 max_length_query: int = EncoderOptions.max_length_query):
        if max_length_query < 1:
            raise VtreproError(f"max_length_query must be at least 1, got {max_length_query}")
        self.tokenizer, self.max_length_query = tokenizer, max_length_query
        self.vocabulary: list[str] = list(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
        self.special_ids: frozenset[int] = frozenset(tokenizer.all_special_ids)
        ids = tokenizer.get_vocab()
        self.weights = np.zeros(len(self.vocabulary), dtype=np.float32)
        for token, value in idf.items():
            if token not in ids:
                raise VtreproError(f"{IDF_NAME}: token {token!r} is not in the tokenizer's vocabulary; "
                                   "the IDF table belongs to another tokenizer")
            self.weights[ids[token]] = check_idf_value(token, value, IDF_NAME)
        self.weights[list(self.special_ids)] = 0.0

    @classmethod
    def from_corpus(cls, tokenizer: PreTrainedTokenizerBase, texts: Iterable[str],
                    max_length_query: int = EncoderOptions.max_length_query) -> IdfQueryEncoder:
        """IDF of every non-special token on ``texts`` (an unseen token gets the largest value)."""
        counts, total = document_frequencies(tokenizer, texts)
        if total == 0:
            raise VtreproError("cannot compute IDF on an empty corpus")
        values = np.log1p((total - counts + 0.5) / (counts + 0.5))
        vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        special = set(tokenizer.all_special_ids)
        idf = {token: float(values[i]) for i, token in enumerate(vocabulary) if i not in special}
        return cls(tokenizer, idf, max_length_query)

    @classmethod
    def load(cls, model: str | Path, model_dir: str | Path | None = None,
             max_length_query: int = EncoderOptions.max_length_query) -> IdfQueryEncoder:
        """The tokenizer and ``idf.json`` of a model folder or Hub id."""
        from transformers import AutoTokenizer

        source = resolve_model(model, model_dir)
        try:
            if Path(source).is_dir():
                folder: Path | None = Path(source)
                path = Path(source) / IDF_NAME
            else:
                folder, path = None, Path(hf_hub_download(source, IDF_NAME))
            idf = read_idf_table(path, folder)
            tokenizer = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as error:
            reason = " ".join(str(error).split())[:200]
            raise VtreproError(f"model {model}: cannot load its tokenizer and {IDF_NAME} ({reason}); "
                               f"the folder needs tokenizer files and {IDF_NAME} ({{token: idf}})") from None
        return cls(tokenizer, idf, max_length_query)

    def save(self, folder: str | Path) -> None:
        """Write ``idf.json`` ({token: idf} for every token with a positive weight, in id order)."""
        table = {self.vocabulary[i]: float(self.weights[i]) for i in np.flatnonzero(self.weights)}
        for token, value in table.items():  # never an Infinity or NaN written: JSON has neither
            check_idf_value(token, value, f"{Path(folder) / IDF_NAME} (not written)")
        write_json(Path(folder) / IDF_NAME, table)

    def encode(self, texts: Sequence[str], kind: str = "query", progress: Progress | None = None) -> list[SparseVector]:
        """Per text: (distinct token ids int64 ascending, their IDF float32 > 0); ``progress`` moves once at the end."""
        if kind != "query":
            raise VtreproError(f"IdfQueryEncoder encodes queries only (kind='query'), got kind={kind!r}")
        encoded = self.tokenizer(list(texts), add_special_tokens=False, truncation=True,
                                 max_length=self.max_length_query)["input_ids"]
        vectors = []
        for ids in encoded:
            ids = np.unique(np.asarray(ids, dtype=np.int64))
            ids = ids[self.weights[ids] > 0]
            vectors.append((ids, self.weights[ids]))
        if progress is not None:
            progress.update(len(vectors))
        return vectors

    def dense(self, texts: Sequence[str], size: int) -> torch.Tensor:
        """(n, size) float32 query vectors, for scoring against model outputs of ``size`` terms."""
        vectors = torch.zeros(len(texts), size)
        for row, (ids, weights) in enumerate(self.encode(texts)):
            vectors[row, torch.from_numpy(ids)] = torch.from_numpy(weights)
        return vectors
