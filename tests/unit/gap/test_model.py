"""The gap in a model's vectors: duplicate activation, dead terms and density, counted on hand-made runs whose
every figure is known, and the run's bad input as one line."""
from __future__ import annotations

import json

import pytest

from helpers import assert_one_error_line
from vtrepro.gap.command import main as gap
from vtrepro.gap.model import model_figures
from vtrepro.gap.units import BYTE_LEVEL
from vtrepro.gap.vocabularies import Vocabulary

ENTRIES = ["<s>", "apple", "Ġapple", "ĠApple", "pie", "Ġpie", "Ġcrumble", "Ġtart"]


def _vocabulary() -> Vocabulary:
    return Vocabulary("hand", "hand-made", BYTE_LEVEL, ENTRIES, frozenset({0}))


def _run(root, documents: list[dict], queries: list[dict]):
    (root / "vectors").mkdir(parents=True)
    (root / "vectors" / "part-00000.jsonl").write_text(
        "".join(json.dumps({"id": f"d{n}", "contents": "", "vector": vector}) + "\n"
                for n, vector in enumerate(documents)), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"id": f"q{n}", "vector": vector}) + "\n"
                                                for n, vector in enumerate(queries)), encoding="utf-8")
    return root


@pytest.fixture
def wordpiece(tmp_path):
    """A small lowercased WordPiece tokenizer folder (vocab.txt): no ``Ġ`` entry in it."""
    folder = tmp_path / "wordpiece"
    folder.mkdir()
    (folder / "vocab.txt").write_text("[PAD]\napple\n##apple\npie\n", encoding="utf-8")
    return folder


def test_duplicates_dead_terms_and_density_are_counted_exactly(tmp_path):
    run = _run(tmp_path / "run", [{"apple": 10, "Ġapple": 30, "ĠApple": 20, "Ġpie": 40},   # apple thrice
                                  {"Ġpie": 5, "pie": 5, "Ġcrumble": 90},                    # pie twice
                                  {"Ġcrumble": 7}],
               [{"Ġapple": 3}, {"apple": 1, "Ġapple": 1}])
    figures = model_figures(run, _vocabulary())
    docs = figures["duplicates_documents"]
    assert (docs["vectors"], docs["with_duplicates"], docs["duplicate_share"]) == (3, 2, round(2 / 3, 4))
    mass = 10 + 30 + 20 + 40 + 5 + 5 + 90 + 7
    assert docs["redundant_mass"] == round((10 + 20 + 5) / mass, 4)  # all forms beyond the strongest of a unit
    assert docs["duplicate_group_mass"] == round((60 + 10) / mass, 4)
    assert figures["duplicates_queries"]["duplicate_share"] == 0.5
    # <s> is a special; Ġtart alone of its unit is dead; nothing else is
    assert figures["dead"] == {"entries": 7, "dead": 1, "dead_multi_form": 0, "dead_single_form": 1,
                               "dead_shadowed": 0}
    assert figures["density_documents"]["mean"] == round(8 / 3, 4) and figures["density_documents"]["p50"] == 3.0
    assert figures["top_duplicates"][0]["unit"] in {"apple", "pie"}
    # FLOPS: p_d(Ġapple) 1/3 x p_q 1, p_d(apple) 1/3 x p_q 1/2
    assert figures["flops"] == round(1 / 3 + 1 / 6, 4)


def test_a_dead_form_whose_unit_lives_elsewhere_is_shadowed(tmp_path):
    run = _run(tmp_path / "run", [{"Ġapple": 1, "Ġpie": 1, "Ġcrumble": 1, "Ġtart": 1}], [])
    dead = model_figures(run, _vocabulary())["dead"]
    assert dead == {"entries": 7, "dead": 3, "dead_multi_form": 3, "dead_single_form": 0, "dead_shadowed": 3}


def test_a_term_outside_the_vocabulary_is_one_line(tmp_path, capsys, wordpiece):
    run = _run(tmp_path / "run", [{"ĠApple": 3}], [])
    code = gap(["model", "--vectors", str(run), "--tokenizer", str(wordpiece), "--output", str(tmp_path / "out")])
    assert_one_error_line(code, capsys.readouterr().err, "part-00000.jsonl:1", "does not match", "--tokenizer")


def test_a_manifest_of_another_vocabulary_is_one_line(tmp_path, capsys, wordpiece):
    run = _run(tmp_path / "run", [{"apple": 3}], [])
    (run / "manifest.json").write_text(json.dumps({"model": "x", "settings": {"vocabulary_sha256": "0" * 64}}))
    code = gap(["model", "--vectors", str(run), "--tokenizer", str(wordpiece), "--output", str(tmp_path / "out")])
    assert_one_error_line(code, capsys.readouterr().err, "manifest.json", "another vocabulary")


@pytest.mark.parametrize("tokenizers", [["a", "b", "c"]])
def test_tokenizers_must_pair_with_runs(tmp_path, capsys, tokenizers):
    run = _run(tmp_path / "run", [{"apple": 3}], [])
    argv = ["model", "--vectors", str(run), "--vectors", str(run), "--output", str(tmp_path / "out")]
    code = gap(argv + [arg for name in tokenizers for arg in ("--tokenizer", name)])
    assert_one_error_line(code, capsys.readouterr().err, "3 --tokenizer for 2 runs")


def test_a_huge_queries_file_is_refused_before_it_is_read(tmp_path, capsys, wordpiece, monkeypatch):
    import vtrepro.gap.model as model

    run = _run(tmp_path / "run", [{"apple": 3}], [{"apple": 1}])
    monkeypatch.setattr(model, "MAX_VECTOR_FILE_BYTES", 10)
    code = gap(["model", "--vectors", str(run), "--tokenizer", str(wordpiece), "--output", str(tmp_path / "out")])
    assert_one_error_line(code, capsys.readouterr().err, "bytes, more than the 10")
