"""Issue 20 catalogue, code execution and model folders: nothing vtrepro reads is ever unpickled.

A planted pickle (one whose unpickling creates a marker file) lies under every name a loader might try
(``pytorch_model.bin``, ``trainer_state.pt``, ``optimizer.pt``, ...) in the model folders given to every
command that loads a model, in a run folder ``train`` resumes, and in a vector bundle. Every case runs
the real command in-process (real splade-tiny, real Lucene, real pytrec_eval) and asserts that the
marker never appears: exit 0 where the folder is otherwise valid, exit 2 with one ``error:`` line where
only pickles hold the weights. Model folders are splade-tiny's files linked, never copied, from the
shared assets; nothing is written into them.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import shutil
import tarfile
from pathlib import Path

import pytest

import vtrepro.__main__
from helpers import MINI_CORPUS, assert_one_error_line, triples_recipe, write_mini_beir, write_recipe
from vtrepro.core.cli import cli_entry
from vtrepro.encode.bundle import checksum_path
from vtrepro.training.distributed import Processes
from vtrepro.training.recipe import load_recipe
from vtrepro.training.run_folder import PICKLED_STATE_NAME, STATE_NAME
from vtrepro.training.trainer import Trainer

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

PICKLE_NAMES = ("pytorch_model.bin", "trainer_state.pt", "optimizer.pt", "training_args.bin", "rng_state.pth",
                "scheduler.pt", "model.pt", "model.pkl", "model.ckpt")
"""Every name a model or checkpoint loader might open: transformers' and torch's pickle formats."""
TRIPLES = "".join(f"{text}\t{text}\t{other}\n" for text, other in zip(MINI_CORPUS.values(),
                                                                      list(MINI_CORPUS.values())[1:] * 2))


class Plant:
    """Unpickling this object opens (creates) ``marker``: the proof that a pickle ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def plant(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps(Plant(marker)))


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's SHA-256 under ``folder`` (links followed): equal snapshots mean nothing was touched."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def vtrepro_command(argv: list, capsys) -> tuple[int, str]:
    """``python -m vtrepro <argv>`` in-process; returns (exit status, stderr)."""
    code = cli_entry(vtrepro.__main__.main)([str(arg) for arg in argv])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def marker(tmp_path_factory) -> Path:
    """The file any planted pickle of this module creates when it is unpickled."""
    return tmp_path_factory.mktemp("marker") / "PICKLE-RAN"


@pytest.fixture(autouse=True)
def no_pickle_ran(marker: Path):
    """Every test of this module ends with the marker absent: no planted pickle was ever loaded."""
    yield
    assert not marker.exists(), "a planted pickle was unpickled"


def model_folder(folder: Path, splade_tiny: Path, marker: Path, weights: bool) -> Path:
    """splade-tiny's files linked into ``folder`` (its safetensors weights only when ``weights``), with a
    planted pickle under every name of PICKLE_NAMES."""
    folder.mkdir(parents=True)
    for source in splade_tiny.iterdir():
        if weights or source.suffix != ".safetensors":
            shutil.copy(source, folder / source.name)  # copies: a model folder's files lie inside it
    for name in PICKLE_NAMES:
        plant(folder / name, marker)
    return folder


@pytest.fixture(scope="module")
def planted(tmp_path_factory, splade_tiny: Path, marker: Path) -> Path:
    """A valid model folder: splade-tiny's safetensors weights with pickles beside them."""
    return model_folder(tmp_path_factory.mktemp("planted") / "model", splade_tiny, marker, weights=True)


@pytest.fixture(scope="module")
def pickles_only(tmp_path_factory, splade_tiny: Path, marker: Path) -> Path:
    """A model folder whose weights exist only as pickles (config and tokenizer are splade-tiny's)."""
    return model_folder(tmp_path_factory.mktemp("pickles-only") / "model", splade_tiny, marker, weights=False)


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> dict[str, Path]:
    """A corpus (JSONL), a training triples file and a BEIR data root of three documents."""
    folder = tmp_path_factory.mktemp("texts")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": doc_id, "text": text}) + "\n" for doc_id, text in MINI_CORPUS.items()))
    triples = folder / "triples.tsv"
    triples.write_text(TRIPLES)
    return {"corpus": corpus, "triples": triples, "data": write_mini_beir(folder / "data")}


