"""The report's "Vocabulary gap" section: the files ``vtrepro gap`` (or ``regress --spec diagnosis_vocabulary_gap``)
writes into ``<results folder>/gap/`` as tables and figures.

The files it reads, any of them (each optional; a folder holding none gives no section):

- ``census.json``: ``{"tokenizers": [{name, source, scheme, entries, specials, units, units_without_accents,
  coarse_graining, coarse_graining_without_accents, forms_per_unit: {"1", "2", "3", "4", "5+"}, multi_form_share,
  largest_groups: [{unit, forms}], variants: {marked, marked_capitalized, capitalized, case_variants,
  position_twins}}]}`` (a variant class may be null or absent: not one of that tokenizer's scheme);
- ``corpus.json``: ``{"figures": [{tokenizer, dataset, split, documents, queries, relevant_pairs, document_tokens,
  query_tokens, variant_mass_documents, variant_mass_queries, form_entropy_documents, form_entropy_queries,
  match_rate: {raw, markers, case, both}, exact_match, unit_match, pairs_gained_by_units, examples: [...]}]}``;
- ``bm25.json``: ``{"runs": [{tokenizer, dataset, normalization, index: {documents, total_terms}, scores: {metric:
  score}, against_raw: {metric: {difference, p_t_test, p_randomization, ...}}}]}``;
- ``integrity.json``: ``{"tokenizers": [{tokenizer, dataset, groups_measured, mean_divergence,
  random_pair_divergence, at_risk: [{unit, forms, divergence}], preserved: [...]}]}``;
- ``model.json`` and ``training.json`` (``vtrepro gap model`` and ``gap training``): :mod:`vtrepro.report.gap_model`.

A results folder may come from a stranger, so these are read as the rest of it is: through
:func:`vtrepro.core.io.read_json_file` (inside the results folder once links are followed, a regular file of at
most the ``gap`` cap of :data:`vtrepro.core.io.JSON_FILE_BYTES`, UTF-8, finite numbers, bounded nesting), every
value used checked for its type and range, every list bounded (:data:`MAX_ROWS`, :data:`MAX_LIST`); a fault is one
line naming the file and the JSON path. Keys it does not use are ignored. The section holds text cells only: the
renderer (:mod:`vtrepro.report.render`) escapes them for each format, and the figures draw no more than
:data:`vtrepro.report.plots.MAX_BAR_GROUPS` groups.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file
from vtrepro.report.gap_model import (
    MODEL_NAME,
    TRAINING_NAME,
    model_rows,
    read_model,
    read_training,
    training_chart,
    training_rows,
)
from vtrepro.report.tables import SIGNIFICANCE_LEVEL

if TYPE_CHECKING:
    import pandas as pd

GAP_DIRNAME = "gap"
"""The folder of a results folder that holds the vocabulary gap's files."""
CENSUS_NAME, CORPUS_NAME, BM25_NAME, INTEGRITY_NAME = "census.json", "corpus.json", "bm25.json", "integrity.json"
GAP_FILES = (CENSUS_NAME, CORPUS_NAME, BM25_NAME, INTEGRITY_NAME, MODEL_NAME, TRAINING_NAME)
GAP_FIGURES = ("forms", "variants", "matches", "bm25", "training")
"""The section's figures, in order: ``figures/gap-<name>.png`` and ``.svg`` (``gap-<k>-<name>`` for the k-th section
of a report over several results folders)."""
FIGURE_FORMATS = ("png", "svg")
MAX_ROWS = 1000
"""The most tokenizers, corpus figures, BM25 runs or integrity entries a file may hold."""
MAX_LIST = 1000
"""The most entries of any inner list read (largest groups, forms of a unit, examples, units at risk)."""
MAX_TEXT_CHARS = 1000
"""The longest text read (a name, a unit, a form, a source)."""
GROUPS_SHOWN, FORMS_SHOWN, EXAMPLES_SHOWN = 3, 12, 3
"""Per tokenizer: the largest groups shown, the forms shown of each; per corpus figure: the examples shown."""
BUCKETS = ("1", "2", "3", "4", "5+")
"""``forms_per_unit``'s keys: how many units have 1, 2, 3, 4 and 5 or more surface forms."""
VARIANT_CLASSES = ("marked", "marked_capitalized", "capitalized", "case_variants", "position_twins")
MATCH_LEVELS = ("raw", "markers", "case", "both")
"""The normalizations, from none to both: ``raw`` is the exact match, ``both`` the unit match."""
METRICS = ("ndcg@10", "recall@100")
"""The BM25 scores shown; the figure draws the first."""
FIX = ("give the files 'vtrepro gap census|corpus|bm25' or 'vtrepro regress --spec diagnosis_vocabulary_gap' "
       "write, or rerun it")


