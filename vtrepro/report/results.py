"""A regression's results folder (``runs/<spec>/``) as the report reads it: ``results.json`` and the
per-query scores beside each run file.

Results folders travel, so the report reads them as it would a stranger's: :func:`check_results` is the
one validator of the format. It refuses, naming the file, the JSON path and the fix, a file larger than
its cap (``core.io.JSON_FILE_BYTES['results']``), invalid UTF-8 or JSON, NaN or infinite numbers, nesting deeper than Python
parses, another layout, a value of the wrong type, a status, kind or tier this version does not write,
a number outside its range (scores in [0, 1], counts and costs >= 0), a name that could not be a
folder of the run, and more runs, metrics or points than a report draws (:data:`MAX_RUNS`,
:data:`MAX_METRICS`, ...). Keys it does not know are ignored, never followed. The report reads no file a
results folder names: only ``results.json`` and ``<condition>/<dataset>/per_query.json``, each inside
the folder once links are followed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file, unsafe_character
from vtrepro.core.schema import bounds_text, within
from vtrepro.report.published import PUBLISHED_DIR

# pandas is imported where the rows become a frame, on purpose: the commands that import the statuses
# (`regress`, `export`, `report`) build their `--help` without it.
if TYPE_CHECKING:
    import pandas as pd

RESULTS_NAME = "results.json"
PER_QUERY_NAME = "per_query.json"
"""Beside each run's ``run.trec`` (``<folder>/<condition>/<dataset>/``): metric -> query id -> score."""
MAX_NAME_CHARS = 200
"""The longest condition, dataset or metric name read (a name is a folder, a label and a legend entry)."""
MAX_RUNS = 1000
"""The most runs (condition, dataset) a results folder may hold: a report's figures and tables grow with them
(1,000 runs take about 10 s; BEIR's 29 sets under 10 conditions are 290)."""
MAX_LOSS_POINTS = 1000
"""The most (step, loss) points of a training loss a results folder holds (regress keeps them evenly spaced)."""
MAX_PERCENTILES = 101
"""The most points of a distribution of terms per vector (regress writes 21: 0, 5, ..., 100)."""
MAX_METRICS = 200
"""The most distinct metric and figure names a results folder may hold (regress writes about 30)."""
STATUS_OK, STATUS_OKISH, STATUS_FAIL = "OK", "OKISH", "FAIL"
STATUS_UNPINNED, STATUS_SKIPPED, STATUS_ERROR = "UNPINNED", "SKIPPED", "ERROR"
STATUS_MEASURED = "MEASURED"
"""The status of an efficiency row: recorded, never judged."""
STATUSES = (STATUS_OK, STATUS_OKISH, STATUS_FAIL, STATUS_UNPINNED, STATUS_SKIPPED, STATUS_ERROR, STATUS_MEASURED)
NOT_OK = (STATUS_FAIL, STATUS_UNPINNED, STATUS_ERROR)
"""The statuses that fail a regression."""
TIER_FIXED, TIER_ENCODED, TIER_PUBLISHED, TIER_MACHINE = "fixed", "encoded", "published", "machine"
TIERS = (TIER_FIXED, TIER_ENCODED, TIER_PUBLISHED, TIER_MACHINE, "")
"""How a row was judged; '' for the row of a run that failed."""


@dataclass
class ResultRow:
    """One row of ``results.json``: a figure of a condition on a dataset, what was expected and what was seen.

    The one declaration of the row format: regress writes these rows, and the report reads them back
    (:data:`ROW_KEYS`)."""

    condition: str
    dataset: str
    metric: str
    kind: str  # "vectors" (fingerprint), "index" (statistic), "score" (pinned), "reference" (published), "efficiency",
    # "agreement" (vectors against another condition's), "gap" (a figure of the spec's vocabulary-gap study)
    expected: float | int | str | None
    observed: float | int | str | None
    status: str
    tier: str = TIER_FIXED
    note: str = ""


