"""Model checkpoints on disk: the one atomic saver of every HF folder the pipeline writes (vocabulary
transfer, calibration, MLM adaptation, training checkpoints and final models), and the check that an
output folder is free."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import write_json
from vtrepro.core.log import quiet_transformers


def check_out(out: str | Path) -> Path:
    """``out`` as a Path; it must not exist or be an empty folder."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise VtreproError(f"{out} already exists and is not empty; remove it or choose another --output")
    return out


def apply_umask(folder: Path) -> None:
    """Give ``folder``, its subfolders and files the modes the umask allows (0o777 / 0o666 masked): mkdtemp
    makes folders 0700 and some writers (transformers' weight shards) files 0600."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


@contextlib.contextmanager
def staged_folder(out: Path, replace: bool = False) -> Iterator[Path]:
    """A temporary folder beside ``out`` to write into; when the block completes it gets the permissions the
    umask allows (:func:`apply_umask`) and is renamed to ``out`` (an existing ``out`` must be an empty folder,
    unless ``replace``); when the block fails it is removed, so a failed write leaves nothing behind."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield staging
        apply_umask(staging)
        if out.exists():
            if replace:
                shutil.rmtree(out)
            else:
                out.rmdir()
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def save_checkpoint(out: str | Path, model: Any, tokenizer: Any, reports: dict[str, Any] | None = None,
                    extra: Callable[[Path], None] | None = None, *, replace: bool = False) -> Path:
    """Write an HF folder (model, tokenizer, the files ``extra(folder)`` writes, then ``reports``: JSON
    files by name) to a temporary folder beside ``out``, give it the permissions the umask allows
    (:func:`apply_umask`) and rename it to ``out``; a failed save leaves nothing behind. ``out`` must not
    exist or be an empty folder (:func:`check_out`), unless ``replace``: then an existing ``out`` is
    replaced."""
    out = Path(out) if replace else check_out(out)
    with staged_folder(out, replace) as staging:
        with quiet_transformers():
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if extra is not None:
            extra(staging)
        for name, report in (reports or {}).items():
            write_json(staging / name, report)
    return out
