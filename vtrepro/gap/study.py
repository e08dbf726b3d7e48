"""One gap study: the census of several tokenizers and, on each dataset, their corpus figures, BM25 over their
tokens and the integrity of their merges, written as JSON and Markdown into one folder (the layout
``vtrepro gap`` writes and ``regress`` keeps in ``runs/<spec>/gap/``):

``census.json``/``.md``, ``corpus.json``/``.md``, ``bm25.json``/``.md`` (each run's index and run file under
``bm25/<tokenizer>/<dataset>/<normalization>/``), ``integrity.json``/``.md``.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, check_within, write_json
from vtrepro.core.markdown import md
from vtrepro.data.beir import DATASET_NAME, TEST_SPLIT, BeirDataset
from vtrepro.gap.bm25 import METRICS, bm25_figures
from vtrepro.gap.census import census
from vtrepro.gap.corpus import TokenizedDataset, corpus_figures, tokenize_dataset
from vtrepro.gap.integrity import input_embeddings, integrity
from vtrepro.gap.model import flat_figures
from vtrepro.gap.units import NORMALIZATIONS
from vtrepro.gap.vocabularies import Vocabulary

logger = logging.getLogger(__name__)

PARTS = ("census", "corpus", "bm25", "integrity")
LISTED_AS = {"census": "tokenizers", "corpus": "figures", "bm25": "runs", "integrity": "tokenizers"}
"""The key under which each part's JSON lists its entries."""
"""What a study measures, in order; each part writes ``<part>.json`` and ``<part>.md``."""


@dataclass
class Study:
    """What to measure: tokenizers (by their names), datasets, and which parts."""

    vocabularies: list[Vocabulary]
    datasets: list[BeirDataset] = field(default_factory=list)
    parts: tuple[str, ...] = PARTS
    split: str = TEST_SPLIT
    threads: int = DEFAULT_THREADS
    normalizations: tuple[str, ...] = NORMALIZATIONS
    model: str | None = None  # integrity: a model whose input-embedding rows are compared (its tokenizer's)
    model_dir: str | None = None

    def __post_init__(self) -> None:
        for dataset in self.datasets:
            if not DATASET_NAME.fullmatch(dataset.name) or dataset.name in (".", ".."):
                raise VtreproError(f"{dataset.path}: dataset name {dataset.name!r:.80} cannot name the study's output "
                                   "folders; give the dataset's folder itself (its name: letters, digits, '.', '_', '-')")
        names = [vocabulary.name for vocabulary in self.vocabularies]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise VtreproError(f"--tokenizer {repeated[0]} is given twice (tokenizers are told apart by their "
                               "folder's name); give each once")


def run_study(study: Study, output: Path) -> dict[str, dict]:
    """Measure ``study`` into ``output`` (an existing folder); every part's figures by part name."""
    results: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    if "census" in study.parts:
        started = time.perf_counter()
        results["census"] = {"tokenizers": [census(vocabulary) for vocabulary in study.vocabularies]}
        seconds["census"] = time.perf_counter() - started
    corpus_parts = [part for part in ("corpus", "bm25", "integrity") if part in study.parts]
    embeddings = {vocabulary.name: input_embeddings(study.model, vocabulary, study.model_dir)
                  for vocabulary in study.vocabularies} if study.model and "integrity" in study.parts else {}
    for part in corpus_parts:
        results[part] = {LISTED_AS[part]: []}
        seconds[part] = 0.0
    for dataset in study.datasets if corpus_parts else []:
        for vocabulary in study.vocabularies:
            started = time.perf_counter()
            tokenized = tokenize_dataset(vocabulary, dataset, study.split)
            seconds["tokenize"] = seconds.get("tokenize", 0.0) + time.perf_counter() - started
            _measure_corpus(study, tokenized, output, results, seconds, embeddings.get(vocabulary.name))
    for name, figures in results.items():
        write_json(output / f"{name}.json", figures)
        with atomic_write(output / f"{name}.md") as handle:
            handle.write(MARKDOWN[name](figures))
    for name, taken in seconds.items():
        logger.info(f"{name}: {taken:.1f} s")
    return results


