"""How many tokens per text a model takes, read from its files without loading it, and the check of the lengths a
command or recipe asks for against it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.model.folder_checks import check_model_file, read_model_json
from vtrepro.model.loading import resolve_model

OFFSET_POSITION_TYPES = frozenset({"roberta", "xlm-roberta", "camembert", "data2vec-text", "longformer",
                                   "roberta-prelayernorm", "xmod", "mpnet"})
"""Model types whose position ids start after the padding id (RoBERTa's offset): their first
``pad_token_id + 1`` positions never hold a token."""
UNSET_MAX_LENGTH = 1_000_000
"""A tokenizer ``model_max_length`` at or above this means unset (transformers writes 10^30 then)."""


def position_limit(config: dict[str, Any]) -> int | None:
    """Most tokens per text a model's config.json allows: ``max_position_embeddings``, less RoBERTa's
    offset (:data:`OFFSET_POSITION_TYPES`); None when it has no such entry."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int):
        return None
    if config.get("model_type") not in OFFSET_POSITION_TYPES:
        return positions
    padding = config.get("pad_token_id")
    return positions - (padding if isinstance(padding, int) else 1) - 1


def text_length_limit(name_or_path: str | Path, model_dir: str | Path | None = None) -> int | None:
    """Most tokens per text a local model takes, read from its files without loading it: its tokenizer's
    ``model_max_length`` when set, else :func:`position_limit` of its config.json; None for a model
    that is not local (a Hub id not downloaded), or whose files state neither."""
    folder = Path(resolve_model(name_or_path, model_dir))
    if not folder.is_dir():
        return None
    tokenizer = read_model_json(folder / "tokenizer_config.json") if check_model_file(folder, "tokenizer_config.json") else {}
    length = tokenizer.get("model_max_length") if isinstance(tokenizer, dict) else None
    if isinstance(length, int) and length < UNSET_MAX_LENGTH:
        return length
    config = read_model_json(folder / "config.json") if check_model_file(folder, "config.json") else {}
    return position_limit(config) if isinstance(config, dict) else None


def check_text_lengths(lengths: dict[str, int], limit: int | None, model: str | Path, where: str = "") -> None:
    """Refuse each of ``lengths`` (what it is -> tokens per text) above ``limit``, the most ``model`` takes
    (:func:`text_length_limit`; None: unknown, nothing refused); ``where`` starts the message (a file)."""
    for name, length in lengths.items():
        if limit is not None and length > limit:
            raise VtreproError(f"{where}{name} is {length} tokens, beyond the {limit} per text model {model} takes "
                               f"(its position embeddings); use at most {limit}")
