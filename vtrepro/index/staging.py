"""A new index is built in a hidden folder beside its target and moved into place only when complete."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from vtrepro.core.io import process_alive

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def staged_index(index_dir: Path, is_index: Callable[[Path], bool]) -> Iterator[Path]:
    """Remove what killed builds of ``index_dir`` left beside it (:func:`remove_dead_builds`), then yield
    ``.<name>.<pid>.<random>.tmp`` beside ``index_dir`` to build in. When the block ends without an exception, an
    index already at ``index_dir`` is set aside (``.old``) and the new one takes its place; either way both hidden
    folders are removed, and an old index whose replacement never arrived is put back."""
    remove_dead_builds(index_dir, is_index)
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


def remove_dead_builds(index_dir: Path, is_index: Callable[[Path], bool]) -> None:
    """Remove what killed builds of ``index_dir`` left beside it.

    A build works in ``.<name>.<pid>.<random>.tmp`` and sets the index it replaces aside as
    ``.<name>.<pid>.<random>.old``; it removes both when it ends, exception or not, so only a killed build
    leaves them. Such a folder whose pid no longer runs is a leftover: its pid is in its name from its
    creation, so a live build's folder is never taken (a reused pid only keeps a leftover a while longer).
    A build killed between setting the old index aside and moving the new one in leaves no index: the old one
    is put back (when ``is_index`` says it is one), as Lucene's builds do. Pids are this machine's: builds of one
    index from several machines sharing a disk are not told apart.
    """
    pattern = re.compile(rf"\.{re.escape(index_dir.name)}\.(\d{{1,9}})\.[^.]+\.(tmp|old)")  # pids fit a C int
    for path in sorted(index_dir.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if not match or not path.is_dir() or path.is_symlink() or process_alive(int(match[1])):
            continue
        if match[2] == "old" and not index_dir.exists() and is_index(path):
            path.rename(index_dir)
            logger.warning(f"{index_dir}: put back the index an interrupted rebuild had moved aside")
        else:
            shutil.rmtree(path, ignore_errors=True)
