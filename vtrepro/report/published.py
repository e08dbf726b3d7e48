"""Published reference tables: the numbers this project compares against, each with its citation.

One YAML file per source in ``regressions/published/`` (papers, model cards, Anserini and Pyserini
regression files at a commit)::

    source: Pyserini BEIR two-click reproductions (BM25 flat)
    url: https://...                       # optional
    average_convention: mean over ...      # optional: how the source averages datasets
    systems:
      bm25-flat:
        label: BM25 flat (Pyserini)
        citation: castorini/pyserini <path> @<commit>
        derived: how a computed value was computed   # only for values not printed by the source
        datasets:
          scifact: {ndcg@10: 0.6789, recall@100: 0.9253}
          nfcorpus: {ndcg@10: 0.3218, citation: <path> @<commit>}   # overrides the system's citation
        average: {ndcg@10: 0.524}          # only an average the source itself states
        average_datasets: [trec-covid, ...]

Specs refer to a system as ``published: <table>/<system>`` instead of repeating its numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import Checker, Field, read_mapping_file
from vtrepro.core.shipped import PUBLISHED_DIR, find_shipped
from vtrepro.evaluate.trec import parse_metric

_TABLE = {"source": Field(str), "url": Field(str, None), "average_convention": Field(str, None),
          "systems": Field("mapping")}
_SYSTEM = {"label": Field(str), "citation": Field(str), "derived": Field(str, None), "datasets": Field("mapping", None),
           "average": Field("mapping", None), "average_datasets": Field("str_list", None)}
_VALUE = Field(float, minimum=0, maximum=1)


@dataclass(frozen=True)
class PublishedSystem:
    """One system's published figures: dataset -> metric -> value, and a stated average if any."""

    table: str
    name: str
    label: str
    source: str
    citation: str
    datasets: dict[str, dict[str, float]] = field(default_factory=dict)
    citations: dict[str, str] = field(default_factory=dict)  # dataset -> citation, where it differs from the system's
    average: dict[str, float] = field(default_factory=dict)
    average_datasets: tuple[str, ...] = ()
    derived: str | None = None
    url: str | None = None

    @property
    def key(self) -> str:
        """``<table>/<system>``, how specs and reports name it."""
        return f"{self.table}/{self.name}"

    def citation_of(self, dataset: str) -> str:
        return self.citations.get(dataset, self.citation)


def beir_average(values: dict[str, float]) -> float:
    """The mean over datasets in BEIR's convention: CQADupStack's forums (``cqadupstack/<forum>``) are
    first averaged into one dataset."""
    forums = [value for name, value in values.items() if name.startswith("cqadupstack/")]
    datasets = [value for name, value in values.items() if not name.startswith("cqadupstack/")]
    datasets += [sum(forums) / len(forums)] if forums else []
    return sum(datasets) / len(datasets)


def find_table(name: str) -> Path:
    """A published table file: a path, or a name in the installed package's ``regressions/published/`` (the
    only folder: reports and results name their tables against it)."""
    return find_shipped(name, PUBLISHED_DIR, "published table", checkout=False)


def load_table(name: str | Path) -> dict[str, PublishedSystem]:
    """Every system of one published table, fully validated (errors name the file and line)."""
    path = find_table(str(name))
    document, check = read_mapping_file(path, "published table", "'source' and 'systems'")
    top = check.read(document, None, _TABLE, "")
    systems = {}
    for system in top["systems"]:
        where = f"system '{system}'"
        given = check.read(top["systems"], system, _SYSTEM, where)
        datasets, citations = _datasets(check, given["datasets"] or CommentedMap(), where)
        average = _metrics(check, given["average"] or CommentedMap(), f"{where}.average")
        if bool(average) != bool(given["average_datasets"]):
            raise check.fail(top["systems"], system, f"{where}: 'average' and 'average_datasets' go together; "
                                                     "name the datasets the stated average is over")
        systems[str(system)] = PublishedSystem(
            path.stem, str(system), given["label"], top["source"], given["citation"], datasets, citations, average,
            tuple(given["average_datasets"] or ()), given["derived"], top["url"])
    return systems


def load_system(key: str) -> PublishedSystem:
    """``<table>/<system>``, e.g. ``pyserini_bm25_flat/bm25-flat``."""
    table, _, system = key.rpartition("/")
    if not table:
        raise VtreproError(f"published system '{key}' must be written <table>/<system>, e.g. pyserini_bm25_flat/bm25-flat")
    systems = load_table(table)
    if system not in systems:
        raise VtreproError(f"published table '{table}' has no system '{system}'; it has {', '.join(systems)}")
    return systems[system]


def _datasets(check: Checker, node: CommentedMap, where: str) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    values, citations = {}, {}
    for dataset in node:
        entry = node[dataset]
        if not isinstance(entry, CommentedMap):
            raise check.fail(node, dataset, f"{where}.datasets.{dataset} must map metrics to values, "
                                            "e.g. {{ndcg@10: 0.6789}}")
        if "citation" in entry:
            citations[str(dataset)] = check.value(entry, "citation", Field(str), f"{where}.datasets.{dataset}.citation")
        values[str(dataset)] = _metrics(check, entry, f"{where}.datasets.{dataset}", skip={"citation"})
    return values, citations


def _metrics(check: Checker, node: CommentedMap, where: str, skip: frozenset[str] | set[str] = frozenset()
             ) -> dict[str, float]:
    values = {}
    for metric in node:
        if metric in skip:
            continue
        try:
            parse_metric(str(metric))
        except VtreproError as error:
            raise check.fail(node, metric, f"{where}: {error}") from None
        values[str(metric)] = check.value(node, metric, _VALUE, f"{where}.{metric}")
    return values
