"""The report's part of the bad-input catalogue (docs/input-validation.md): results folders from strangers.

``python -m vtrepro report`` reads results folders that may come from anyone. Each case builds a results
folder as regress writes it (every row kind, per-query scores, calibration, training loss, distributions),
changes what a stranger could, and runs the real command: markup in every text field must reach no output
unescaped (checked in headless Chromium), another layout or a wrong type is one ``error:`` line naming the
file and the JSON path (exit 2) and nothing is written, a file outside the folder is never read. The last
test sends a real SIGINT to ``regress`` in its report phase.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from test_catalogue import run_command, snapshot

from helpers import assert_one_error_line
from vtrepro.core.io import JSON_FILE_BYTES
from vtrepro.regress.compare import ResultRow
from vtrepro.report.command import main as report_main
from vtrepro.report.render import hold_interrupts
from vtrepro.report.results import (
    MAX_LOSS_POINTS,
    MAX_NAME_CHARS,
    MAX_RUNS,
    PER_QUERY_NAME,
    RESULTS_NAME,
    ConditionRecord,
    load_results,
)

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

MARKUP = '<img src=x onerror=window.__pwned=1><script>window.__pwned=1</script>" onmouseover="window.__pwned=1'
"""What a stranger writes into a free text (a note, a command, the description, the environment)."""
NAME_MARKUP = "\"onmouseover=\"window.__pwned=1\"x='<b>&amp;<!--"
"""The same attack in a condition name, which may hold neither whitespace nor '/' (it names a folder)."""
PATH_MARKUP = "<img/src=x/onerror=window.__pwned=1>"
"""A dataset or metric name: a '/' is allowed there (``cqadupstack/android``), so an image tag fits."""
QUERIES = [f"q{index}" for index in range(8)]


def results_document(texts: dict[str, str], figures: bool = False) -> dict:
    """A results document as regress writes it: conditions ``texts["first"]`` (with a published counterpart)
    and ``texts["second"]``, every row kind on scifact and ``texts["dataset"]``; ``texts`` gives every free
    text and name a stranger controls. Its report draws two figures (scores, retention); with ``figures``
    also what the other four draw (FLOPS, terms per document, APC, a training loss)."""
    first, second, other, note = texts["first"], texts["second"], texts["dataset"], texts["note"]
    conditions = (first, second)
    rows: list[ResultRow] = []
    for condition, shift in zip(conditions, (0.0, 0.05)):
        for dataset in ("scifact", other):
            rows += [
                ResultRow(condition, dataset, "vectors.corpus", "vectors", "ab" * 32, "cd" * 32, "FAIL", "encoded", note),
                ResultRow(condition, dataset, "documents", "index", 5183, 5183, "OK"),
                ResultRow(condition, dataset, "ndcg@10", "score", 0.6789, 0.6789 - shift, "OKISH", "encoded", note),
                ResultRow(condition, dataset, "recall@100", "score", None, 0.9253, "UNPINNED", "encoded", note),
                ResultRow(condition, dataset, "encode_device", "efficiency", None, texts["device"], "MEASURED", "machine"),
                ResultRow(condition, dataset, texts["metric"], "efficiency", None, 3.25, "MEASURED", "machine", note),
                ResultRow(condition, dataset, "agreement_documents_identical", "agreement", None, 0.98, "MEASURED",
                          "machine", note),
            ] + ([ResultRow(condition, dataset, "flops", "efficiency", None, 1.5 + shift, "MEASURED", "machine")]
                 if figures else [])
        rows.append(ResultRow(condition, "scifact", "ndcg@10", "reference", 0.6789, 0.6789 - shift, "OK", "published"))
    rows.append(ResultRow(first, "nfcorpus", "run", "error", None, None, "ERROR", "", note))
    percentiles = [float(value) for value in range(0, 101, 25)]
    return {
        "spec": f"/specs/{texts['spec']}.yaml", "description": texts["description"],
        "command": ["--spec", texts["command"], "--output", "runs"], "environment": {texts["key"]: texts["value"]},
        "timings_seconds": {f"{first}/scifact": 12.5}, "interrupted": False,
        "conditions": {
            first: {"published": "pyserini_bm25_flat/bm25-flat",
                    "calibration": {"before": {"active_mean": 180.0, "active_p50": 170.0, "active_p90": 260.0},
                                    "after": {"active_mean": 90.0, "active_p50": 85.0, "active_p90": 130.0}}
                    if figures else None,
                    "training_loss": [[step, 2.0 / step] for step in range(1, 40)] if figures else None},
            second: {"published": None, "calibration": None, "training_loss": None},
        },
        "rows": [row.__dict__ for row in rows],
        "distributions": {f"{condition}/{dataset}": {"percentiles": list(percentiles),
                                                      "terms_per_document": [1.0, 20.0, 40.0, 70.0, 300.0],
                                                      "terms_per_query": [1.0, 5.0, 8.0, 12.0, 30.0]}
                          for condition in conditions for dataset in ("scifact", other)} if figures else {},
    }


HARMLESS = {"first": "splade-tiny", "second": "bm25", "dataset": "nfcorpus", "metric": "index_mib", "note": "+0.0012",
            "device": "cpu", "spec": "beir_mixed", "description": "two conditions", "command": "beir_mixed",
            "key": "python", "value": "3.11.7"}
HOSTILE = {"first": "=1+2" + NAME_MARKUP, "second": "@2" + NAME_MARKUP + r"$\foo{$", "dataset": "-2+3" + PATH_MARKUP,
           "metric": "+1" + PATH_MARKUP, "note": MARKUP, "device": MARKUP, "spec": MARKUP, "description": MARKUP,
           "command": MARKUP, "key": MARKUP, "value": MARKUP}
"""Markup in every text a results folder holds; names that start as spreadsheet formulas; TeX in a label."""
SAME_LENGTHS = {role: "x" * len(text) for role, text in HOSTILE.items()}
"""Harmless texts of the lengths of ``HOSTILE``'s (the two conditions' differ, so do the dataset and metric)."""


def write_results(folder: Path, document: dict | list | str | bytes, per_query: bool = True) -> Path:
    """``folder/results.json`` (a document, or the raw text or bytes given) and, with ``per_query``, the
    per-query scores of every run the document's rows name."""
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(document, bytes):
        (folder / RESULTS_NAME).write_bytes(document)
    else:
        (folder / RESULTS_NAME).write_text(document if isinstance(document, str) else json.dumps(document))
    if per_query and isinstance(document, dict):
        for condition, dataset in {(row["condition"], row["dataset"]) for row in document["rows"]
                                   if row["kind"] == "score"}:
            run = folder / condition / dataset
            run.mkdir(parents=True, exist_ok=True)
            scores = {qid: round((index * 0.37 + len(condition) % 3 * 0.11) % 1, 4) for index, qid in enumerate(QUERIES)}
            (run / PER_QUERY_NAME).write_text(json.dumps({"ndcg@10": scores}))
    return folder


