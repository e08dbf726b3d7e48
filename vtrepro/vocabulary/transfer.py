"""Vocabulary transfer (VT): move a masked-LM encoder onto another, normalized vocabulary.

``python -m vtrepro transfer --source answerdotai/ModernBERT-base --target-tokenizer bert-base-uncased
--init topology --out runs/modernbert-vt`` writes a checkpoint that loads with
``AutoModelForMaskedLM`` / ``AutoTokenizer``, plus ``transfer_report.json``.

Steps (docs/vocabulary-transfer.md has the formulas):

1. Overlap: every vocabulary entry is reduced to its text (WordPiece ``##``, byte-level ``Ġ`` and
   SentencePiece ``▁`` markers removed, GPT-2 byte characters decoded, the target tokenizer's
   normalizer applied) and its position (word start or continuation). A target token whose text
   matches one source token at its position copies that row; one matching several gets their
   norm-preserving weighted mean (weights in :func:`merge_weights`).
2. Remaining target tokens: ``topology`` (sparsemax over reference-space similarities to the
   overlap tokens), or the ablations ``subword-mean``, ``mean``, ``random``.
3. Decoder and bias: a tied decoder follows the embeddings, an untied one is built the same way;
   the bias is the reference's MLM bias mapped onto the source bias distribution (z-score), or
   transferred like the rows when the reference has no MLM head.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from vtrepro.core.cli import cli_entry, command_parser, non_negative_int, open_fraction, positive_float, positive_int
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import write_json

# torch, transformers and tokenizers are imported where they are used, on purpose: `--help`, argument
# errors and the spec and recipe loaders (which import INITS and SIMILARITIES) stay fast.
if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from torch import Tensor
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

INITS = ("topology", "subword-mean", "mean", "random")
SIMILARITIES = ("cosine", "zscore", "pmi")
REPORT_NAME = "transfer_report.json"
DEFAULT_TARGET = "bert-base-uncased"
DEFAULT_CHUNK_SIZE = 512
SAME_POSITION_WEIGHT = 2.0
SAME_SPELLING_WEIGHT = 2.0
MIN_VOCABULARY = 100

ROLES = ("cls", "sep", "pad", "mask", "unk", "bos", "eos")
ROLE_FALLBACK = {
    "cls": ("cls", "bos"),
    "sep": ("sep", "eos"),
    "bos": ("bos", "cls"),
    "eos": ("eos", "sep"),
    "pad": ("pad",),
    "mask": ("mask",),
    "unk": ("unk",),
}
SPECIAL_NAMES = {
    "[CLS]": "cls", "<cls>": "cls", "[SEP]": "sep", "<sep>": "sep", "<s>": "bos", "</s>": "eos",
    "[PAD]": "pad", "<pad>": "pad", "[MASK]": "mask", "<mask>": "mask", "[UNK]": "unk", "<unk>": "unk",
}
CONFIG_ROLE_KEYS = {f"{role}_token_id": role for role in ROLES}


# ---------------------------------------------------------------------------- canonical forms


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (``Ġ`` is the space byte)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, characters)))


BYTE_ENCODER = _bytes_to_unicode()
BYTE_DECODER = {character: byte for byte, character in BYTE_ENCODER.items()}


def decode_byte_level(token: str) -> str | None:
    """Text of a byte-level BPE token, or None when it is not whole UTF-8 (a partial character)."""
    try:
        return bytes(BYTE_DECODER[character] for character in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class TokenForm:
    """A vocabulary entry without its marker: ``spelling`` as stored, ``text`` normalized."""

    spelling: str
    text: str
    word_start: bool


@dataclass(frozen=True)
class VocabularyScheme:
    """How a vocabulary marks word boundaries.

    ``unmarked_word_start``: the first word of a text gets no marker (byte-level BPE without
    ``add_prefix_space``), so unmarked entries start words too.
    """

    continuation_prefix: str | None = None
    word_start_marker: str | None = None
    byte_level: bool = False
    unmarked_word_start: bool = False

    def split(self, token: str) -> tuple[str, bool] | None:
        """``(spelling, word_start)`` of an entry; None for one without text (a lone marker, a byte piece)."""
        if self.byte_level:
            token = decode_byte_level(token)
            if token is None:
                return None
        prefix, marker = self.continuation_prefix, self.word_start_marker
        if prefix and token.startswith(prefix) and len(token) > len(prefix):
            spelling, word_start = token[len(prefix):], False
        elif marker:
            word_start = token.startswith(marker)
            spelling = token[len(marker):] if word_start else token
        else:
            spelling, word_start = token, True
        return (spelling, word_start) if spelling.strip() else None

    def can_start_word(self, form: TokenForm) -> bool:
        """Whether the entry can begin a word."""
        return form.word_start or self.unmarked_word_start


def _components(node: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """A tokenizer.json component and the members of any ``Sequence`` inside it."""
    if not node:
        return
    yield node
    for key in ("pretokenizers", "decoders", "normalizers"):
        for member in node.get(key) or []:
            yield from _components(member)


def _backend(tokenizer: PreTrainedTokenizerBase) -> Tokenizer:
    """The tokenizers-library object behind a fast tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise VtreproError(f"{type(tokenizer).__name__} {tokenizer.name_or_path}: not a fast tokenizer; "
                           "vocabulary transfer needs one with a tokenizer.json")
    return backend