@dataclass
class GapTable:
    """One table of the section: text cells, as shown."""

    title: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)


@dataclass
class GapSection:
    """The "Vocabulary gap" section of one results folder: its tables and figures (stem -> caption, PNG, SVG)."""

    folder: Path
    tables: list[GapTable]
    figures: dict[str, tuple[str, bytes, bytes]] = field(default_factory=dict)


def gap_folder(results_folder: Path) -> Path | None:
    """``<results_folder>/gap`` when it is a folder holding any of :data:`GAP_FILES`, else None."""
    folder = Path(results_folder) / GAP_DIRNAME
    if not folder.is_dir():
        return None
    return folder if any((folder / name).exists() or (folder / name).is_symlink() for name in GAP_FILES) else None


def figure_stems(position: int) -> list[str]:
    """The figure stems of a report's gap section at ``position`` (0 first): ``gap-forms``, then ``gap-2-forms`` ..."""
    prefix = "gap" if position == 0 else f"gap-{position + 1}"
    return [f"{prefix}-{name}" for name in GAP_FIGURES]


def gap_section(results_folder: Path, position: int = 0) -> GapSection | None:
    """The vocabulary gap section of a results folder (``<results_folder>/gap/``), or None when it has none;
    ``position`` (the section's place in the report) names its figures (:func:`figure_stems`). Every figure is drawn inside
    :func:`vtrepro.report.plots.drawing`."""
    from vtrepro.report import plots

    folder = gap_folder(results_folder)
    if folder is None:
        return None
    census, corpus, bm25, integrity, model, training = (_read(folder / name, Path(results_folder))
                                                         for name in GAP_FILES)
    tokenizers = _census(_Checker(folder / CENSUS_NAME), census) if census is not None else []
    figures = _corpus(_Checker(folder / CORPUS_NAME), corpus) if corpus is not None else []
    runs = _bm25(_Checker(folder / BM25_NAME), bm25) if bm25 is not None else []
    entries = _integrity(_Checker(folder / INTEGRITY_NAME), integrity) if integrity is not None else []
    model_runs = read_model(_Checker(folder / MODEL_NAME), model) if model is not None else []
    machine, trained = (read_training(_Checker(folder / TRAINING_NAME), training) if training is not None
                        else ("", []))
    tables = [*_census_tables(tokenizers), *_corpus_tables(figures), *_bm25_tables(runs), *_integrity_tables(entries)]
    if model_runs:
        tables.append(GapTable("Duplicate activation, dead terms and density in the model's vectors",
                               _frame(model_rows(model_runs)),
                               ["duplicates: vectors activating two or more forms of one unit; redundant mass: the "
                                "impact on the forms beyond the strongest of their unit; dead: entries no document "
                                "activates (docs/vocabulary-gap.md)."]))
    if trained:
        tables.append(GapTable("Training runs drawn in the training curves", _frame(training_rows(machine, trained))))
    stems = dict(zip(GAP_FIGURES, figure_stems(position)))
    with plots.drawing():
        drawn = {stems["forms"]: _forms_chart(tokenizers), stems["variants"]: _variants_chart(tokenizers),
                 stems["matches"]: _matches_chart(figures), stems["bm25"]: _bm25_chart(runs),
                 stems["training"]: training_chart(trained)}
    return GapSection(folder, tables, {stem: (caption, *images) for stem, (caption, images) in drawn.items()
                                       if images is not None})


def _read(path: Path, results_folder: Path) -> Any:
    if not (path.exists() or path.is_symlink()):
        return None
    return read_json_file(path, FIX, JSON_FILE_BYTES["gap"], folder=results_folder)


# -- Reading ---------------------------------------------------------------------------------------------


