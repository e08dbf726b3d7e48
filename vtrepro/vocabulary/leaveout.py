"""The leave-out experiment: a WordPiece masked LM with a seeded share of its tokens removed.

Transferring such a source back onto its original vocabulary rebuilds the held-out rows, which
can then be compared with the originals (``run_transfer(..., leaveout=...)``, ``--leaveout``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from vtrepro.core.errors import VtreproError
from vtrepro.model.loading import load_masked_lm
from vtrepro.vocabulary.matching import ROLES, special_ids, special_roles, tokenizer_spec
from vtrepro.vocabulary.weight_tables import install_vocabulary, vocabulary_tables

# torch, transformers and tokenizers are imported inside the functions, so importing this module stays fast
# (see transfer.py).
if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

def _restricted_tokenizer(tokenizer: PreTrainedTokenizerBase, kept: list[str]) -> PreTrainedTokenizerBase:
    """The same WordPiece tokenizer over ``kept`` tokens only, with new contiguous ids."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = tokenizer_spec(tokenizer)
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
    model_path: str | Path, fraction: float, seed: int
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, list[str]]:
    """A WordPiece masked LM with a seeded ``fraction`` of its ordinary tokens removed.

    Special tokens, ``[unused*]``, single characters and ``##`` + one character are always kept.
    Returns the smaller model (rows gathered, new contiguous ids), its tokenizer and the held-out tokens.
    """
    import torch

    model, tokenizer = load_masked_lm(model_path)
    tokens = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    skip = special_ids(tokenizer)
    eligible = [index for index, token in enumerate(tokens)
                if index not in skip and not token.startswith("[unused") and len(token.removeprefix("##")) > 1]
    order = torch.randperm(len(eligible), generator=torch.Generator().manual_seed(seed))
    held = {eligible[i] for i in order[:round(fraction * len(eligible))].tolist()}
    kept = [index for index in range(len(tokens)) if index not in held]
    restricted = _restricted_tokenizer(tokenizer, [tokens[index] for index in kept])
    tables, _ = vocabulary_tables(model)
    install_vocabulary(model, {name: table[kept] for name, table in tables.items()}, special_roles(restricted))
    return model, restricted, [tokens[index] for index in sorted(held)]
