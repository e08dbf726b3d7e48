"""Catalogue of bad input: every invalid spec value, recipe value and numeric option fails before any work.

Specs and recipes fail at load (so ``--dry-run`` is a complete check) with one ``file:line: problem``
error; numeric options fail in argparse (exit 2, no traceback); ``--help`` imports no torch/transformers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_module
from vtrepro.__main__ import command_functions
from vtrepro.core.errors import VtreproError
from vtrepro.regress.spec import load_spec
from vtrepro.training.recipe import load_recipe

SPEC = """\
defaults:
  k: 1000
  metrics: [ndcg@10, recall@100]
  tolerance: {scores: 0.0005}
conditions:
  tiny:
    model: splade-tiny
    trust_remote_code: false
    encoder: {max_length_doc: 256, max_length_query: 64, batch_size: 32}
    quantization: {scale: 100, rounding: half-even}
    datasets:
      scifact:
        scores: {ndcg@10: 0.5, recall@100: null}
        reference: {ndcg@10: 0.5}
        index: {documents: 5183, total_terms: null}
  bm25:
    retrieval: bm25
    bm25: {k1: 0.9, b: 0.4}
    datasets:
      scifact:
  vt:
    transfer: {source: splade-tiny, init: topology, temperature: 1.0, target_norm: false, seed: 0}
    calibrate: {dataset: scifact, docs: 100, cut_percent: 60, max_length: 128}
    datasets:
      scifact:
"""

# (text to replace, replacement, line of the error, fragment of the error)
SPEC_CASES = [
    ("[ndcg@10, recall@100]", "[ndcg@10, recall@100, ndcg@0]", 3, "the cutoff must be >= 1"),
    ("[ndcg@10, recall@100]", "[ndcg@10, ndcg@-1]", 3, "the cutoff must be >= 1"),
    ("[ndcg@10, recall@100]", "[ndcg@10, ndcg@--5]", 3, "unknown metric 'ndcg@--5'"),
    ("  bm25:\n", "  bm 25:\n", 16, "a condition name must be a non-empty string without whitespace"),
    ("  bm25:\n", "  bm/25:\n", 16, "or '/'"),
    ("[ndcg@10, recall@100]", "[foo@10, recall@100]", 3, "unknown metric 'foo@10'"),
    ("[ndcg@10, recall@100]", "[ndcg@10, ndcg@10]", 3, "listed twice"),
    ("metrics: [ndcg@10, recall@100]", "metrics: ndcg@10", 3, "must be a non-empty list"),
    ("metrics: [ndcg@10, recall@100]", "metrics:\n    - ndcg@10\n    - recall@0", 5, "the cutoff must be >= 1"),
    ("{ndcg@10: 0.5, recall@100: null}", "{ndcg@0: 0.5}", 13, "unknown key 'ndcg@0'"),
    ("reference: {ndcg@10: 0.5}", "reference: {foo@10: 0.5}", 14, "unknown key 'foo@10'"),
    ("{ndcg@10: 0.5, recall@100: null}", "{ndcg@10: 1.5}", 13, "scores.ndcg@10 must be a number in [0, 1]"),
    ("k: 1000", "k: 0", 2, "defaults.k must be an integer in [1, 10000], got 0"),
    ("k: 1000", "k: -1", 2, "defaults.k must be an integer in [1, 10000], got -1"),
    ("k: 1000", "k: 10.5", 2, "defaults.k must be an integer in [1, 10000]"),
    ("k: 1000", "k: ten", 2, "defaults.k must be an integer in [1, 10000]"),
    ("k: 1000", "k: 50", 2, "recall@100 needs 100 hits per query"),
    ("max_length_doc: 256", "max_length_doc: -5", 9, "encoder.max_length_doc must be an integer in [1, 8192]"),
    ("max_length_doc: 256", "max_length_doc: 0", 9, "encoder.max_length_doc must be an integer in [1, 8192]"),
    ("max_length_query: 64", "max_length_query: 0", 9, "encoder.max_length_query must be an integer in [1, 8192]"),
    ("batch_size: 32", "batch_size: 0", 9, "encoder.batch_size must be an integer in [1, 4096]"),
    ("trust_remote_code: false", "trust_remote_code: no", 8, "got 'no'; use true or false"),
    ("trust_remote_code: false", 'trust_remote_code: "yes"', 8, "got 'yes'; use true or false"),
    ("trust_remote_code: false", "trust_remote_code: 1", 8, "got 1; use true or false"),
    ("trust_remote_code: false", "trust_remote_code: 'false'", 8, "use true or false"),
    ("    model: splade-tiny\n", "    model: splade-tiny\n    query_encoder: bert\n", 8, "must be one of splade, idf"),
    ("{k1: 0.9, b: 0.4}", "{k1: -1, b: 0.4}", 18, "bm25.k1 must be a number >= 0"),
    ("{k1: 0.9, b: 0.4}", "{k1: 0.9, b: 1.5}", 18, "bm25.b must be a number in [0, 1]"),
    ("{k1: 0.9, b: 0.4}", "{k1: 0.9, b: -0.1}", 18, "bm25.b must be a number in [0, 1]"),
    ("{k1: 0.9, b: 0.4}", "{k1: .nan, b: 0.4}", 18, "bm25.k1 must be a number >= 0"),
    ("scale: 100", "scale: 0", 10, "quantization.scale must be a number in [1, 10000]"),
    ("rounding: half-even", "rounding: nearest", 10, "must be one of half-even, half-up, truncate"),
    ("init: topology", "init: topolgy", 22, "init must be one of topology, subword-mean, mean, random"),
    ("temperature: 1.0", "temperature: 0", 22, "transfer.temperature must be a number > 0"),
    ("temperature: 1.0", "temperature: -1", 22, "transfer.temperature must be a number > 0"),
    ("target_norm: false", "target_norm: no", 22, "use true or false"),
    ("seed: 0}", "seed: 1.5}", 22, "transfer.seed must be an integer >= 0"),
    ("seed: 0}", "seed: -1}", 22, "transfer.seed must be an integer >= 0"),
    ("seed: 0}", "seed: 0, similarity: dot}", 22, "similarity must be one of cosine, zscore, pmi"),
    ("seed: 0}", "seed: 0, leaveout: {fraction: 0}}", 22, "leaveout.fraction must be a number in (0, 1)"),
    ("seed: 0}", "seed: 0, leaveout: {fraction: 1}}", 22, "leaveout.fraction must be a number in (0, 1)"),
    ("seed: 0}", "seed: 0, leaveout: {seed: x}}", 22, "leaveout.seed must be an integer >= 0"),
    ("docs: 100", "docs: 0", 23, "calibrate.docs must be an integer in [1, 10000000]"),
    ("cut_percent: 60", "cut_percent: 150", 23, "calibrate.cut_percent must be a number in (0, 100)"),
    ("cut_percent: 60", "cut_percent: 0", 23, "calibrate.cut_percent must be a number in (0, 100)"),
    ("cut_percent: 60", "target_terms: 0", 23, "calibrate.target_terms must be a number in (0, 1000000]"),
    ("max_length: 128", "max_length: 0", 23, "calibrate.max_length must be an integer in [1, 8192]"),
    ("{scores: 0.0005}", "{scores: -1}", 4, "defaults.tolerance.scores must be a number >= 0"),
    ("    model: splade-tiny\n", "    model: splade-tiny\n    reference_tolerance: -0.1\n", 8,
     "reference_tolerance must be a number >= 0"),
    ("{documents: 5183, total_terms: null}", "{documents: -1}", 15, "index.documents must be an integer >= 0"),
    ("      scifact:\n        scores", "      scifact:\n        split: 5\n        scores", 13,
     "split must be a non-empty string"),
]

RECIPE = """\
model: splade-tiny
trust_remote_code: false
stages:
  - transfer: {init: topology, temperature: 1.0, target_norm: false, seed: 0, leaveout: {fraction: 0.1}}
  - mlm: {dataset: nfcorpus, steps: 10, mask_rate: 0.15, max_length: 64, lr: 5.0e-5, seed: 0}
  - calibrate: {dataset: nfcorpus, docs: 100, cut_percent: 60}
data: {format: triples, path: triples.tsv}
loss: {ranking: infonce, temperature: 1.0, in_batch_negatives: true, lambda_q: 0.001, lambda_d: 0.001}
training:
  steps: 6
  batch_size: 4
  lr: 5.0e-5
  max_length_query: 16
  max_length_doc: 64
  dropout: 0.1
  dtype: float32
  cpu_threads: 2
  seed: 42