def report(folders: list[Path], output: Path, capsys, *options: str) -> tuple[int, str, str]:
    return run_command(report_main, ["--results", *folders, "--output", output, *options], capsys)


# -- 1. Markup in every text field reaches no output unescaped ------------------------------------------

_PROBE = """
() => {
  const all = Array.from(document.querySelectorAll('*'));
  for (const element of all) {
    for (const type of ['mouseover', 'mouseenter', 'mousemove', 'mousedown', 'click']) {
      element.dispatchEvent(new MouseEvent(type, {bubbles: true}));
    }
  }
  return {
    pwned: typeof window.__pwned,
    elements: document.getElementsByTagName('*').length,
    tags: Array.from(new Set(all.map((element) => element.tagName.toLowerCase()))).sort(),
    scripts: document.scripts.length,
    handlers: all.filter((element) => Array.from(element.attributes).some((a) => a.name.startsWith('on'))).length,
    classes: Array.from(new Set(all.flatMap((element) => Array.from(element.classList)))).sort(),
  };
}
"""


@pytest.fixture(scope="module")
def hostile_reports(tmp_path_factory) -> dict[str, tuple[Path, int]]:
    """The report (folder, exit status) of a results folder whose every text field carries markup, and of
    one with harmless texts of the same lengths."""
    from vtrepro.core.cli import cli_entry

    root = tmp_path_factory.mktemp("hostile")
    built = {}
    for name, texts in (("hostile", HOSTILE), ("harmless", SAME_LENGTHS)):
        folder = write_results(root / name, results_document(texts))
        output = root / f"{name}-report"
        built[name] = output, cli_entry(report_main)(["--results", str(folder), "--output", str(output)])
    return built


