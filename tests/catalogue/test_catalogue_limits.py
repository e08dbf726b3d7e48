"""The bad-input catalogue, sizes that scale memory (docs/input-validation.md): every such size has a stated
bound, checked before work, and a value past it is one ``error:`` line with exit status 2.

Hits per query (``k``, cut to the index's documents), YAML alias expansion, tokens per text (against the
model's positions), calibration targets (against the vocabulary), the quantization scale, batch, shard and
sample sizes. The cases that used to exhaust memory run as real processes under a 2 GiB address-space
limit and must end within a few CPU seconds; the others run in-process through ``cli_entry``.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_catalogue import snapshot

from helpers import assert_one_error_line
from vtrepro.core.cli import cli_entry
from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import MAX_YAML_BYTES, read_yaml
from vtrepro.core.shipped import RECIPES_DIR, SHIPPED_DIR
from vtrepro.index.command import main as index_main
from vtrepro.regress.command import main as regress_main
from vtrepro.regress.spec import load_spec
from vtrepro.search.command import main as search_main
from vtrepro.search.runs import MAX_RUN_HITS, hits_per_query

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

ADDRESS_SPACE = 2 * 1024**3
CPU_SECONDS = 10.0
"""CPU time allowed to a refused command in a fresh process: 1.5 s here, mostly imports (the alias bomb took
38 s before its MemoryError). CPU time, not wall time: other jobs on the machine stretch only the latter."""
DOCUMENTS = {f"d{i}": {"paris": i + 1, "france": 2} for i in range(6)}
QUERIES = {"q1": {"paris": 3}, "d2": {"france": 1, "paris": 1}}

SPEC = """\
defaults:
  k: 10
  metrics: [ndcg@10]
conditions:
  tiny:
    model: splade-tiny
    encoder: {max_length_doc: 256, batch_size: 32}
    quantization: {scale: 100}
    calibrate: {dataset: scifact, docs: 100, cut_percent: 60}
    datasets:
      scifact:
