"""A model folder checked before transformers reads it, each problem one line naming the file: which files a
model format defines and may be read, each a regular file of bounded size inside the folder, its JSON parsed
through the one bounded reader, its weights safetensors and complete, and a config.json that describes a model this
machine can hold whose vocabulary is the rows of the weights' token embeddings.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, check_regular_file, read_json_file
from vtrepro.model.safetensors_header import check_safetensors

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
"""A tokenizer needs at least one of these files (fast tokenizer, WordPiece, BPE or SentencePiece vocabulary)."""
MODEL_FILES = "config.json, model.safetensors and tokenizer files (tokenizer.json or vocab.txt)"
PICKLED_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
"""Weight files in pickle format (``pytorch_model.bin``, ``model.pt``, ...): never read, since unpickling runs code."""
EMBEDDING_SUFFIXES = ("word_embeddings.weight", "tok_embeddings.weight", "embed_tokens.weight", "wte.weight")
"""Name endings of the token-embedding matrix (BERT/RoBERTa, ModernBERT, Llama-like, GPT-2): one row per token."""
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
            read_model_json(folder / name)
    for name in MODEL_OTHER_FILES:
        check_model_file(folder, name)
    headers = {path: check_safetensors(path) for path in _safetensors_files(folder)}
    config = read_model_json(folder / "config.json")
    check_model_size(config if isinstance(config, dict) else {}, folder / "config.json", headers)
    _check_vocabulary_rows(folder, headers)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise VtreproError(
            f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...); "
            "copy the model's tokenizer files into the folder"
        )


def read_model_json(path: Path) -> object:
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
        contents = read_model_json(index)
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


def config_vocab_size(folder: Path) -> int | None:
    """``vocab_size`` of ``folder``'s config.json, when it has both (a malformed file is one line naming it)."""
    config = read_model_json(folder / "config.json") if check_model_file(folder, "config.json") else None
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
