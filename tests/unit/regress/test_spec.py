"""Spec validation names the file and line; recording keeps comments and order."""
import textwrap

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.core.shipped import SHIPPED_DIR
from vtrepro.regress.spec import find_spec, load_spec, record_observed
from vtrepro.search.runs import Bm25Options

VALID = """\
# a comment that must survive --record
description: test spec
defaults:
  metrics: [ndcg@10, recall@100]
conditions:
  bm25-flat:  # inline comment
    retrieval: bm25
    datasets:
      scifact:
        index: {documents: 5183, total_terms: null}
        scores: {ndcg@10: 0.6789, recall@100: null}
        reference: {ndcg@10: 0.6789}
  tiny:
    model: splade-tiny
    encoder: {max_length_doc: 256}
    quantization: {scale: 100, rounding: half-up}
    datasets:
      nfcorpus:
"""


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_valid_spec_loads_with_defaults(tmp_path):
    spec = load_spec(write(tmp_path, VALID))
    assert spec.name == "spec" and spec.metrics == ("ndcg@10", "recall@100") and spec.k == 1000
    bm25, tiny = spec.conditions
    assert bm25.retrieval == "bm25" and bm25.bm25 == Bm25Options(k1=0.9, b=0.4)
    assert bm25.datasets[0].scores == {"ndcg@10": 0.6789, "recall@100": None}
    assert tiny.retrieval == "impact" and tiny.encoder.max_length_doc == 256 and tiny.encoder.max_length_query == 64
    assert tiny.quantization.rounding == "half-up" and tiny.datasets[0].scores == {}


@pytest.mark.parametrize(
    "broken, message",
    [
        (VALID.replace("    retrieval: bm25\n", "    retrieval: bm25\n    modle: x\n"), r"spec\.yaml:8: unknown key 'modle'"),
        (VALID.replace("{ndcg@10: 0.6789, recall@100: null}", "{ndcg@10: high}"), r"spec\.yaml:11: .*must be a number"),
        (VALID.replace("{ndcg@10: 0.6789}", "{map@100: 0.1}"), r"spec\.yaml:12: unknown key 'map@100'"),
        (VALID.replace("rounding: half-up", "rounding: nearest"),
         r"spec\.yaml:16: .*rounding must be one of half-even, half-up, truncate, got 'nearest'"),
        (VALID.replace("    model: splade-tiny\n", ""), r"spec\.yaml:13: .*needs 'retrieval: bm25', a 'model', a 'transfer'"),
        (VALID.replace("    model: splade-tiny\n", "    model: splade-tiny\n    train: splade_tiny_nfcorpus\n"),
         r"spec\.yaml:15: .*takes one of 'model', 'transfer' and 'train', not model and train"),
        (VALID.replace("    model: splade-tiny\n", "    train: splade_tiny_nfcorpus\n    calibrate: {dataset: scifact}\n"),
         r"spec\.yaml:15: .*'train' recipe calibrates in its own stages"),
        (VALID.replace("    model: splade-tiny\n", "    train: [a, b]\n"), r"spec\.yaml:14: .*train must be a recipe file"),
        (VALID.replace("[ndcg@10, recall@100]", "[ndcg@ten]"), r"spec\.yaml:4: defaults\.metrics: unknown metric 'ndcg@ten'"),
        (VALID.replace("  bm25-flat:  # inline comment", "  bm25-flat: [oops"), r"spec\.yaml:\d+: malformed YAML"),
        ("- just\n- a list\n", r"spec\.yaml:1: a spec must be a YAML mapping"),
        (VALID.replace("  metrics: [ndcg@10, recall@100]\n", "  metrics: [ndcg@10, recall@100]\n  tolerance: {scores: -1}\n"),
         r"spec\.yaml:5: defaults\.tolerance\.scores must be a number >= 0"),
        (VALID.replace("    model: splade-tiny\n", "    model: splade-tiny\n    tolerance: {total: 0.1}\n"),
         r"spec\.yaml:15: unknown key 'total' in condition 'tiny'\.tolerance"),
        (VALID.replace("      nfcorpus:\n", "      nfcorpus:\n        vectors: {corpus: abc}\n"),
         r"spec\.yaml:19: .*vectors\.corpus must be a 64-digit lowercase hex sha256"),
        (VALID.replace("        reference: {ndcg@10: 0.6789}\n",
                       "        reference: {ndcg@10: 0.6789}\n        vectors: {corpus: null}\n"),
         r"spec\.yaml:13: .*BM25 runs have no vectors"),
        (VALID.replace("      nfcorpus:\n", "      nfcorpus:\n        encoded: {corpus: nowhere, queries: q.jsonl}\n"),
         r"spec\.yaml:19: .*encoded\.corpus: .*nowhere does not exist"),
        (VALID.replace("{max_length_doc: 256}", "{dtype: int8}"),
         r"spec\.yaml:15: .*encoder\.dtype must be one of float32, bfloat16, float16, got 'int8'"),
        (VALID.replace("{max_length_doc: 256}", "{projection: sparse}"), r"spec\.yaml:15: .*encoder\.projection must be one of"),
        (VALID.replace("    model: splade-tiny\n", "    model: splade-tiny\n    agrees_with: bm25-flat\n"),
         r"spec\.yaml:15: condition 'tiny'\.agrees_with: 'bm25-flat' is not an impact condition listed before this one "
         r"\(those are: none\)"),
        (VALID.replace("    retrieval: bm25\n", "    retrieval: bm25\n    agrees_with: tiny\n"),
         r"spec\.yaml:8: condition 'bm25-flat'\.agrees_with: only impact conditions have vectors"),
    ],
)
def test_bad_specs_name_file_and_line(tmp_path, broken, message):
    with pytest.raises(VtreproError, match=message) as error:
        load_spec(write(tmp_path, broken))
    assert "\n" not in str(error.value)