"""

BOMB = "".join(f"  - &{name} [{', '.join(['x'] * 9 if name == 'a' else [f'*{chr(ord(name) - 1)}'] * 9)}]\n"
               for name in "abcdefghi")
"""Nine levels of nine aliases each (billion laughs): 9^9 = 387 million nodes in about 300 bytes."""


def write_jsonl(path: Path, records: dict[str, dict[str, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": key, "contents": "", "vector": vector}) + "\n"
                            for key, vector in records.items()))
    return path


def cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def limited_run(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """``python -m vtrepro ARGS`` under a 2 GiB address-space limit: (result, its CPU seconds)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    began = cpu_seconds_of_children()
    result = subprocess.run([sys.executable, "-m", "vtrepro", *args], capture_output=True, text=True, cwd=cwd,
                            preexec_fn=limit, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return result, cpu_seconds_of_children() - began


def run(main, argv: list, capsys) -> tuple[int, str]:
    """A command run in-process as its ``python -m`` entry runs it, argparse's exit included: (status, stderr)."""
    try:
        code = cli_entry(main)([str(arg) for arg in argv])
    except SystemExit as exited:
        code = int(exited.code or 0)
    return code, capsys.readouterr().err


def edited(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> Path:
    """Six documents and two queries (one of them also a document id) as JSON vectors."""
    root = tmp_path_factory.mktemp("limits")
    write_jsonl(root / "vectors" / "part-00000.jsonl", DOCUMENTS)
    write_jsonl(root / "queries.jsonl", QUERIES)
    return root


@pytest.fixture(scope="module")
def lucene_index(vectors: Path) -> Path:
    from vtrepro.index.lucene import build_impact_index

    build_impact_index(vectors / "vectors", vectors / "index")
    return vectors / "index"


# -- k: one stated maximum, and cut to the documents before the engine allocates -----------------------

@pytest.mark.parametrize("engine", ["pisa", "lucene"])
def test_k_beyond_the_maximum_is_refused_under_2_gib(engine, vectors: Path, tmp_path: Path) -> None:
    """It was 23 GB resident then the OOM kill (PISA, k=3e9), or a JavaException after searching began
    (Lucene, k=2^31-1): now the parser refuses it, before any index, JVM or allocation."""
    engine_args = (["--engine", "pisa", "--index", str(tmp_path / "pisa")]
                   if engine == "pisa" else ["--index", str(tmp_path / "no-index")])
    k = "3000000000" if engine == "pisa" else "2147483647"
    result, seconds = limited_run("search", *engine_args, "--queries", str(vectors / "queries.jsonl"),
                                  "--output", str(tmp_path / "run.trec"), "--k", k, cwd=tmp_path)
    assert_one_error_line(result.returncode, result.stderr, f"argument --k: expected an integer in [1, 10000], got '{k}'")
    assert seconds < CPU_SECONDS
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_k_in_a_spec_is_refused_by_the_dry_run(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(edited(SPEC, "k: 10", "k: 3000000000"))
    before = snapshot(tmp_path)
    code, stderr = run(regress_main, ["--spec", spec, "--dry-run", "--runs", tmp_path / "runs"], capsys)
    assert_one_error_line(code, stderr, f"{spec}:2: defaults.k must be an integer in [1, 10000], got 3000000000")
    assert snapshot(tmp_path) == before and not (tmp_path / "runs").exists()


def test_k_above_the_documents_gives_the_same_run(lucene_index: Path, vectors: Path, tmp_path: Path, capsys) -> None:
    """Six documents: k=10000 is cut to 6 before Lucene and PISA allocate, and the run is k=6's, hit for hit."""
    runs = {}
    code, stderr = run(index_main, ["--engine", "pisa", "--vectors", vectors / "vectors", "--output", tmp_path / "pisa"],
                       capsys)
    assert code == 0, stderr
    for engine, k in (("lucene", 10_000), ("lucene", 6), ("pisa", 10_000)):
        output = tmp_path / f"{engine}-{k}.trec"
        engine_args = ["--index", lucene_index] if engine == "lucene" else ["--engine", "pisa", "--index", tmp_path / "pisa"]
        code, stderr = run(search_main, [*engine_args, "--queries", vectors / "queries.jsonl", "--output", output,
                                         "--k", k], capsys)
        assert code == 0, stderr
        runs[engine, k] = output.read_text()
    assert runs["lucene", 10_000] == runs["lucene", 6] == runs["pisa", 10_000]
    assert len(runs["lucene", 6].splitlines()) == 6 + 5  # q1: all six documents; d2: the five others


def test_a_run_larger_than_memory_allows_is_refused() -> None:
    """queries x hits past MAX_RUN_HITS (a run is held in memory) is refused; k is cut to the documents first."""
    assert hits_per_query(10_000, 6, 10**6) == 6
    assert hits_per_query(1000, 5_000_000, MAX_RUN_HITS // 1000) == 1000
    with pytest.raises(VtreproError, match=r"would return 20,001,000 hits, more than the 20,000,000"):
        hits_per_query(1000, 5_000_000, MAX_RUN_HITS // 1000 + 1)


# -- YAML: aliases expanded, size and depth bounded, before anything is built ---------------------------

def test_a_yaml_alias_bomb_is_refused_under_2_gib(tmp_path: Path) -> None:
    """A 400-byte spec whose k is nine levels of aliases: 3 GB and 38 s before a MemoryError (exit 3); now
    one line naming the line where the expansion passes the limit, within seconds under 2 GiB."""
    spec = tmp_path / "bomb.yaml"
    spec.write_text("defaults:\n  split:\n" + BOMB + "  k: *i\nconditions:\n  bm25: {retrieval: bm25, datasets: {scifact: }}\n")
    before = snapshot(tmp_path)
    result, seconds = limited_run("regress", "--spec", str(spec), "--dry-run", "--runs", str(tmp_path / "runs"),
                                  cwd=tmp_path)
    assert_one_error_line(result.returncode, result.stderr, f"{spec}:8: YAML aliases expand to more than 100000 nodes")
    assert seconds < CPU_SECONDS
    assert snapshot(tmp_path) == before


def bomb_recipe(tmp_path: Path) -> tuple[list[str], str]:
    """The bomb as a recipe's description, whose wrong type was reported with the value's repr."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("description:\n" + BOMB + "model: splade-tiny\ndata: {format: triples, path: t.tsv}\n"
                      "training: {steps: 1}\n")
    return ["train", "--recipe", str(recipe), "--dry-run", "--output", str(tmp_path / "run")], f"{recipe}:7: "


def bomb_table(tmp_path: Path) -> tuple[list[str], str]:
    """The bomb as the source of a published table a spec names."""
    table = tmp_path / "table.yaml"
    table.write_text("source:\n" + BOMB + "systems: {}\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(edited(SPEC, "    datasets:", f"    published: {table}/system\n    datasets:"))
    return ["regress", "--spec", str(spec), "--dry-run", "--runs", str(tmp_path / "runs")], f"{table}:7: "


@pytest.mark.parametrize("make", [bomb_recipe, bomb_table], ids=["recipe (train --dry-run)", "published table"])
def test_every_yaml_reader_bounds_the_expansion(make, tmp_path: Path, capsys) -> None:
    from vtrepro.__main__ import main as vtrepro_main

    argv, where = make(tmp_path)
    before = snapshot(tmp_path)
    code, stderr = run(vtrepro_main, argv, capsys)
    assert_one_error_line(code, stderr, where, "YAML aliases expand to more than 100000 nodes")
    assert snapshot(tmp_path) == before


SHAPES = {
    "alias inside the collection it names": ("a: &a [1, *a]\n", ":1: a YAML alias sits inside the collection it names"),
    "nested 20,000 deep": ("a: " + "[" * 20_000 + "]" * 20_000 + "\n", ":1: YAML nested deeper than 32 levels"),
    "larger than the bound": ("a: " + "x" * MAX_YAML_BYTES + "\n", f": larger than {MAX_YAML_BYTES} bytes"),
    "invalid UTF-8": (b"a: 1\nb: caf\xe9\n", ":2: not valid UTF-8"),
}


@pytest.mark.parametrize("case", SHAPES, ids=list(SHAPES))
def test_yaml_shapes_that_would_exhaust_the_reader_are_refused(case, tmp_path: Path) -> None:
    text, fragment = SHAPES[case]
    path = tmp_path / "spec.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    began = time.process_time()
    with pytest.raises(VtreproError) as error:
        read_yaml(path)
    assert str(error.value).startswith(f"{path}{fragment}") and "\n" not in str(error.value), error.value
    assert time.process_time() - began < 4  # CPU seconds; it was exit 3 (RecursionError) after 7


def test_small_aliases_still_work(tmp_path: Path) -> None:
    """Shared settings (``&pins``, ``<<: *pins``) as the shipped specs use them load as before."""
    ablation = load_spec(SHIPPED_DIR / "vt_round_trip_ablation.yaml")
    assert {(condition.model, condition.source_build) for condition in ablation.conditions if condition.stages} == {
        ("splade-tiny", "round_trip")}  # each from the shared &round-trip block
    path = tmp_path / "spec.yaml"
    path.write_text(edited(SPEC, "    encoder: {max_length_doc: 256, batch_size: 32}",
                           "    encoder: &enc {max_length_doc: 256, batch_size: 32}")
                    + "  again:\n    model: splade-tiny\n    encoder: *enc\n    datasets: {scifact: }\n")
    spec = load_spec(path)
    assert spec.conditions[0].encoder == spec.conditions[1].encoder


# -- tokens per text: the model's positions, checked before work ---------------------------------------

def test_mlm_max_length_beyond_the_model_is_refused_before_work(tmp_path: Path, capsys, models_dir: Path) -> None:
    """It was a tensor size mismatch after loading texts and model (exit 3); now one line, nothing loaded."""
    from vtrepro.training.command import mlm_main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "protein folding " * 800}) + "\n")
    for length, fragment in (("100000", "argument --max-length: expected an integer in [8, 8192], got '100000'"),
                             ("600", "max length is 600 tokens, beyond the 512 per text model splade-tiny takes")):
        code, stderr = run(mlm_main, ["--model", "splade-tiny", "--model-dir", models_dir, "--corpus", corpus,
                                      "--steps", "1", "--max-length", length, "--output", tmp_path / "out"], capsys)
        assert_one_error_line(code, stderr, fragment)
        assert not (tmp_path / "out").exists()


RECIPE = (RECIPES_DIR / "splade_tiny_nfcorpus.yaml").read_text()
ROBERTA = (RECIPES_DIR / "roberta_base_native.yaml").read_text()


@pytest.mark.parametrize(("text", "old", "new", "fragment"), [
    (RECIPE, "max_length_doc: 256", "max_length_doc: 100000",
     ":32: training.max_length_doc must be an integer in [1, 8192], got 100000"),
    (RECIPE, "max_length_doc: 256", "max_length_doc: 1000",
     ": training.max_length_doc is 1000 tokens, beyond the 512 per text model splade-tiny takes"),
    (ROBERTA, "max_length_doc: 256", "max_length_doc: 513",
     ": training.max_length_doc is 513 tokens, beyond the 512 per text model FacebookAI/roberta-base takes"),
], ids=["schema bound", "local model's positions", "RoBERTa's positions less its padding offset (Hub, offline)"])
def test_train_dry_run_refuses_lengths_the_model_cannot_take(text, old, new, fragment, tmp_path: Path, capsys,
                                                            models_dir: Path) -> None:
    """They used to pass --dry-run (the real run refused after its stages and mining)."""
    from vtrepro.training.command import train_main

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(edited(text, old, new))
    code, stderr = run(train_main, ["--recipe", recipe, "--model-dir", models_dir, "--dry-run",
                                    "--output", tmp_path / "run"], capsys)
    assert_one_error_line(code, stderr, f"{recipe}{fragment}")
    assert not (tmp_path / "run").exists()


# -- calibration target: at most the vocabulary ----------------------------------------------------------

def test_calibrate_target_beyond_the_vocabulary_is_refused(tmp_path: Path, capsys, models_dir: Path) -> None:
    """--target-terms 1e9 gave 30,516.98 active terms per document (every term), exit 0; now refused: above
    any vocabulary by the parser and the spec schema, above this model's 30,517 terms once it is loaded."""
    from vtrepro.vocabulary.command import calibrate_main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "heart attack"}) + "\n")
    for target, fragment in (("1e9", "argument --target-terms: expected a number in (0, 1000000], got '1e9'"),
                             ("40000", "--target-terms 40000 is more than the 30517 terms of the model's vocabulary")):
        code, stderr = run(calibrate_main, ["--model", "splade-tiny", "--model-dir", models_dir, "--corpus", corpus,
                                            "--target-terms", target, "--output", tmp_path / "out"], capsys)
        assert_one_error_line(code, stderr, fragment)
        assert not (tmp_path / "out").exists()
    spec = tmp_path / "spec.yaml"
    spec.write_text(edited(SPEC, "cut_percent: 60", "target_terms: 1.0e9"))
    with pytest.raises(VtreproError, match=r"spec.yaml:9: condition 'tiny'.calibrate.target_terms must be a number in "
                                           r"\(0, 1000000\], got 1000000000.0"):
        load_spec(spec)


# -- quantization scale: a stated range, and never every document or query empty -----------------------

def test_scale_out_of_range_is_refused_before_work(tmp_path: Path, capsys) -> None:
    """--scale 1e-9 made every document {"%empty": 1} and every stage exited 0; now the parser and the spec
    schema refuse scales outside [1, 10000]."""
    from vtrepro.encode.command import encode_main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "heart attack"}) + "\n")
    code, stderr = run(encode_main, ["--model", "splade-tiny", "--corpus", corpus, "--scale", "1e-9",
                                     "--output", tmp_path / "enc"], capsys)
    assert_one_error_line(code, stderr, "argument --scale: expected a number in [1, 10000], got '1e-9'")
    assert not (tmp_path / "enc").exists()
    spec = tmp_path / "spec.yaml"
    spec.write_text(edited(SPEC, "scale: 100", "scale: 1.0e-9"))
    with pytest.raises(VtreproError, match=r"spec.yaml:8: condition 'tiny'.quantization.scale must be a number in "
                                           r"\[1, 10000\], got 1e-09"):
        load_spec(spec)


