"""The catalogue's outputs class (docs/input-validation.md): no spec, option or file makes a vtrepro
command write inside an input folder, over an input file or to a non-regular file; bundles from
elsewhere are opened as hostile input; ``regress --record`` writes each condition's own values.

Every case runs the real command and asserts the exit status, the one ``error:`` line and that nothing
under the test's folder was written, lost or changed (a snapshot of every path: files by content,
links by target, FIFOs and folders by kind).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from ruamel.yaml import YAML
from test_catalogue import small_file_system

from helpers import assert_one_error_line, write_jsonl, write_mini_beir
from vtrepro.bench.command import main as bench_main
from vtrepro.core.archives import line_length as _line_length
from vtrepro.core.cli import Command, cli_entry
from vtrepro.encode.bundle import BUNDLE_FORMAT, MAX_LINE_BYTES
from vtrepro.encode.command import encode_main
from vtrepro.index.command import main as index_main
from vtrepro.regress.command import export_main
from vtrepro.regress.command import main as regress_main
from vtrepro.regress.spec import load_spec, record_observed
from vtrepro.report.command import main as report_main
from vtrepro.search.command import main as search_main
from vtrepro.training.command import mlm_main, train_main
from vtrepro.vocabulary.command import calibrate_main, transfer_main

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

GOOD_VECTORS = [{"id": f"d{i}", "contents": "", "vector": {"paris": i + 1, "france": 2}} for i in range(3)]


def run_command(main: Command, argv: list, capsys) -> tuple[int, str]:
    """Run a command in-process as its ``python -m`` entry does; returns (exit status, stderr)."""
    code = cli_entry(main)([str(arg) for arg in argv])
    return code, capsys.readouterr().err


def tree_state(root: Path) -> dict[str, tuple[str, str]]:
    """Every path under ``root`` without following links: regular files by content, links by target,
    folders, FIFOs and devices by kind. Equal states mean nothing there was written, lost or changed."""
    state = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            state[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif stat.S_ISREG(mode):
            state[str(path.relative_to(root))] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            state[str(path.relative_to(root))] = ("other", stat.filemode(mode)[0])
    return state


def linked_model(source: Path, folder: Path) -> Path:
    """A model folder of its own with ``source``'s files, so nothing can land in the shared assets: hard links
    where the file system allows (no copy of the weights), else copies. Symbolic links would lead outside the
    folder, which a model folder may not (issue 31)."""
    folder.mkdir(parents=True)
    for path in source.iterdir():
        try:
            os.link(path, folder / path.name)
        except OSError:
            shutil.copy2(path, folder / path.name)
    return folder


@dataclass
class World:
    """Real inputs of every command under one test folder."""

    root: Path
    queries: Path  # encoded query vectors
    vectors: Path  # a JsonVectorCollection folder
    index: Path  # a real Lucene impact index
    corpus: Path  # texts
    text_queries: Path
    triples: Path
    data: Path  # a data root holding beir/mini
    model: Path  # a model folder (links to splade-tiny's files)
    spec: Path  # a BM25 spec over mini
    runs: Path  # the --runs root export reads
    results: Path  # a results folder report reads
    recipe: Path
    fifo: Path

    @property
    def dataset(self) -> Path:
        return self.data / "beir" / "mini"


def make_world(root: Path, index_to_copy: Path, splade_tiny: Path) -> World:
    """Every command's inputs under ``root``."""
    queries = write_jsonl(root / "encoded" / "queries.jsonl", [{"id": "q1", "vector": {"paris": 3}}])
    vectors = write_jsonl(root / "vectors" / "part-00000.jsonl", GOOD_VECTORS).parent
    index = Path(shutil.copytree(index_to_copy, root / "index"))
    corpus = write_jsonl(root / "texts" / "corpus.jsonl", [{"_id": "d1", "text": "heart attack"}])
    text_queries = write_jsonl(root / "texts" / "queries.jsonl", [{"_id": "q1", "text": "heart"}])
    triples = root / "texts" / "triples.tsv"
    triples.write_text("heart\theart attack\tyeast cells\n")
    data = write_mini_beir(root / "data")
    model = linked_model(splade_tiny, root / "model")
    spec = root / "specs" / "bm.yaml"
    spec.parent.mkdir()
    spec.write_text("conditions:\n  bm:\n    retrieval: bm25\n    datasets:\n      mini:\n")
    runs = root / "runs"
    (runs / "bm").mkdir(parents=True)
    results = root / "results" / "bm"
    results.mkdir(parents=True)
    (results / "results.json").write_text("{}\n")
    recipe = root / "recipes" / "tiny.yaml"
    recipe.parent.mkdir()
    recipe.write_text(json.dumps({"model": str(model), "data": {"format": "triples", "path": str(triples)},
                                  "loss": {"ranking": "infonce", "lambda_q": 0.001, "lambda_d": 0.001},
                                  "training": {"steps": 2, "batch_size": 1, "lr": 5.0e-5}}))
    fifo = root / "fifo"
    os.mkfifo(fifo)
    return World(root, queries, vectors, index, corpus, text_queries, triples, data, model, spec, runs, results,
                 recipe, fifo)


