"""The report's tables, built with pandas: the BEIR matrix (datasets x systems, published columns
beside observed ones, deltas, averages, significance), the efficiency table and the regression checks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from vtrepro.data.download import BEIR_DATASETS
from vtrepro.evaluate.trec import paired_comparison
from vtrepro.report.published import PUBLISHED_DIR, PublishedSystem, beir_average, load_system, load_table
from vtrepro.report.results import STATUS_MEASURED, Results

# pandas is imported where a table is built, on purpose: `report --help` and `regress --help` stay fast.
if TYPE_CHECKING:
    import pandas as pd

DEFAULT_METRIC = "ndcg@10"
"""The matrix's metric unless one is chosen (BEIR's headline figure)."""
AVERAGE = "average"
STATED_AVERAGE = "average (stated by the source)"
SIGNIFICANCE_LEVEL = 0.05


@dataclass(frozen=True)
class System:
    """An observed system: one condition of one results folder."""

    label: str
    results: Results
    condition: str

    @property
    def published_key(self) -> str | None:
        return self.results.record(self.condition).published


@dataclass
class Matrix:
    """The BEIR matrix of one metric and what each cell came from."""

    metric: str
    table: pd.DataFrame  # datasets (+ average rows) x columns, numbers (NaN where absent)
    kinds: dict[str, str]  # column -> "observed", "delta", "status", "published", "p"
    commands: dict[tuple[str, str], str] = field(default_factory=dict)  # (column, dataset) -> command
    notes: list[str] = field(default_factory=list)
    citations: dict[tuple[str, str], str] = field(default_factory=dict)  # (published column, dataset) -> citation


def observed_systems(results: list[Results]) -> list[System]:
    """Every condition of every folder, labelled by its name (``<spec>:<name>`` where two folders share it)."""
    pairs = [(result, condition) for result in results
             for condition in dict.fromkeys(result.rows.loc[result.rows["kind"] == "score", "condition"])]
    names = [condition for _, condition in pairs]
    return [System(condition if names.count(condition) == 1 else f"{result.name}:{condition}", result, condition)
            for result, condition in pairs]


def score_metrics(results: list[Results]) -> list[str]:
    """Every metric the results hold scores of, sorted."""
    return sorted({metric for result in results
                   for metric in result.rows.loc[result.rows["kind"] == "score", "metric"]})


def scores(system: System, metric: str) -> dict[str, float]:
    """Dataset -> observed score of ``metric``."""
    rows = system.results.rows
    chosen = rows[(rows["condition"] == system.condition) & (rows["kind"] == "score") & (rows["metric"] == metric)]
    return {row.dataset: float(row.observed) for row in chosen.itertuples()}


def _reference_status(system: System, metric: str) -> dict[str, str]:
    rows = system.results.rows
    chosen = rows[(rows["condition"] == system.condition) & (rows["kind"] == "reference") & (rows["metric"] == metric)]
    return {row.dataset: row.status for row in chosen.itertuples()}


def dataset_order(names: set[str]) -> list[str]:
    """BEIR's order (the order of its paper's table), then any others alphabetically."""
    known = [name for name in BEIR_DATASETS if name in names]
    return known + sorted(names - set(known))


def beir_matrix(systems: list[System], published: list[PublishedSystem], metric: str,
                baseline: System | None) -> Matrix:
    """Datasets as rows; per observed system its score, and where its spec names a published counterpart
    the delta to it and the regression's verdict; each published system's values; the p-value of a
    paired randomization test against ``baseline`` where both runs' per-query scores are at hand."""
    import pandas as pd

    observed = {system.label: scores(system, metric) for system in systems}
    datasets = dataset_order({name for values in observed.values() for name in values})
    columns: dict[str, dict[str, float] | dict[str, str]] = {}
    kinds: dict[str, str] = {}
    commands: dict[tuple[str, str], str] = {}
    by_key = {system.key: system for system in published}
    for system in systems:
        columns[system.label], kinds[system.label] = dict(observed[system.label]), "observed"
        commands.update({(system.label, dataset): system.results.command_for(dataset) for dataset in observed[system.label]})
        counterpart = by_key.get(system.published_key or "")
        if counterpart is not None:
            values = counterpart.datasets
            columns[f"{system.label} Δ published"] = {dataset: score - values[dataset][metric]
                                                       for dataset, score in observed[system.label].items()
                                                       if metric in values.get(dataset, {})}
            kinds[f"{system.label} Δ published"] = "delta"
            columns[f"{system.label} check"] = dict(_reference_status(system, metric))
            kinds[f"{system.label} check"] = "status"
        if baseline is not None and system is not baseline:
            columns[f"{system.label} p vs {baseline.label}"] = _p_values(system, baseline, metric, datasets)
            kinds[f"{system.label} p vs {baseline.label}"] = "p"
    citations: dict[tuple[str, str], str] = {}
    for reference in published:
        column = f"{reference.label} (published)"
        columns[column] = {dataset: values[metric] for dataset, values in reference.datasets.items()
                           if metric in values and dataset in datasets}
        kinds[column] = "published"
        citations.update({(column, dataset): reference.citation_of(dataset) for dataset in columns[column]})
    table = pd.DataFrame(columns, index=pd.Index(datasets, name="dataset"), dtype=object)
    table.loc[AVERAGE] = _averages(table, kinds, datasets)
    stated = {f"{system.label} (published)": system.average[metric] for system in published if metric in system.average}
    notes = [_average_note(datasets)]
    if stated:
        table.loc[STATED_AVERAGE] = pd.Series(stated, dtype=object)
        notes += [f"{system.label}: the source's own average over {len(system.average_datasets)} datasets"
                  f"{' (derived: ' + system.derived + ')' if system.derived else ''}; {system.citation}"
                  for system in published if metric in system.average]
    return Matrix(metric, table, kinds, commands, notes, citations)