@pytest.fixture(scope="module")
def silent_model(tmp_path_factory, splade_tiny: Path) -> Path:
    """splade-tiny with its decoder bias lowered by 1000: every logit is negative, so every weight is 0."""
    from vtrepro.core.checkpoints import save_checkpoint
    from vtrepro.model.loading import load_masked_lm
    from vtrepro.vocabulary.calibrate import shift_bias

    model, tokenizer = load_masked_lm(splade_tiny)
    shift_bias(model, -1000.0)
    folder = tmp_path_factory.mktemp("silent") / "silent-tiny"
    save_checkpoint(folder, model, tokenizer)
    return folder


def test_a_corpus_left_without_terms_is_refused(silent_model: Path, tmp_path: Path, capsys) -> None:
    """Every document quantized to nothing used to be indexed as {"%empty": 1} (exit 0 at every stage)."""
    from vtrepro.encode.command import encode_main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                              for i, text in enumerate(["heart attack", "protein folding", "heart rate"])))
    before = snapshot(tmp_path)
    code, stderr = run(encode_main, ["--model", silent_model, "--corpus", corpus, "--output", tmp_path / "enc"],
                       capsys)
    assert_one_error_line(code, stderr, f"{tmp_path / 'enc'}: quantization x100 (half-even) leaves every one of the 3 "
                                        "documents without a term")
    assert {key: value for key, value in snapshot(tmp_path).items() if not key.startswith("enc/")} == before


