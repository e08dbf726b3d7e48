"""The shared checkpoint saver: atomic, permissions from the umask, an output folder that must be free."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from vtrepro.core.checkpoints import check_out, save_checkpoint
from vtrepro.core.errors import VtreproError


class FakePretrained:
    """Stands in for a model or tokenizer: ``save_pretrained`` writes one file."""

    def __init__(self, name: str):
        self.name = name

    def save_pretrained(self, folder: Path) -> None:
        path = Path(folder) / self.name
        path.write_text("weights", encoding="utf-8")
        path.chmod(0o600)  # as transformers writes weight shards


@pytest.fixture
def restore_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def write_extra(folder: Path) -> None:
    (folder / "sub").mkdir(mode=0o700)
    (folder / "sub" / "extra.txt").write_text("x")


@pytest.mark.parametrize(("mask", "folder_mode", "file_mode"),
                         [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640), (0o077, 0o700, 0o600)])
def test_saved_checkpoint_has_the_umask_mode(tmp_path: Path, restore_umask, mask: int, folder_mode: int,
                                             file_mode: int) -> None:
    os.umask(mask)
    out = save_checkpoint(tmp_path / "runs" / "model", FakePretrained("model.bin"), FakePretrained("tokenizer.json"),
                          {"report.json": {"steps": 3}}, write_extra)
    assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE((out / "sub").stat().st_mode) == folder_mode
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in out.rglob("*") if path.is_file()} == {
        name: file_mode for name in ("extra.txt", "model.bin", "report.json", "tokenizer.json")}
    assert sorted(path.name for path in out.iterdir()) == ["model.bin", "report.json", "sub", "tokenizer.json"]
    assert json.loads((out / "report.json").read_text()) == {"steps": 3}
    assert [path.name for path in out.parent.iterdir()] == ["model"]


def test_failing_save_leaves_no_partial_folder(tmp_path: Path) -> None:
    def fail(folder: Path) -> None:
        (folder / "half.bin").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "model", FakePretrained("model.bin"), FakePretrained("tokenizer.json"), extra=fail)
    assert list(tmp_path.iterdir()) == []


def test_failing_replace_keeps_the_previous_folder(tmp_path: Path) -> None:
    out = save_checkpoint(tmp_path / "final", FakePretrained("old.bin"), FakePretrained("tokenizer.json"))

    def fail(folder: Path) -> None:
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        save_checkpoint(out, FakePretrained("new.bin"), FakePretrained("tokenizer.json"), extra=fail, replace=True)
    assert sorted(path.name for path in out.iterdir()) == ["old.bin", "tokenizer.json"]
    assert [path.name for path in tmp_path.iterdir()] == ["final"]
    save_checkpoint(out, FakePretrained("new.bin"), FakePretrained("tokenizer.json"), replace=True)
    assert sorted(path.name for path in out.iterdir()) == ["new.bin", "tokenizer.json"]


def test_output_must_be_free_unless_replaced(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert save_checkpoint(empty, FakePretrained("model.bin"), FakePretrained("tokenizer.json")) == empty
    assert (empty / "model.bin").is_file()
    with pytest.raises(VtreproError, match="already exists and is not empty"):
        check_out(empty)
    with pytest.raises(VtreproError, match="already exists and is not empty"):
        save_checkpoint(empty, FakePretrained("model.bin"), FakePretrained("tokenizer.json"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(VtreproError, match="already exists and is not empty"):
        check_out(tmp_path / "file")