def _measure_corpus(study: Study, tokenized: TokenizedDataset, output: Path, results: dict[str, dict],
                    seconds: dict[str, float], embeddings: Any) -> None:
    for part in ("corpus", "bm25", "integrity"):
        if part not in study.parts:
            continue
        started = time.perf_counter()
        if part == "corpus":
            results["corpus"]["figures"].append(corpus_figures(tokenized))
        elif part == "bm25":
            folder = check_within(output / "bm25" / tokenized.vocabulary.name / tokenized.dataset, output)
            results["bm25"]["runs"] += bm25_figures(tokenized, folder, study.threads, study.normalizations)
        else:
            results["integrity"]["tokenizers"].append(integrity(tokenized, embeddings))
        seconds[part] += time.perf_counter() - started


def _cell(value: object) -> str:
    """A table cell: numbers as they are, - for none, any text escaped (names and forms come from files)."""
    if value is None:
        return "-"
    return str(value) if isinstance(value, (int, float)) else md(value)


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def census_markdown(figures: dict) -> str:
    rows = [[entry["name"], entry["scheme"], entry["entries"], entry["units"], entry["coarse_graining"],
             entry["multi_form_share"], *[entry["variants"].get(name) for name in
                                          ("marked", "marked_capitalized", "capitalized", "position_twins",
                                           "case_variants")]]
            for entry in figures["tokenizers"]]
    histogram = [[entry["name"], *entry["forms_per_unit"].values()] for entry in figures["tokenizers"]]
    return ("# Vocabulary census\n\n"
            + _table(["tokenizer", "scheme", "entries", "units", "\\|V\\|/units", "in multi-form groups", "marked",
                      "marked_capitalized", "capitalized", "position_twins", "case_variants"], rows)
            + "\n## Surface forms per unit\n\n" + _table(["tokenizer", "1", "2", "3", "4", "5+"], histogram))


def corpus_markdown(figures: dict) -> str:
    rows = [[entry["tokenizer"], entry["dataset"], entry["variant_mass_documents"], entry["variant_mass_queries"],
             entry["form_entropy_documents"], *entry["match_rate"].values(), entry["pairs_gained_by_units"]]
            for entry in figures["figures"]]
    examples = [[entry["tokenizer"], entry["dataset"], example["query_form"], example["document_form"],
                 example["pairs"], example["query_id"], example["document_id"]]
                for entry in figures["figures"] for example in entry["examples"][:5]]
    return ("# The gap on a corpus\n\n"
            + _table(["tokenizer", "dataset", "variant mass (docs)", "variant mass (queries)", "H(form\\|unit) bits",
                      *[f"match {name}" for name in NORMALIZATIONS], "pairs gained by units"], rows)
            + "\n## Matches ids miss and units find\n\n"
            + _table(["tokenizer", "dataset", "query form", "document form", "pairs", "query", "document"], examples))


def bm25_markdown(figures: dict) -> str:
    rows = []
    for run in figures["runs"]:
        against = run["against_raw"].get("ndcg@10", {})
        rows.append([run["tokenizer"], run["dataset"], run["normalization"],
                     *[run["scores"][metric] for metric in METRICS], against.get("difference"),
                     against.get("p_t_test"), against.get("p_randomization")])
    return ("# BM25 (Lucene) over tokens\n\n"
            + _table(["tokenizer", "dataset", "normalization", *METRICS, "nDCG@10 vs raw", "p (t-test)",
                      "p (randomization)"], rows))


