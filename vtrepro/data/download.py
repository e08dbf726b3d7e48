"""Datasets had by name, and the download of a missing one: BEIR's list (and the four BEIR may not redistribute),
ChemTEB's retrieval sets on the Hugging Face Hub at pinned revisions, and the fetch of either into the BEIR
layout that :mod:`vtrepro.data.beir` reads.

A BEIR dataset comes from BEIR's zip, else from the ``BeIR/<name>`` datasets on the Hub; a download is bounded
(:data:`MAX_DOWNLOAD_BYTES`, :data:`MAX_DATASET_BYTES`), unpacked beside its target and renamed into place whole.
"""
from __future__ import annotations

import logging
import socket
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vtrepro.core.archives import extract_zip
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, write_jsonl

logger = logging.getLogger(__name__)

# Hugging Face `datasets` is imported only for a Hub download, on purpose: it is heavy and most runs read local files.

CQADUPSTACK_FORESTS: tuple[str, ...] = (
    "android", "english", "gaming", "gis", "mathematica", "physics",
    "programmers", "stats", "tex", "unix", "webmasters", "wordpress",
)
BEIR_DATASETS: tuple[str, ...] = (
    "trec-covid", "bioasq", "nfcorpus", "nq", "hotpotqa", "fiqa", "signal1m", "trec-news",
    "robust04", "arguana", "webis-touche2020",
    *(f"cqadupstack/{forest}" for forest in CQADUPSTACK_FORESTS),
    "quora", "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact", "msmarco",
)
# BEIR lists these but may not redistribute them; users build them from the original sources.
NOT_REDISTRIBUTED: frozenset[str] = frozenset({"bioasq", "signal1m", "trec-news", "robust04"})


@dataclass(frozen=True)
class HubRetrievalSet:
    """A retrieval set kept on the Hugging Face Hub in mteb's layout: configs ``corpus`` and ``queries`` (one split
    each) and ``default``, whose splits are the qrels (``query-id``, ``corpus-id``, ``score``)."""

    repo: str
    revision: str
    documents: int  # corpus size as mteb's descriptive statistics give it (for cost estimates)


HUB_DATASETS: dict[str, HubRetrievalSet] = {
    # ChemTEB (Kasmaee et al. 2024, arXiv:2412.00532) retrieval tasks, at the revisions mteb pins
    # (embeddings-benchmark/mteb mteb/tasks/Retrieval/eng/ChemHotpotQARetrieval.py:11-12 @9711091 and
    # ChemNQRetrieval.py:11-12 @84213c4); corpus sizes from mteb/descriptive_stats/Retrieval/<task>.json
    # (@6226d72: 10,069 documents, 18 test queries; @673df07: 22,933 documents, 27 test queries).
    "chemhotpotqa": HubRetrievalSet("BASF-AI/ChemHotpotQARetrieval", "1840e8a5ac6ec752bbdd97d543ead0189bc7c25b", 10_069),
    "chemnq": HubRetrievalSet("BASF-AI/ChemNQRetrieval", "5d958fb6b31055495347724d46431ba41309b03a", 22_933),
}
"""Datasets outside BEIR that vtrepro downloads by name, into the same BEIR layout."""
KNOWN_DATASETS: tuple[str, ...] = (*BEIR_DATASETS, *HUB_DATASETS)

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{}.zip"
HF_API_URL = "https://huggingface.co/api/datasets/{}"
DOWNLOAD_TIMEOUT_S = 10.0
MAX_DOWNLOAD_BYTES = 8 << 30
"""Largest dataset zip fetched: BEIR's largest (climate-fever, fever, msmarco) are 1-1.7 GB."""
MAX_DATASET_BYTES = 64 << 30
"""Largest unpacked dataset: BEIR's largest corpora unpack to under 10 GB; a zip may also not expand beyond
:data:`vtrepro.core.archives.MAX_EXPANSION` times its size."""


def known_names() -> str:
    """The names of :data:`KNOWN_DATASETS` in one line, cqadupstack's forests folded into one entry."""
    plain = [name for name in BEIR_DATASETS if not name.startswith("cqadupstack/")]
    return ", ".join(plain) + ", cqadupstack/{" + ",".join(CQADUPSTACK_FORESTS) + "}, " + ", ".join(HUB_DATASETS)


