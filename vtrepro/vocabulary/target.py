"""The target side of a transfer: the target tokenizer and the reference model on its vocabulary.

:func:`load_tokenizer` takes a folder, a Hub id or a ``tokenizer.json`` and checks the size it
loaded; :func:`load_reference` returns the input embeddings (whose geometry guides the topology
init) and the MLM decoder bias of a model that uses the target vocabulary.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vtrepro.core.cli import quiet_transformers
from vtrepro.core.errors import VtreproError
from vtrepro.model.loading import resolve_model
from vtrepro.vocabulary.matching import SPECIAL_NAMES, fast_backend

# torch, transformers and tokenizers are imported inside the functions, so importing this module stays fast
# (see transfer.py).
if TYPE_CHECKING:
    from torch import Tensor
    from transformers import PreTrainedTokenizerBase

MIN_VOCABULARY = 100


def load_tokenizer(name_or_path: str | Path, model_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """A fast tokenizer from a folder, a Hub id or a ``tokenizer.json`` file; its size is checked.

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
    expected = fast_backend(tokenizer).get_vocab_size(with_added_tokens=True)
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

    path = resolve_model(name_or_path, model_dir)
    try:
        config = AutoConfig.from_pretrained(path)
        masked = any(name.endswith("ForMaskedLM") for name in config.architectures or [])
        loader = AutoModelForMaskedLM if masked else AutoModel
        with quiet_transformers():
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