@pytest.fixture
def world(tmp_path: Path, impact_index, splade_tiny: Path) -> World:
    return make_world(tmp_path / "world", impact_index[0], splade_tiny)


@dataclass(frozen=True)
class OutputCase:
    """A command and its arguments, given the inputs and the output path."""

    main: Command
    argv: Callable[[World, Path], list]


OUTPUTS = {
    "search --output": OutputCase(
        search_main, lambda w, out: ["--index", w.index, "--queries", w.queries, "--output", out]),
    "index --engine pisa --output": OutputCase(
        index_main, lambda w, out: ["--engine", "pisa", "--vectors", w.vectors, "--output", out]),
    "index --output": OutputCase(index_main, lambda w, out: ["--vectors", w.vectors, "--output", out]),
    "index --engine bmp --output": OutputCase(
        index_main, lambda w, out: ["--engine", "bmp", "--vectors", w.vectors, "--output", out]),
    "search --engine bmp --output": OutputCase(
        search_main, lambda w, out: ["--engine", "bmp", "--index", w.index, "--queries", w.queries, "--exact-run",
                                     w.queries, "--output", out]),
    "encode --output": OutputCase(
        encode_main, lambda w, out: ["--model", w.model, "--corpus", w.corpus, "--queries", w.text_queries,
                                     "--output", out]),
    "encode --dataset --output": OutputCase(
        encode_main, lambda w, out: ["--model", w.model, "--dataset", w.dataset, "--output", out]),
    "export vectors --output": OutputCase(
        export_main, lambda w, out: ["vectors", "--spec", w.spec, "--runs", w.runs, "--output", out]),
    "regress --runs": OutputCase(
        regress_main, lambda w, out: ["--spec", w.spec, "--data-dir", w.data, "--runs", out.parent]),
    "regress --dry-run --runs": OutputCase(
        regress_main, lambda w, out: ["--spec", w.spec, "--data-dir", w.data, "--runs", out.parent, "--dry-run"]),
    "report --output": OutputCase(report_main, lambda w, out: ["--results", w.results, "--output", out]),
    "train --output": OutputCase(train_main, lambda w, out: ["--recipe", w.recipe, "--output", out]),
    "mlm --output": OutputCase(
        mlm_main, lambda w, out: ["--model", w.model, "--corpus", w.corpus, "--steps", 1, "--output", out]),
    "transfer --output": OutputCase(
        transfer_main, lambda w, out: ["--model", w.model, "--target-tokenizer", w.model, "--output", out]),
    "calibrate --output": OutputCase(
        calibrate_main, lambda w, out: ["--model", w.model, "--corpus", w.corpus, "--limit", 1, "--output", out]),
    "bench search --index-dir": OutputCase(
        bench_main, lambda w, out: ["search", "--vectors", w.vectors, "--queries", w.queries, "--index-dir", out]),
}