"""

RECIPE_CASES = [
    ("trust_remote_code: false", "trust_remote_code: no", 2, "got 'no'; use true or false"),
    ("trust_remote_code: false", "trust_remote_code: 1", 2, "use true or false"),
    ("init: topology", "init: topolgy", 4, "init must be one of topology, subword-mean, mean, random"),
    ("temperature: 1.0, target_norm", "temperature: 0, target_norm", 4, "transfer.temperature must be a number > 0"),
    ("target_norm: false", "target_norm: 'no'", 4, "use true or false"),
    ("seed: 0, leaveout", "seed: -1, leaveout", 4, "transfer.seed must be an integer >= 0"),
    ("fraction: 0.1", "fraction: 1", 4, "leaveout.fraction must be a number in (0, 1)"),
    ("mask_rate: 0.15", "mask_rate: 0", 5, "mlm.mask_rate must be a number in (0, 1]"),
    ("max_length: 64", "max_length: 4", 5, "mlm.max_length must be an integer in [8, 8192]"),
    ("steps: 10", "steps: 0", 5, "mlm.steps must be an integer >= 1"),
    ("docs: 100", "docs: 0", 6, "calibrate.docs must be an integer in [1, 10000000]"),
    ("cut_percent: 60", "cut_percent: 100", 6, "calibrate.cut_percent must be a number in (0, 100)"),
    ("cut_percent: 60", "target_terms: -3", 6, "calibrate.target_terms must be a number in (0, 1000000]"),
    ("path: triples.tsv}", "path: triples.tsv, negatives: -1}", 7, "data.negatives must be an integer in [0, 255]"),
    ("temperature: 1.0, in_batch", "temperature: 0, in_batch", 8, "loss.temperature must be a number > 0"),
    ("in_batch_negatives: true", "in_batch_negatives: yes", 8, "use true or false"),
    ("lambda_d: 0.001", "lambda_d: -1", 8, "loss.lambda_d must be a number >= 0"),
    ("steps: 6", "steps: 0", 10, "training.steps must be an integer >= 1"),
    ("steps: 6", "steps: -1", 10, "training.steps must be an integer >= 1"),
    ("steps: 6", "steps: 1.5", 10, "training.steps must be an integer"),
    ("batch_size: 4", "batch_size: 0", 11, "training.batch_size must be an integer in [1, 4096]"),
    ("lr: 5.0e-5\n  max", "lr: 0\n  max", 12, "training.lr must be a number > 0"),
    ("max_length_doc: 64", "max_length_doc: 0", 14, "training.max_length_doc must be an integer in [1, 8192]"),
    ("dropout: 0.1", "dropout: 1.5", 15, "training.dropout must be a number in [0, 1]"),
    ("dtype: float32", "dtype: float16", 16, "training.dtype must be one of float32, bfloat16"),
    ("cpu_threads: 2", "cpu_threads: 0", 17, "training.cpu_threads must be an integer >= 1"),
    ("seed: 42", "seed: -1", 18, "training.seed must be an integer >= 0"),
]

# (module, arguments that are valid except for one numeric option, fragment of argparse's message)
OPTION_CASES = [
    ("transfer", ["--model", "m", "--output", "o", "--temperature", "-1"], "--temperature: expected a number > 0"),
    ("transfer", ["--model", "m", "--output", "o", "--temperature", "nan"], "--temperature: expected a number > 0"),
    ("transfer", ["--model", "m", "--output", "o", "--seed", "-1"], "--seed: expected an integer >= 0"),
    ("transfer", ["--model", "m", "--output", "o", "--chunk-size", "0"], "--chunk-size: expected an integer >= 1"),
    ("transfer", ["--model", "m", "--output", "o", "--leaveout", "1"], "--leaveout: expected a number in (0, 1)"),
    ("transfer", ["--model", "m", "--output", "o", "--leaveout", "0"], "--leaveout: expected a number in (0, 1)"),
    ("transfer", ["--model", "m", "--output", "o", "--leaveout-seed", "x"], "--leaveout-seed: expected an integer >= 0"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--limit", "0"],
     "--limit: expected an integer in [1, 10000000]"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--cut-percent", "150"],
     "--cut-percent: expected a number in (0, 100)"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--cut-percent", "0"],
     "--cut-percent: expected a number in (0, 100)"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--target-terms", "0"],
     "--target-terms: expected a number in (0, 1000000]"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--max-length-doc", "0"],
     "--max-length-doc: expected an integer in [1, 8192]"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--max-sample", "0"],
     "--max-sample: expected an integer in [1, 50000]"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--batch-size", "0"],
     "--batch-size: expected an integer in [1, 4096]"),
    ("calibrate", ["--model", "m", "--dataset", "d", "--output", "o", "--seed", "-1"], "--seed: expected an integer >= 0"),
    ("mlm", ["--model", "m", "--dataset", "d", "--output", "o", "--steps", "0"], "--steps: expected an integer >= 1"),
    ("mlm", ["--model", "m", "--dataset", "d", "--output", "o", "--mask-rate", "1.5"],
     "--mask-rate: expected a number in (0, 1]"),
    ("mlm", ["--model", "m", "--dataset", "d", "--output", "o", "--lr", "0"], "--lr: expected a number > 0"),
    ("mlm", ["--model", "m", "--dataset", "d", "--output", "o", "--batch-size", "0"],
     "--batch-size: expected an integer in [1, 4096]"),
    ("mlm", ["--model", "m", "--dataset", "d", "--output", "o", "--warmup-steps", "-1"],
     "--warmup-steps: expected an integer >= 0"),
    ("mlm", ["--model", "m", "--dataset", "d", "--output", "o", "--limit", "0"], "--limit: expected an integer >= 1"),
    ("bench", ["encode", "--limit", "0"], "--limit: expected an integer >= 1"),
    ("bench", ["encode", "--batch-size", "0"], "--batch-size: expected an integer in [1, 4096]"),
    ("bench", ["encode", "--max-length-doc", "0"], "--max-length-doc: expected an integer in [1, 8192]"),
    ("bench", ["encode", "--repeat", "0"], "--repeat: expected an integer >= 1"),
    ("train", ["--recipe", "r", "--gpu-tflops", "0"], "--gpu-tflops: expected a number > 0"),
]

# train defines torch.nn.Module subclasses at module level, so it still imports torch.
def edited(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def assert_one_line_error(error: VtreproError, path: Path, line: int, fragment: str) -> None:
    message = str(error)
    assert message.startswith(f"{path}:{line}: ") and "\n" not in message, message
    assert fragment in message, message


def assert_cli_error(result: tuple[int, str, str], *fragments: str) -> None:
    code, _, stderr = result
    assert_one_error_line(code, stderr, *fragments)


def test_the_catalogue_bases_are_valid(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.k == 1000 and spec.conditions[0].trust_remote_code is False
    transfer = spec.conditions[2].stages[0]
    assert spec.conditions[2].model == "splade-tiny"
    assert {key: transfer.options.to_dict()[key] for key in ("init", "temperature", "target_norm", "seed")} == {
        "init": "topology", "temperature": 1.0, "target_norm": False, "seed": 0}
    assert load_recipe(tmp_path / "recipe.yaml").stages[0].options.to_dict()["init"] == "topology"


def test_trust_remote_code_true_stays_true(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(edited(SPEC, "trust_remote_code: false", "trust_remote_code: true"))
    assert load_spec(tmp_path / "spec.yaml").conditions[0].trust_remote_code is True


@pytest.mark.parametrize(("old", "new", "line", "fragment"), SPEC_CASES, ids=[case[1] for case in SPEC_CASES])
def test_invalid_spec_value_rejected_at_load(tmp_path: Path, old: str, new: str, line: int, fragment: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(edited(SPEC, old, new))
    with pytest.raises(VtreproError) as error:
        load_spec(path)
    assert_one_line_error(error.value, path, line, fragment)


DRY_RUN_CASES = [case for case in SPEC_CASES if case[1] in ("[ndcg@10, recall@100, ndcg@0]", "k: 0", "trust_remote_code: no")]


@pytest.mark.parametrize(("old", "new", "line", "fragment"), DRY_RUN_CASES, ids=["ndcg@0", "k: 0", "trust_remote_code: no"])
def test_invalid_spec_value_rejected_by_dry_run(tmp_path: Path, old: str, new: str, line: int, fragment: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(edited(SPEC, old, new))
    result = run_module("vtrepro", "regress", "--spec", path, "--dry-run", "--runs", tmp_path / "runs", capsys=capsys)
    assert_cli_error(result, f"{path}:{line}: ", fragment)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("old", "new", "line", "fragment"), RECIPE_CASES, ids=[case[1] for case in RECIPE_CASES])
def test_invalid_recipe_value_rejected_at_load(tmp_path: Path, old: str, new: str, line: int, fragment: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(edited(RECIPE, old, new))
    with pytest.raises(VtreproError) as error:
        load_recipe(path)
    assert_one_line_error(error.value, path, line, fragment)


def test_invalid_recipe_value_rejected_by_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(edited(RECIPE, "init: topology", "init: topolgy"))
    result = run_module("vtrepro", "train", "--recipe", path, "--dry-run", "--output", tmp_path / "run", capsys=capsys)
    assert_cli_error(result, f"{path}:4: ", "init must be one of topology")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("module", "args", "fragment"), OPTION_CASES,
                         ids=[f"{case[0]} {' '.join(case[1][-2:])}" for case in OPTION_CASES])
def test_numeric_option_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                     module: str, args: list[str], fragment: str) -> None:
    monkeypatch.chdir(tmp_path)
    main = command_functions(module)[0]
    with pytest.raises(SystemExit) as exited:
        main(args)
    stderr = capsys.readouterr().err
    assert exited.value.code == 2 and fragment in stderr.rstrip().splitlines()[-1], stderr
    assert not any(tmp_path.iterdir())


def test_numeric_option_out_of_range_from_the_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_module("vtrepro", "calibrate", "--model", "m", "--dataset", "d", "--output", "o", "--cut-percent", "150",
                        capsys=capsys)
    assert_cli_error(result, "argument --cut-percent: expected a number in (0, 100)")
    assert not (tmp_path / "o").exists()
