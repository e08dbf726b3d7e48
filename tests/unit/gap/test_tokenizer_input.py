"""A tokenizer folder from others is bounded before it is read, and every bad input is one line, exit 2, with
nothing written outside --output."""
from __future__ import annotations

import json
import os

import pytest

from conftest import assert_one_error_line
from helpers import run_command
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