# Where each command's output is pointed: an input file, inside an input folder, a folder holding an
# input (for folder outputs) and, for every command, a FIFO. regress writes <--runs>/<spec name>.
TARGETS: dict[str, dict[str, Callable[[World], Path]]] = {
    "search --output": {"input file": lambda w: w.queries, "inside input folder": lambda w: w.index / "run.trec"},
    "index --engine pisa --output": {"input file": lambda w: w.vectors / "part-00000.jsonl",
                                     "inside input folder": lambda w: w.vectors / "pisa",
                                     "holding an input": lambda w: w.vectors.parent},
    "index --output": {"input file": lambda w: w.vectors / "part-00000.jsonl",
                      "inside input folder": lambda w: w.vectors / "index",
                      "holding an input": lambda w: w.vectors.parent},
    "index --engine bmp --output": {"input file": lambda w: w.vectors / "part-00000.jsonl",
                                    "inside input folder": lambda w: w.vectors / "bmp",
                                    "holding an input": lambda w: w.vectors.parent},
    "search --engine bmp --output": {"input file": lambda w: w.queries,
                                     "inside input folder": lambda w: w.index / "run.trec"},
    "encode --output": {"input file": lambda w: w.corpus, "inside input folder": lambda w: w.model / "encoded",
                        "holding an input": lambda w: w.corpus.parent},
    "encode --dataset --output": {"input file": lambda w: w.dataset / "corpus.jsonl",
                                  "inside input folder": lambda w: w.dataset / "encoded",
                                  "holding an input": lambda w: w.data},
    "export vectors --output": {"input file": lambda w: w.spec, "inside input folder": lambda w: w.runs / "bm" / "bundle.tar"},
    "regress --runs": {"input file": lambda w: w.root / "named" / "bm",
                         "inside input folder": lambda w: w.dataset / "runs" / "bm",
                         "holding an input": lambda w: w.root / "bm"},
    "regress --dry-run --runs": {"inside input folder": lambda w: w.dataset / "runs" / "bm"},
    "report --output": {"input file": lambda w: w.results / "results.json",
                        "inside input folder": lambda w: w.results / "report",
                        "holding an input": lambda w: w.results.parent},
    "train --output": {"input file": lambda w: w.recipe, "inside input folder": lambda w: w.model / "run",
                       "holding an input": lambda w: w.triples.parent},
    "mlm --output": {"input file": lambda w: w.corpus, "inside input folder": lambda w: w.model / "adapted",
                     "holding an input": lambda w: w.corpus.parent},
    "transfer --output": {"input file": lambda w: w.model / "config.json",
                          "inside input folder": lambda w: w.model / "transferred",
                          "holding an input": lambda w: w.model.parent},
    "calibrate --output": {"input file": lambda w: w.corpus, "inside input folder": lambda w: w.model / "calibrated",
                           "holding an input": lambda w: w.corpus.parent},
    "bench search --index-dir": {"input file": lambda w: w.queries, "inside input folder": lambda w: w.vectors / "bench",
                                 "holding an input": lambda w: w.queries.parent},
}
CASES = [(command, where) for command, targets in TARGETS.items() for where in [*targets, "FIFO"]]


def _prepare(command: str, where: str, world: World) -> Path:
    """The output path of a case, with what the case needs in place (regress: its spec in the folder the
    run would write, a FIFO where the run's folder would be)."""
    target = TARGETS[command].get(where, lambda w: w.fifo)(world)
    if command.startswith("regress") and where == "input file":  # a spec file named 'bm' is its run's folder
        target.parent.mkdir()
        world.spec = Path(shutil.copy(world.spec, target))
    if command.startswith("regress") and where == "holding an input":
        target.mkdir()
        world.spec = Path(shutil.copy(world.spec, target / "bm.yaml"))
    if command.startswith("regress") and where == "FIFO":
        (world.root / "out").mkdir()
        target = world.root / "out" / "bm"
        os.mkfifo(target)
    return target


@pytest.mark.parametrize("command, where", CASES, ids=[f"{command} at {where}" for command, where in CASES])
def test_no_command_writes_over_or_inside_an_input_or_to_a_fifo(command, where, world, capsys):
    """Every command with an output: pointed at an input file, inside an input folder, at a FIFO, or at a
    folder holding an input, it stops before any work with one line, and nothing under the test folder
    changes (the FIFO stays a FIFO)."""
    case = OUTPUTS[command]
    target = _prepare(command, where, world)
    before = tree_state(world.root)
    code, stderr = run_command(case.main, case.argv(world, target), capsys)
    assert_one_error_line(code, stderr, str(target))
    assert tree_state(world.root) == before