@pytest.mark.slow
def test_report_html_from_markup_in_every_field_runs_and_adds_nothing(hostile_reports, browser_render, tmp_path):
    """report.html built from results whose every text field carries markup contains none of it unescaped:
    in headless Chromium no script runs (every element hovered and clicked) and no element is added."""
    assert [code for _, code in hostile_reports.values()] == [0, 0]
    seen = {name: browser_render(folder / "report.html", tmp_path / f"{name}.png", probe=_PROBE)
            for name, (folder, _) in hostile_reports.items()}
    hostile, harmless = seen["hostile"].probe, seen["harmless"].probe
    assert hostile["pwned"] == "undefined"
    assert hostile["scripts"] == 0 and hostile["handlers"] == 0
    assert hostile["elements"] == harmless["elements"] and hostile["tags"] == harmless["tags"]
    assert set(hostile["classes"]) <= {"matrix", "number", "published", "average", "note", "OK", "OKISH", "FAIL",
                                       "UNPINNED", "ERROR"}, hostile["classes"]
    assert seen["hostile"].problems == [] and len(seen["hostile"].images) == 2  # both figures drawn and decoded
    page = (hostile_reports["hostile"][0] / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<img src=x" not in page and "'<b>" not in page and "<!--" not in page
    assert MARKUP not in page and NAME_MARKUP not in page


@pytest.mark.slow
def test_report_markdown_and_csv_carry_no_markup_or_formula(hostile_reports):
    """report.md renders (CommonMark, with tables) to no tag, link or image from the results; a name a
    spreadsheet would run as a formula is quoted in table.csv. A '$' in a name (matplotlib's TeX parser
    used to fail on it: exit 3) is drawn as written."""
    markdown_it = pytest.importorskip("markdown_it")
    output, code = hostile_reports["hostile"]
    assert code == 0
    text = (output / "report.md").read_text(encoding="utf-8")
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    tags = set(re.findall(r"<([a-z0-9]+)", rendered))
    assert tags <= {"h1", "h2", "ul", "li", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "img"}, tags
    assert len(re.findall("<img", rendered)) == len(list((output / "figures").iterdir())) == 2
    assert "onerror" not in " ".join(re.findall(r"<[^>]*>", rendered))
    for table in re.findall(r"<table>.*?</table>", rendered, flags=re.S):  # every row has its header's cells
        assert len({len(re.findall("<t[dh]", row)) for row in re.findall(r"<tr>.*?</tr>", table, flags=re.S)}) == 1
    cells = [cell for row in csv.reader(io.StringIO((output / "table.csv").read_text())) for cell in row]
    assert {"'" + HOSTILE["first"], "'" + HOSTILE["second"], "'" + HOSTILE["dataset"]} <= set(cells)
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@") and not _is_number(cell)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- 2. Another layout, wrong types, numbers out of range: one line, exit 2, nothing written ----------


def _changed(change):
    """A valid results document with ``change(document)`` applied."""
    def build() -> dict:
        document = results_document(HARMLESS, figures=True)
        change(document)
        return document
    return build


def _set_row(index: int, **values):
    return _changed(lambda document: document["rows"][index].update(values))


def _deep(depth: int) -> str:
    return '{"spec": "x", "rows": ' + "[" * depth + "]" * depth + "}"


LAYOUTS = {
    # name: (results.json content or a builder, fragments of the error line)
    "a list instead of an object": (lambda: [results_document(HARMLESS)], ["the top level: expected a JSON object"]),
    "rows an object": (_changed(lambda d: d.update(rows={"0": d["rows"][0]})), ["rows: expected a JSON list"]),
    "no rows": (_changed(lambda d: d.pop("rows")), ["needs 'spec' and 'rows'"]),
    "a row missing a key": (_changed(lambda d: d["rows"][2].pop("status")), ["rows[2]: misses 'status'"]),
    "a number where a string is expected": (_set_row(2, condition=7), ["rows[2].condition: expected a string"]),
    "a string where a number is expected": (_set_row(2, observed="0.6789"), ["rows[2].observed: expected a number in [0, 1]"]),
    "a count that is a float": (_set_row(1, observed=5183.5), ["rows[1].observed: expected an integer >= 0"]),
    "a boolean score": (_set_row(2, observed=True), ["rows[2].observed", "got a boolean"]),
    "a score above 1": (_set_row(2, observed=1.5), ["rows[2].observed: 1.5 is out of range"]),
    "a negative cost": (_set_row(5, observed=-3.0), ["rows[5].observed: -3.0 is out of range", ">= 0"]),
    "a score row without its score": (_set_row(2, observed=None), ["rows[2].observed: a score row needs"]),
    "a status this version does not write": (_set_row(2, status="PASS"), ["rows[2].status: 'PASS' is not one of"]),
    "a status carrying markup": (_set_row(8, status="OK\" onmouseover=\"alert('status')\" x=\""),
                                 ["rows[8].status", "is not one of 'OK'"]),
    "an unknown row kind": (_set_row(2, kind="latency"), ["rows[2].kind: 'latency' is not one of"]),
    "an unknown tier": (_set_row(2, tier="gold"), ["rows[2].tier: 'gold'"]),
    "a fingerprint that is not hex": (_set_row(0, observed="<b>zz</b>"), ["rows[0].observed", "a fingerprint"]),
    "a condition name that climbs out": (_set_row(2, condition=".."), ["rows[2].condition: '..' is not a name"]),
    "a condition name with a slash": (_set_row(2, condition="a/b"), ["rows[2].condition", "no '/'"]),
    "a dataset name with a dot part": (_set_row(2, dataset="../../etc"), ["rows[2].dataset", "'..' parts"]),
    "a name longer than the limit": (_set_row(2, metric="m" * (MAX_NAME_CHARS + 1)), ["rows[2].metric", "1 to 200"]),
    "a published key that is a path": (_changed(lambda d: d["conditions"]["splade-tiny"].update(published="/etc/passwd/x")),
                                       ["conditions.splade-tiny.published", "not <table>/<system>"]),
    "calibration of the wrong shape": (_changed(lambda d: d["conditions"]["splade-tiny"].update(calibration={"before": [1]})),
                                       ["conditions.splade-tiny.calibration.before: expected a JSON object"]),
    "a training loss point that is not a pair": (
        _changed(lambda d: d["conditions"]["splade-tiny"]["training_loss"].append([1, 2, 3])),
        ["conditions.splade-tiny.training_loss[39]: expected [step, loss]"]),
    "distributions of unequal lengths": (
        _changed(lambda d: d["distributions"]["bm25/nfcorpus"]["terms_per_document"].pop()),
        ["distributions.bm25/nfcorpus.terms_per_document: has 4 values for 5 percentiles"]),
    "a percentile above 100": (_changed(lambda d: d["distributions"]["bm25/nfcorpus"]["percentiles"].__setitem__(4, 400)),
                               ["distributions.bm25/nfcorpus.percentiles[4]: 400 is out of range"]),
    "more runs than a report draws": (
        _changed(lambda d: d["rows"].extend(dict(d["rows"][1], dataset=f"d{index}") for index in range(MAX_RUNS))),
        [f"rows: hold {MAX_RUNS + 4} runs (condition, dataset); a report reads at most {MAX_RUNS}"]),
    "a training loss of too many points": (
        _changed(lambda d: d["conditions"]["splade-tiny"].update(training_loss=[[1, 0.5]] * (MAX_LOSS_POINTS + 1))),
        [f"training_loss: holds {MAX_LOSS_POINTS + 1} points; at most {MAX_LOSS_POINTS}"]),
    "interrupted not a boolean": (_changed(lambda d: d.update(interrupted="no")), ["interrupted: expected true or false"]),
    "environment values not strings": (_changed(lambda d: d.update(environment={"threads": 2})),
                                       ["environment.threads: expected a string"]),
    "NaN": (lambda: json.dumps(results_document(HARMLESS)).replace('"observed": 0.6789', '"observed": NaN', 1),
            ["holds NaN, which is not a number"]),
    "Infinity": (lambda: json.dumps(results_document(HARMLESS)).replace("5183", "-Infinity", 1), ["holds -Infinity"]),
    "a float too large": (lambda: json.dumps(results_document(HARMLESS)).replace("5183", "1e999", 1),
                          ["holds 1e999, which is too large"]),
    "an integer of 5000 digits": (lambda: json.dumps(results_document(HARMLESS)).replace("5183", "9" * 5000, 1),
                                  ["an integer of 5000 digits"]),
    "nesting 100000 deep": (lambda: _deep(100_000), ["nested deeper than 64 levels"]),
    "not JSON": (lambda: json.dumps(results_document(HARMLESS))[:-40], ["results.json: not valid JSON"]),
    "invalid UTF-8": (lambda: json.dumps(results_document(HARMLESS)).encode().replace(b"two conditions", b"two \xff"),
                      ["not valid UTF-8"]),
}


@pytest.mark.parametrize("case", LAYOUTS, ids=list(LAYOUTS))
def test_results_of_another_layout_are_refused_with_their_json_path(case, tmp_path, capsys):
    content, fragments = LAYOUTS[case]
    folder = write_results(tmp_path / "results", content(), per_query=False)
    output = tmp_path / "report"
    before = snapshot(tmp_path)
    code, _, stderr = report([folder], output, capsys)
    assert_one_error_line(code, stderr, f"{folder / RESULTS_NAME}", *fragments)
    assert snapshot(tmp_path) == before and not output.exists()


def test_a_results_file_of_1_gib_is_refused_before_it_is_read(tmp_path, capsys):
    """A sparse 1 GiB results.json: refused from its size, before it is opened (it used to be read whole)."""
    folder = tmp_path / "results"
    folder.mkdir()
    with open(folder / RESULTS_NAME, "wb") as handle:
        handle.truncate(1 << 30)
    tracemalloc.start()
    try:
        code, _, stderr = report([folder], tmp_path / "report", capsys)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_one_error_line(code, stderr, f"{folder / RESULTS_NAME}: {1 << 30} bytes, more than the "
                                        f"{JSON_FILE_BYTES['results']} such a file may hold")
    assert peak < 4 * JSON_FILE_BYTES["results"] and not (tmp_path / "report").exists()  # never read whole


# -- 3. Files a results folder points to, outside it -------------------------------------------------


def test_files_outside_the_results_folder_are_never_read(tmp_path, capsys):
    """A per-query file or results.json that is a link out of the folder, and per-query scores that are not
    scores: refused with the file named; nothing written."""
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"ndcg@10": {query: 0.5 for query in QUERIES}}))
    folder = write_results(tmp_path / "linked", results_document(HARMLESS))
    per_query = folder / "bm25" / "nfcorpus" / PER_QUERY_NAME  # nfcorpus comes first: nothing is computed before
    per_query.unlink()
    per_query.symlink_to(secret)
    code, _, stderr = report([folder], tmp_path / "out", capsys)
    assert_one_error_line(code, stderr, f"{per_query}: leads to {secret}, outside the folder")

    outside = tmp_path / "elsewhere"
    write_results(outside, results_document(HARMLESS), per_query=False)
    linked = tmp_path / "linked-results"
    linked.mkdir()
    (linked / RESULTS_NAME).symlink_to(outside / RESULTS_NAME)
    code, _, stderr = report([linked], tmp_path / "out", capsys)
    assert_one_error_line(code, stderr, f"{linked / RESULTS_NAME}: leads to", "outside the folder")

    folder = write_results(tmp_path / "nan-scores", results_document(HARMLESS))
    (folder / "splade-tiny" / "nfcorpus" / PER_QUERY_NAME).write_text('{"ndcg@10": {"q1": NaN}}')
    code, _, stderr = report([folder], tmp_path / "out", capsys)
    assert_one_error_line(code, stderr, f"{folder / 'splade-tiny' / 'nfcorpus' / PER_QUERY_NAME}", "holds NaN")
    assert not (tmp_path / "out").exists()