def test_queries_left_without_terms_are_refused(silent_model: Path, tmp_path: Path) -> None:
    from vtrepro.encode.queries import encode_queries
    from vtrepro.model.splade import SpladeEncoder

    path = tmp_path / "queries.jsonl"
    with pytest.raises(VtreproError, match=r"queries.jsonl: quantization x100 \(half-even\) leaves every one of the "
                                           r"2 queries without a term"):
        encode_queries(SpladeEncoder(silent_model), {"q1": "heart", "q2": "yeast"}, path, show_progress=False)
    assert not path.exists()


# -- every other size that scales memory: a stated maximum in the parser or the schema ------------------

ENCODE = ["encode", "--model", "m", "--corpus", "c.jsonl", "--output", "o"]
CALIBRATE = ["calibrate", "--model", "m", "--dataset", "d", "--output", "o"]
OPTION_CASES = [
    ([*ENCODE, "--batch-size", "100000"], "--batch-size: expected an integer in [1, 4096]"),
    ([*ENCODE, "--shard-size", "1000000000"], "--shard-size: expected an integer in [1, 100000]"),
    ([*ENCODE, "--sort-window", "1000000000"], "--sort-window: expected an integer in [1, 100000]"),
    ([*ENCODE, "--max-length-doc", "100000"], "--max-length-doc: expected an integer in [1, 8192]"),
    ([*CALIBRATE, "--limit", "1000000000"], "--limit: expected an integer in [1, 10000000]"),
    ([*CALIBRATE, "--max-sample", "1000000"], "--max-sample: expected an integer in [1, 50000]"),
    ([*CALIBRATE, "--batch-size", "100000"], "--batch-size: expected an integer in [1, 4096]"),
    (["mlm", "--model", "m", "--dataset", "d", "--output", "o", "--batch-size", "100000"],
     "--batch-size: expected an integer in [1, 4096]"),
    (["bench", "search", "--vectors", "v", "--queries", "q", "--k", "3000000000"], "--k: expected an integer in [1, 10000]"),
    (["bench", "encode", "--batch-size", "100000"], "--batch-size: expected an integer in [1, 4096]"),
]


