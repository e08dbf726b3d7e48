"""BEIR datasets: locate (downloading one that is missing), and read corpus, queries and qrels with line-checked
errors.

A dataset folder holds ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]`` and ``qrels/<split>.tsv``
(header ``query-id<TAB>corpus-id<TAB>score``). A split's queries are those its qrels name,
as with BEIR's ``GenericDataLoader(...).load(split=...)``. A known dataset that is not here is fetched into the
same layout by :mod:`vtrepro.data.download` (BEIR's, and ChemTEB's ChemHotpotQA and ChemNQ from the Hugging Face
Hub).

Every reader refuses, with the file and line, what a later stage would change or fail on: ids with
whitespace or control characters, text holding a lone surrogate (a ``\\ud800`` JSON escape: not
Unicode, so it cannot be encoded or written), and qrels lines that are not exactly one judgment.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import read_jsonl, read_lines, unsafe_character
from vtrepro.data.download import CQADUPSTACK_FORESTS, KNOWN_DATASETS, download_dataset, known_names

REQUIRED_FILES = "corpus.jsonl[.gz], queries.jsonl[.gz], qrels/test.tsv"
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
"""A dataset name, never a path: ``scifact``, or ``<group>/<name>`` like ``cqadupstack/android``; no ``..``,
no leading ``/`` or ``~``, so a name stays under the data root and the output folder it names."""
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
TEST_SPLIT = "test"
"""The split evaluated by default (a spec's ``defaults.split``, every BEIR dataset's qrels/test.tsv)."""
QRELS_HEADER = "query-id\tcorpus-id\tscore"
"""BEIR's qrels header: only this exact first line (a ``\\r\\n`` ending allowed) is skipped; TREC qrels have none."""
MIN_RELEVANCE, MAX_RELEVANCE = -(2**31), 1000
"""Relevance grades are plain decimal integers in this range: trec_eval keeps one counter per grade up to the
largest, so its memory and time grow with it (10^8: 0.8 GB and 10 s; 2^31 - 1 under a 4 GiB limit scored 0
without a word; 2^63 - 1 crashed it); the lowest is the C ``long`` of every platform (32 bits on Windows)."""
_RELEVANCE = re.compile(r"-?[0-9]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Document:
    """One corpus entry."""

    doc_id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Indexed text as Pyserini builds it for BEIR: title + " " + text, or just text without a title."""
        return f"{self.title} {self.text}" if self.title else self.text


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR-layout folder on disk; every read re-parses the files."""

    name: str
    path: Path

    def corpus(self) -> list[Document]:
        """All documents in file order; a repeated ``_id`` is an error."""
        return read_corpus(self._data_file("corpus"))

    def queries(self, split: str = TEST_SPLIT) -> dict[str, str]:
        """Texts of the queries named in ``qrels/<split>.tsv``, in queries-file order."""
        qrels_path = self._qrels_file(split)
        wanted: dict[str, int] = {}
        for line, query_id, _, _ in _qrels_rows(qrels_path):
            wanted.setdefault(query_id, line)
        path = self._data_file("queries")
        queries = {qid: text for qid, text in read_queries(path).items() if qid in wanted}
        missing = [query_id for query_id in wanted if query_id not in queries]
        if missing:
            raise VtreproError(
                f"{qrels_path}:{wanted[missing[0]]}: query id '{missing[0]}' has no entry in {path} "
                f"({len(missing)} qrels query id(s) missing); add the queries or remove their qrels rows"
            )
        return queries

    def qrels(self, split: str = TEST_SPLIT) -> dict[str, dict[str, int]]:
        """``{query_id: {doc_id: score}}`` from ``qrels/<split>.tsv``; a repeated pair keeps the last score."""
        return read_qrels(self._qrels_file(split))

    def splits(self) -> list[str]:
        """Names of the splits with a ``qrels/<split>.tsv`` file, sorted."""
        return sorted(path.stem for path in (self.path / "qrels").glob("*.tsv") if path.is_file())

    def _data_file(self, stem: str) -> Path:
        path = _jsonl_file(self.path, stem)
        if path is None:
            raise VtreproError(
                f"{self.path}: no {stem}.jsonl or {stem}.jsonl.gz; a BEIR folder needs {REQUIRED_FILES}"
            )
        return path

    def _qrels_file(self, split: str) -> Path:
        if not SPLIT_NAME.fullmatch(split):
            raise VtreproError(f"{self.path}: split {split!r} is not a split name (letters, digits, '.', '_', '-'); "
                               f"use one of: {', '.join(self.splits()) or 'none'}")
        path = self.path / "qrels" / f"{split}.tsv"
        if not path.is_file():
            available = ", ".join(self.splits()) or "none"
            raise VtreproError(f"{path}: qrels file not found for split '{split}'; available splits: {available}")
        return path


def _unique_records(path: Path, kind: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line, id, record)`` for each JSONL line; a repeated id is an error naming both lines."""
    first_line: dict[str, int] = {}
    for line, record in read_jsonl(path):
        record_id = _id_field(record, path, line)
        if record_id in first_line:
            raise VtreproError(
                f"{path}:{line}: duplicate {kind} id '{record_id}' (first seen on line {first_line[record_id]}); remove one"
            )
        first_line[record_id] = line
        yield line, record_id, record


def body_field(record: dict[str, Any], path: Path, line: int) -> str:
    """The checked text of a JSONL record: BEIR's ``text``, or Pyserini's ``contents`` when there is no ``text``."""
    key = "text" if "text" in record or "contents" not in record else "contents"
    return text_field(record, key, path, line, required=True)


def read_corpus(path: str | Path) -> list[Document]:
    """Documents of a JSONL corpus (BEIR ``_id/title/text`` or Pyserini ``id/contents``), in file order."""
    path = Path(path)
    return [
        Document(doc_id, text_field(record, "title", path, line, required=False), body_field(record, path, line))
        for line, doc_id, record in _unique_records(path, "document")
    ]


def read_queries(path: str | Path) -> dict[str, str]:
    """``{query_id: text}`` of a JSONL queries file (``_id|id`` and ``text|contents``), in file order."""
    path = Path(path)
    return {query_id: body_field(record, path, line) for line, query_id, record in _unique_records(path, "query")}


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: score}}`` from a BEIR TSV or TREC 4-column qrels file; a repeated pair keeps the last."""
    path = Path(path)
    if not path.is_file():
        raise VtreproError(f"{path}: qrels file not found")
    qrels: dict[str, dict[str, int]] = {}
    for _, query_id, doc_id, score in _qrels_rows(path):
        qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def data_root(data_dir: str | Path | None = None) -> Path | None:
    """The data root: ``data_dir`` (``--data-dir``), else ``$VTREPRO_DATA``, else None."""
    value = data_dir or os.environ.get("VTREPRO_DATA")
    return Path(value).expanduser() if value else None


def load_dataset(
    name_or_path: str | Path, data_dir: str | Path | None = None, download: bool = True
) -> BeirDataset:
    """Open a dataset by folder path or BEIR name, downloading a public BEIR dataset when missing.

    A Path, a string starting with "/", "." or "~", or an existing folder holding a corpus is a path.
    A name is looked up as ``<root>/beir/<name>`` then ``<root>/<name>`` (root from :func:`data_root`),
    or in ``~/.cache/vtrepro/beir/<name>`` when no root is set; downloads go to ``<root>/beir/``
    or that cache.
    """
    if isinstance(name_or_path, Path) or _looks_like_path(name_or_path):
        return _open_folder(Path(name_or_path).expanduser())
    name = name_or_path.strip().strip("/")
    if name == "cqadupstack":
        raise VtreproError(
            "cqadupstack is split into forests; use one of "
            + ", ".join(f"cqadupstack/{forest}" for forest in CQADUPSTACK_FORESTS)
        )
    root = data_root(data_dir)
    cache = root / "beir" if root is not None else Path.home() / ".cache" / "vtrepro" / "beir"
    candidates = [cache / name, root / name] if root is not None else [cache / name]
    if DATASET_NAME.fullmatch(name):
        for folder in candidates:
            if _jsonl_file(folder, "corpus") is not None:
                return BeirDataset(name, folder)
    searched = " or ".join(str(folder.parent) for folder in candidates)
    if name not in KNOWN_DATASETS:
        raise VtreproError(
            f"unknown dataset '{name}': not found under {searched} and not a BEIR or ChemTEB dataset; "
            f"known: {known_names()}; or pass the path of a folder with {REQUIRED_FILES}"
        )
    target = cache / name
    if target.exists():
        raise VtreproError(
            f"dataset '{name}': {target} exists but has no corpus.jsonl[.gz]; "
            f"complete it ({REQUIRED_FILES}) or remove it to download again"
        )
    reason = download_dataset(name, cache) if download else "download is disabled"
    if reason:
        raise VtreproError(
            f"dataset '{name}' not found under {searched} and could not be downloaded ({reason}): "
            f"create {target}/ with {REQUIRED_FILES}, or set VTREPRO_DATA / --data-dir"
        )
    return _open_folder(target, name)


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", ".", "~")) or _jsonl_file(Path(value), "corpus") is not None


def _open_folder(folder: Path, name: str | None = None) -> BeirDataset:
    if not folder.is_dir():
        raise VtreproError(f"{folder}: no such dataset folder; it needs {REQUIRED_FILES}")
    if _jsonl_file(folder, "corpus") is None:
        raise VtreproError(f"{folder}: no corpus.jsonl or corpus.jsonl.gz; a BEIR folder needs {REQUIRED_FILES}")
    if name is None:
        name = f"cqadupstack/{folder.name}" if folder.parent.name == "cqadupstack" else folder.name
    return BeirDataset(name, folder)


def _jsonl_file(folder: Path, stem: str) -> Path | None:
    """``<stem>.jsonl``, else ``<stem>.jsonl.gz``, else None."""
    for path in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz"):
        if path.is_file():
            return path
    return None


def _id_field(record: dict[str, Any], path: Path, line: int) -> str:
    value = record.get("_id", record.get("id"))
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value:
        raise VtreproError(f"{path}:{line}: '_id' (or 'id') must be a non-empty string or integer, got {value!r}")
    return _checked_id(value, path, line)


def _checked_id(value: str, path: Path, line: int) -> str:
    """An id Anserini and TREC run files carry unchanged: no whitespace, no control characters."""
    char = unsafe_character(value)
    if char is not None:
        raise VtreproError(f"{path}:{line}: id {value!r} holds {char!r}; ids must not contain whitespace or control "
                           "characters (Anserini and TREC run files would split them): rename it")
    return value


def text_field(record: dict[str, Any], key: str, path: Path, line: int, required: bool) -> str:
    """The string ``record[key]`` ("" when absent and not ``required``); not a string, or holding a lone
    surrogate (a JSON ``\\ud800`` escape: no UTF-8 encoding exists for it), is an error naming the line."""
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise VtreproError(f"{path}:{line}: '{key}' must be a string, got {value!r:.60}")
    surrogate = _SURROGATE.search(value)
    if surrogate is not None:
        raise VtreproError(f"{path}:{line}: '{key}' holds a lone surrogate {surrogate.group()!r} at character "
                           f"{surrogate.start() + 1}, a \\u escape that is not Unicode text (it cannot be encoded "
                           "or written as UTF-8); fix or remove that escape")
    return value


def _qrels_rows(path: Path) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, query_id, doc_id, relevance)`` of BEIR (``query-id<TAB>corpus-id<TAB>score``) or TREC
    (``query-id iteration doc-id relevance``, whitespace-separated) qrels; blank lines are skipped. Only a
    first line that is exactly :data:`QRELS_HEADER` is a header; a file without judgments is an error."""
    judgments = 0
    for line_number, line in read_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip() or (line_number == 1 and line == QRELS_HEADER):
            continue
        query_id, doc_id, relevance = _qrels_fields(line, path, line_number)
        judgments += 1
        yield (line_number, _checked_id(query_id, path, line_number), _checked_id(doc_id, path, line_number),
               _relevance(relevance, path, line_number, first=line_number == 1))
    if not judgments:
        raise VtreproError(f"{path}: holds no judgments; a qrels file needs 'query-id<TAB>corpus-id<TAB>score' "
                           "lines (after an optional header) or TREC 'query-id iteration doc-id relevance' lines")


def _qrels_fields(line: str, path: Path, line_number: int) -> tuple[str, str, str]:
    """``(query_id, doc_id, relevance)`` of a BEIR line (three tab-separated fields) or a TREC line (four
    whitespace-separated fields, no tab); anything else is an error."""
    fields = [field.strip() for field in line.split("\t")]
    if len(fields) == 3 and fields[0] and fields[1]:
        return fields[0], fields[1], fields[2]
    words = line.split()
    if len(fields) == 1 and len(words) == 4:
        return words[0], words[2], words[3]
    raise VtreproError(f"{path}:{line_number}: expected 'query-id<TAB>corpus-id<TAB>score' (BEIR; the only header "
                       f"is that exact first line) or 'query-id iteration doc-id relevance' (TREC), got {line!r:.80}; "
                       "fix or remove that line")


def _relevance(text: str, path: Path, line_number: int, first: bool) -> int:
    """A relevance grade: plain decimal digits (Python's ``int`` would also take ``2_0``, ``+1`` and other
    scripts' digits) within :data:`MIN_RELEVANCE`..:data:`MAX_RELEVANCE`; on the ``first`` line the error
    also says which header is the only one skipped."""
    if not _RELEVANCE.fullmatch(text):
        header = " (the one header skipped is a first line 'query-id<TAB>corpus-id<TAB>score')" if first else ""
        raise VtreproError(f"{path}:{line_number}: relevance {text!r:.40} is not an integer written in plain digits "
                           f"(e.g. 0, 1, 2, -1){header}; fix that line")
    if len(text.lstrip("-0")) > 10 or not MIN_RELEVANCE <= int(text) <= MAX_RELEVANCE:
        raise VtreproError(f"{path}:{line_number}: relevance {text:.40} is outside {MIN_RELEVANCE}..{MAX_RELEVANCE} "
                           "(trec_eval's memory and time grow with the largest grade); use graded levels such as 0-4")
    return int(text)