def test_a_results_file_naming_outside_files_reads_none_of_them(tmp_path):
    """The old layout named a training log and a calibration report by path: a stranger could point them
    anywhere. Such keys are dropped when the folder is read, so nothing downstream can follow them."""
    document = results_document(HARMLESS, figures=True)
    document["conditions"]["splade-tiny"].update(training_log="/etc/passwd", calibration_report="/proc/self/environ")
    document["conditions"]["bm25"].update(training_log="../../x/train_log.jsonl")
    results = load_results(write_results(tmp_path / "results", document, per_query=False))
    assert results.record("bm25") == ConditionRecord()
    assert results.record("splade-tiny") == ConditionRecord(
        "pyserini_bm25_flat/bm25-flat", document["conditions"]["splade-tiny"]["calibration"],
        [tuple(point) for point in document["conditions"]["splade-tiny"]["training_loss"]])


# -- 4. --metric the results do not hold ----------------------------------------------------------------


def test_a_metric_the_results_do_not_hold_is_refused(tmp_path, capsys):
    """``--metrics ndcg@7`` used to give an empty matrix and exit 0."""
    folder = write_results(tmp_path / "results", results_document(HARMLESS))
    code, _, stderr = report([folder], tmp_path / "out", capsys, "--metrics", "ndcg@7")
    assert_one_error_line(code, stderr, "--metrics ndcg@7", str(folder), "they hold ndcg@10, recall@100")
    assert not (tmp_path / "out").exists()