ROW_KEYS = tuple(item.name for item in fields(ResultRow))
"""The keys of a results.json row, in order."""
CALIBRATION_FIGURES = ("active_mean", "active_p50", "active_p90")
"""APC's active terms per document, before and after calibration, as a condition's results record them."""
_SCORE = "a number in [0, 1]"
_VALUES: dict[str, tuple[str, dict[str, Any]]] = {
    # kind -> (what expected and observed must be, besides null; the bounds of a number)
    "score": (_SCORE, {"minimum": 0, "maximum": 1}),
    "reference": (_SCORE, {"minimum": 0, "maximum": 1}),
    "index": ("an integer >= 0", {"minimum": 0, "integer": True}),
    "vectors": ("a fingerprint (hex digits)", {}),
    "efficiency": ("a number >= 0 or a device name", {"minimum": 0}),
    "agreement": ("a number >= 0", {"minimum": 0}),
    "gap": ("a number >= 0", {"minimum": 0}),
    "error": ("null", {}),
}
"""Every row kind regress writes, with the values it may hold."""
MAX_INTEGER = 2**63 - 1
"""The largest integer read (a count; far beyond any corpus): pandas holds every one in 64 bits."""
_FIX = "give a results folder written by 'python -m vtrepro regress' (runs/<spec>/), or rerun that regression"


@dataclass(frozen=True)
class ConditionRecord:
    """What a results folder records of one condition beyond its rows: its published counterpart
    (``<table>/<system>`` in ``regressions/published/``), APC's effect and the training loss of its model."""

    published: str | None = None
    calibration: dict[str, dict[str, float]] | None = None  # "before"/"after" -> CALIBRATION_FIGURES -> value
    training_loss: list[tuple[int, float]] | None = None  # (step, loss)


@dataclass
class Results:
    """One results folder: its spec, how it was run, and every row it recorded."""

    folder: Path
    spec: str
    description: str
    command: list[str]
    environment: dict[str, str]
    interrupted: bool
    rows: pd.DataFrame  # ROW_KEYS
    conditions: dict[str, ConditionRecord] = field(default_factory=dict)
    distributions: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # "condition/dataset" -> ...

    @property
    def name(self) -> str:
        return Path(self.spec).stem

    def record(self, condition: str) -> ConditionRecord:
        return self.conditions.get(condition, ConditionRecord())

    def per_query(self, condition: str, dataset: str) -> dict[str, dict[str, float]] | None:
        """Metric -> query id -> score of one run, or None when the folder does not hold them."""
        path = self.folder / condition / dataset / PER_QUERY_NAME
        if not path.exists():
            return None
        document = read_json(path, self.folder)
        check = _Checker(path)
        return {metric: {query: check.number(score, _at(_at("", metric), query), minimum=0, maximum=1)
                         for query, score in check.mapping(scores, _at("", metric)).items()}
                for metric, scores in check.mapping(document, "the top level").items()}

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
    """Read and check ``<folder>/results.json`` (written by ``python -m vtrepro regress``)."""
    folder = Path(folder)
    path = folder / RESULTS_NAME
    if not path.exists():
        raise VtreproError(f"{folder}: no {RESULTS_NAME}; give a results folder written by "
                           "'python -m vtrepro regress --spec ...' (runs/<spec>/)")
    return check_results(read_json(path, folder), folder, path)


def read_json(path: Path, folder: Path) -> Any:
    """One JSON file of a results folder, through the one bounded JSON reader: a regular file inside ``folder``
    once links are followed, of at most the ``results`` cap, UTF-8, with finite numbers only."""
    return read_json_file(path, _FIX, JSON_FILE_BYTES["results"], folder)


