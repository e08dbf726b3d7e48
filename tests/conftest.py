"""Shared fixtures: real assets from ../shared (never copied into the repo)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, escape_term

REPO_ROOT = Path(__file__).resolve().parent.parent


def _shared_dir() -> Path:
    return Path(os.environ.get("VTREPRO_SHARED", REPO_ROOT.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_dir()
    if not path.is_dir():
        pytest.skip(f"real test assets not found at {path} (set VTREPRO_SHARED)")
    return path


@pytest.fixture(scope="session")
def data_dir(shared_dir: Path) -> Path:
    """BEIR data root: contains beir/<dataset>/."""
    return shared_dir / "data"


@pytest.fixture(scope="session")
def models_dir(shared_dir: Path) -> Path:
    return shared_dir / "models"


@pytest.fixture(scope="session")
def splade_tiny(models_dir: Path) -> Path:
    return models_dir / "splade-tiny"


@pytest.fixture(scope="session")
def scifact_sample(data_dir: Path):
    """The first 60 scifact documents: small enough to encode several times in a test."""
    from vtrepro.data.beir import load_dataset

    return load_dataset("scifact", data_dir).corpus()[:60]


@pytest.fixture(scope="session")
def tiny_encoder(splade_tiny: Path):
    """One loaded splade-tiny SpladeEncoder per test session."""
    from vtrepro.model.splade import SpladeEncoder

    return SpladeEncoder(splade_tiny, max_length_doc=256)


MINI_CORPUS = {"d1": "heart attack causes and risk factors", "d2": "protein folding in yeast cells", "d3": "heart rate"}


def write_mini_beir(root: Path) -> Path:
    """A data root holding beir/mini: three documents, one test query ("what causes heart attacks") judging d1."""
    import json

    folder = root / "beir" / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in MINI_CORPUS.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what causes heart attacks"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


@pytest.fixture(scope="session")
def gpt2_bpe(tmp_path_factory) -> Path:
    """A folder holding a real cased byte-level BPE tokenizer: GPT-2's exact files in RoBERTa's layout."""
    from vtrepro.vocabulary.gpt2 import write_gpt2_bpe_tokenizer

    return write_gpt2_bpe_tokenizer(tmp_path_factory.mktemp("gpt2-bpe"))


@pytest.fixture
def mini_beir(tmp_path: Path) -> Path:
    """A data root holding beir/mini (see ``write_mini_beir``)."""
    return write_mini_beir(tmp_path)


def assert_one_error_line(code: int, stderr: str, *fragments: str, status: int = 2) -> str:
    """A command failed as every vtrepro command must: exit ``status``, exactly one ``error:`` line (the
    last on stderr; argparse's starts ``<prog>: error:``) holding every fragment, and no traceback."""
    assert code == status, stderr
    errors = [line for line in stderr.splitlines() if "error: " in line]
    assert len(errors) == 1 and stderr.rstrip().endswith(errors[0]), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


# Vectors of a hand-made impact collection; "q1" is a document whose id is also a query id.
HAND_MADE_DOCS = {
    "d1": {"paris": 30, "france": 20, escape_term("new york"): 5},
    "d2": {"paris": 10, "texas": 40},
    "d3": {"france": 15, "paris": 10},
    "d4": {EMPTY_DOCUMENT_TERM: 1},
    "q1": {"paris": 50},
}


@pytest.fixture(scope="session")
def impact_index(tmp_path_factory):
    """A real Lucene impact index of ``HAND_MADE_DOCS`` (built once per session): (folder, stats)."""
    import json

    from vtrepro.index.lucene import build_impact_index

    folder = tmp_path_factory.mktemp("vectors")
    with open(folder / "part-00000.jsonl", "w") as handle:
        for doc_id, vector in HAND_MADE_DOCS.items():
            handle.write(json.dumps({"id": doc_id, "contents": "", "vector": vector}) + "\n")
    index = folder.parent / "impact-index"
    stats = build_impact_index(folder, index)
    return index, stats


@pytest.fixture(scope="session")
def splade_tiny_run(tmp_path_factory, data_dir, models_dir):
    """One regression run of beir_splade_tiny per test session (encoding is the expensive part):
    ``(args, results folder, exit code)``."""
    from vtrepro.regress.runner import main as regress
    from vtrepro.regress.spec import REGRESSIONS_DIR

    output = tmp_path_factory.mktemp("runs")
    args = ["--spec", str(REGRESSIONS_DIR / "beir_splade_tiny.yaml"), "--data-dir", str(data_dir),
            "--model-dir", str(models_dir), "--output", str(output)]
    return args, output / "beir_splade_tiny", regress(args)


@pytest.fixture(scope="session")
def bm25_flat_run(tmp_path_factory, data_dir):
    """One regression run of beir_bm25_flat per test session: ``(results folder, exit code)``."""
    from vtrepro.regress.runner import main as regress
    from vtrepro.regress.spec import REGRESSIONS_DIR

    output = tmp_path_factory.mktemp("runs")
    code = regress(["--spec", str(REGRESSIONS_DIR / "beir_bm25_flat.yaml"), "--data-dir", str(data_dir),
                    "--output", str(output)])
    return output / "beir_bm25_flat", code


@pytest.fixture(scope="session")
def _chromium():
    """One headless Chromium per test session (``tests/browser.py``); skips when Chromium is absent
    (``.ci/run`` installs it; playwright is a test dependency, so its absence fails)."""
    from browser import INSTALL_HINT, Browser, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip(f"Chromium not found: {INSTALL_HINT}")
    with Browser(executable) as browser:
        yield browser


@pytest.fixture
def browser_render(_chromium):
    """``render(html, screenshot) -> browser.Rendering`` in the session's headless Chromium."""
    return _chromium.render
