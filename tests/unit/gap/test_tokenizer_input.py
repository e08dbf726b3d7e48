"""A tokenizer folder from others is bounded before it is read, and every bad input is one line, exit 2, with
nothing written outside --output."""
from __future__ import annotations

import json
import os

import pytest

from helpers import assert_one_error_line, run_command
from vtrepro.gap.command import main as gap
from vtrepro.gap.vocabularies import MAX_ENTRIES


def _census(capsys, tmp_path, tokenizer: str) -> tuple[int, str]:
    code, _, err = run_command(gap, ["census", "--tokenizer", tokenizer, "--output", str(tmp_path / "out")], capsys)
    return code, err


def _folder(tmp_path, name: str = "tok"):
    folder = tmp_path / name
    folder.mkdir()
    return folder


def test_an_unknown_name_is_one_line(tmp_path, capsys):
    assert_one_error_line(*_census(capsys, tmp_path, "./no-such-tokenizer"), "no-such-tokenizer", "built-in")
    assert not (tmp_path / "out").exists()


def test_a_folder_without_a_vocabulary_is_one_line(tmp_path, capsys):
    folder = _folder(tmp_path)
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "no tokenizer.json or vocab.txt")


def test_a_fifo_tokenizer_json_is_refused_unopened(tmp_path, capsys):
    folder = _folder(tmp_path)
    os.mkfifo(folder / "tokenizer.json")
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "tokenizer.json", "not a regular file")


def test_a_link_leading_out_of_the_folder_is_refused(tmp_path, capsys):
    folder = _folder(tmp_path)
    (folder / "tokenizer.json").symlink_to("/dev/zero")
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "tokenizer.json", "outside the folder")


def test_deep_json_is_one_line(tmp_path, capsys):
    folder = _folder(tmp_path)
    (folder / "tokenizer.json").write_text("[" * 100_000)
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "tokenizer.json", "nested deeper")


def test_a_tokenizer_json_without_a_model_vocabulary_is_one_line(tmp_path, capsys):
    folder = _folder(tmp_path)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "no model vocabulary")


def test_too_many_entries_are_refused(tmp_path, capsys):
    folder = _folder(tmp_path)
    (folder / "vocab.txt").write_text("".join(f"w{index}\n" for index in range(MAX_ENTRIES + 1)))
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "vocab.txt", "more than the")


def test_a_vocab_txt_folder_is_counted(tmp_path, capsys):
    folder = _folder(tmp_path)
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n##the\nThe\n")
    code, err = _census(capsys, tmp_path, str(folder))
    assert code == 0, err
    figures = json.loads((tmp_path / "out" / "census.json").read_text())["tokenizers"][0]
    assert figures["variants"]["position_twins"] == 1 and figures["variants"]["case_variants"] == 1
    assert sorted(os.listdir(folder)) == ["vocab.txt"]  # nothing written beside the input


def test_the_output_must_not_be_the_input(tmp_path, capsys):
    folder = _folder(tmp_path)
    (folder / "vocab.txt").write_text("a\nb\n")
    code, _, err = run_command(gap, ["census", "--tokenizer", str(folder), "--output", str(folder)], capsys)
    assert_one_error_line(code, err)


@pytest.mark.parametrize("part", ["corpus", "bm25", "integrity"])
def test_a_dataset_without_test_qrels_is_one_line(tmp_path, capsys, part):
    dataset = tmp_path / "beir" / "toy"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "apple"}) + "\n")
    (dataset / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "apple"}) + "\n")
    (dataset / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    code, _, err = run_command(gap, [part, "--tokenizer", "gpt2-bpe", "--dataset", str(dataset),
                                     "--output", str(tmp_path / "out")], capsys)
    assert_one_error_line(code, err, "test")
    assert not (tmp_path / "out").exists()


def test_a_vocabulary_only_built_in_says_so_for_corpus_figures(tmp_path, capsys, data_dir):
    code, _, err = run_command(gap, ["corpus", "--tokenizer", "clip-bpe", "--dataset", "scifact", "--data-dir",
                                     str(data_dir), "--output", str(tmp_path / "out")], capsys)
    assert_one_error_line(code, err, "clip-bpe", "vocabulary only")


@pytest.mark.slow
def test_a_model_whose_tokenizer_is_another_is_one_line(tmp_path, capsys, data_dir, models_dir):
    code, _, err = run_command(gap, ["integrity", "--tokenizer", "gpt2-bpe", "--model", "splade-tiny", "--model-dir",
                                     str(models_dir), "--dataset", "nfcorpus", "--data-dir", str(data_dir),
                                     "--output", str(tmp_path / "out")], capsys)
    assert_one_error_line(code, err, "--model splade-tiny", "does not spell the vocabulary")
    assert not (tmp_path / "out").exists()


def _tokenizer_json(folder, normalizer=None, pre_tokenizer=None, vocab=None):
    """A small WordLevel tokenizer.json with the given normalizer and pre-tokenizer."""
    vocab = vocab or {"[UNK]": 0, "a": 1, "apple": 2, "Apple": 3}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer or {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}))
    return folder