def vocabulary_scheme(tokenizer: PreTrainedTokenizerBase) -> VocabularyScheme:
    """Detect WordPiece ``##``, byte-level BPE and SentencePiece ``▁`` vocabularies from tokenizer.json."""
    spec = json.loads(_backend(tokenizer).to_str())
    splitters = list(_components(spec.get("pre_tokenizer")))
    parts = [*splitters, *_components(spec.get("decoder"))]
    model = spec["model"]
    prefix = model.get("continuing_subword_prefix") or ("##" if model["type"] == "WordPiece" else None)
    byte_level = [part for part in splitters if part["type"] == "ByteLevel"]
    if byte_level or any(part["type"] == "ByteLevel" for part in parts):
        unmarked = bool(byte_level) and not byte_level[0].get("add_prefix_space", False)
        return VocabularyScheme(prefix, " ", byte_level=True, unmarked_word_start=unmarked)
    metaspace = next((part for part in parts if part["type"] == "Metaspace"), None)
    if metaspace is not None:
        unmarked = metaspace.get("prepend_scheme") == "never" or metaspace.get("add_prefix_space") is False
        return VocabularyScheme(prefix, metaspace.get("replacement", "▁"), unmarked_word_start=unmarked)
    tokens = list(tokenizer.get_vocab())
    if prefix is None and sum(token.startswith("▁") for token in tokens) > 0.2 * len(tokens):
        return VocabularyScheme(None, "▁")
    return VocabularyScheme(prefix)


def text_normalizer(tokenizer: PreTrainedTokenizerBase) -> Callable[[str], str]:
    """The tokenizer's own normalization (case folding, accent stripping, ...) followed by strip()."""
    normalizer = _backend(tokenizer).normalizer
    if normalizer is None:
        return str.strip
    return lambda text: normalizer.normalize_str(text).strip()


def special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids of special tokens: the named ones and every added token flagged special."""
    ids = set(tokenizer.all_special_ids)
    ids.update(index for index, added in tokenizer.added_tokens_decoder.items() if added.special)
    return ids


def special_roles(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """``{role: id}`` for cls/sep/pad/mask/unk/bos/eos, from the tokenizer's attributes or well-known names."""
    roles = {}
    for role in ROLES:
        index = getattr(tokenizer, f"{role}_token_id", None)
        if isinstance(index, int):
            roles[role] = index
    for index, added in tokenizer.added_tokens_decoder.items():
        role = SPECIAL_NAMES.get(added.content)
        if role and added.special:
            roles.setdefault(role, index)
    return roles


def _role_id(roles: dict[str, int], role: str) -> int | None:
    return next((roles[name] for name in ROLE_FALLBACK[role] if name in roles), None)


def token_forms(tokenizer: PreTrainedTokenizerBase, normalize: Callable[[str], str]) -> dict[int, TokenForm]:
    """``{id: TokenForm}`` for every non-special entry that has text; added tokens are taken literally."""
    scheme = vocabulary_scheme(tokenizer)
    added = tokenizer.added_tokens_decoder
    skip = special_ids(tokenizer)
    forms = {}
    for token, index in tokenizer.get_vocab().items():
        if index in skip:
            continue
        parts = (token.strip(), True) if index in added else scheme.split(token)
        if not parts or not parts[0]:
            continue
        text = normalize(parts[0])
        if text:
            forms[index] = TokenForm(parts[0], text, parts[1])
    return forms


# ---------------------------------------------------------------------------- overlap


@dataclass
class VocabularyMatch:
    """Where each target row comes from."""

    special: dict[int, int] = field(default_factory=dict)
    exact: dict[int, int] = field(default_factory=dict)
    merged: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    new: list[int] = field(default_factory=list)

    @property
    def overlap(self) -> list[int]:
        """Target ids whose rows come from matching source tokens, sorted."""
        return sorted([*self.exact, *self.merged])


def merge_weights(target: TokenForm, candidates: list[tuple[int, TokenForm]]) -> list[tuple[int, float]]:
    """Normalized weights ``(2 if same position else 1) * (2 if same spelling else 1)`` of merged source rows."""
    raw = [
        (index, (SAME_POSITION_WEIGHT if form.word_start == target.word_start else 1.0)
         * (SAME_SPELLING_WEIGHT if form.spelling == target.spelling else 1.0))
        for index, form in candidates
    ]
    total = sum(weight for _, weight in raw)
    return [(index, weight / total) for index, weight in raw]


