"""Every shell command the docs show runs as written on this install.

Each fenced ``bash`` block of the README (and of the other documents in ``DOCUMENTS``) runs as one bash script,
in a fresh folder laid out like a checkout (``../shared`` beside it), through this environment's ``vtrepro``
and ``python``. Three kinds of command are checked rather than run, each by a rule of ``CHECKED``: installing
(``pip install --dry-run``: pip resolves everything, installs nothing), the test suite (``--collect-only``: the
suite cannot run itself). A command a rule changes runs from the repository itself. Everything else runs
exactly as the reader would type it; the encodings it needs come from the session's encode cache, so no corpus
is encoded again. The README that ``export index`` writes into a prebuilt tarball is held to the same: its
commands run as written from the folder holding the tarball.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from helpers import REPO_ROOT, seed_spec_encodings

DOCUMENTS = ("README.md", "docs/exchange.md")
"""Run in this order in one checkout: each may use what the ones before it made."""
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
CHECKED = (
    (re.compile(r"\bpip install\b"), "pip install --dry-run --quiet"),
    (re.compile(r"\bpython -m pytest\b"), "python -m pytest --collect-only -q"),
)
"""(what a command says, what runs instead): the only commands not run as written."""
BLOCK_TIMEOUT_S = 1200


def shell_blocks(markdown: str) -> list[str]:
    """The fenced ``bash``/``sh``/``shell`` blocks of a Markdown text, continuation lines joined."""
    return [block.replace("\\\n", " ") for block in SHELL_BLOCK.findall(markdown)]


def checked_line(line: str) -> str:
    """``line`` as it runs here: as written, or changed by its rule of ``CHECKED`` and run from the repository.
    A rule looks at the command only: a comment that names ``pip install`` leaves its line as written."""
    try:
        command = " ".join(shlex.split(line, comments=True))
    except ValueError:  # an unbalanced quote: bash reports it when the block runs
        command = line
    for said, instead in CHECKED:
        if said.search(command):
            return f"(cd {shlex.quote(str(REPO_ROOT))} && {said.sub(instead, line, count=1)}\n)"  # after its comment
    return line


def run_block(block: str, where: Path) -> subprocess.CompletedProcess:
    """One documented block as one bash script (``set -e``: its first failing command fails it)."""
    script = "set -euo pipefail\n" + "\n".join(checked_line(line) for line in block.splitlines())
    bin_dir = str(Path(sys.executable).parent)
    environment = {name: value for name, value in os.environ.items() if not name.startswith("VTREPRO_")}
    environment["PATH"] = f"{bin_dir}{os.pathsep}{environment['PATH']}"
    return subprocess.run(["bash", "-c", script], cwd=where, env=environment, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S)


@pytest.fixture
def checkout(tmp_path: Path, shared_dir: Path) -> Path:
    """A folder where the docs' relative paths resolve as in a checkout: ``../shared`` beside it."""
    (tmp_path / "shared").symlink_to(shared_dir.resolve())
    (tmp_path / "checkout").mkdir()
    return tmp_path / "checkout"


def seed_stage_encodings(checkout: Path, data_dir: Path, models_dir: Path, encode_cache) -> None:
    """The encodings the README's stage block makes, put where its commands look: ``encode``'s folder, and
    ``regress``'s for its spec, so they resume with every shard done."""
    from vtrepro.core.shipped import SHIPPED_DIR
    from vtrepro.data.beir import load_dataset
    from vtrepro.model.encoder_options import EncoderOptions
    from vtrepro.model.splade import SpladeEncoder

    encoder = SpladeEncoder("splade-tiny", EncoderOptions(), model_dir=str(models_dir))
    folder = encode_cache.folder(encoder, load_dataset("scifact", data_dir).corpus())
    encode_cache.seed(folder, checkout / "runs" / "enc" / "scifact")
    seed_spec_encodings(SHIPPED_DIR / "beir_splade_tiny.yaml", checkout / "runs", models_dir, data_dir, encode_cache)


def test_the_rules_change_only_installs_and_the_suite() -> None:
    assert checked_line("vtrepro regress --spec beir_bm25_flat") == "vtrepro regress --spec beir_bm25_flat"
    assert "pip install --dry-run --quiet -e" in checked_line('pip install -e ".[test]"   # comment')
    assert "pytest --collect-only -q -m" in checked_line('VTREPRO_DATA=x python -m pytest -m "not slow"')
    noted = "vtrepro index --engine seismic --vectors v --output i  # pip install 'vtrepro[approximate]'"
    assert checked_line(noted) == noted  # runs where the block runs, not from the repository
    commented = checked_line("pip install -e .  # a comment (with a parenthesis)")
    assert subprocess.run(["bash", "-n", "-c", commented]).returncode == 0


def test_every_shell_command_of_the_docs_runs_as_written(checkout, data_dir, models_dir, encode_cache):
    """The documents in order, in one checkout, as a reader who follows the README first (the exchange page
    searches what the README's commands exported)."""
    seed_stage_encodings(checkout, data_dir, models_dir, encode_cache)
    for document in DOCUMENTS:
        blocks = shell_blocks((REPO_ROOT / document).read_text())
        assert blocks, f"{document} shows no bash block"
        for number, block in enumerate(blocks, 1):
            began = time.perf_counter()
            result = run_block(block, checkout)
            print(f"{document} block {number}: exit {result.returncode} in {time.perf_counter() - began:.0f} s")
            assert result.returncode == 0, (f"{document}, bash block {number} failed:\n{block}\n--- stdout (end)\n"
                                            f"{result.stdout[-3000:]}\n--- stderr (end)\n{result.stderr[-3000:]}")


def test_every_command_of_an_exported_tarballs_readme_runs_as_written(exported, tmp_path):
    """The README inside a prebuilt index: its commands run as written from the folder holding the tarball (unpack,
    vtrepro's search, Anserini's SearchCollection, Pyserini's search, scoring), and it reads as plain text."""
    _, output = exported
    tarball = next(output.glob("*.tar.gz"))
    shutil.copy(tarball, tmp_path / tarball.name)
    with tarfile.open(tarball) as archive:
        readme = archive.extractfile(f"{tarball.name.removesuffix('.tar.gz')}/README.md").read().decode()
    assert "\\" not in readme and "/shared/" not in readme  # no Markdown escapes, no local path
    blocks = shell_blocks(readme)
    assert [block.split()[:2] for block in blocks] == [["tar", "xzf"], ["vtrepro", "search"], ["vtrepro", "anserini"],
                                                      ["vtrepro", "pyserini"], ["vtrepro", "evaluate"]]
    for number, block in enumerate(blocks, 1):
        result = run_block(block, tmp_path)
        assert result.returncode == 0, (f"the tarball README's bash block {number} failed:\n{block}\n"
                                        f"--- stdout (end)\n{result.stdout[-3000:]}\n--- stderr (end)\n{result.stderr[-3000:]}")
    runs = [tmp_path / name for name in ("run.trec", "anserini.trec", "pyserini.trec")]
    assert all(len(run.read_text().splitlines()) == 300_000 for run in runs)