def _p_values(system: System, baseline: System, metric: str, datasets: list[str]) -> dict[str, float]:
    values = {}
    for dataset in datasets:
        ours = system.results.per_query(system.condition, dataset)
        theirs = baseline.results.per_query(baseline.condition, dataset)
        if ours and theirs and metric in ours and metric in theirs and set(ours[metric]) == set(theirs[metric]):
            values[dataset] = float(paired_comparison(ours[metric], theirs[metric])["p_randomization"])
    return values


def _averages(table: pd.DataFrame, kinds: dict[str, str], datasets: list[str]) -> pd.Series:
    """Per observed, delta and published column, the BEIR average over the datasets shown, where the
    column has every one of them (a partial average would not compare)."""
    import pandas as pd

    averages = {}
    for column, kind in kinds.items():
        values = table.loc[datasets, column]
        if kind in ("observed", "delta", "published") and values.notna().all() and datasets:
            averages[column] = beir_average({dataset: float(values[dataset]) for dataset in datasets})
    return pd.Series(averages, dtype=object)


def _average_note(datasets: list[str]) -> str:
    forums = sum(name.startswith("cqadupstack/") for name in datasets)
    folded = f", CQADupStack's {forums} forums averaged first" if forums else ""
    return (f"'{AVERAGE}': mean over the {len(datasets)} dataset(s) shown{folded}, for columns that have all of them; "
            f"'p vs': paired randomization test of per-query scores; below {SIGNIFICANCE_LEVEL} is marked *.")


def measured_figures(rows: pd.DataFrame) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(condition, dataset, figure -> value) of the MEASURED rows (efficiency, vector agreement), runs and
    figures in the order the rows come: the machine's figures, not judged."""
    chosen = rows[(rows["status"] == STATUS_MEASURED) & rows["observed"].notna()]
    for (condition, dataset), group in chosen.groupby(["condition", "dataset"], sort=False):
        yield condition, dataset, dict(zip(group["metric"], group["observed"]))


def efficiency_table(systems: list[System]) -> pd.DataFrame:
    """One line per (system, dataset), one column per measured figure (each folder's rows read once)."""
    import pandas as pd

    labels = {(id(system.results), system.condition): system.label for system in systems}
    folders = {id(system.results): system.results for system in systems}
    return pd.DataFrame([{"system": labels[(key, condition)], "dataset": dataset, **figures}
                         for key, results in folders.items()
                         for condition, dataset, figures in measured_figures(results.rows)
                         if (key, condition) in labels])


def checks_table(results: Results) -> pd.DataFrame:
    """The regression's judged rows (pins and published values), as the regression printed them."""
    rows = results.rows[results.rows["status"] != STATUS_MEASURED]
    return rows[["condition", "dataset", "metric", "kind", "tier", "expected", "observed", "status", "note"]]


def published_systems(results: list[Results], names: list[str] | None) -> list[PublishedSystem]:
    """The published systems to show: ``names`` (tables or ``<table>/<system>``), or by default those the
    results refer to and every system with per-dataset values on a dataset the results cover."""
    chosen: dict[str, PublishedSystem] = {}
    for result in results:
        for record in result.conditions.values():
            if record.published:  # checked to be <table>/<system> of a table there
                system = load_system(str(PUBLISHED_DIR / record.published))
                chosen[system.key] = system
    if names is None:
        datasets = {dataset for result in results for dataset in result.rows["dataset"]}
        candidates = [system for path in sorted(PUBLISHED_DIR.glob("*.yaml")) for system in load_table(path).values()
                      if datasets & set(system.datasets)]
    else:
        candidates = [system for name in names
                      for system in ([load_system(name)] if "/" in name else load_table(name).values())]
    chosen.update({system.key: system for system in candidates})
    return list(chosen.values())
