"""The model half of the report's "Vocabulary gap" section: ``model.json`` (``vtrepro gap model``) as the
duplicate-activation table, and ``training.json`` (``vtrepro gap training``) as the training curves and the table of
their recipes and machine. Read like the rest of the section (:mod:`vtrepro.report.gap`): bounded, every value
checked, a fault one line naming the file and the JSON path.

- ``model.json``: ``{"runs": [{run, tokenizer, vocabulary, duplicates_documents: {vectors, duplicate_share,
  redundant_mass, ...}, duplicates_queries: {...}, dead: {dead, dead_multi_form, dead_single_form, dead_shadowed},
  density_documents: {mean, p50, p99}, density_queries: {...}, flops}]}``;
- ``training.json``: ``{"machine", "runs": [{run, recipe, fingerprint, device, cpu_threads, train_seconds, curves:
  {step: [...], active_d, active_q, inactive_d, loss}}]}``.
"""
from __future__ import annotations

from typing import Any

MODEL_NAME, TRAINING_NAME = "model.json", "training.json"
MAX_STEPS = 1_000_000
"""The most steps of one training curve read."""
CURVES = (("active terms per document", "active_d", True), ("active terms per query", "active_q", True),
          ("entries no document of the batch activates", "inactive_d", False), ("loss", "loss", False))
"""The training figure's panels: title, curve, log scale."""


def read_model(check: Any, document: Any) -> list[dict[str, Any]]:
    """The runs of ``model.json``, checked (``check``: the section's :class:`vtrepro.report.gap._Checker`)."""
    runs = []
    for where, row in check.rows(document, "runs"):
        def part(key: str, names: tuple[str, ...], read, row=row, where=where) -> dict[str, Any]:
            values = check.mapping(row.get(key), f"{where}.{key}")
            return {name: read(values.get(name), f"{where}.{key}.{name}") for name in names}

        runs.append({
            "run": check.name(row.get("run"), f"{where}.run"),
            "tokenizer": check.name(row.get("tokenizer"), f"{where}.tokenizer"),
            "vocabulary": check.count(row.get("vocabulary"), f"{where}.vocabulary"),
            "documents": part("duplicates_documents", ("vectors", "duplicate_share", "redundant_mass"), check.number),
            "queries": part("duplicates_queries", ("vectors", "duplicate_share", "redundant_mass"), check.number),
            "dead": part("dead", ("dead", "dead_multi_form", "dead_single_form", "dead_shadowed"), check.count),
            "density_documents": part("density_documents", ("mean", "p50", "p99"), check.number),
            "density_queries": part("density_queries", ("mean", "p50", "p99"), check.number),
            "flops": check.optional(row, "flops", where, check.number),
        })
    return runs


def read_training(check: Any, document: Any) -> tuple[str, list[dict[str, Any]]]:
    """The machine and the runs of ``training.json``, checked."""
    top = check.mapping(document, "the top level")
    machine = check.text(top.get("machine", ""), "machine")
    runs = []
    for where, row in check.rows(document, "runs"):
        curves = check.mapping(row.get("curves"), f"{where}.curves")
        steps = [check.number(value, f"{where}.curves.step[{index}]", 0) for index, value in
                 enumerate(check.listing(curves.get("step"), f"{where}.curves.step", MAX_STEPS))]
        read = {}
        for _, key, _ in CURVES:
            values = check.listing(curves.get(key, []), f"{where}.curves.{key}", MAX_STEPS)
            if values and len(values) != len(steps):
                raise check.fail(f"{where}.curves.{key}", f"{len(values)} values for {len(steps)} steps")
            read[key] = [check.number(value, f"{where}.curves.{key}[{index}]") for index, value in enumerate(values)]
        runs.append({"run": check.name(row.get("run"), f"{where}.run"), "steps": steps, "curves": read,
                     **{key: check.optional(row, key, where, check.text) for key in ("recipe", "fingerprint", "device")},
                     "cpu_threads": check.optional(row, "cpu_threads", where, check.count),
                     "train_seconds": check.optional(row, "train_seconds", where, check.number)})
    return machine, runs


def model_rows(runs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The duplicate-activation table: one row per run."""
    return [{"run": run["run"], "tokenizer": run["tokenizer"], "vocabulary": f"{run['vocabulary']:,}",
             "docs with duplicates": f"{run['documents']['duplicate_share']:.4f}",
             "queries with duplicates": f"{run['queries']['duplicate_share']:.4f}",
             "redundant mass (docs)": f"{run['documents']['redundant_mass']:.4f}",
             "dead terms": f"{run['dead']['dead']:,}", "dead, unit has other forms": f"{run['dead']['dead_multi_form']:,}",
             "dead, unit has one form": f"{run['dead']['dead_single_form']:,}",
             "terms/doc (mean, p99)": f"{run['density_documents']['mean']:.1f}, {run['density_documents']['p99']:.0f}",
             "terms/query (mean, p99)": f"{run['density_queries']['mean']:.1f}, {run['density_queries']['p99']:.0f}",
             "FLOPS": "" if run["flops"] is None else f"{run['flops']:.3f}"} for run in runs]


def training_rows(machine: str, runs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The recipes and machine of the training curves: one row per run."""
    return [{"run": run["run"], "steps": f"{len(run['steps']):,}", "recipe": run["recipe"] or "",
             "fingerprint": (run["fingerprint"] or "")[:12], "device": run["device"] or "",
             "CPU threads": "" if run["cpu_threads"] is None else str(run["cpu_threads"]),
             "seconds": "" if run["train_seconds"] is None else f"{run['train_seconds']:.0f}", "machine": machine}
            for run in runs]


def training_chart(runs: list[dict[str, Any]]) -> tuple[str, tuple[bytes, bytes] | None]:
    """The training curves, one panel per entry of :data:`CURVES`."""
    from vtrepro.report.plots import panels_chart

    panels = [(title, {run["run"]: (run["steps"], run["curves"][key]) for run in runs if run["curves"][key]}, log)
              for title, key, log in CURVES]
    return ("active terms, inactive vocabulary entries and loss against step, one line per run",
            panels_chart(panels, "step", "The vocabulary gap over training") if runs else None)