def write_spec(path: Path, model: Path) -> Path:
    path.write_text(f"conditions:\n  tiny:\n    model: {model}\n"
                    "    encoder: {max_length_doc: 32, max_length_query: 16, batch_size: 2}\n"
                    "    datasets:\n      mini:\n")
    return path


def command(name: str, model: Path, splade_tiny: Path, texts: dict[str, Path], work: Path) -> list:
    """The argv of ``name`` loading ``model`` (where the command reads two models, ``model`` is the one
    named after the colon) on tiny inputs, writing under ``work``."""
    out = work / "out"
    corpus = ["--corpus", texts["corpus"]]
    arguments = {
        "encode": ["encode", "--model", model, *corpus, "--output", out],
        "transfer:model": ["transfer", "--model", model, "--target-tokenizer", splade_tiny, "--reference", splade_tiny,
                           "--output", out],
        "transfer:reference": ["transfer", "--model", splade_tiny, "--target-tokenizer", splade_tiny,
                               "--reference", model, "--output", out],
        "calibrate": ["calibrate", "--model", model, *corpus, "--limit", 3, "--output", out],
        "mlm": ["mlm", "--model", model, *corpus, "--steps", 1, "--batch-size", 2, "--max-length", 16, "--output", out],
        "train": ["train", "--recipe", write_recipe(work / "tiny.yaml", triples_recipe(model, texts["triples"])),
                  "--output", out],
        "regress": ["regress", "--spec", write_spec(work / "mini_spec.yaml", model), "--data-dir", texts["data"],
                    "--output", out, "--record"],  # --record: the unpinned spec's figures are written, exit 0
    }
    return arguments[name]


COMMANDS = ("encode", "transfer:model", "transfer:reference", "calibrate", "mlm", "train", "regress")


def test_the_planted_pickle_runs_code_when_unpickled(tmp_path) -> None:
    """The plant is live: plain unpickling creates its marker (so its absence elsewhere means something)."""
    canary = tmp_path / "canary"
    plant(tmp_path / "model.pkl", canary)
    pickle.loads((tmp_path / "model.pkl").read_bytes())
    assert canary.exists()


@pytest.mark.parametrize("name", [
    *COMMANDS[:-1],
    pytest.param("regress", marks=pytest.mark.slow),  # over 4 s: it writes the results and report of the ERROR row
])
def test_weights_only_in_pickles_are_refused_unopened(name, pickles_only, splade_tiny, texts, tmp_path, capsys):
    before = snapshot(pickles_only)
    code, stderr = vtrepro_command(command(name, pickles_only, splade_tiny, texts, tmp_path), capsys)
    assert_one_error_line(code, stderr, str(pickles_only / "model.ckpt"), "pickle-format weights",
                          "never loads", "convert the model to safetensors")
    assert snapshot(pickles_only) == before
    if name != "regress":  # regress records the failed run as an ERROR row, by design
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", [
    "encode", "mlm", "train",
    pytest.param("transfer:model", marks=pytest.mark.slow),  # over 4 s: the 30,522-token vocabulary match
    pytest.param("transfer:reference", marks=pytest.mark.slow),
    pytest.param("calibrate", marks=pytest.mark.slow),
    pytest.param("regress", marks=pytest.mark.slow),  # encode, Lucene index and search
])
def test_pickles_beside_safetensors_weights_are_never_opened(name, planted, splade_tiny, texts, tmp_path, capsys):
    before = snapshot(planted)
    code, stderr = vtrepro_command(command(name, planted, splade_tiny, texts, tmp_path), capsys)
    assert code == 0, stderr
    assert snapshot(planted) == before


# ---------------------------------------------------------------------------- model and tokenizer files that disagree


def edited_copy(folder: Path, splade_tiny: Path, name: str, change) -> Path:
    """splade-tiny's files linked into ``folder``, except ``name`` (a JSON file), written with ``change`` applied."""
    folder.mkdir()
    for source in splade_tiny.iterdir():
        if source.name != name:
            shutil.copy(source, folder / source.name)
    document = json.loads((splade_tiny / name).read_text())
    change(document)
    (folder / name).write_text(json.dumps(document))
    return folder


def five_tokens(tokenizer: dict) -> None:
    """Keep only the five special tokens of a BERT tokenizer.json."""
    kept = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer["model"]["vocab"] = {token: index for index, token in enumerate(kept)}
    for added in tokenizer["added_tokens"]:
        added["id"] = kept.index(added["content"])
    for special in tokenizer["post_processor"]["special_tokens"].values():
        special["ids"] = [kept.index(token) for token in special["tokens"]]


