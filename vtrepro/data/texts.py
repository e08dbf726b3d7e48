"""Plain text sources: a BEIR corpus, a JSONL corpus (``title`` + ``text`` or ``contents``) or an
``id<TAB>text`` TSV file, read the same way for MLM adaptation, calibration and training data."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import read_jsonl, read_lines
from vtrepro.data.beir import body_field, load_dataset, text_field


def read_tsv_texts(path: str | Path, wanted: set[str] | None = None) -> dict[str, str]:
    """``{id: text}`` from ``id<TAB>text`` lines (MS MARCO collection / queries), optionally only ``wanted`` ids."""
    path = Path(path)
    if not path.is_file():
        raise VtreproError(f"{path}: file not found")
    texts = {}
    for line_number, line in read_lines(path):
        key, tab, text = line.rstrip("\r\n").partition("\t")
        if not tab or not key:
            raise VtreproError(f"{path}:{line_number}: expected id<TAB>text, got {line!r:.80}")
        if wanted is None or key in wanted:
            texts[key] = text
    return texts


def corpus_texts(path: str | Path, titles: bool = True) -> Iterator[str]:
    """Texts of a corpus file: JSONL (``title`` + ``text`` or ``contents``; ``titles=False``: the text
    alone) or ``id<TAB>text`` TSV."""
    path = Path(path)
    if path.name.endswith((".tsv", ".tsv.gz")):
        yield from read_tsv_texts(path).values()
        return
    for line, record in read_jsonl(path):
        text = body_field(record, path, line)
        title = text_field(record, "title", path, line, required=False) if titles else ""
        yield f"{title} {text}" if title else text


def dataset_or_file_texts(source: str, data_dir: str | Path | None, titles: bool = True) -> Iterable[str]:
    """Texts of a BEIR dataset's corpus (name or folder), or of a JSONL / TSV corpus file; each document's
    title and text, or with ``titles=False`` its text alone."""
    if Path(source).expanduser().is_file():
        return corpus_texts(Path(source).expanduser(), titles)
    corpus = load_dataset(source, data_dir).corpus()
    return [document.contents for document in corpus] if titles else [document.text for document in corpus]