@pytest.mark.parametrize("command", ["search", "export vectors"])
@pytest.mark.parametrize("special", ["FIFO", "link to /dev/null", "copy of /dev/null", "sha256 beside it a FIFO"])
def test_a_file_output_that_is_not_a_regular_file_is_refused(command, special, world, capsys):
    """Before, as root: ``--output`` naming a device (or a FIFO, or a link to a device) was replaced by a
    regular file. A device copy needs ``mknod`` (root); the real /dev is never touched."""
    output = world.root / "out.bin"
    if special == "FIFO":
        os.mkfifo(output)
    elif special == "link to /dev/null":
        output.symlink_to("/dev/null")
    elif special == "copy of /dev/null":
        try:
            os.mknod(output, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
    elif command == "search":
        pytest.skip("search writes no sidecar")
    else:
        os.mkfifo(world.root / "out.bin.sha256")
    argv = OUTPUTS[f"{command} --output"].argv(world, output)
    before = tree_state(world.root)
    code, stderr = run_command(OUTPUTS[f"{command} --output"].main, argv, capsys)
    line = assert_one_error_line(code, stderr, "not a regular file")
    assert ("a FIFO" if "FIFO" in special else "character device") in line
    assert tree_state(world.root) == before


def test_search_output_equal_to_its_queries_keeps_the_queries(world, capsys):
    """The issue's case 1: ``search --output`` equal to ``--queries`` overwrote the encoded queries with
    the run (exit 0). Refused: the queries are untouched."""
    before = world.queries.read_bytes()
    code, stderr = run_command(search_main, ["--index", world.index, "--queries", world.queries,
                                             "--output", world.queries], capsys)
    assert_one_error_line(code, stderr, f"{world.queries}: is the input file", "choose another output path")
    assert world.queries.read_bytes() == before


def test_a_link_or_hard_link_to_an_input_is_the_input(world, capsys):
    """Same resolved path (a symlink) or same inode (a hard link): both are the input itself."""
    link, hard = world.root / "link.trec", world.root / "hard.trec"
    link.symlink_to(world.queries)
    os.link(world.queries, hard)
    for output in (link, hard):
        code, stderr = run_command(search_main, ["--index", world.index, "--queries", world.queries,
                                                 "--output", output], capsys)
        assert_one_error_line(code, stderr, "is the input file")
    assert json.loads(world.queries.read_text()) == {"id": "q1", "vector": {"paris": 3}}


def test_a_fifo_inside_an_output_folder_is_never_replaced(world, capsys):
    """Every file is written through one writer (``core.io.atomic_write``), which refuses to replace a
    non-regular file: a FIFO where regress writes its results.json stays a FIFO."""
    out = world.root / "out" / "bm"
    out.mkdir(parents=True)
    os.mkfifo(out / "results.json")
    code, stderr = run_command(regress_main, ["--spec", world.spec, "--data-dir", world.data,
                                              "--output", world.root / "out"], capsys)
    assert_one_error_line(code, stderr, str(out / "results.json"), "is a FIFO, not a regular file")
    assert stat.S_ISFIFO((out / "results.json").lstat().st_mode)


# -- regress --record: each condition's own values, a read-only spec refused before any run ---------

SHARED_PINS = """# pins shared between two conditions
defaults: {metrics: [ndcg@10]}
conditions:
  bm25:
    retrieval: bm25
    datasets:
      mini: &pins
        scores: {ndcg@10: null}
  splade:
    model: MODEL
    encoder: {max_length_doc: 64, max_length_query: 16, batch_size: 2}
    datasets:
      mini: *pins
  merged:
    retrieval: bm25
    bm25: {k1: 1.2}
    datasets:
      mini:
        <<: *pins
        split: test
"""


def test_record_writes_each_condition_its_own_values_through_aliases_and_merges(tmp_path):
    """Before: the second condition's pins (vectors included) were written through ``*pins`` into the
    first's, a BM25 condition, and the spec was then rejected. Now every written place gets its own copy."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SHARED_PINS.replace("MODEL", "splade-tiny"))
    observed = {
        ("bm25", "mini"): {"scores": {"ndcg@10": 0.5}, "index": {"documents": 3, "total_terms": 9}},
        ("splade", "mini"): {"scores": {"ndcg@10": 0.75}, "index": {"documents": 3, "total_terms": 120},
                             "vectors": {"corpus": "a" * 64, "queries": "b" * 64}},
        ("merged", "mini"): {"scores": {"ndcg@10": 0.25}, "index": {"documents": 3, "total_terms": 9}},
    }
    record_observed(spec, observed)
    pinned = {(condition.name, run.name): {"scores": run.scores, "index": run.index, "vectors": run.vectors}
              for condition in load_spec(spec).conditions for run in condition.datasets}
    for key, values in observed.items():
        assert pinned[key] == {"vectors": {}, **values}, key
    assert spec.read_text().startswith("# pins shared between two conditions\n")


SHARED_PINS_RUN = """defaults: {metrics: [ndcg@10]}
conditions:
  bm25:
    retrieval: bm25
    datasets:
      mini: &pins
        scores: {ndcg@10: null}
  bm25-k1.2:
    retrieval: bm25
    bm25: {k1: 1.2}
    datasets:
      mini: *pins
  vectors:
    datasets:
      mini:
        <<: *pins
        encoded: {corpus: vectors, queries: queries.jsonl}
"""


@pytest.mark.slow
def test_a_real_record_through_an_alias_gives_a_spec_that_reruns_exactly(tmp_path):
    """End to end on the mini collection (two BM25 conditions sharing ``*pins``, an impact one merging them):
    the recorded spec loads, keeps BM25 free of vectors, and reruns with every figure exact."""
    data = write_mini_beir(tmp_path / "data")
    write_jsonl(tmp_path / "vectors" / "part-00000.jsonl",
                [{"id": doc, "contents": "", "vector": {"heart": weight, "attack": 1}}
                 for doc, weight in (("d1", 9), ("d2", 1), ("d3", 4))])
    write_jsonl(tmp_path / "queries.jsonl", [{"id": "q1", "vector": {"heart": 2}}])
    spec = tmp_path / "shared.yaml"
    spec.write_text(SHARED_PINS_RUN)
    argv = [str(arg) for arg in ["--spec", spec, "--data-dir", data, "--output", tmp_path / "runs"]]
    assert cli_entry(regress_main)([*argv, "--record"]) == 0
    document = YAML(typ="safe").load(spec.read_text())["conditions"]
    assert [sorted(document[name]["datasets"]["mini"]) for name in ("bm25", "bm25-k1.2")] == [["index", "scores"]] * 2
    assert set(document["vectors"]["datasets"]["mini"]["vectors"]) == {"corpus", "queries"}
    assert cli_entry(regress_main)([*argv, "--strict"]) == 0


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_record_on_a_read_only_spec_is_refused_before_any_run(dry_run, world, capsys):
    """Before (as root): the 0444 spec was rewritten and lost its mode; as another user every run went
    first, then nothing was written at all. The mode is honoured, and checked before any run."""
    world.spec.chmod(0o444)
    before = tree_state(world.root)
    argv = ["--spec", world.spec, "--data-dir", world.data, "--output", world.root / "out", "--record"]
    code, stderr = run_command(regress_main, [*argv, *(["--dry-run"] if dry_run else [])], capsys)
    assert_one_error_line(code, stderr, str(world.spec), "read-only", "chmod u+w")
    assert tree_state(world.root) == before and stat.S_IMODE(world.spec.stat().st_mode) == 0o444


def test_record_on_a_read_only_file_system_is_refused_before_any_run(world, capsys):
    with small_file_system(world.root / "ro", "64k") as folder:
        spec = Path(shutil.copy(world.spec, folder / "bm.yaml"))
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", world.data, "--runs",
                                                  world.root / "out", "--record"], capsys)
        assert_one_error_line(code, stderr, str(spec), "Read-only file system")
        assert not (world.root / "out").exists()


def test_a_record_that_fails_at_the_end_still_writes_the_results_and_report(world, capsys):
    """The spec's disk fills up during the runs (a real full 64 KiB tmpfs): the results and report are
    written, the error line says the recording failed, and the spec is unchanged."""
    with small_file_system(world.root / "disk", "64k") as disk:
        spec = Path(shutil.copy(world.spec, disk / "bm.yaml"))
        with open(disk / "filler", "wb") as filler, contextlib.suppress(OSError):
            filler.write(b"\0" * (1 << 20))
        before = spec.read_bytes()
        code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", world.data, "--runs",
                                                  world.root / "out", "--record"], capsys)
        assert_one_error_line(code, stderr, str(spec), "recording the observed values failed", "No space left",
                              "report.md")
        assert spec.read_bytes() == before
    rows = json.loads((world.root / "out" / "bm" / "results.json").read_text())["rows"]
    assert any(row["metric"] == "ndcg@10" and row["observed"] == 1.0 for row in rows)
    assert (world.root / "out" / "bm" / "report.md").is_file()


# -- regress writes only under its --output root ----------------------------------------------------

def test_a_link_in_the_output_root_cannot_lead_a_run_outside_it(world, capsys):
    """A condition's folder that is a link to elsewhere: refused before any work, the target untouched."""
    elsewhere = world.root / "elsewhere"
    elsewhere.mkdir()
    (world.root / "out" / "bm").mkdir(parents=True)
    (world.root / "out" / "bm" / "bm").symlink_to(elsewhere)
    before = tree_state(world.root)
    code, stderr = run_command(regress_main, ["--spec", world.spec, "--data-dir", world.data,
                                              "--output", world.root / "out"], capsys)
    assert_one_error_line(code, stderr, "outside the output folder")
    assert tree_state(world.root) == before


@pytest.mark.parametrize("names", [("..", "mini"), ("bm", "..")], ids=["condition ..", "dataset .."])
def test_no_spec_name_makes_regress_write_outside_its_root(names, world, capsys):
    """A condition or dataset named ``..`` (refused by the spec's name rules or by the runner's check that
    every artifact folder lies under the root): one line, nothing written anywhere in the test folder."""
    condition, dataset = names
    spec = world.root / "specs" / "escape.yaml"
    spec.write_text(f"conditions:\n  '{condition}':\n    retrieval: bm25\n    datasets:\n      '{dataset}':\n")
    before = tree_state(world.root)
    code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", world.data,
                                              "--output", world.root / "out"], capsys)
    assert_one_error_line(code, stderr)
    assert tree_state(world.root) == before