def keep_case(tokenizer: dict) -> None:
    """A tokenizer.json whose normalizer keeps case."""
    tokenizer["normalizer"]["lowercase"] = False


@pytest.mark.parametrize("name", ["encode", "transfer:reference"])
def test_a_config_vocabulary_that_differs_from_the_weights_is_named(name, splade_tiny, texts, tmp_path, capsys):
    model = edited_copy(tmp_path / "model", splade_tiny, "config.json", lambda config: config.update(vocab_size=30000))
    code, stderr = vtrepro_command(command(name, model, splade_tiny, texts, tmp_path), capsys)
    assert_one_error_line(code, stderr, str(model / "config.json"), "vocab_size 30000", "30522 token rows",
                          "set vocab_size to 30522")
    assert not (tmp_path / "out").exists()


def transfer_onto(target: Path, splade_tiny: Path, out: Path) -> list:
    return ["transfer", "--model", splade_tiny, "--target-tokenizer", target, "--reference", splade_tiny, "--output", out]


@pytest.mark.parametrize("given", ["folder", "tokenizer.json", "folder with config.json"])
def test_a_target_tokenizer_without_a_vocabulary_says_what_is_wrong(given, splade_tiny, tmp_path, capsys):
    folder = edited_copy(tmp_path / "tokenizer", splade_tiny, "tokenizer.json", five_tokens)
    (folder / "model.safetensors").unlink()
    if given != "folder with config.json":
        (folder / "config.json").unlink()
    target = folder / "tokenizer.json" if given == "tokenizer.json" else folder
    code, stderr = vtrepro_command(transfer_onto(target, splade_tiny, tmp_path / "out"), capsys)
    expected = ("holds 5 tokens but config.json beside it has vocab_size 30522" if given == "folder with config.json"
                else "holds only 5 tokens")
    assert_one_error_line(code, stderr, f"target tokenizer {folder / 'tokenizer.json'}: {expected}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", ["folder", "tokenizer.json"])
def test_a_target_tokenizer_that_keeps_case_on_an_uncased_vocabulary_is_refused(given, splade_tiny, tmp_path, capsys):
    folder = edited_copy(tmp_path / "tokenizer", splade_tiny, "tokenizer.json", keep_case)
    settings = json.loads((splade_tiny / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").unlink()  # transformers rebuilds a folder's normalizer from do_lower_case
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "do_lower_case": False}))
    target = folder if given == "folder" else folder / "tokenizer.json"
    code, stderr = vtrepro_command(transfer_onto(target, splade_tiny, tmp_path / "out"), capsys)
    assert_one_error_line(code, stderr, f"target tokenizer {folder / 'tokenizer.json'}: maps 'Paris', 'France', "
                          "'London' to its unknown token [UNK]", "lowercase")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- a run folder train resumes


class _Interrupted(Trainer):
    """Stops where a killed run stops: its last checkpoint written, no final model."""

    def save_final(self) -> Path:
        return self.output


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, splade_tiny: Path, texts) -> tuple[Path, Path]:
    """(recipe, run folder) of a 2-step run interrupted after its step-1 checkpoint."""
    folder = tmp_path_factory.mktemp("interrupted")
    recipe = write_recipe(folder / "resume.yaml", triples_recipe(splade_tiny, texts["triples"], steps=2, save_every=1))
    run = folder / "run"
    _Interrupted(load_recipe(recipe), str(splade_tiny), run, None, None, Processes()).train()
    assert (run / "checkpoint-000001" / STATE_NAME).is_file() and not (run / "final").exists()
    return recipe, run


@pytest.mark.slow  # a 2-step training interrupted, then resumed: over 4 s
def test_a_resumed_run_opens_no_pickle_in_its_checkpoint(interrupted, marker, tmp_path, capsys):
    recipe, run = interrupted
    resumed = tmp_path / "run"
    shutil.copytree(run, resumed)
    for name in PICKLE_NAMES:
        plant(resumed / "checkpoint-000001" / name, marker)
    code, stderr = vtrepro_command(["train", "--recipe", recipe, "--output", resumed], capsys)
    assert code == 0, stderr
    assert "resuming from" in stderr and (resumed / "final" / "model.safetensors").is_file()