# -- 5. The report files are replaced together ---------------------------------------------------------


def test_a_report_file_that_is_a_folder_is_refused_before_any_is_written(tmp_path, capsys):
    """An output folder whose report.html is a folder: refused before the results are read, the old files kept."""
    folder = write_results(tmp_path / "results", results_document(HARMLESS))
    output = tmp_path / "out"
    (output / "report.html").mkdir(parents=True)
    (output / "report.md").write_text("# the previous report\n")
    before = snapshot(output)
    code, _, stderr = report([folder], output, capsys)
    assert_one_error_line(code, stderr, f"{output / 'report.html'}: is a folder")
    assert snapshot(output) == before and sorted(path.name for path in output.iterdir()) == ["report.html", "report.md"]


@pytest.fixture
def sigint_delivered():
    """Ctrl-C delivered as Python delivers it in a foreground process, also where the suite itself was started
    with SIGINT ignored (a background job of a non-interactive shell), which Python then leaves ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _sigint_by_default() -> None:
    """In a child before it starts: SIGINT back to the default action, so its Python installs its own handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_an_interrupt_held_back_is_delivered_after_the_block(sigint_delivered):
    """Ctrl-C during the renames is held back until the last one is done, then raised."""
    reached = []
    with pytest.raises(KeyboardInterrupt), hold_interrupts():
        signal.raise_signal(signal.SIGINT)
        reached.append("after the signal")
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