TRANSFER = """\
conditions:
  vt:
    transfer:
      source: splade-tiny
      reference: sentence-transformers/all-MiniLM-L6-v2
      init: topology
      temperature: 0.5
      leaveout: {fraction: 0.1}
    calibrate: {dataset: scifact, docs: 500, target_terms: 286}
    datasets:
      scifact:
"""


def test_tolerances_inherit_from_defaults_and_fingerprints_load(tmp_path):
    text = VALID.replace("  metrics: [ndcg@10, recall@100]\n", "  metrics: [ndcg@10, recall@100]\n  tolerance: {scores: 0.001}\n")
    text = text.replace("    model: splade-tiny\n", "    model: splade-tiny\n    tolerance: {total_terms: 1.0e-5}\n")
    text = text.replace("      nfcorpus:\n", f"      nfcorpus:\n        vectors: {{corpus: {'ab' * 32}, queries: null}}\n")
    bm25, tiny = load_spec(write(tmp_path, text)).conditions
    assert (bm25.tolerance.scores, bm25.tolerance.total_terms) == (0.001, 1e-6)
    assert (tiny.tolerance.scores, tiny.tolerance.total_terms) == (0.001, 1e-5)
    assert tiny.datasets[0].vectors == {"corpus": "ab" * 32, "queries": None}


def test_transfer_and_calibrate_blocks(tmp_path):
    condition = load_spec(write(tmp_path, TRANSFER)).conditions[0]
    assert condition.retrieval == "impact" and condition.model == "splade-tiny"
    transfer, calibrate = condition.stages
    assert transfer.name == "transfer" and transfer.options.to_dict() == {
        "target_tokenizer": "bert-base-uncased", "reference": "sentence-transformers/all-MiniLM-L6-v2",
        "init": "topology", "temperature": 0.5, "similarity": "cosine", "preset": "vtrepro", "matching": None,
        "keep_norm": None, "bias_statistics": None, "target_norm": None, "seed": 0, "leaveout": {"fraction": 0.1, "seed": 0}}
    assert calibrate.name == "calibrate" and calibrate.options.to_dict() == {
        "preset": "vtrepro", "dataset": "scifact", "corpus": None, "docs": 500, "cut_percent": None,
        "target_terms": 286.0, "max_length": 512, "max_sample": 10_000, "batch_size": 32, "seed": 0}
    broken = TRANSFER.replace("target_terms: 286", "target_terms: 286, cut_percent: 60")
    with pytest.raises(VtreproError, match=r"spec\.yaml:9: .*not both"):
        load_spec(write(tmp_path, broken))
    with pytest.raises(VtreproError, match=r"spec\.yaml:4: unknown key 'sorce'"):
        load_spec(write(tmp_path, TRANSFER.replace("source:", "sorce:")))