def match_vocabularies(
    source_tokenizer: PreTrainedTokenizerBase, target_tokenizer: PreTrainedTokenizerBase
) -> VocabularyMatch:
    """Pair every target id with its source rows: special equivalents, exact copies, merges, or new.

    A target token's candidates are the source tokens with the same normalized text at the same
    position (word start / continuation); unmarked source tokens also count as word starts when
    the source leaves a text's first word unmarked.
    """
    normalize = text_normalizer(target_tokenizer)
    scheme = vocabulary_scheme(source_tokenizer)
    by_text: dict[str, list[tuple[int, TokenForm]]] = defaultdict(list)
    for index, form in sorted(token_forms(source_tokenizer, normalize).items()):
        by_text[form.text].append((index, form))
    source_roles = special_roles(source_tokenizer)
    match = VocabularyMatch()
    for role, index in special_roles(target_tokenizer).items():
        source_index = _role_id(source_roles, role)
        if source_index is not None:
            match.special.setdefault(index, source_index)
    target_forms = token_forms(target_tokenizer, normalize)
    for index in range(len(target_tokenizer)):
        if index in match.special:
            continue
        form = target_forms.get(index)
        candidates = [
            (source, source_form) for source, source_form in (by_text.get(form.text, []) if form else [])
            if (scheme.can_start_word(source_form) if form.word_start else not source_form.word_start)
        ]
        if len(candidates) == 1:
            match.exact[index] = candidates[0][0]
        elif candidates:
            match.merged[index] = merge_weights(form, candidates)
        else:
            match.new.append(index)
    return match


# ---------------------------------------------------------------------------- topology


def _sparsemax_threshold(ordered: Tensor) -> tuple[Tensor, Tensor]:
    """Threshold tau and support size from scores sorted descending along the last dim.

    A sorted prefix is enough when it is longer than the support.
    """
    import torch

    cumulative = ordered.cumsum(dim=-1) - 1
    ranks = torch.arange(1, ordered.shape[-1] + 1, dtype=ordered.dtype, device=ordered.device)
    support = (ranks * ordered > cumulative).sum(dim=-1, keepdim=True)
    return cumulative.gather(-1, support - 1) / support, support


def sparsemax(scores: Tensor, dim: int = -1) -> Tensor:
    """Euclidean projection onto the probability simplex (Martins & Astudillo 2016), by sorting:
    ``max(z - tau, 0)`` with ``tau`` such that the result sums to 1.

    Rows are independent, so a large score matrix can be processed chunk by chunk.
    """
    z = scores.movedim(dim, -1)
    threshold, _ = _sparsemax_threshold(z.sort(dim=-1, descending=True).values)
    return (z - threshold).clamp_min(0).movedim(-1, dim)


def sparse_sparsemax(scores: Tensor, candidates: int = 256) -> tuple[Tensor, Tensor, Tensor]:
    """Row-wise sparsemax of a 2-D tensor as ``(rows, columns, values)`` of its non-zeros.

    Sorts only the top ``candidates`` scores per row (doubling them while some support fills
    them), which gives the same result as :func:`sparsemax` without sorting whole rows.
    """
    import torch

    width = min(candidates, scores.shape[-1])
    while True:
        top, columns = scores.topk(width, dim=-1)
        threshold, support = _sparsemax_threshold(top)
        if width == scores.shape[-1] or bool((support < width).all()):
            break
        width = min(2 * width, scores.shape[-1])
    rows, ranks = (torch.arange(width) < support).nonzero(as_tuple=True)
    return rows, columns[rows, ranks], (top - threshold)[rows, ranks]


def _scores(queries: Tensor, keys: Tensor, temperature: float, similarity: str, log_prior: Tensor | None) -> Tensor:
    """Similarity logits of unit-norm ``queries`` to unit-norm ``keys``, divided by the temperature."""
    cosine = queries @ keys.T
    if similarity == "zscore":
        cosine = (cosine - cosine.mean(-1, keepdim=True)) / cosine.std(-1, keepdim=True).clamp_min(1e-6)
    logits = cosine / temperature
    return logits - log_prior if log_prior is not None else logits