def test_a_spec_named_dot_dot_cannot_move_the_run_folder_out_of_the_root(world, capsys):
    spec = world.root / "specs" / "...yaml"  # its name (the file's stem) is '..'
    shutil.copy(world.spec, spec)
    before = tree_state(world.root)
    code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", world.data,
                                              "--output", world.root / "out" / "root"], capsys)
    assert_one_error_line(code, stderr, "outside the output folder")
    assert tree_state(world.root) == before


# -- bundles: checked member by member before anything is extracted ----------------------------------

def _add(archive: tarfile.TarFile, name: str, data: bytes = b"", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    for field, value in fields.items():
        setattr(info, field, value)
    archive.addfile(info, io.BytesIO(data) if data else None)


def write_bundle_with(path: Path, extra: Callable[[tarfile.TarFile], None]) -> Path:
    """A bundle for the condition 'tiny' on 'mini', with ``extra(archive)`` adding the member under test."""
    header = {"format": BUNDLE_FORMAT, "spec": "tiny.yaml", "spec_text": "", "environment": {},
              "runs": {"tiny/mini": {name: {"sha256": "0" * 64, "count": 1, "total_impact": 1}
                                     for name in ("corpus", "queries")}}}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as archive:
        _add(archive, "bundle.json", json.dumps(header).encode())
        _add(archive, "tiny/mini/manifest.json", b'{"complete": true}')
        _add(archive, "tiny/mini/queries.jsonl", b'{"id": "q1", "vector": {"heart": 5}}\n')
        extra(archive)
    return path


def sparse_gigabyte(archive: tarfile.TarFile) -> None:
    """10 stored bytes declaring a 1 GiB file (GNU sparse, as PAX headers): extracted, a 1 GiB line."""
    info = tarfile.TarInfo("tiny/mini/vectors/part-00000.jsonl")
    info.size, info.mode = 10, 0o644
    info.pax_headers = {"GNU.sparse.map": "0,10", "GNU.sparse.size": str(1 << 30)}
    archive.addfile(info, io.BytesIO(b"x" * 10))


HOSTILE_MEMBERS: dict[str, tuple[Callable[[tarfile.TarFile], None], str]] = {
    "1 GiB sparse member": (sparse_gigabyte, "is a sparse file declaring 1073741824 bytes"),
    "../ path": (lambda a: _add(a, "../escaped.jsonl", b"{}\n"), "has a path that leaves the bundle"),
    "absolute path": (lambda a: _add(a, "/tmp/vtrepro-escaped.jsonl", b"{}\n"), "has a path that leaves the bundle"),
    "symlink": (lambda a: _add(a, "tiny/mini/vectors", type=tarfile.SYMTYPE, linkname="/etc"),
                "is not a plain file or folder"),
    "hard link": (lambda a: _add(a, "tiny/mini/vectors/part-00000.jsonl", type=tarfile.LNKTYPE,
                                 linkname="bundle.json"), "is not a plain file or folder"),
    "FIFO": (lambda a: _add(a, "tiny/mini/vectors/part-00000.jsonl", type=tarfile.FIFOTYPE),
             "is not a plain file or folder"),
    "member twice": (lambda a: _add(a, "tiny/mini/queries.jsonl", b"{}\n"), "appears twice"),
}


@pytest.fixture
def bundle_world(tmp_path: Path) -> tuple[Path, Path]:
    """A spec with the impact condition 'tiny' on 'mini' (its model is never loaded) and its data root."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(f"conditions:\n  tiny:\n    model: {tmp_path / 'no-model'}\n    datasets:\n      mini:\n")
    return spec, write_mini_beir(tmp_path / "data")


@pytest.mark.parametrize("member", HOSTILE_MEMBERS, ids=list(HOSTILE_MEMBERS))
def test_a_hostile_bundle_member_is_refused_before_anything_is_extracted(member, bundle_world, tmp_path, capsys):
    spec, data = bundle_world
    add, fragment = HOSTILE_MEMBERS[member]
    bundle = write_bundle_with(tmp_path / "hostile.tar", add)
    code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", data, "--vectors", bundle,
                                              "--output", tmp_path / "runs"], capsys)
    assert_one_error_line(code, stderr, str(bundle), fragment, "refused before extracting anything")
    assert list((tmp_path / "runs" / ".bundles").iterdir()) == []  # nothing extracted, no staging left
    assert not Path("/tmp/vtrepro-escaped.jsonl").exists() and not (tmp_path / "escaped.jsonl").exists()


def test_a_member_declaring_more_than_the_bundle_holds_is_refused(bundle_world, tmp_path, capsys):
    """A header claiming more bytes than the whole archive (a truncated or forged bundle)."""
    spec, data = bundle_world

    def oversized(archive: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("tiny/mini/vectors/part-00000.jsonl")
        info.size, info.pax_headers = 2048, {"size": str(1 << 30)}  # its header says 1 GiB; 2 KiB follow
        archive.addfile(info, io.BytesIO(b"x" * 2048))

    bundle = write_bundle_with(tmp_path / "forged.tar", oversized)
    code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", data, "--vectors", bundle,
                                              "--output", tmp_path / "runs"], capsys)
    assert_one_error_line(code, stderr, "declares 1073741824 bytes, more than the whole bundle's")


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_a_10_kb_bundle_with_a_1_gib_member_fails_fast_within_2_gb(bundle_world, tmp_path):
    """The issue's measurement: 2.25 GB peak before the bundle was refused (under a 2 GB address-space
    limit: exit 3, MemoryError). Now the real command, limited to 2 GB, exits 2 with one line in seconds."""
    spec, data = bundle_world
    bundle = write_bundle_with(tmp_path / "sparse.tar", sparse_gigabyte)
    assert bundle.stat().st_size < 16 << 10
    result = subprocess.run([sys.executable, "-m", "vtrepro", "regress", "--spec", str(spec), "--data-dir", str(data),
                             "--vectors", str(bundle), "--output", str(tmp_path / "runs")],
                            capture_output=True, text=True, preexec_fn=_limit_address_space, timeout=60)
    assert_one_error_line(result.returncode, result.stderr, "is a sparse file declaring 1073741824 bytes")
    assert list((tmp_path / "runs" / ".bundles").iterdir()) == []


def test_line_lengths_are_tracked_across_blocks():
    """The streaming line check (a vector line is read whole when fingerprinted, so its length is capped)."""
    assert _line_length(b"abc", 0) == 3
    assert _line_length(b"abc\nde", 5) == 2
    assert _line_length(b"\n", MAX_LINE_BYTES) == 0
    assert _line_length(b"x\n", MAX_LINE_BYTES) > MAX_LINE_BYTES
    assert _line_length(b"x" * 10, MAX_LINE_BYTES - 5) > MAX_LINE_BYTES