def integrity_markdown(figures: dict) -> str:
    rows = [[entry["tokenizer"], entry["dataset"], entry["groups_measured"], entry["mean_divergence"],
             entry["random_pair_divergence"], entry["groups_at_baseline"], entry.get("mean_cosine"),
             entry.get("random_pair_cosine")] for entry in figures["tokenizers"]]
    risky = [[entry["tokenizer"], entry["dataset"], " ".join(group["forms"]), group["divergence"]]
             for entry in figures["tokenizers"] for group in entry["at_risk"][:8]]
    return ("# Semantic integrity of the merges\n\n"
            + _table(["tokenizer", "dataset", "groups measured", "mean JS (bits)", "random pairs' JS",
                      "groups at or above it", "mean cosine of rows", "random pairs' cosine"], rows)
            + "\n## Merges most at risk\n\n" + _table(["tokenizer", "dataset", "forms", "JS (bits)"], risky))


MODEL_COLUMNS = (("duplicate_share_documents", "docs with duplicates"), ("duplicate_share_queries",
                                                                        "queries with duplicates"),
                 ("redundant_mass_documents", "redundant mass (docs)"), ("redundant_mass_queries",
                                                                          "redundant mass (queries)"),
                 ("dead", "dead terms"), ("dead_multi_form", "dead, unit has other forms"),
                 ("dead_single_form", "dead, unit has one form"), ("dead_shadowed", "dead, unit alive elsewhere"),
                 ("terms_per_document_mean", "terms/doc mean"), ("terms_per_document_p50", "p50"),
                 ("terms_per_document_p99", "p99"), ("terms_per_query_mean", "terms/query mean"),
                 ("terms_per_query_p50", "p50"), ("terms_per_query_p99", "p99"), ("flops", "FLOPS"))
"""The figures of ``model.md``'s side-by-side table, in order, with their column names."""


def model_markdown(figures: dict) -> str:
    """``model.md``: the runs side by side (one column each), then each run's commonest duplicated units."""
    runs = figures["runs"]
    flat = [flat_figures(run) for run in runs]
    rows = [["tokenizer", *[run["tokenizer"] for run in runs]], ["vocabulary", *[run["vocabulary"] for run in runs]],
            ["documents", *[run["documents"] for run in flat]], ["queries", *[run["queries"] for run in flat]]]
    rows += [[label, *[run[name] for run in flat]] for name, label in MODEL_COLUMNS]
    examples = [[run["run"], group["unit"], " ".join(group["forms"][:6]), group["documents"]]
                for run in runs for group in run["top_duplicates"][:8]]
    return ("# The vocabulary gap in the model's vectors\n\n"
            + _table(["figure", *[run["run"] for run in runs]], rows)
            + "\n## Units whose forms a document activates together, commonest first\n\n"
            + _table(["run", "unit", "forms in the vocabulary", "documents"], examples))


def training_markdown(figures: dict) -> str:
    """``training.md``: each run's recipe and machine, and its curves' first and last tenth."""
    rows = []
    for run in figures["runs"]:
        summary = run["summary"]
        rows.append([run["run"], len(run["curves"]["step"]), *[summary.get(f"{key}_{end}") for key in
                     ("active_d", "active_q", "inactive_d", "loss") for end in ("first", "last")]])
    recipes = [[run["run"], run.get("recipe"), (run.get("fingerprint") or "")[:12], run.get("device"),
                run.get("cpu_threads"), run.get("train_seconds")] for run in figures["runs"]]
    return ("# The vocabulary gap over training\n\nEach figure is the mean over the first and the last tenth of the "
            "steps; inactive: vocabulary entries no document of the step's batch activates.\n\n"
            + _table(["run", "steps", "active/doc first", "last", "active/query first", "last", "inactive first",
                      "last", "loss first", "last"], rows)
            + f"\n## Recipes and machine\n\nMachine: {md(figures.get('machine') or '-')}.\n\n"
            + _table(["run", "recipe", "fingerprint", "device", "CPU threads", "train seconds"], recipes))


MARKDOWN = {"census": census_markdown, "corpus": corpus_markdown, "bm25": bm25_markdown,
            "integrity": integrity_markdown, "model": model_markdown}