MINI_SPEC = """description: BM25 on three documents
defaults: {split: test, k: 10, metrics: [ndcg@10, recall@10]}
conditions:
  bm25:
    retrieval: bm25
    bm25: {k1: 0.9, b: 0.4}
    datasets:
      mini: {}
"""


@pytest.mark.slow
def test_sigint_in_the_report_phase_leaves_a_whole_set(mini_beir, tmp_path):
    """SIGINT while regress writes its report (just after the last run's line): exit 130 with one line and
    no abort (the JVM took SIGINT and aborted the process: exit -6, no line). The report phase finishes
    first: results.json, results.csv and every report file are the new ones, consistent, none left
    from before, no temporary file left."""
    spec = tmp_path / "mini.yaml"
    spec.write_text(MINI_SPEC)
    out_dir = tmp_path / "runs" / "mini"
    previous = {name: f"the previous {name}\n" for name in (RESULTS_NAME, "results.csv", "report.md", "report.html",
                                                             "table.csv", "figures/scores.png")}
    for name, text in previous.items():
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_text(text)
    command = ["--spec", str(spec), "--data-dir", str(mini_beir), "--output", str(tmp_path / "runs")]
    process = subprocess.Popen([sys.executable, "-m", "vtrepro", "regress", *command], preexec_fn=_sigint_by_default,
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "] done in" in line:  # the last run finished: the report phase starts now
            time.sleep(0.3)
            process.send_signal(signal.SIGINT)
            break
    stderr = "".join(lines) + process.stderr.read()
    code = process.wait(timeout=120)
    assert_one_error_line(code, stderr, "interrupted", status=130)
    assert not [name for name, text in previous.items() if (out_dir / name).read_bytes() == text.encode()]
    results = load_results(out_dir)
    assert results.command == command and not results.interrupted
    page = (out_dir / "report.html").read_text(encoding="utf-8")
    assert html.escape(" ".join(command)) in page and "Regression checks: mini" in page
    assert (out_dir / "figures" / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out_dir.rglob(".*.tmp"))
