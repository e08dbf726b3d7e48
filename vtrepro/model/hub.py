"""Model names and the Hugging Face Hub: whether a name is a folder path or a Hub id, whether the Hub answers a
quick probe, and whether it serves a model.

The probe and each model's lookup are made once a process (cached), so a command that names many models waits
for the Hub once.
"""
from __future__ import annotations

import functools
import os
import re
import urllib.error
import urllib.request

# huggingface_hub is imported where the Hub is probed, on purpose: `--help` and `--dry-run` stay fast.

HUB_PROBE_TIMEOUT_S = 3.0
HUB_LOOKUP_TIMEOUT_S = 10.0
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
