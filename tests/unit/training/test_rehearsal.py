"""Rehearsal stand-ins: data files that the real readers read, models of the named family, and one line for
what a rehearsal cannot stand in for. The whole rehearsals of every shipped spec and recipe are in
tests/integration/test_rehearsals.py."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_command, write_recipe
from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import load_dataset
from vtrepro.data.standins import Collection, write_beir_folder, write_hard_negatives, write_teacher_scores, write_tsv
from vtrepro.regress.command import main as regress
from vtrepro.training.command import train_main as train
from vtrepro.training.examples import msmarco_training_set
from vtrepro.training.rehearsal import Rehearsal, rehearsal_recipe
from vtrepro.training.standin_models import standin_family, write_standin_model


def test_a_standin_beir_folder_reads_as_beir(tmp_path: Path) -> None:
    folder = write_beir_folder(tmp_path / "beir" / "nq", "nq", ("test", "train"))
    dataset = load_dataset("nq", tmp_path)
    assert dataset.path == folder and len(dataset.corpus()) == 32
    test, train_split = dataset.qrels("test"), dataset.qrels("train")
    assert len(test) == len(train_split) == 8 and not set(test) & set(train_split)
    assert set(dataset.queries("test")) == set(test)


def test_standin_msmarco_files_read_as_the_published_ones(tmp_path: Path) -> None:
    """The four MS MARCO files agree on their ids, in the layouts the real readers take."""
    collection = Collection.make("msmarco")
    negatives = write_hard_negatives(tmp_path / "hn.jsonl.gz", collection, "msmarco")
    data = msmarco_training_set(negatives, write_tsv(tmp_path / "collection.tsv", collection.documents),
                                write_tsv(tmp_path / "queries.train.tsv", collection.queries), negatives=1)
    assert data.summary["examples"] == 8 and data.summary["queries"] == 8
    first = json.loads(gzip.decompress(negatives.read_bytes()).splitlines()[0])
    assert set(first) == {"qid", "pos", "neg"} and isinstance(first["qid"], int)
    teacher = write_teacher_scores(tmp_path / "scores.pkl.gz", collection)
    assert gzip.decompress(teacher.read_bytes())[:2] == b"\x80\x04"  # a protocol-4 pickle, gzip'd, as published


@pytest.mark.slow  # builds a model with a 30,522-token vocabulary: over 1.5 s
def test_a_standin_model_is_its_family_scaled_down(tmp_path: Path) -> None:
    from transformers import AutoConfig

    described = write_standin_model("bert-base-uncased", tmp_path / "bert", tmp_path / "tokenizers").describe()
    config = AutoConfig.from_pretrained(tmp_path / "bert")
    assert (config.model_type, config.num_hidden_layers, config.vocab_size) == ("bert", 2, 30522)
    assert "BERT-uncased WordPiece" in described
    assert standin_family("answerdotai/ModernBERT-base") == "modernbert"
    assert standin_family("FacebookAI/roberta-large") == "roberta"


def test_a_model_of_unknown_family_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(VtreproError, match="model someone/unknown-model: a rehearsal cannot stand in for it"):
        write_standin_model("someone/unknown-model", tmp_path / "m", tmp_path / "tokenizers")


@pytest.mark.slow  # builds the ModernBERT and BERT stand-ins: over 1.5 s
def test_a_recipe_is_scaled_and_its_inputs_stood_in_for(tmp_path: Path) -> None:
    rehearsal = Rehearsal(tmp_path / "standins")
    recipe = rehearsal_recipe("modernbert_vt_idf", rehearsal)
    assert recipe.name == "modernbert_vt_idf" and recipe.training.steps == 2 and recipe.training.batch_size == 4
    assert [stage.options.to_dict().get("steps") for stage in recipe.stages][1] == 2
    assert "modernbert_vt_idf: training.steps 150000 -> 2" in rehearsal.scaled
    teacher = rehearsal.data_dir / "msmarco-hard-negatives" / "cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz"
    assert teacher.is_file() and (rehearsal.model_dir / "answerdotai" / "ModernBERT-base" / "config.json").is_file()
    assert (rehearsal.data_dir / "beir" / "msmarco" / "corpus.jsonl").is_file()


def test_rehearse_refuses_record_and_vectors(tmp_path: Path, capsys) -> None:
    code, _, err = run_command(regress, ["--spec", "beir_bm25_flat", "--rehearse", "--record",
                                         "--runs", tmp_path], capsys)
    assert_one_error_line(code, err, "--rehearse runs on stand-ins, so --record has no meaning with it")


def test_a_spec_naming_a_folder_no_recipe_trains_is_one_line(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "local.yaml"
    spec.write_text("conditions:\n  mine:\n    model: ./my-models/splade\n    datasets: {scifact: }\n")
    code, _, err = run_command(regress, ["--spec", spec, "--rehearse", "--runs", tmp_path / "runs"], capsys)
    assert_one_error_line(code, err, "condition 'mine': model ./my-models/splade is a folder, which a rehearsal "
                                     "cannot stand in for")


def test_a_recipe_with_absolute_data_paths_is_one_line(tmp_path: Path, capsys) -> None:
    recipe = write_recipe(tmp_path / "abs.yaml", {
        "model": "bert-base-uncased", "data": {"format": "triples", "path": str(tmp_path / "triples.tsv")},
        "training": {"steps": 10}})
    code, _, err = run_command(train, ["--recipe", recipe, "--rehearse", "--output", tmp_path / "runs" / "abs"], capsys)
    assert_one_error_line(code, err, f"data.path {tmp_path / 'triples.tsv'}: a rehearsal stands in for data files "
                                     "named relative to --data-dir only")
