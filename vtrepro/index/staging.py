"""A new index is built in a hidden folder beside its target and moved into place only when complete."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def staged_index(index_dir: Path) -> Iterator[Path]:
    """Yield ``.<name>.<pid>.<random>.tmp`` beside ``index_dir`` to build in. When the block ends without an
    exception, an index already at ``index_dir`` is set aside (``.old``) and the new one takes its place; either
    way both hidden folders are removed, and an old index whose replacement never arrived is put back."""
    staging = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.{os.getpid()}.", suffix=".tmp", dir=index_dir.parent))
    aside = staging.with_suffix(".old")
    try:
        yield staging
        if index_dir.exists():
            index_dir.rename(aside)
        staging.rename(index_dir)
    finally:
        if aside.exists() and not index_dir.exists():  # the new index never arrived: the old one goes back
            aside.rename(index_dir)
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)