class _Checker:
    """The values of one gap file, failing on the first wrong one with the file and its JSON path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> VtreproError:
        return VtreproError(f"{self.path}: {where}: {problem}; {FIX}")

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a JSON object, got {_shown(value)}")
        return value

    def listing(self, value: Any, where: str, most: int = MAX_LIST) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a JSON list, got {_shown(value)}")
        if len(value) > most:
            raise self.fail(where, f"holds {len(value)} entries; a report reads at most {most}")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_shown(value)}")
        if len(value) > MAX_TEXT_CHARS:
            raise self.fail(where, f"a string of {len(value)} characters; at most {MAX_TEXT_CHARS}")
        return value

    def name(self, value: Any, where: str) -> str:
        """A tokenizer, dataset or split name: 1 to 200 characters, no control characters (it is a label)."""
        text = self.text(value, where)
        if not text or len(text) > 200 or any(ord(char) < 32 or 127 <= ord(char) < 160 for char in text):
            raise self.fail(where, f"{_shown(text)} is not a name (1 to 200 characters, no control characters)")
        return text

    def number(self, value: Any, where: str, minimum: float | None = None, maximum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, got {_shown(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            low = "" if minimum is None else f">= {minimum}"
            high = "" if maximum is None else f"<= {maximum}"
            raise self.fail(where, f"{value} is out of range: expected a number {' and '.join(filter(None, (low, high)))}")
        return float(value)

    def share(self, value: Any, where: str) -> float:
        return self.number(value, where, 0, 1)

    def count(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(where, f"expected a count (an integer >= 0), got {_shown(value)}")
        return value

    def optional(self, record: dict[str, Any], key: str, where: str, read) -> Any:
        """``read(value, where)`` of ``record[key]``, or None where it is absent or null."""
        value = record.get(key)
        return None if value is None else read(value, f"{where}.{key}")

    def rows(self, document: Any, key: str) -> list[tuple[str, dict[str, Any]]]:
        """``document[key]``: a list of at most :data:`MAX_ROWS` objects, each with its JSON path."""
        top = self.mapping(document, "the top level")
        if key not in top:
            raise self.fail("the top level", f"needs '{key}', has {', '.join(map(repr, list(top)[:10])) or 'no key'}")
        return [(f"{key}[{index}]", self.mapping(row, f"{key}[{index}]"))
                for index, row in enumerate(self.listing(top[key], key, MAX_ROWS))]


def _shown(value: Any) -> str:
    """A value as an error line shows it: its JSON type, or a string's first characters."""
    if isinstance(value, str):
        return repr(value[:60] + ("..." if len(value) > 60 else ""))
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "an integer", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _forms(check: _Checker, value: Any, where: str) -> list[str]:
    return [check.text(form, f"{where}[{index}]") for index, form in enumerate(check.listing(value, where))]


def _census(check: _Checker, document: Any) -> list[dict[str, Any]]:
    tokenizers = []
    for where, row in check.rows(document, "tokenizers"):
        buckets = check.mapping(row.get("forms_per_unit"), f"{where}.forms_per_unit")
        variants = check.mapping(row.get("variants", {}), f"{where}.variants")
        groups = check.listing(row.get("largest_groups", []), f"{where}.largest_groups")
        shown_groups = []
        for index, group in enumerate(groups[:GROUPS_SHOWN]):
            at = f"{where}.largest_groups[{index}]"
            group = check.mapping(group, at)
            shown_groups.append((check.text(group.get("unit"), f"{at}.unit"), _forms(check, group.get("forms"), f"{at}.forms")))
        tokenizers.append({
            "name": check.name(row.get("name"), f"{where}.name"),
            "scheme": check.text(row.get("scheme", ""), f"{where}.scheme"),
            "source": check.text(row.get("source", ""), f"{where}.source"),
            **{key: check.count(row.get(key), f"{where}.{key}") for key in ("entries", "specials", "units")},
            "coarse_graining": check.number(row.get("coarse_graining"), f"{where}.coarse_graining", 0),
            "coarse_graining_without_accents": check.optional(row, "coarse_graining_without_accents", where,
                                                              lambda value, at: check.number(value, at, 0)),
            "multi_form_share": check.share(row.get("multi_form_share"), f"{where}.multi_form_share"),
            "forms_per_unit": {bucket: check.count(buckets.get(bucket), f"{where}.forms_per_unit['{bucket}']")
                               for bucket in BUCKETS},
            "variants": {name: check.optional(variants, name, f"{where}.variants", check.count) for name in VARIANT_CLASSES},
            "groups": shown_groups,
        })
    return tokenizers