def topology_weights(
    reference: Tensor,
    overlap: list[int],
    new: list[int],
    temperature: float = 1.0,
    similarity: str = "cosine",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Tensor:
    """Sparse ``(len(new), len(overlap))`` sparsemax weights from cosine similarity in ``reference`` space.

    ``pmi`` subtracts ``log p(j)``, the mean over new tokens of ``softmax(cos/T)``, from the logits
    (one extra pass), down-weighting overlap tokens that are close to everything.
    """
    import torch
    import torch.nn.functional as F

    unit = F.normalize(reference.float(), dim=-1)
    keys = unit[overlap]
    chunks = [new[start:start + chunk_size] for start in range(0, len(new), chunk_size)]
    log_prior = None
    if similarity == "pmi":
        prior = torch.zeros(len(overlap))
        for chunk in chunks:
            prior += _scores(unit[chunk], keys, temperature, "cosine", None).softmax(-1).sum(0)
        log_prior = (prior / len(new)).log()
    rows, columns, values = [], [], []
    offset = 0
    for chunk in chunks:
        row, column, value = sparse_sparsemax(_scores(unit[chunk], keys, temperature, similarity, log_prior))
        rows.append(row + offset)
        columns.append(column)
        values.append(value)
        offset += len(chunk)
    indices = torch.stack([torch.cat(rows), torch.cat(columns)]) if rows else torch.zeros(2, 0, dtype=torch.long)
    data = torch.cat(values) if values else torch.zeros(0)
    return torch.sparse_coo_tensor(indices, data, (len(new), len(overlap)), check_invariants=False)


def _sparse(rows: list[int], columns: list[int], values: list[float], shape: tuple[int, int]) -> Tensor:
    import torch

    indices = torch.tensor([rows, columns], dtype=torch.long)
    return torch.sparse_coo_tensor(indices, torch.tensor(values), shape, check_invariants=False)


def combine_rows(weights: Tensor, table: Tensor, keep_norm: bool) -> Tensor:
    """``weights @ table`` (sparse weights summing to 1 per row); with ``keep_norm`` each result is
    rescaled to the weighted mean norm of the rows it combines."""
    import torch

    combined = torch.sparse.mm(weights, table)
    if keep_norm:
        norms = torch.sparse.mm(weights, table.norm(dim=1, keepdim=True))
        combined = combined * (norms / combined.norm(dim=1, keepdim=True).clamp_min(1e-12))
    return combined


# ---------------------------------------------------------------------------- ablations


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
    model = _backend(source_tokenizer).model
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
    return _sparse(rows, columns, values, (len(new), size)), missing


# ---------------------------------------------------------------------------- transfer


def _source_tables(model: PreTrainedModel) -> tuple[dict[str, Tensor], bool]:
    """Float32 copies of the vocabulary-indexed weights and whether the decoder is tied."""
    embeddings = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head.weight.data_ptr() == embeddings.data_ptr()
    tables = {"embeddings": embeddings.detach().float().clone()}
    if not tied:
        tables["decoder"] = head.weight.detach().float().clone()
    if head.bias is not None:
        tables["bias"] = head.bias.detach().float().clone()
    return tables, tied


def _known_rows(table: Tensor, match: VocabularyMatch, size: int) -> Tensor:
    """Target-indexed table with special, exact and merged rows filled (merges keep the norm for matrices)."""
    out = table.new_zeros((size, *table.shape[1:]))
    copies = {**match.special, **match.exact}
    if copies:
        out[list(copies)] = table[list(copies.values())]
    if match.merged:
        targets = list(match.merged)
        rows = [row for row, index in enumerate(targets) for _ in match.merged[index]]
        columns = [source for index in targets for source, _ in match.merged[index]]
        values = [weight for index in targets for _, weight in match.merged[index]]
        weights = _sparse(rows, columns, values, (len(targets), table.shape[0]))
        out[targets] = _as_table(combine_rows(weights, _as_matrix(table), table.dim() == 2), table)
    return out


def _as_matrix(table: Tensor) -> Tensor:
    return table if table.dim() == 2 else table[:, None]


def _as_table(rows: Tensor, like: Tensor) -> Tensor:
    return rows if like.dim() == 2 else rows[:, 0]


def _zscore_map(
    reference_bias: Tensor, source_bias: Tensor, reference_rows: list[int], source_rows: list[int]
) -> tuple[Tensor, dict[str, float]]:
    """``(b_ref - mean_ref) / std_ref * std_src + mean_src`` as ``b_ref * scale + shift``, in float64."""
    reference, source = reference_bias.double(), source_bias.double()
    scale = (source[source_rows].std() / reference[reference_rows].std()).item()
    shift = (source[source_rows].mean() - scale * reference[reference_rows].mean()).item()
    return (reference * scale + shift).float(), {"scale": scale, "shift": shift}


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


def _check_options(init: str, temperature: float, similarity: str, chunk_size: int) -> None:
    if init not in INITS:
        raise VtreproError(f"unknown --init '{init}'; choose one of {', '.join(INITS)}")
    if similarity not in SIMILARITIES:
        raise VtreproError(f"unknown --similarity '{similarity}'; choose one of {', '.join(SIMILARITIES)}")
    if not temperature > 0:
        raise VtreproError(f"--temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise VtreproError(f"--chunk-size must be >= 1, got {chunk_size}")


def transfer_vocabulary(
    source_model: PreTrainedModel,
    source_tokenizer: PreTrainedTokenizerBase,
    target_tokenizer: PreTrainedTokenizerBase,
    reference_embeddings: Tensor | None,
    reference_decoder_bias: Tensor | None = None,
    init: str = "topology",
    temperature: float = 1.0,
    similarity: str = "cosine",
    target_norm: bool = False,
    seed: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[PreTrainedModel, dict[str, Any]]:
    """Move ``source_model`` (in place) onto ``target_tokenizer``'s vocabulary; return it and a report.

    ``reference_embeddings`` are the input embeddings of a model that uses the target vocabulary
    (row i = target id i; any hidden size): only their cosine geometry is used.
    """
    _check_options(init, temperature, similarity, chunk_size)
    started = time.perf_counter()
    size = len(target_tokenizer)
    if reference_embeddings is None and (init == "topology" or target_norm):
        raise VtreproError(f"--init {init}{' with --target-norm' if target_norm else ''} needs a --reference model")
    if reference_embeddings is not None and reference_embeddings.shape[0] < size:
        raise VtreproError(
            f"reference has {reference_embeddings.shape[0]} embedding rows but the target vocabulary has {size} tokens"
        )
    match = match_vocabularies(source_tokenizer, target_tokenizer)
    overlap, new = match.overlap, match.new
    if not overlap:
        raise VtreproError("no target token matches a source token; check --source and --target-tokenizer")
    source_tables, tied = _source_tables(source_model)
    tables = {name: _known_rows(table, match, size) for name, table in source_tables.items()}

    report: dict[str, Any] = {}
    if new:
        report.update(_initialize_new(tables, source_tables, match, source_tokenizer, target_tokenizer,
                                      reference_embeddings, init, temperature, similarity, chunk_size,
                                      seed, source_model.config))
    special_rows = sorted(match.special)
    ordinary = [index for index in range(size) if index not in match.special]
    if "bias" in tables and reference_decoder_bias is not None:
        source_ordinary = sorted(set(range(source_tables["bias"].shape[0])) - special_ids(source_tokenizer))
        tables["bias"], report["bias_map"] = _zscore_map(reference_decoder_bias[:size], source_tables["bias"],
                                                         ordinary, source_ordinary)
        tables["bias"][special_rows] = source_tables["bias"][[match.special[i] for i in special_rows]]
    norm_scale = None
    if target_norm:
        norm_scale = (reference_embeddings[overlap].float().norm(dim=1).mean()
                      / tables["embeddings"][overlap].norm(dim=1).mean()).item()
        tables = {name: table * norm_scale for name, table in tables.items()}
    install_vocabulary(source_model, tables, special_roles(target_tokenizer))

    norms = tables["embeddings"].norm(dim=1)
    report.update({
        "vocabulary": {"source": len(source_tokenizer), "target": size},
        "counts": {"special": len(match.special), "exact": len(match.exact), "merged": len(match.merged),
                   "new": len(new), "merged_sources_mean": round(
                       sum(map(len, match.merged.values())) / max(len(match.merged), 1), 3)},
        "decoder": "tied" if tied else "untied",
        "bias": "none" if "bias" not in tables else
                "reference z-score map" if reference_decoder_bias is not None else "transferred",
        "norms": {
            "source_mean": round(source_tables["embeddings"].norm(dim=1).mean().item(), 4),
            "overlap_mean": round(norms[overlap].mean().item(), 4),
            "new_mean": round(norms[new].mean().item(), 4) if new else None,
            "reference_overlap_mean": None if reference_embeddings is None
            else round(reference_embeddings[overlap].float().norm(dim=1).mean().item(), 4),
            "target_norm_scale": norm_scale,
        },
        "options": {"init": init, "temperature": temperature, "similarity": similarity,
                    "target_norm": target_norm, "seed": seed, "chunk_size": chunk_size},
        "seconds": round(time.perf_counter() - started, 2),
    })
    return source_model, report


def _initialize_new(
    tables: dict[str, Tensor],
    source_tables: dict[str, Tensor],
    match: VocabularyMatch,
    source_tokenizer: PreTrainedTokenizerBase,
    target_tokenizer: PreTrainedTokenizerBase,
    reference: Tensor | None,
    init: str,
    temperature: float,
    similarity: str,
    chunk_size: int,
    seed: int,
    config: Any,
) -> dict[str, Any]:
    """Fill the rows of ``match.new`` in every table (in place) with the chosen initializer."""
    import torch

    overlap, new = match.overlap, match.new
    report: dict[str, Any] = {}
    if init == "topology":
        weights = topology_weights(reference[:len(target_tokenizer)], overlap, new, temperature, similarity, chunk_size)
        support = torch.bincount(weights.coalesce().indices()[0], minlength=len(new))
        report["support"] = _summary(support)
        for name, table in tables.items():
            tables[name][new] = _as_table(combine_rows(weights, _as_matrix(table[overlap]), table.dim() == 2), table)
    elif init == "subword-mean":
        size = source_tables["embeddings"].shape[0]
        weights, missing = subword_weights(source_tokenizer, target_tokenizer, new, size)
        report["subword_fallback_to_mean"] = len(missing)
        for name, table in tables.items():
            rows = _as_table(combine_rows(weights, _as_matrix(source_tables[name]), False), table)
            rows[missing] = table[overlap].mean(0)
            tables[name][new] = rows
    elif init == "mean":
        for name, table in tables.items():
            tables[name][new] = table[overlap].mean(0)
    else:
        generator = torch.Generator().manual_seed(seed)
        std = getattr(config, "initializer_range", 0.02)
        for name, table in tables.items():
            tables[name][new] = (torch.normal(0.0, std, (len(new), *table.shape[1:]), generator=generator)
                                 if table.dim() == 2 else table[overlap].mean())
    return report


def install_vocabulary(model: PreTrainedModel, tables: dict[str, Tensor], roles: dict[str, int]) -> None:
    """Resize ``model`` to the tables' vocabulary, copy the rows in and point the config's token ids at ``roles``."""
    import torch

    old_pad = model.config.pad_token_id
    shared_before = _sharing(model)
    model.resize_token_embeddings(tables["embeddings"].shape[0], mean_resizing=False)
    head = model.get_output_embeddings()
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(tables["embeddings"])
        if "decoder" in tables:
            head.weight.copy_(tables["decoder"])
        if "bias" in tables:
            head.bias.copy_(tables["bias"])
    _unshare_new_ties(model, shared_before)
    for key, role in CONFIG_ROLE_KEYS.items():
        if getattr(model.config, key, None) is not None or (key == "pad_token_id" and "pad" in roles):
            setattr(model.config, key, _role_id(roles, role))
    new_pad = model.config.pad_token_id
    model.get_input_embeddings().padding_idx = new_pad
    if old_pad is not None and new_pad is not None and old_pad != new_pad:
        _move_padding(model, old_pad, new_pad)


def _sharing(model: PreTrainedModel) -> dict[str, int]:
    """``{parameter name: id}`` with every name of a shared parameter."""
    return {name: id(param) for name, param in model.named_parameters(remove_duplicate=False)}


def _unshare_new_ties(model: PreTrainedModel, before: dict[str, int]) -> None:
    """Give back separate parameters to names that ``resize_token_embeddings`` tied together.

    It ties an untied BERT's ``decoder.bias`` to ``cls.predictions.bias``; saved once, that bias
    would then be missing when the untied checkpoint is loaded.
    """
    import torch

    owners: dict[int, str] = {}
    retie = []
    for name, param in model.named_parameters(remove_duplicate=False):
        first = owners.setdefault(id(param), name)
        if first != name and before.get(first) != before.get(name):
            retie.append((name, param))
    for name, param in retie:
        module, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(module), leaf, torch.nn.Parameter(param.detach().clone()))


def _move_padding(model: PreTrainedModel, old_pad: int, new_pad: int) -> None:
    """Follow a new pad id, keeping RoBERTa-style positions (which start at ``pad + 1``) unchanged."""
    import torch

    for module in model.modules():
        if getattr(module, "padding_idx", None) != old_pad:
            continue
        module.padding_idx = new_pad
        positions = getattr(module, "position_embeddings", None)
        if hasattr(module, "create_position_ids_from_input_ids") and isinstance(positions, torch.nn.Embedding):
            with torch.no_grad():
                positions.weight.copy_(positions.weight.roll(new_pad - old_pad, dims=0))
            positions.padding_idx = new_pad


# ---------------------------------------------------------------------------- loading and saving


def load_tokenizer(name_or_path: str | Path, model_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """A fast tokenizer from a folder, a Hub id or a ``tokenizer.json`` file; its size is checked.

    A ``tokenizer.json`` is wrapped in PreTrainedTokenizerFast(tokenizer_file=...), with the roles of
    well-known special tokens ([CLS], <s>, ...) set from their names.
    """
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from vtrepro.model.loading import resolve_model

    file = Path(str(name_or_path)).expanduser()
    folder = Path(resolve_model(name_or_path, model_dir))
    try:
        if file.is_file():
            backend = Tokenizer.from_file(str(file))
            names = {f"{SPECIAL_NAMES[added.content]}_token": added.content
                     for added in backend.get_added_tokens_decoder().values()
                     if added.special and added.content in SPECIAL_NAMES}
            tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(file), **names)
        else:
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as error:  # tokenizers raises plain Exception for a malformed tokenizer.json
        reason = " ".join(str(error).split())[:300]
        raise VtreproError(f"target tokenizer {name_or_path}: cannot load ({reason}); pass a tokenizer folder, "
                           "a Hub id or a tokenizer.json file") from None
    expected = _backend(tokenizer).get_vocab_size(with_added_tokens=True)
    if (folder / "vocab.txt").is_file() and not file.is_file():
        with open(folder / "vocab.txt", encoding="utf-8") as handle:
            expected = max(expected, sum(1 for _ in handle))
    if len(tokenizer) != expected or len(tokenizer) < MIN_VOCABULARY:
        raise VtreproError(f"target tokenizer {name_or_path}: loaded {len(tokenizer)} tokens, expected {expected}; "
                           "load it from its folder or its tokenizer.json")
    return tokenizer


def load_reference(
    name_or_path: str | Path, target_tokenizer: PreTrainedTokenizerBase, model_dir: str | Path | None = None
) -> tuple[Tensor, Tensor | None]:
    """Input embeddings of a model on the target vocabulary, and its MLM decoder bias when it has one."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from vtrepro.model.loading import resolve_model

    path = resolve_model(name_or_path, model_dir)
    try:
        config = AutoConfig.from_pretrained(path)
        masked = any(name.endswith("ForMaskedLM") for name in config.architectures or [])
        loader = AutoModelForMaskedLM if masked else AutoModel
        model, info = loader.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError, KeyError, ImportError) as error:
        reason = " ".join(str(error).split())[:300]
        raise VtreproError(f"reference {name_or_path}: cannot load {path} ({reason}); pass a model folder that uses "
                           "the target vocabulary with --reference") from None
    try:
        reference_vocab = AutoTokenizer.from_pretrained(path).get_vocab()
    except (OSError, ValueError, KeyError, ImportError):
        reference_vocab = None
    if reference_vocab is not None and reference_vocab != target_tokenizer.get_vocab():
        raise VtreproError(f"reference {name_or_path}: its tokenizer ({len(reference_vocab)} tokens) differs from the "
                           f"target tokenizer ({len(target_tokenizer)}); the reference must use the target vocabulary")
    embeddings = model.get_input_embeddings().weight.detach().float()
    head = model.get_output_embeddings() if masked else None
    bias = None
    if head is not None and head.bias is not None and not info["missing_keys"]:
        bias = head.bias.detach().float()
    return embeddings, bias


def check_out(out: str | Path) -> Path:
    """``out`` as a Path; it must not exist or be an empty folder."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise VtreproError(f"{out} already exists and is not empty; remove it or choose another --out")
    return out


def save_checkpoint(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, report: dict[str, Any],
                    report_name: str, out: str | Path) -> None:
    """Write model, tokenizer and report to a temporary folder beside ``out``, then rename it to ``out``."""
    out = check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(temporary)
        tokenizer.save_pretrained(temporary)
        write_json(temporary / report_name, report)
        if out.is_dir():
            out.rmdir()
        os.rename(temporary, out)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _adapt_tokenizer(target: PreTrainedTokenizerBase, source: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """``target``, changed in place to the source model's input names (no token_type_ids for
    RoBERTa/ModernBERT) and, when the source sets one, its maximum length."""
    names = list(source.model_input_names)
    target.model_input_names = names
    target.init_kwargs["model_input_names"] = names
    if source.model_max_length < 1e9:
        target.model_max_length = source.model_max_length
    return target


def run_transfer(
    source: str | Path,
    target_tokenizer: str | Path,
    reference: str | Path | None,
    init: str,
    out: str | Path,
    temperature: float = 1.0,
    similarity: str = "cosine",
    target_norm: bool = False,
    seed: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    model_dir: str | Path | None = None,
    leaveout: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Load, transfer, and save a checkpoint with ``transfer_report.json`` to ``out``; return the report.

    ``reference=None`` means the target tokenizer's own model, or none for a ``tokenizer.json``.
    ``leaveout={"fraction": f, "seed": s}`` first removes a seeded share of the source's tokens
    (:func:`make_leaveout_source`, the leave-out experiment); the report lists the held-out tokens.
    """
    from vtrepro.model.loading import load_masked_lm, resolve_model

    _check_options(init, temperature, similarity, chunk_size)
    check_out(out)
    held_out: list[str] = []
    if leaveout is None:
        model, source_tokenizer = load_masked_lm(source, model_dir)
    else:
        model, source_tokenizer, held_out = make_leaveout_source(resolve_model(source, model_dir), **leaveout)
    target = load_tokenizer(target_tokenizer, model_dir)
    if reference is None and not Path(str(target_tokenizer)).is_file():
        reference = target_tokenizer
    embeddings, bias = load_reference(reference, target, model_dir) if reference is not None else (None, None)
    model, report = transfer_vocabulary(model, source_tokenizer, target, embeddings, bias, init, temperature,
                                        similarity, target_norm, seed, chunk_size)
    report = {"source": str(source), "target_tokenizer": str(target_tokenizer),
              "reference": None if reference is None else str(reference), **report}
    if leaveout is not None:
        report["leaveout"] = {**leaveout, "held_out": held_out}
    save_checkpoint(model, _adapt_tokenizer(target, source_tokenizer), report, REPORT_NAME, out)
    return report


# ---------------------------------------------------------------------------- leave-out experiment


def _restricted_tokenizer(tokenizer: PreTrainedTokenizerBase, kept: list[str]) -> PreTrainedTokenizerBase:
    """The same WordPiece tokenizer over ``kept`` tokens only, with new contiguous ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(_backend(tokenizer).to_str())
    vocab = {token: index for index, token in enumerate(kept)}
    spec["model"]["vocab"] = vocab
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    processor = spec.get("post_processor") or {}
    for special in processor.get("special_tokens", {}).values():  # TemplateProcessing
        special["ids"] = [vocab[token] for token in special["tokens"]]
    for key in ("cls", "sep"):  # BertProcessing / RobertaProcessing
        if key in processor:
            processor[key][1] = vocab[processor[key][0]]
    roles = {f"{role}_token": getattr(tokenizer, f"{role}_token") for role in ROLES
             if getattr(tokenizer, f"{role}_token_id", None) is not None}
    restricted = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                         model_max_length=tokenizer.model_max_length, **roles)
    if len(restricted) != len(kept):
        raise VtreproError(f"restricted tokenizer has {len(restricted)} tokens, expected {len(kept)}")
    return restricted


def make_leaveout_source(
    model_path: str | Path, fraction: float = 0.1, seed: int = 0
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, list[str]]:
    """A WordPiece masked LM with a seeded ``fraction`` of its ordinary tokens removed.

    Special tokens, ``[unused*]``, single characters and ``##`` + one character are always kept.
    Returns the smaller model (rows gathered, new contiguous ids), its tokenizer and the held-out tokens.
    """
    import torch

    from vtrepro.model.loading import load_masked_lm

    model, tokenizer = load_masked_lm(model_path)
    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    skip = special_ids(tokenizer)
    eligible = [index for index, token in enumerate(tokens)
                if index not in skip and not token.startswith("[unused") and len(token.removeprefix("##")) > 1]
    order = torch.randperm(len(eligible), generator=torch.Generator().manual_seed(seed))
    held = {eligible[i] for i in order[:round(fraction * len(eligible))].tolist()}
    kept = [index for index in range(len(tokens)) if index not in held]
    restricted = _restricted_tokenizer(tokenizer, [tokens[index] for index in kept])
    tables, _ = _source_tables(model)
    install_vocabulary(model, {name: table[kept] for name, table in tables.items()}, special_roles(restricted))
    return model, restricted, [tokens[index] for index in sorted(held)]


# ---------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("transfer", __doc__)
    parser.add_argument("--source", required=True, help="masked-LM checkpoint (folder or Hub id)")
    parser.add_argument("--target-tokenizer", default=DEFAULT_TARGET,
                        help="tokenizer folder, Hub id or tokenizer.json (default: %(default)s)")
    parser.add_argument("--reference", default=None,
                        help="model on the target vocabulary whose embedding geometry guides the topology init "
                             "(default: the target tokenizer's model; none for a tokenizer.json)")
    parser.add_argument("--init", choices=INITS, default="topology",
                        help="initializer of target tokens without a source match (default: %(default)s)")
    parser.add_argument("--out", required=True, type=Path, help="output folder (must not exist or be empty)")
    parser.add_argument("--temperature", type=positive_float, default=1.0,
                        help="sparsemax temperature, > 0 (default: 1.0)")
    parser.add_argument("--similarity", choices=SIMILARITIES, default="cosine",
                        help="topology scores: cosine, per-token z-scored cosine, or cosine minus log prior "
                             "(default: %(default)s)")
    parser.add_argument("--target-norm", action="store_true",
                        help="rescale rows and bias so the mean overlap-row norm equals the reference's")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of --init random (default: 0)")
    parser.add_argument("--chunk-size", type=positive_int, default=DEFAULT_CHUNK_SIZE,
                        help="target tokens per similarity chunk (default: %(default)s)")
    parser.add_argument("--model-dir", default=None, help="folder of local models for Hub ids (else $VTREPRO_MODELS)")
    parser.add_argument("--leaveout", type=open_fraction, default=None, metavar="FRACTION",
                        help="leave-out experiment: first remove this seeded share (0 < FRACTION < 1) of the "
                             "source's ordinary WordPiece tokens, then transfer back onto the target")
    parser.add_argument("--leaveout-seed", type=non_negative_int, default=0, help="seed of --leaveout (default: 0)")
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    leaveout = None if args.leaveout is None else {"fraction": args.leaveout, "seed": args.leaveout_seed}
    report = run_transfer(args.source, args.target_tokenizer, args.reference, args.init, args.out,
                          args.temperature, args.similarity, args.target_norm, args.seed, args.chunk_size,
                          args.model_dir, leaveout)
    counts = report["counts"]
    print(f"{args.out}: {report['vocabulary']['source']} -> {report['vocabulary']['target']} tokens "
          f"(exact {counts['exact']}, merged {counts['merged']}, new {counts['new']}, special {counts['special']}) "
          f"in {report['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
