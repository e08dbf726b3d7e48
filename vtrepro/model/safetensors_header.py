"""The header of a safetensors file, read without its data: the tensors' names, dtypes, shapes and offsets, and
the check that the file holds exactly the data its header describes (a truncated or padded file is refused)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, check_regular_file, open_regular_file, parse_json


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