def _corpus(check: _Checker, document: Any) -> list[dict[str, Any]]:
    figures = []
    for where, row in check.rows(document, "figures"):
        rates = check.mapping(row.get("match_rate"), f"{where}.match_rate")
        examples = check.listing(row.get("examples", []), f"{where}.examples")
        shown = []
        for index, example in enumerate(examples[:EXAMPLES_SHOWN]):
            at = f"{where}.examples[{index}]"
            example = check.mapping(example, at)
            shown.append({**{key: check.text(example.get(key), f"{at}.{key}")
                             for key in ("query_form", "document_form", "unit", "query_id", "document_id")},
                          "pairs": check.count(example.get("pairs"), f"{at}.pairs")})
        figures.append({
            "tokenizer": check.name(row.get("tokenizer"), f"{where}.tokenizer"),
            "dataset": check.name(row.get("dataset"), f"{where}.dataset"),
            "split": check.optional(row, "split", where, check.name) or "",
            **{key: check.count(row.get(key), f"{where}.{key}") for key in ("documents", "queries", "relevant_pairs")},
            **{key: check.share(row.get(key), f"{where}.{key}")
               for key in ("variant_mass_documents", "variant_mass_queries", "exact_match", "unit_match",
                           "pairs_gained_by_units")},
            **{key: check.number(row.get(key), f"{where}.{key}", 0) for key in ("form_entropy_documents",
                                                                                "form_entropy_queries")},
            "match_rate": {level: check.share(rates.get(level), f"{where}.match_rate.{level}") for level in MATCH_LEVELS},
            "examples": shown,
        })
    return figures


def _bm25(check: _Checker, document: Any) -> list[dict[str, Any]]:
    runs = []
    for where, row in check.rows(document, "runs"):
        normalization = check.text(row.get("normalization"), f"{where}.normalization")
        if normalization not in MATCH_LEVELS:
            raise check.fail(f"{where}.normalization", f"{_shown(normalization)} is not one of {', '.join(MATCH_LEVELS)}")
        index = check.mapping(row.get("index", {}), f"{where}.index")
        scores = check.mapping(row.get("scores"), f"{where}.scores")
        against = check.mapping(row.get("against_raw", {}), f"{where}.against_raw")
        comparisons = {}
        for metric in METRICS:
            if against.get(metric) is None:
                continue
            at = f"{where}.against_raw['{metric}']"
            test = check.mapping(against[metric], at)
            comparisons[metric] = {
                "difference": check.number(test.get("difference"), f"{at}.difference", -1, 1),
                **{key: check.optional(test, key, at, check.share) for key in ("p_t_test", "p_randomization")},
            }
        runs.append({
            "tokenizer": check.name(row.get("tokenizer"), f"{where}.tokenizer"),
            "dataset": check.name(row.get("dataset"), f"{where}.dataset"),
            "normalization": normalization,
            **{key: check.optional(index, key, f"{where}.index", check.count) for key in ("documents", "total_terms")},
            "scores": {metric: check.optional(scores, metric, f"{where}.scores", check.share) for metric in METRICS},
            "against_raw": comparisons,
        })
    return runs


def _integrity(check: _Checker, document: Any) -> list[dict[str, Any]]:
    entries = []
    for where, row in check.rows(document, "tokenizers"):
        at_risk = check.listing(row.get("at_risk", []), f"{where}.at_risk")
        shown = []
        for index, unit in enumerate(at_risk[:GROUPS_SHOWN]):
            at = f"{where}.at_risk[{index}]"
            unit = check.mapping(unit, at)
            shown.append((check.text(unit.get("unit"), f"{at}.unit"), _forms(check, unit.get("forms"), f"{at}.forms"),
                          check.number(unit.get("divergence"), f"{at}.divergence", 0)))
        entries.append({
            "tokenizer": check.name(row.get("tokenizer"), f"{where}.tokenizer"),
            "dataset": check.optional(row, "dataset", where, check.name) or "",
            "groups_measured": check.count(row.get("groups_measured"), f"{where}.groups_measured"),
            **{key: check.optional(row, key, where, lambda value, at: check.number(value, at, 0))
               for key in ("mean_divergence", "random_pair_divergence")},
            "at_baseline": check.optional(row, "groups_at_baseline", where, check.count),
            "shown": shown,
        })
    return entries


# -- Tables ----------------------------------------------------------------------------------------------