@pytest.mark.parametrize(("argv", "fragment"), OPTION_CASES, ids=[f"{case[0][0]} {case[0][-2]}" for case in OPTION_CASES])
def test_sizes_past_their_maximum_are_refused_by_the_parser(argv, fragment, tmp_path: Path, capsys, monkeypatch) -> None:
    from vtrepro.__main__ import main as vtrepro_main

    monkeypatch.chdir(tmp_path)
    code, stderr = run(vtrepro_main, argv, capsys)
    assert_one_error_line(code, stderr, f"argument {fragment}")
    assert not any(tmp_path.iterdir())


RECIPE_CASES = [
    ("batch_size: 16", "batch_size: 100000", 27, "training.batch_size must be an integer in [1, 4096]"),
    ("depth: 100", "depth: 1000000000", 16, "data.depth must be an integer in [1, 10000]"),
    ("negatives: 1", "negatives: 100000", 17, "data.negatives must be an integer in [0, 255]"),
]


@pytest.mark.parametrize(("old", "new", "line", "fragment"), RECIPE_CASES, ids=[case[1] for case in RECIPE_CASES])
def test_recipe_sizes_past_their_maximum_are_refused_at_load(old, new, line, fragment, tmp_path: Path) -> None:
    from vtrepro.training.recipe import load_recipe

    path = tmp_path / "recipe.yaml"
    path.write_text(edited(RECIPE, old, new))
    with pytest.raises(VtreproError) as error:
        load_recipe(path)
    assert str(error.value).startswith(f"{path}:{line}: {fragment}"), error.value


def test_spec_sizes_past_their_maximum_are_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    for old, new, fragment in (("batch_size: 32", "batch_size: 100000", "encoder.batch_size must be an integer in [1, 4096]"),
                               ("max_length_doc: 256", "max_length_doc: 100000",
                                "encoder.max_length_doc must be an integer in [1, 8192]")):
        path.write_text(edited(SPEC, old, new))
        with pytest.raises(VtreproError) as error:
            load_spec(path)
        assert str(error.value).startswith(f"{path}:7: condition 'tiny'.{fragment}"), error.value