def test_a_half_precision_condition_is_its_own_tier_measured_against_float32(tmp_path):
    text = VALID + "  tiny-bfloat16:\n    model: splade-tiny\n    encoder: {dtype: bfloat16, projection: screened}\n" \
                   "    agrees_with: tiny\n    tolerance: {scores: 0.002}\n    datasets:\n      nfcorpus:\n"
    tiny, half = load_spec(write(tmp_path, text)).conditions[1:]
    assert (tiny.encoder.dtype, tiny.encoder.projection, tiny.agrees_with) == ("float32", "auto", None)
    assert (half.encoder.dtype, half.encoder.projection, half.agrees_with) == ("bfloat16", "screened", "tiny")
    assert half.tolerance.scores == 0.002


def test_query_encoder_option(tmp_path):
    spec = VALID.replace("    model: splade-tiny\n", "    model: splade-tiny\n    query_encoder: idf\n")
    assert load_spec(write(tmp_path, spec)).conditions[1].query_encoder == "idf"
    with pytest.raises(VtreproError, match=r"spec\.yaml:15: .*query_encoder must be one of splade, idf"):
        load_spec(write(tmp_path, spec.replace("query_encoder: idf", "query_encoder: bm25")))


def test_query_encoder_model_is_the_old_spelling_of_splade(tmp_path, caplog):
    spec = VALID.replace("    model: splade-tiny\n", "    model: splade-tiny\n    query_encoder: model\n")
    assert load_spec(write(tmp_path, spec)).conditions[1].query_encoder == "splade"
    assert "spec.yaml:15: query_encoder: model is deprecated; write splade" in caplog.text


def test_missing_spec_is_an_error():
    with pytest.raises(VtreproError, match="spec 'no_such_spec' not found"):
        find_spec("no_such_spec")


def test_shipped_specs_are_found_by_name_and_valid():
    from vtrepro.training.recipe import load_recipe

    assert load_spec("beir_bm25_flat").conditions[0].name == "bm25-flat"
    for path in sorted(SHIPPED_DIR.glob("*.yaml")):
        for condition in load_spec(path).conditions:
            if condition.train:  # the recipes that specs train from are valid too
                assert load_recipe(condition.train).name == condition.train


def test_record_keeps_comments_and_order(tmp_path):
    path = write(tmp_path, VALID)
    record_observed(path, {
        ("bm25-flat", "scifact"): {"scores": {"ndcg@10": 0.6789, "recall@100": 0.9253},
                                   "index": {"documents": 5183, "total_terms": 838128}},
        ("tiny", "nfcorpus"): {"scores": {"ndcg@10": 0.25, "recall@100": 0.2}, "index": {"documents": 3633, "total_terms": 9}},
    })
    text = path.read_text()
    assert "# a comment that must survive --record" in text and "# inline comment" in text
    assert "scores: {ndcg@10: 0.6789, recall@100: 0.9253}" in text
    assert "index: {documents: 5183, total_terms: 838128}" in text
    assert text.index("bm25-flat") < text.index("tiny")
    spec = load_spec(path)
    assert spec.conditions[1].datasets[0].scores == {"ndcg@10": 0.25, "recall@100": 0.2}
    assert spec.conditions[0].datasets[0].reference == {"ndcg@10": 0.6789}
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("where", ["defaults", "condition"])
def test_no_spec_chooses_an_approximate_engine_for_a_pinned_figure(tmp_path, where):
    """Every pinned figure is searched exactly (Lucene): a spec has no engine key, so 'engine: seismic' (an
    approximate engine, measured against exact but never pinned) is an unknown key at its line."""
    text = (VALID.replace("  metrics: [ndcg@10, recall@100]\n", "  metrics: [ndcg@10, recall@100]\n  engine: seismic\n")
            if where == "defaults" else VALID.replace("    model: splade-tiny\n", "    model: splade-tiny\n    engine: bmp\n"))
    with pytest.raises(VtreproError, match=r"unknown key 'engine'"):
        load_spec(write(tmp_path, text))