def _count(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _p(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}{'*' if value < SIGNIFICANCE_LEVEL else ''}"


def _listed(forms: list[str]) -> str:
    shown = ", ".join(forms[:FORMS_SHOWN])
    return shown + (f", ... (+{len(forms) - FORMS_SHOWN})" if len(forms) > FORMS_SHOWN else "")


def _frame(rows: list[dict[str, str]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, dtype=object)


def _census_tables(tokenizers: list[dict[str, Any]]) -> list[GapTable]:
    if not tokenizers:
        return []
    sizes = _frame([{
        "tokenizer": row["name"], "scheme": row["scheme"], "entries": _count(row["entries"]),
        "specials": _count(row["specials"]), "units": _count(row["units"]),
        "coarse-graining": _ratio(row["coarse_graining"]),
        "without accents": _ratio(row["coarse_graining_without_accents"]),
        "multi-form share": _ratio(row["multi_form_share"]),
        **{f"{bucket} form{'s' if bucket != '1' else ''}": _count(row["forms_per_unit"][bucket]) for bucket in BUCKETS},
    } for row in tokenizers])
    variants = _frame([{"tokenizer": row["name"], **{name.replace("_", " "): "n/a" if row["variants"][name] is None
                                                     else _count(row["variants"][name]) for name in VARIANT_CLASSES}}
                       for row in tokenizers])
    groups = _frame([{"tokenizer": row["name"], "unit": unit, "forms": _listed(forms)}
                     for row in tokenizers for unit, forms in row["groups"]])
    return [
        GapTable("Census: units and their surface forms", sizes,
                 ["coarse-graining: vocabulary entries per unit (a unit: the entries that differ only by case, the "
                  "word-start marker or accents); multi-form share: the share of entries whose unit has 2 or more forms.",
                  *(f"{row['name']}: {row['source']}" for row in tokenizers if row["source"])]),
        GapTable("Census: variant classes (entries)", variants,
                 ["n/a: not a class of that tokenizer's scheme (the word-start marker is BPE's; position twins, "
                  "'x' and '##x', WordPiece's)."]),
        *([GapTable(f"Census: the largest groups (first {GROUPS_SHOWN} per tokenizer)", groups)] if len(groups) else []),
    ]


def _corpus_tables(figures: list[dict[str, Any]]) -> list[GapTable]:
    if not figures:
        return []
    matches = _frame([{
        "tokenizer": row["tokenizer"], "dataset": row["dataset"], "split": row["split"],
        "documents": _count(row["documents"]), "queries": _count(row["queries"]),
        "relevant pairs": _count(row["relevant_pairs"]),
        "variant mass (docs)": _ratio(row["variant_mass_documents"]),
        "variant mass (queries)": _ratio(row["variant_mass_queries"]),
        "form entropy (docs)": _ratio(row["form_entropy_documents"]),
        "form entropy (queries)": _ratio(row["form_entropy_queries"]),
        "exact match": _ratio(row["exact_match"]), "markers merged": _ratio(row["match_rate"]["markers"]),
        "case merged": _ratio(row["match_rate"]["case"]), "unit match": _ratio(row["unit_match"]),
        "pairs gained by units": _ratio(row["pairs_gained_by_units"]),
    } for row in figures])
    examples = _frame([{"tokenizer": row["tokenizer"], "dataset": row["dataset"], "query form": example["query_form"],
                        "document form": example["document_form"], "unit": example["unit"],
                        "pairs": _count(example["pairs"]), "e.g. query": example["query_id"],
                        "document": example["document_id"]}
                       for row in figures for example in row["examples"]])
    return [
        GapTable("Corpus: matches lost to surface forms", matches,
                 ["variant mass: the share of token occurrences on units of several forms; form entropy: bits of the "
                  "form given the unit, per token; exact (unit) match: the mean share of a query's distinct tokens "
                  "whose form (unit) a relevant document holds; pairs gained by units: the share of relevant pairs "
                  "where units find a match that ids miss."]),
        *([GapTable(f"Corpus: matches only units make (first {EXAMPLES_SHOWN} per figure)", examples)]
          if len(examples) else []),
    ]


def _bm25_tables(runs: list[dict[str, Any]]) -> list[GapTable]:
    if not runs:
        return []
    rows = []
    for run in runs:
        row = {"tokenizer": run["tokenizer"], "dataset": run["dataset"], "normalization": run["normalization"],
               "documents": _count(run["documents"]), "terms": _count(run["total_terms"])}
        for metric in METRICS:
            test = run["against_raw"].get(metric, {})
            row.update({metric: _ratio(run["scores"][metric]),
                        f"Δ {metric}": "" if not test else f"{test['difference']:+.4f}",
                        f"p (t-test) {metric}": _p(test.get("p_t_test")),
                        f"p (randomization) {metric}": _p(test.get("p_randomization"))})
        rows.append(row)
    return [GapTable("BM25 on normalized vocabularies", _frame(rows),
                     ["Δ and p: against the raw (unnormalized) run of the same tokenizer and dataset, paired over the "
                      f"queries; a p-value below {SIGNIFICANCE_LEVEL} is starred."])]


def _integrity_tables(entries: list[dict[str, Any]]) -> list[GapTable]:
    if not entries:
        return []
    frame = _frame([{
        "tokenizer": row["tokenizer"], "dataset": row["dataset"], "groups measured": _count(row["groups_measured"]),
        "mean divergence": _ratio(row["mean_divergence"]),
        "random pairs' divergence": _ratio(row["random_pair_divergence"]),
        "at or above the random pairs": _count(row["at_baseline"]),
        "most divergent": "; ".join(f"{unit} ({_listed(forms)}): {divergence:.4f}" for unit, forms, divergence in row["shown"]),
    } for row in entries])
    return [GapTable("Integrity: do a unit's forms mean the same?", frame,
                     ["divergence between the contexts of a unit's forms; a group at or above the random pairs' median "
                      "is at risk of losing meaning when its forms are merged; the most divergent are listed."])]


# -- Figures ---------------------------------------------------------------------------------------------


def _first(what: str, count: int) -> str:
    from vtrepro.report.plots import MAX_BAR_GROUPS

    return f" (the first {MAX_BAR_GROUPS} of {count} {what})" if count > MAX_BAR_GROUPS else ""


def _forms_chart(tokenizers: list[dict[str, Any]]) -> tuple[str, tuple[bytes, bytes] | None]:
    from vtrepro.report.plots import MAX_BAR_SERIES, bars_chart

    series = {row["name"]: [row["forms_per_unit"][bucket] / row["units"] if row["units"] else None for bucket in BUCKETS]
              for row in tokenizers}
    more = f" (the first {MAX_BAR_SERIES} of {len(series)} tokenizers)" if len(series) > MAX_BAR_SERIES else ""
    return (f"surface forms per unit, share of each tokenizer's units{more}",
            bars_chart(list(BUCKETS), series, "share of units (log)", "Surface forms per unit", log=True)
            if tokenizers else None)


def _variants_chart(tokenizers: list[dict[str, Any]]) -> tuple[str, tuple[bytes, bytes] | None]:
    from vtrepro.report.plots import bars_chart

    series = {name.replace("_", " "): [row["variants"][name] for row in tokenizers] for name in VARIANT_CLASSES}
    return (f"variant classes per tokenizer{_first('tokenizers', len(tokenizers))}",
            bars_chart([row["name"] for row in tokenizers], series, "vocabulary entries", "Variant classes"))


def _matches_chart(figures: list[dict[str, Any]]) -> tuple[str, tuple[bytes, bytes] | None]:
    from vtrepro.report.plots import bars_chart

    labels = {"raw": "exact", "markers": "markers merged", "case": "case merged", "both": "unit"}
    series = {labels[level]: [row["match_rate"][level] for row in figures] for level in MATCH_LEVELS}
    caption = "matches lost: the share of a query's tokens a relevant document holds, by form and by unit"
    return (caption + _first("figures", len(figures)),
            bars_chart([f"{row['tokenizer']} / {row['dataset']}" for row in figures], series,
                       "query tokens found in a relevant document", "Matches lost: exact against unit match"))


def _significant(run: dict[str, Any] | None, metric: str) -> bool:
    p = (run or {}).get("against_raw", {}).get(metric, {}).get("p_randomization")
    return p is not None and p < SIGNIFICANCE_LEVEL


def _bm25_chart(runs: list[dict[str, Any]]) -> tuple[str, tuple[bytes, bytes] | None]:
    from vtrepro.report.plots import bars_chart

    metric = METRICS[0]
    keys = list(dict.fromkeys((run["tokenizer"], run["dataset"]) for run in runs))
    scores = {(run["tokenizer"], run["dataset"], run["normalization"]): run for run in runs}
    series, marks = {}, {}
    for level in MATCH_LEVELS:
        found = [scores.get((*key, level)) for key in keys]
        series[level] = [run["scores"][metric] if run else None for run in found]
        marks[level] = [_significant(run, metric) for run in found]
    return (f"BM25 {metric} by normalization (* p < {SIGNIFICANCE_LEVEL} against raw){_first('runs', len(keys))}",
            bars_chart([f"{tokenizer} / {dataset}" for tokenizer, dataset in keys], series, metric,
                       f"BM25 {metric} by normalization", marks=marks))