def _toy_dataset(root, text="a apple Apple"):
    dataset = root / "toy"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": text}) + "\n")
    (dataset / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "apple"}) + "\n")
    (dataset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return dataset


def test_a_normalizer_that_lengthens_text_is_refused_unrun(tmp_path, capsys):
    grow = {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "a"}, "content": "aaaaaaaaaa"}]
            * 7}
    folder = _tokenizer_json(tmp_path / "grow", normalizer=grow)
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "tokenizer.json", "Replace normalizer")


def test_a_regex_past_its_match_limit_is_one_line(tmp_path, capsys):
    split = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}
    folder = _tokenizer_json(tmp_path / "slow", pre_tokenizer=split)
    dataset = _toy_dataset(tmp_path, "a" * 5000 + "b")
    code, _, err = run_command(gap, ["corpus", "--tokenizer", str(folder), "--dataset", str(dataset),
                                     "--output", str(tmp_path / "out")], capsys)
    assert_one_error_line(code, err, "the tokenizers library failed")  # Onig's retry limit: a Rust panic


def test_names_that_climb_out_of_the_output_are_refused(tmp_path, capsys):
    folder = _tokenizer_json(tmp_path / "tok")
    dataset = _toy_dataset(tmp_path / "ds")
    (folder / "sub").mkdir()
    (dataset / "sub").mkdir()
    code, _, err = run_command(gap, ["bm25", "--tokenizer", str(folder / "sub" / ".."),
                                     "--dataset", str(dataset / "sub" / ".."),
                                     "--output", str(tmp_path / "outs" / "o")], capsys)
    assert_one_error_line(code, err, "cannot name the study's output folders")
    assert not (tmp_path / "outs" / "raw").exists()


def test_the_output_inside_the_model_folder_and_a_full_output_are_refused_before_work(tmp_path, capsys, splade_tiny):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("keep")
    code, _, err = run_command(gap, ["census", "--tokenizer", "gpt2-bpe", "--output", str(full)], capsys)
    assert_one_error_line(code, err, "not empty")
    assert (full / "keep.txt").read_text() == "keep"
    code, _, err = run_command(gap, ["integrity", "--tokenizer", str(splade_tiny), "--model", str(splade_tiny),
                                     "--dataset", str(_toy_dataset(tmp_path)), "--output", str(splade_tiny / "out")],
                               capsys)
    assert_one_error_line(code, err)
    assert not (splade_tiny / "out").exists()


def test_a_vocab_txt_line_not_utf8_or_repeated_is_one_line_naming_it(tmp_path, capsys):
    folder = _folder(tmp_path, "bad")
    (folder / "vocab.txt").write_bytes(b"[PAD]\nappl\xffe\n")
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "vocab.txt:2", "UTF-8")
    (folder / "vocab.txt").write_text("[PAD]\napple\napple\n")
    assert_one_error_line(*_census(capsys, tmp_path, str(folder)), "vocab.txt:3", "also line 2")


def test_an_unmarked_vocabulary_merges_case_alone(tmp_path, capsys):
    folder = _tokenizer_json(tmp_path / "words", vocab={"[UNK]": 0, "é": 1, "É": 2, "apple": 3})
    code, err = _census(capsys, tmp_path, str(folder))
    assert code == 0, err
    figures = json.loads((tmp_path / "out" / "census.json").read_text())["tokenizers"][0]
    assert figures["scheme"] == "unmarked" and figures["variants"]["marked"] is None
    assert figures["variants"]["case_variants"] == 1  # É beside é
