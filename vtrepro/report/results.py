"""A regression's results folder (``runs/<spec>/``) as the report reads it: ``results.json``, the
per-query scores beside each run file, and the training and calibration logs its conditions point to."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vtrepro.core.errors import VtreproError

RESULTS_NAME = "results.json"
PER_QUERY_NAME = "per_query.json"
"""Beside each run's ``run.trec`` (``<folder>/<condition>/<dataset>/``): metric -> query id -> score."""
STATUS_OK, STATUS_OKISH, STATUS_FAIL = "OK", "OKISH", "FAIL"
STATUS_UNPINNED, STATUS_SKIPPED, STATUS_ERROR = "UNPINNED", "SKIPPED", "ERROR"
STATUS_MEASURED = "MEASURED"
"""The status of an efficiency row: recorded, never judged."""
NOT_OK = (STATUS_FAIL, STATUS_UNPINNED, STATUS_ERROR)
"""The statuses that fail a regression."""


@dataclass
class Results:
    """One results folder: its spec, how it was run, and every row it recorded."""

    folder: Path
    spec: str
    description: str
    command: list[str]
    environment: dict[str, str]
    interrupted: bool
    rows: pd.DataFrame  # condition, dataset, metric, kind, expected, observed, status, tier, note
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> published, training_log, calibration
    distributions: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # "condition/dataset" -> ...

    @property
    def name(self) -> str:
        return Path(self.spec).stem

    def per_query(self, condition: str, dataset: str) -> dict[str, dict[str, float]] | None:
        """Metric -> query id -> score of one run, or None when the folder does not hold them."""
        path = self.folder / condition / dataset / PER_QUERY_NAME
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def command_for(self, dataset: str) -> str:
        """The command that reruns one dataset of this spec, with the options the run was given."""
        options, skip = [], False
        for argument in self.command:
            if skip:
                skip = False
            elif argument in ("--datasets", "--record", "--dry-run") or argument.startswith("--datasets="):
                skip = argument == "--datasets"
            else:
                options.append(argument)
        return " ".join(["python -m vtrepro regress", *options, "--datasets", dataset])


def load_results(folder: str | Path) -> Results:
    """Read ``<folder>/results.json`` (written by ``python -m vtrepro regress``)."""
    folder = Path(folder)
    path = folder / RESULTS_NAME
    if not path.is_file():
        raise VtreproError(f"{folder}: no {RESULTS_NAME}; give a results folder written by "
                           "'python -m vtrepro regress --spec ...' (runs/<spec>/)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = pd.DataFrame(data["rows"], columns=["condition", "dataset", "metric", "kind", "expected", "observed",
                                                   "status", "tier", "note"])
        spec = data["spec"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise VtreproError(f"{path}: not a results file of this version ({error}); rerun the regression") from None
    return Results(folder, spec, data.get("description", ""), data.get("command", ["--spec", spec]),
                   data.get("environment", {}), bool(data.get("interrupted")), rows, data.get("conditions", {}),
                   data.get("distributions", {}))
