"""The target side of a transfer: the target tokenizer and the reference model on its vocabulary.

:func:`load_tokenizer` takes a folder, a Hub id or a ``tokenizer.json`` and checks the size it
loaded and that it lowercases an uncased vocabulary; :func:`load_reference` returns the input
embeddings (whose geometry guides the topology init) and the MLM decoder bias of a model that uses
the target vocabulary, loaded like every model (safetensors only).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vtrepro.core.errors import VtreproError
from vtrepro.model.folder_checks import TOKENIZER_FILES, config_vocab_size
from vtrepro.model.loading import MIN_TOKENIZER_COVERAGE, ModelSource, find_model, load_weights, resolve_model
from vtrepro.vocabulary.matching import SPECIAL_NAMES, fast_backend

# torch, transformers and tokenizers are imported inside the functions, so importing this module stays fast
# (see transfer.py).
if TYPE_CHECKING:
    from torch import Tensor
    from transformers import PreTrainedTokenizerBase

MIN_VOCABULARY = 100
CASING_PROBE = ("Paris", "France", "London")
"""Ordinary capitalized words: a tokenizer that maps them to its unknown token while it knows their lowercase
forms has an uncased vocabulary without a lowercasing normalizer."""


def load_tokenizer(name_or_path: str | Path, model_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """A fast tokenizer from a folder, a Hub id or a ``tokenizer.json`` file; its size and casing are checked.

    A ``tokenizer.json`` is wrapped in PreTrainedTokenizerFast(tokenizer_file=...), with the roles of
    well-known special tokens ([CLS], <s>, ...) set from their names.
    """
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    file = Path(str(name_or_path)).expanduser()
    folder = Path(resolve_model(name_or_path, model_dir))
    tokenizer: PreTrainedTokenizerBase
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
    local = folder if folder.is_dir() and not file.is_file() else None
    read = file if file.is_file() else (local and _tokenizer_file(local)) or name_or_path
    _check_size(tokenizer, read, local)
    _check_casing(tokenizer, read)
    return tokenizer


def _tokenizer_file(folder: Path) -> Path | None:
    """The vocabulary file a tokenizer folder is read from (the first of TOKENIZER_FILES it holds)."""
    return next((folder / name for name in TOKENIZER_FILES if (folder / name).is_file()), None)


def _check_size(tokenizer: PreTrainedTokenizerBase, read: str | Path, folder: Path | None) -> None:
    """The tokenizer must hold every token of the file it was read from, a real vocabulary (at least
    MIN_VOCABULARY tokens) and, beside a model config, about as many tokens as the model predicts."""
    loaded = len(tokenizer)
    in_file = fast_backend(tokenizer).get_vocab_size(with_added_tokens=True)
    if folder is not None and (folder / "vocab.txt").is_file():
        with open(folder / "vocab.txt", encoding="utf-8") as handle:
            in_file = max(in_file, sum(1 for _ in handle))
    if loaded != in_file:
        raise VtreproError(f"target tokenizer {read}: loaded {loaded} of its {in_file} tokens; "
                           "pass its tokenizer.json, or a folder whose tokenizer files agree")
    config_size = None if folder is None else config_vocab_size(folder)
    if config_size is not None and not MIN_TOKENIZER_COVERAGE * config_size <= loaded <= config_size:
        raise VtreproError(f"target tokenizer {read}: holds {loaded} tokens but config.json beside it has vocab_size "
                           f"{config_size}; copy the tokenizer files that belong to this model into {folder}")
    if loaded < MIN_VOCABULARY:
        raise VtreproError(f"target tokenizer {read}: holds only {loaded} tokens, not a vocabulary to transfer onto "
                           f"(at least {MIN_VOCABULARY}); pass the full tokenizer.json or tokenizer folder")


def _check_casing(tokenizer: PreTrainedTokenizerBase, read: str | Path) -> None:
    """Refuse an uncased vocabulary behind a normalizer that keeps case: ordinary capitalized words would
    become the unknown token (every 'Paris' in a corpus lost)."""
    unknown = tokenizer.unk_token_id
    if unknown is None:
        return
    lost = [word for word in CASING_PROBE
            if unknown in tokenizer(word, add_special_tokens=False)["input_ids"]
            and unknown not in tokenizer(word.lower(), add_special_tokens=False)["input_ids"]]
    if lost:
        raise VtreproError(
            f"target tokenizer {read}: maps {', '.join(map(repr, lost))} to its unknown token {tokenizer.unk_token} "
            "although it knows them in lowercase (an uncased vocabulary whose normalizer keeps case); make it "
            "lowercase (tokenizer.json normalizer with \"lowercase\": true, or do_lower_case: true in "
            "tokenizer_config.json) or use the uncased tokenizer.json the model came with"
        )


def find_reference(name_or_path: str | Path, model_dir: str | Path | None = None) -> ModelSource:
    """Locate and check the reference model without loading it (no torch), so a bad one fails before work."""
    folder = Path(resolve_model(name_or_path, model_dir))
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise VtreproError(f"reference {name_or_path}: {folder} holds no model (no config.json); pass a model folder "
                           "that uses the target vocabulary with --reference")
    return find_model(name_or_path, model_dir)


def load_reference(
    name_or_path: str | Path, target_tokenizer: PreTrainedTokenizerBase, model_dir: str | Path | None = None
) -> tuple[Tensor, Tensor | None]:
    """Input embeddings of a model on the target vocabulary, and its MLM decoder bias when it has one.

    The model is found, checked and loaded like every other (safetensors only: :func:`load_weights`).
    """
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    found = find_reference(name_or_path, model_dir)
    try:
        config = AutoConfig.from_pretrained(found.source, local_files_only=found.offline)
    except (OSError, ValueError, KeyError, ImportError) as error:
        reason = " ".join(str(error).split())[:300]
        raise VtreproError(f"reference {name_or_path}: cannot read its config ({reason}); pass a model folder that "
                           "uses the target vocabulary with --reference") from None
    masked = any(name.endswith("ForMaskedLM") for name in config.architectures or [])
    model, info = load_weights(AutoModelForMaskedLM if masked else AutoModel, found, model_dir)
    try:
        reference_vocab = AutoTokenizer.from_pretrained(found.source, local_files_only=found.offline).get_vocab()
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
