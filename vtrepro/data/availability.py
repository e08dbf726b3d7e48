"""Whether a dataset or data file is here, can be downloaded, or is missing (with the one-line problem),
checked before any work starts."""
from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import data_root, load_dataset
from vtrepro.data.download import BEIR_DATASETS, BEIR_URL, HF_API_URL, HUB_DATASETS, NOT_REDISTRIBUTED

DOWNLOAD_PROBE_TIMEOUT_S = 10.0


def data_path(value: str, data_dir: str | Path | None) -> Path:
    """A recipe file path: absolute, or relative to the data root (--data-dir / $VTREPRO_DATA) when set,
    else to the working directory."""
    path = Path(value).expanduser()
    root = data_root(data_dir)
    if path.is_absolute() or root is None:
        return path
    return path if path.exists() and not (root / path).exists() else root / path


def dataset_availability(name: str, data_dir: str | Path | None) -> tuple[str, str | None]:
    """A BEIR dataset name/folder or a corpus file: local, downloadable, or missing (with the problem)."""
    if Path(name).expanduser().is_file():
        return f"local {name}", None
    try:
        return f"local {load_dataset(name, data_dir, download=False).path}", None
    except VtreproError as error:
        if name not in BEIR_DATASETS and name not in HUB_DATASETS:
            return "missing", str(error)
    hub = HUB_DATASETS.get(name)
    url = HF_API_URL.format(hub.repo) if hub else BEIR_URL.format(name.split("/")[0])
    server = f"the Hugging Face Hub ({hub.repo})" if hub else "BEIR"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=DOWNLOAD_PROBE_TIMEOUT_S):
            return f"to download from {server}", None
    except OSError as error:
        reason = " ".join(str(getattr(error, "reason", error)).split())[:120]
        return "missing", (f"dataset {name} is not under the data root (--data-dir / $VTREPRO_DATA) and "
                           f"{server}'s download server is unreachable ({reason})")


def check_dataset_split(name: str, split: str, data_dir: str | Path | None) -> bool:
    """What a run checks on a dataset before any work, without downloading; returns whether it is here.

    A dataset here must have ``qrels/<split>.tsv`` naming only queries of its queries file (both read and
    checked); one not here must be a BEIR or ChemTEB
    (:data:`~vtrepro.data.download.HUB_DATASETS`) dataset that a run may download (it is checked once fetched).
    ``regress --dry-run`` checks with this what the real run checks.
    """
    try:
        dataset = load_dataset(name, data_dir, download=False)
    except VtreproError:
        if (name in BEIR_DATASETS and name not in NOT_REDISTRIBUTED) or name in HUB_DATASETS:
            return False
        raise
    dataset.queries(split)
    return True


def file_availability(value: str, data_dir: str | Path | None) -> tuple[str, str | None]:
    path = data_path(value, data_dir)
    if path.is_file():
        return f"local {path}", None
    return "missing", f"file {path} not found (relative paths are under --data-dir / $VTREPRO_DATA when set)"


def hub_dataset_availability(repo: str) -> tuple[str, str | None]:
    """A Hugging Face dataset read with `datasets` (a recipe's pairs data): reachable, or missing with the problem."""
    try:
        with urllib.request.urlopen(urllib.request.Request(HF_API_URL.format(repo), method="HEAD"),
                                    timeout=DOWNLOAD_PROBE_TIMEOUT_S):
            return "on the Hugging Face Hub", None
    except OSError as error:
        reason = " ".join(str(getattr(error, "reason", error)).split())[:120]
        return "missing", (f"Hugging Face dataset {repo} is unreachable ({reason}); save its rows as JSONL under "
                           "--data-dir and set data.path")