@pytest.mark.parametrize("dry_run", [False, True], ids=["train", "dry-run"])
def test_a_pickled_trainer_state_is_refused_before_anything_runs(dry_run, splade_tiny, texts, marker, tmp_path, capsys):
    """A checkpoint of an older vtrepro (its trainer_state.pt a pickle) cannot be resumed: one line, nothing changed."""
    run = tmp_path / "run"
    checkpoint = model_folder(run / "checkpoint-000001", splade_tiny, marker, weights=True)  # every pickle name
    (run / "data").mkdir()
    (run / "data" / ".prepared").touch()
    (run / "train_log.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    recipe = write_recipe(tmp_path / "resume.yaml", triples_recipe(splade_tiny, texts["triples"], steps=2, save_every=1))
    before = snapshot(run)
    code, stderr = vtrepro_command(["train", "--recipe", recipe, "--output", run, *(["--dry-run"] * dry_run)], capsys)
    assert_one_error_line(code, stderr, str(checkpoint / PICKLED_STATE_NAME), "never unpickles",
                          f"remove the checkpoint-* folders of {run}")
    assert snapshot(run) == before


# ---------------------------------------------------------------------------- a vector bundle


@pytest.mark.slow  # a regression run, an export and a run on the bundle: about 10 s
def test_a_pickle_in_a_vector_bundle_is_never_opened(splade_tiny, texts, marker, tmp_path, capsys):
    spec = write_spec(tmp_path / "mini_spec.yaml", splade_tiny)
    runs = tmp_path / "runs"
    assert vtrepro_command(["regress", "--spec", spec, "--data-dir", texts["data"], "--runs", runs, "--record"],
                           capsys)[0] == 0
    bundle = tmp_path / "mini.tar"
    assert vtrepro_command(["export", "vectors", "--spec", spec, "--runs", runs, "--output", bundle], capsys)[0] == 0
    with tarfile.open(bundle, "a") as archive:  # a pickle under every name, beside the run's vectors
        for name in (*PICKLE_NAMES, "vectors/part-00001.pkl"):
            data = pickle.dumps(Plant(marker))
            info = tarfile.TarInfo(f"tiny/mini/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    checksum_path(bundle).write_text(f"{hashlib.sha256(bundle.read_bytes()).hexdigest()}  {bundle.name}\n")
    before = snapshot(tmp_path / "runs")
    code, stderr = vtrepro_command(["regress", "--spec", spec, "--data-dir", texts["data"], "--vectors", bundle,
                                    "--output", tmp_path / "again"], capsys)
    assert code == 0, stderr
    assert snapshot(tmp_path / "runs") == before


def test_a_planted_teacher_pickle_stops_train_before_any_step(marker, splade_tiny, tmp_path, capsys) -> None:
    """The published teacher-scores name holding a pickle that calls code: `train` refuses it with one line
    naming the opcode, nothing runs and no checkpoint is written (the real format trains: test_rehearsals)."""
    from vtrepro.data.standins import Collection, write_hard_negatives, write_tsv

    collection = Collection.make("msmarco")
    data = tmp_path / "data"
    data.mkdir()
    write_hard_negatives(data / "hn.jsonl.gz", collection, "msmarco")
    write_tsv(data / "collection.tsv", collection.documents)
    write_tsv(data / "queries.train.tsv", collection.queries)
    (data / "scores.pkl.gz").write_bytes(gzip.compress(pickle.dumps({1: Plant(marker)}, protocol=4)))
    recipe = write_recipe(tmp_path / "distill.yaml", {
        "model": str(splade_tiny), "loss": {"ranking": "margin_mse", "in_batch_negatives": False},
        "data": {"format": "msmarco", "hard_negatives": "hn.jsonl.gz", "collection": "collection.tsv",
                 "queries": "queries.train.tsv", "teacher": "scores.pkl.gz"},
        "training": {"steps": 2, "batch_size": 2, "max_length_doc": 32, "save_every": 1}})
    code, err = vtrepro_command(["train", "--recipe", recipe, "--data-dir", data, "--output", tmp_path / "run"], capsys)
    assert_one_error_line(code, err, "scores.pkl.gz: opcode STACK_GLOBAL at byte", "never runs what one names")
    assert not list((tmp_path / "run").glob("checkpoint-*"))