class _Checker:
    """Reads the values of one JSON document, failing on the first wrong one with the file and its JSON path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str) -> VtreproError:
        return VtreproError(f"{self.path}: {where}: {problem}; {_FIX}")

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a JSON object, got {_shown(value)}")
        return value

    def listing(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a JSON list, got {_shown(value)}")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_shown(value)}")
        return value

    def flag(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {_shown(value)}")
        return value

    def name(self, value: Any, where: str, slash: bool = False) -> str:
        """A condition, dataset or metric name: conditions and datasets name folders, so no whitespace, control
        characters, empty or dot parts, and a '/' only where ``slash`` allows (``cqadupstack/android``)."""
        text = self.text(value, where)
        parts = text.split("/") if slash else [text]
        if (not text or len(text) > MAX_NAME_CHARS or unsafe_character(text) is not None
                or any(part in ("", ".", "..") or (not slash and "/" in part) for part in parts)):
            rule = "no empty, '.' or '..' parts" if slash else "no '/'"
            raise self.fail(where, f"{_shown(text)} is not a name regress writes (1 to {MAX_NAME_CHARS} characters, "
                                   f"no whitespace or control characters, {rule}: names are folders and labels)")
        return text

    def number(self, value: Any, where: str, minimum: float | None = None, maximum: float | None = None,
               integer: bool = False) -> float:
        bounds = bounds_text(minimum, maximum)
        wanted = f"{'an integer' if integer else 'a number'}{' ' + bounds if bounds else ''}"
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            raise self.fail(where, f"expected {wanted}, got {_shown(value)}")
        if not within(value, minimum, maximum) or (isinstance(value, int) and abs(value) > MAX_INTEGER):
            raise self.fail(where, f"{value} is out of range: expected {wanted}")
        return value


def _at(where: str, key: str) -> str:
    """The JSON path of ``key`` inside ``where``: ``rows.x``, or ``rows['a b']`` where the key is not plain."""
    if key and len(key) <= 60 and unsafe_character(key) is None and "'" not in key:
        return f"{where}.{key}" if where else key
    return f"{where}[{key[:60]!r}]"


def _shown(value: Any) -> str:
    """A value as an error line shows it: its JSON type, or a string's first characters."""
    if isinstance(value, str):
        return repr(value[:60] + ("..." if len(value) > 60 else ""))
    names = {dict: "an object", list: "a list", bool: "a boolean", int: "an integer", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def check_results(document: Any, folder: Path, path: Path) -> Results:
    """A results document checked whole (layout, types, statuses, ranges, names): see the module's doc."""
    import pandas as pd

    check = _Checker(path)
    top = check.mapping(document, "the top level")
    if "spec" not in top or "rows" not in top:
        raise check.fail("the top level", f"needs 'spec' and 'rows', has {', '.join(map(repr, top)) or 'no key'}")
    spec = check.text(top["spec"], "spec")
    if not 0 < len(Path(spec).stem) <= MAX_NAME_CHARS:
        raise check.fail("spec", f"the spec's name (its file name) must have 1 to {MAX_NAME_CHARS} characters")
    command = [check.text(value, f"command[{index}]")
               for index, value in enumerate(check.listing(top.get("command", ["--spec", spec]), "command"))]
    environment = {key: check.text(value, _at("environment", key))
                   for key, value in check.mapping(top.get("environment", {}), "environment").items()}
    for key, seconds in check.mapping(top.get("timings_seconds", {}), "timings_seconds").items():
        check.number(seconds, _at("timings_seconds", key), minimum=0)
    conditions = {check.name(name, _at("conditions", name)): _condition(check, record, _at("conditions", name))
                  for name, record in check.mapping(top.get("conditions", {}), "conditions").items()}
    rows = [_row(check, row, f"rows[{index}]") for index, row in enumerate(check.listing(top["rows"], "rows"))]
    for what, count, most in (("runs (condition, dataset)", len({(row["condition"], row["dataset"]) for row in rows}),
                               MAX_RUNS), ("metrics", len({row["metric"] for row in rows}), MAX_METRICS)):
        if count > most:
            raise check.fail("rows", f"hold {count} {what}; a report reads at most {most}")
    distributions = {key: _distribution(check, key, value)
                     for key, value in check.mapping(top.get("distributions", {}), "distributions").items()}
    if len(distributions) > MAX_RUNS:
        raise check.fail("distributions", f"hold {len(distributions)} runs; a report reads at most {MAX_RUNS}")
    return Results(folder, spec, check.text(top.get("description", ""), "description"), command, environment,
                   check.flag(top.get("interrupted", False), "interrupted"), pd.DataFrame(rows, columns=list(ROW_KEYS)),
                   conditions, distributions)


def _row(check: _Checker, value: Any, where: str) -> dict[str, Any]:
    row = check.mapping(value, where)
    missing = [key for key in ROW_KEYS if key not in row]
    if missing:
        raise check.fail(where, f"misses {', '.join(map(repr, missing))} (a row has {', '.join(ROW_KEYS)})")
    for key, known in (("kind", _VALUES), ("status", STATUSES), ("tier", TIERS)):
        if not isinstance(row[key], str) or row[key] not in known:
            raise check.fail(f"{where}.{key}", f"{_shown(row[key])} is not one of {', '.join(map(repr, known))}")
    check.name(row["condition"], f"{where}.condition")
    check.name(row["dataset"], f"{where}.dataset", slash=True)
    check.name(row["metric"], f"{where}.metric", slash=True)
    check.text(row["note"], f"{where}.note")
    for key in ("expected", "observed"):
        _value(check, row["kind"], row[key], f"{where}.{key}")
    if row["kind"] == "score" and row["observed"] is None:
        raise check.fail(f"{where}.observed", f"a score row needs its observed score ({_SCORE})")
    return {key: row[key] for key in ROW_KEYS}


def _value(check: _Checker, kind: str, value: Any, where: str) -> None:
    """An expected or observed value: null, or what its row's ``kind`` holds (see ``_VALUES``)."""
    wanted, bounds = _VALUES[kind]
    if value is None:
        return
    if isinstance(value, str) and kind in ("vectors", "efficiency"):
        if not 0 < len(value) <= MAX_NAME_CHARS or (kind == "vectors" and value.strip("0123456789abcdef")):
            raise check.fail(where, f"{_shown(value)} is not {wanted} of 1 to {MAX_NAME_CHARS} characters")
        return
    if kind in ("vectors", "error"):
        raise check.fail(where, f"expected {wanted} or null, got {_shown(value)}")
    check.number(value, where, **bounds)


def _condition(check: _Checker, value: Any, where: str) -> ConditionRecord:
    record = check.mapping(value, where)
    published = record.get("published")
    if published is not None:
        table, _, system = check.text(published, f"{where}.published").partition("/")
        if not (PUBLISHED_DIR / f"{table}.yaml").is_file() or "/" in system or not system or "/" in table:
            raise check.fail(f"{where}.published", f"{_shown(published)} is not <table>/<system> of a table in "
                                                   f"{PUBLISHED_DIR}")
    calibration = record.get("calibration")
    if calibration is not None:
        calibration = _calibration(check, calibration, f"{where}.calibration")
    loss = record.get("training_loss")
    if loss is not None:
        points = check.listing(loss, f"{where}.training_loss")
        if len(points) > MAX_LOSS_POINTS:
            raise check.fail(f"{where}.training_loss", f"holds {len(points)} points; at most {MAX_LOSS_POINTS}")
        loss = [_loss_point(check, point, f"{where}.training_loss[{index}]") for index, point in enumerate(points)]
    return ConditionRecord(published, calibration, loss)


def _calibration(check: _Checker, value: Any, where: str) -> dict[str, dict[str, float]]:
    """``{"before": {...}, "after": {...}}``, each with every one of :data:`CALIBRATION_FIGURES` (>= 0)."""
    moments = check.mapping(value, where)
    checked = {}
    for moment in ("before", "after"):
        figures = check.mapping(moments.get(moment), f"{where}.{moment}")
        checked[moment] = {figure: check.number(figures.get(figure), f"{where}.{moment}.{figure}", minimum=0)
                           for figure in CALIBRATION_FIGURES}
    return checked


def _loss_point(check: _Checker, value: Any, where: str) -> tuple[int, float]:
    point = check.listing(value, where)
    if len(point) != 2:
        raise check.fail(where, f"expected [step, loss], got a list of {len(point)}")
    return int(check.number(point[0], f"{where}[0]", minimum=0, integer=True)), float(check.number(point[1], f"{where}[1]"))


def _distribution(check: _Checker, key: str, value: Any) -> dict[str, list[float]]:
    """``distributions["<condition>/<dataset>"]``: percentiles in [0, 100] and the terms per vector at each."""
    where = _at("distributions", key)
    condition, _, dataset = key.partition("/")
    check.name(condition, f"{where} (its condition)")
    check.name(dataset, f"{where} (its dataset)", slash=True)
    distribution = check.mapping(value, where)
    given = check.listing(distribution.get("percentiles"), f"{where}.percentiles")
    if len(given) > MAX_PERCENTILES:
        raise check.fail(f"{where}.percentiles", f"holds {len(given)} points; at most {MAX_PERCENTILES}")
    percentiles = [check.number(number, f"{where}.percentiles[{index}]", minimum=0, maximum=100)
                   for index, number in enumerate(given)]
    checked = {"percentiles": percentiles}
    for name in ("terms_per_document", "terms_per_query"):
        values = check.listing(distribution.get(name, []), f"{where}.{name}")
        if values and len(values) != len(percentiles):
            raise check.fail(f"{where}.{name}", f"has {len(values)} values for {len(percentiles)} percentiles")
        checked[name] = [check.number(number, f"{where}.{name}[{index}]", minimum=0) for index, number in enumerate(values)]
    return checked
