"""gap training: curves from training logs of one recipe, and every bad log as one line."""
from __future__ import annotations

import json

import pytest

from helpers import assert_one_error_line
from vtrepro.gap.command import main as gap


def _record(step: int, **changes) -> dict:
    record = {"step": step, "loss": 2.0 - step / 10, "ranking_loss": 1.9, "flops_q": 1.0, "flops_d": 2.0,
              "active_q": 20.0 + step, "active_d": 100.0 * step, "used_q": 50, "used_d": 900 - step,
              "vocabulary": 1000, "lambda_q": 0.001, "lambda_d": 0.001, "lr": 1e-5, "seconds": 0.1}
    return {**record, **changes}


def _run(root, records: list[dict], report_steps: int | None = None):
    root.mkdir(parents=True)
    (root / "train_log.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    if report_steps is not None:
        (root / "final").mkdir()
        (root / "final" / "training_report.json").write_text(json.dumps(
            {"recipe": "r.yaml", "fingerprint": "f" * 64, "steps": report_steps, "device": "cpu", "cpu_threads": 2,
             "train_seconds": 1.0}))
    return root


@pytest.mark.slow  # 10.7 s on the loaded 2-core machine: matplotlib imported, a PNG and an SVG drawn
def test_curves_of_two_runs_are_written_with_their_recipe(tmp_path, capsys):
    first = _run(tmp_path / "raw", [_record(step) for step in (1, 2, 3)], report_steps=3)
    second = _run(tmp_path / "apc", [_record(step, active_d=50.0) for step in (1, 2, 3)])
    assert gap(["training", "--log", str(first), "--log", str(second / "train_log.jsonl"),
                "--output", str(tmp_path / "out")]) == 0
    figures = json.loads((tmp_path / "out" / "training.json").read_text())
    raw, apc = figures["runs"]
    assert raw["run"] == "raw" and raw["recipe"] == "r.yaml" and raw["curves"]["inactive_d"] == [101, 102, 103]
    assert raw["summary"]["active_d_last"] == 300.0 and apc["summary"]["active_d_last"] == 50.0
    assert (tmp_path / "out" / "training.png").stat().st_size and (tmp_path / "out" / "training.svg").stat().st_size
    assert "| raw | 3 |" in (tmp_path / "out" / "training.md").read_text()


@pytest.mark.parametrize("records, report_steps, fragments", [
    ([_record(1), _record(2)], 3, ("2 steps", "says 3", "truncated")),
    ([_record(1), _record(2, active_d="many")], None, ("train_log.jsonl:2", "'active_d' must be a number")),
    ([_record(1), _record(3)], None, ("train_log.jsonl:2", "'step' must be 2")),
    ([], None, ("no training step",)),
])
def test_a_bad_log_is_one_line(tmp_path, capsys, records, report_steps, fragments):
    run = _run(tmp_path / "run", records, report_steps)
    code = gap(["training", "--log", str(run), "--output", str(tmp_path / "out")])
    assert_one_error_line(code, capsys.readouterr().err, *fragments)


def test_a_log_of_another_recipe_is_one_line(tmp_path, capsys):
    first = _run(tmp_path / "a", [_record(step) for step in (1, 2)])
    second = _run(tmp_path / "b", [_record(1), _record(2, lr=1e-4)])
    code = gap(["training", "--log", str(first), "--log", str(second), "--output", str(tmp_path / "out")])
    assert_one_error_line(code, capsys.readouterr().err, "lr 0.0001 at step 2", "different recipes")


def test_a_huge_log_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    import vtrepro.gap.training as training

    run = _run(tmp_path / "run", [_record(1)])
    monkeypatch.setattr(training, "MAX_LOG_BYTES", 10)
    code = gap(["training", "--log", str(run), "--output", str(tmp_path / "out")])
    assert_one_error_line(code, capsys.readouterr().err, "bytes, more than the 10")
