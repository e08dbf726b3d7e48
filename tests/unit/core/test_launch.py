"""One launcher (vtrepro.core.launch): a job's command line reads back as its options, and the three modes
run a real command: in this process, as ``python -m vtrepro``, and under torchrun (2 CPU processes)."""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

from vtrepro.core.cli import options_from_args
from vtrepro.core.errors import VtreproError
from vtrepro.core.launch import Job, Shared, command_line, launch
from vtrepro.encode.command import build_encode_parser as encode_parser
from vtrepro.encode.vectors import Quantization
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.training import command as training_command
from vtrepro.training import mlm
from vtrepro.training.stages import Stage, stage_job
from vtrepro.vocabulary import calibrate, transfer
from vtrepro.vocabulary import command as vocabulary_command

STAGE_PARSERS = {"transfer": vocabulary_command.build_transfer_parser, "mlm": training_command.build_mlm_parser,
                 "calibrate": vocabulary_command.build_calibrate_parser}
STAGE_READERS = {"transfer": vocabulary_command.transfer_options, "calibrate": vocabulary_command.calibration_options,
                 "mlm": functools.partial(options_from_args, mlm.MlmOptions)}
"""Each stage's options from its command line, as its command module reads them."""
STAGES = [Stage("transfer", transfer.TransferOptions(init="mean", keep_norm=False, leaveout={"fraction": 0.2})),
          Stage("mlm", mlm.MlmOptions(dataset="scifact", steps=5, dtype="bfloat16")),
          Stage("calibrate", calibrate.CalibrationOptions(dataset="scifact", target_terms=100))]


def test_an_encode_job_reads_back_as_its_options_and_shared_flags() -> None:
    encoder = EncoderOptions(max_length_doc=128, batch_size=8, sort_window=40, dtype="bfloat16", projection="dense")
    quantization = Quantization(scale=50)
    job = Job("encode", ("--model", "m", "--corpus", "c.jsonl", "--output", "o"), (encoder, quantization))
    for granted in (True, False):
        argv = job.argv(Shared("data", "models", granted))
        assert argv[0] == "encode"
        args = encode_parser().parse_args(argv[1:])
        assert options_from_args(EncoderOptions, args) == encoder and options_from_args(Quantization, args) == quantization
        assert (args.data_dir, args.model_dir, args.trust_remote_code) == ("data", "models", granted)


@pytest.mark.parametrize("stage", STAGES, ids=[stage.name for stage in STAGES])
def test_a_stage_job_is_its_command_with_its_options(stage: Stage) -> None:
    argv = stage_job(stage, "m", Path("o")).argv()
    assert argv[0] == stage.name
    assert STAGE_READERS[stage.name](STAGE_PARSERS[stage.name]().parse_args(argv[1:])) == stage.options


def test_in_process_the_shared_settings_are_arguments_and_errors_reach_the_caller() -> None:
    calls = []

    def run(**shared) -> None:
        calls.append(shared)
        if len(calls) == 2:
            raise VtreproError("bad input")

    job = Job("encode", run=run)
    launch(job, Shared("data", "models", trust_remote_code=True))
    assert calls == [{"data_dir": "data", "model_dir": "models", "trust_remote_code": True}]
    with pytest.raises(VtreproError, match="^bad input$"):
        launch(job)
    with pytest.raises(ValueError, match="runs only as a child"):
        launch(Job("encode"))


def test_a_child_command_line_is_this_python_and_the_vtrepro_command() -> None:
    job = Job("train", ("--recipe", "r.yaml"))
    assert command_line(job, Shared(model_dir="models", trust_remote_code=True))[:5] == [
        sys.executable, "-m", "vtrepro", "train", "--recipe"]
    assert command_line(job, mode="torchrun", processes=3)[:5] == [sys.executable, "-m", "vtrepro.core.torchrun", "3", "train"]
    assert "--trust-remote-code" in command_line(job, Shared(trust_remote_code=True), "torchrun", 2)
    assert "--trust-remote-code" not in command_line(job, Shared(), "torchrun", 2)


@pytest.fixture
def scored(tmp_path: Path) -> Job:
    """``evaluate`` of a two-document run: ``--run`` is a flag torchrun's own parser would misread (``--run-path``)."""
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    return Job("evaluate", ("--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.tsv"),
                            "--metrics", "ndcg@10"))


@pytest.mark.parametrize(("mode", "processes"), [("subprocess", 1), pytest.param("torchrun", 2, marks=pytest.mark.slow)])
def test_a_child_runs_the_command_and_a_failed_one_is_one_line_here(scored: Job, mode, processes, capfd) -> None:
    from vtrepro.evaluate.command import main as evaluate

    evaluate(list(scored.arguments))
    one = capfd.readouterr().out
    assert '"ndcg@10": 0.6309' in one
    launch(scored, mode=mode, processes=processes)
    out, err = capfd.readouterr()
    assert sorted(out) == sorted(one * processes), out + err  # processes writing at once may interleave characters
    missing = Job("evaluate", ("--run", "/no/such/run.trec", *scored.arguments[2:]))
    with pytest.raises(VtreproError) as failure:
        launch(missing, mode=mode, processes=processes, failed="scoring", resume="rerun it")
    assert str(failure.value) == "scoring failed (its error is above); rerun it"
    err = capfd.readouterr().err
    # Each process that got as far as its error says it in one line; torchrun stops the group at the first
    # failure, so on a loaded machine a rank may be stopped before it prints (seen in a local CI run at load 4).
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert 1 <= len(errors) <= processes and set(errors) == {"error: /no/such/run.trec: file not found"}, err
    assert "Traceback" not in err


def test_a_job_in_process_and_as_a_child_writes_the_same(scored: Job, tmp_path: Path, capfd) -> None:
    """The in-process call and the child command line are one job: the same scores either way."""
    from vtrepro.evaluate.command import main as evaluate

    here = Job(scored.command, scored.arguments, run=lambda **shared: evaluate(list(scored.arguments)))
    launch(here)
    launch(here, mode="subprocess")
    first, second = capfd.readouterr().out.split("}\n", 1)
    assert json.loads(first + "}") == json.loads(second)
