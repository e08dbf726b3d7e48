"""Judging observed figures against a spec: result rows, statuses and the two tiers (fixed, encoded)."""
from __future__ import annotations

from dataclasses import dataclass, field

from vtrepro.encode.fingerprint import (
    VectorDiff,
    VectorSetSummary,
)
from vtrepro.regress.efficiency import Efficiency
from vtrepro.regress.spec import Condition, DatasetRun, EncodedVectors
from vtrepro.report.published import beir_average
from vtrepro.report.results import (
    STATUS_FAIL,
    STATUS_MEASURED,
    STATUS_OK,
    STATUS_OKISH,
    STATUS_SKIPPED,
    STATUS_UNPINNED,
    TIER_ENCODED,
    TIER_FIXED,
    TIER_MACHINE,
    TIER_PUBLISHED,
    ResultRow,
)


@dataclass
class Observation:
    scores: dict[str, float]
    index: dict[str, int]
    seconds: float
    vectors: dict[str, VectorSetSummary] = field(default_factory=dict)  # empty for BM25
    differences: dict[str, VectorDiff] = field(default_factory=dict)  # against --reference-vectors
    efficiency: Efficiency = field(default_factory=Efficiency)
    encoded: EncodedVectors | None = None  # the vectors searched (None for BM25)


def _same(expected: float | int, observed: float | int) -> bool:
    return f"{expected:.4f}" == f"{observed:.4f}"


def _status(expected, observed, exact: bool, within: bool) -> str:
    if expected is None:
        return STATUS_UNPINNED
    if exact:
        return STATUS_OK
    return STATUS_OKISH if within else STATUS_FAIL


def tier_of(dataset: DatasetRun, observation: Observation) -> str:
    """``fixed`` when there are no vectors (BM25) or every pinned fingerprint matches, else ``encoded``."""
    if not observation.vectors:
        return TIER_FIXED
    matches = [dataset.vectors.get(name) == summary.sha256 for name, summary in observation.vectors.items()]
    return TIER_FIXED if all(matches) else TIER_ENCODED


def _vector_note(name: str, observation: Observation) -> str:
    summary = observation.vectors[name]
    what = "documents" if name == "corpus" else "queries"
    note = f"{summary.count} {what}, total impact {summary.total_impact}"
    diff = observation.differences.get(name)
    if diff is not None:
        note += (f"; vs reference: {diff.records_differing} {what} differ ({diff.impacts_differing} impacts, "
                 f"max |delta| {diff.max_impact_delta}, total {diff.total_impact_delta:+d})")
        if diff.only_in_first or diff.only_in_second:
            note += f", {diff.only_in_first} only in the reference, {diff.only_in_second} only here"
    return note


def compare(condition: Condition, dataset: DatasetRun, observation: Observation) -> list[ResultRow]:
    """Rows for one dataset: fingerprints, index stats, scores, published references.

    In the fixed tier every pinned figure must be equal; in the encoded tier index totals and scores
    may differ within the condition's tolerance (OKISH). Document counts are always exact.
    """
    tier = tier_of(dataset, observation)
    tolerance = condition.tolerance
    rows = []
    for name, summary in observation.vectors.items():
        if name not in dataset.vectors:
            continue  # a spec recorded before fingerprints: judged in the encoded tier
        pinned_sha = dataset.vectors[name]
        status = _status(pinned_sha, summary.sha256, pinned_sha == summary.sha256, within=True)
        rows.append(ResultRow(condition.name, dataset.name, f"vectors.{name}", "vectors", pinned_sha, summary.sha256,
                              status, tier, _vector_note(name, observation)))
    for stat, count in observation.index.items():
        if stat in dataset.index:
            pinned_count = dataset.index[stat]
            within = (pinned_count is not None and stat == "total_terms" and tier == TIER_ENCODED
                      and abs(count - pinned_count) <= tolerance.total_terms * abs(pinned_count))
            note = ""
            if pinned_count is not None and count != pinned_count:
                difference = count - pinned_count
                note = f"{difference:+d} ({difference / max(pinned_count, 1):+.1e})"
            rows.append(ResultRow(condition.name, dataset.name, stat, "index", pinned_count, count,
                                  _status(pinned_count, count, pinned_count == count, within), tier, note))
    for metric, score in observation.scores.items():
        pinned_score = dataset.scores.get(metric)
        same = pinned_score is not None and _same(pinned_score, score)
        delta = None if pinned_score is None else round(score, 4) - pinned_score
        within = tier == TIER_ENCODED and delta is not None and abs(delta) <= tolerance.scores + 1e-9
        rows.append(ResultRow(condition.name, dataset.name, metric, "score", pinned_score, score,
                              _status(pinned_score, score, same, within), tier,
                              "" if same or delta is None else f"{delta:+.4f}"))
    for metric, published in dataset.reference.items():
        within = abs(round(observation.scores[metric], 4) - published) <= condition.reference_tolerance + 1e-9
        rows.append(ResultRow(condition.name, dataset.name, metric, "reference", published,
                              observation.scores[metric], STATUS_OK if within else STATUS_FAIL, TIER_PUBLISHED))
    rows += [ResultRow(condition.name, dataset.name, name, "efficiency", None, value, STATUS_MEASURED, TIER_MACHINE)
             for name, value in observation.efficiency.figures.items()]
    return rows


def agreement_rows(condition: Condition, dataset: DatasetRun, figures: dict[str, float | int]) -> list[ResultRow]:
    """Measured rows of how this condition's vectors agree with those of ``condition.agrees_with``."""
    note = f"against {condition.agrees_with}'s vectors"
    return [ResultRow(condition.name, dataset.name, name, "agreement", None, value, STATUS_MEASURED, TIER_MACHINE, note)
            for name, value in figures.items()]


def compare_averages(condition: Condition, observations: dict[str, Observation]) -> list[ResultRow]:
    """The condition's published averages, checked only when every one of its datasets ran (CQADupStack's
    forums averaged first, as BEIR does)."""
    rows = []
    complete = all(dataset.name in observations for dataset in condition.datasets)
    for metric, published in condition.reference_average.items():
        if not complete:
            rows.append(ResultRow(condition.name, "average", metric, "reference", published, None, STATUS_SKIPPED,
                                  TIER_PUBLISHED))
            continue
        mean = round(beir_average({name: obs.scores[metric] for name, obs in observations.items()}), 4)
        within = abs(mean - published) <= condition.reference_tolerance + 1e-9
        rows.append(ResultRow(condition.name, "average", metric, "reference", published, mean,
                              STATUS_OK if within else STATUS_FAIL, TIER_PUBLISHED))
    return rows