def download_dataset(name: str, cache: Path) -> str:
    """Fetch ``name`` into ``cache``: BEIR's zip, else the ``BeIR/<name>`` Hugging Face datasets.

    Returns "" on success, else why it failed ("no network" when nothing could be reached). A
    :data:`NOT_REDISTRIBUTED` name is never fetched; a :data:`HUB_DATASETS` name comes from its Hub repository at
    its pinned revision only.
    """
    if name in NOT_REDISTRIBUTED:
        return "BEIR may not redistribute it; build it from the original source as BEIR describes"
    cache.mkdir(parents=True, exist_ok=True)
    if name in HUB_DATASETS:
        return _download_hub(name, cache, HUB_DATASETS[name])
    archive = name.split("/")[0]
    url = BEIR_URL.format(archive)
    try:
        _fetch_zip(url, archive, cache)
        return ""
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        zip_offline = _is_offline(error)
        reasons = [f"{url}: {_describe(error)}"]
    if "/" in name:
        return "no network" if zip_offline else "; ".join(reasons)
    repo = f"BeIR/{name}"
    try:
        with urllib.request.urlopen(HF_API_URL.format(repo), timeout=DOWNLOAD_TIMEOUT_S):
            pass
    except OSError as error:
        if zip_offline and _is_offline(error):
            return "no network"
        return "; ".join([*reasons, f"Hugging Face {repo}: {_describe(error)}"])
    try:
        _fetch_hf(name, cache, repo, (f"{repo}-qrels",))
        return ""
    except Exception as error:  # datasets raises many types; any of them means this fallback failed
        return "; ".join([*reasons, f"Hugging Face {repo}: {_describe(error)}"])


def _download_hub(name: str, cache: Path, source: HubRetrievalSet) -> str:
    """Fetch a :data:`HUB_DATASETS` set into ``cache/<name>``; "" on success, else why it failed."""
    try:
        with urllib.request.urlopen(HF_API_URL.format(source.repo), timeout=DOWNLOAD_TIMEOUT_S):
            pass
    except OSError as error:
        return "no network" if _is_offline(error) else f"Hugging Face {source.repo}: {_describe(error)}"
    try:
        _fetch_hf(name, cache, source.repo, (source.repo, "default"), source.revision)
        return ""
    except Exception as error:  # datasets raises many types; any of them means the download failed
        return f"Hugging Face {source.repo}@{source.revision[:7]}: {_describe(error)}"


def _is_offline(error: BaseException) -> bool:
    if isinstance(error, urllib.error.HTTPError):
        return False
    if isinstance(error, urllib.error.URLError):
        return isinstance(error.reason, OSError)
    return isinstance(error, (socket.timeout, ConnectionError))


def _describe(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    text = str(getattr(error, "reason", None) or error) or type(error).__name__
    return " ".join(text.split())[:200]


def _fetch_zip(url: str, archive: str, cache: Path) -> None:
    """Download BEIR's zip and unpack its top folder to ``cache/<archive>`` in one rename."""
    logger.info(f"downloading {url} into {cache}/")
    with tempfile.TemporaryDirectory(prefix=f".{archive}.", dir=cache) as tmp:
        zip_path = Path(tmp) / f"{archive}.zip"
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(zip_path, "wb") as out:
            fetched = 0
            for block in iter(lambda: response.read(1 << 20), b""):
                fetched += len(block)
                if fetched > MAX_DOWNLOAD_BYTES:
                    raise VtreproError(f"{url}: more than {MAX_DOWNLOAD_BYTES} bytes, larger than any BEIR dataset; "
                                       "not the expected archive (nothing was kept)")
                out.write(block)
        extracted = Path(tmp) / "extracted"
        extract_zip(zip_path, extracted, url, MAX_DATASET_BYTES)
        if not (extracted / archive).is_dir():
            raise ValueError(f"zip has no top-level folder '{archive}/'")
        _publish(extracted / archive, cache / archive)


def _fetch_hf(name: str, cache: Path, repo: str, qrels: tuple[str, ...], revision: str | None = None) -> None:
    """Write ``repo``'s corpus/queries configs and the splits of ``qrels`` (a repository and optional config:
    ``BeIR/<name>-qrels``, or mteb's ``(<repo>, "default")``) in BEIR layout."""
    from datasets import load_dataset as hf_load_dataset

    logger.info(f"downloading Hugging Face {repo} into {cache}/")
    with tempfile.TemporaryDirectory(prefix=f".{name}.", dir=cache) as tmp:
        folder = Path(tmp) / name
        corpus = hf_load_dataset(repo, "corpus", revision=revision)
        write_jsonl(
            folder / "corpus.jsonl",
            ({"_id": str(row["_id"]), "title": row.get("title") or "", "text": row.get("text") or ""}
             for split in corpus.values() for row in split),
        )
        queries = hf_load_dataset(repo, "queries", revision=revision)
        write_jsonl(
            folder / "queries.jsonl",
            ({"_id": str(row["_id"]), "text": row.get("text") or ""} for split in queries.values() for row in split),
        )
        for split, rows in hf_load_dataset(*qrels, revision=revision).items():
            with atomic_write(folder / "qrels" / f"{split}.tsv") as handle:
                handle.write("query-id\tcorpus-id\tscore\n")
                for row in rows:
                    handle.write(f"{row['query-id']}\t{row['corpus-id']}\t{int(row['score'])}\n")
        _publish(folder, cache / name)


def _publish(source: Path, target: Path) -> None:
    """Rename a finished folder into place; a concurrent finisher's copy wins."""
    try:
        source.rename(target)
    except OSError:
        if not target.is_dir():
            raise
