"""Shared fixtures: real assets from ../shared (never copied into the repo).

Session fixtures that hand tests a mutable object or folder (the loaded encoder, the sample documents,
built indexes and runs) are guarded: :func:`_shared_fixtures_unchanged` fingerprints what a test may
not change in them after every test that uses them (directly or through another fixture) and fails
that test by name when it changed them, then restores them where that is cheap, so no test sees
another's changes and none pays for a fresh model load.
"""
from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import (
    HAND_MADE_DOCS,
    REPO_ROOT,
    EncodeCache,
    cache_root,
    repeated_encodings,
    seed_spec_encodings,
    write_mini_beir,
)


def _shared_dir() -> Path:
    return Path(os.environ.get("VTREPRO_SHARED", REPO_ROOT.parent / "shared")).resolve()


INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"
"""Real-data and outside-tool tests (whole corpora, other tools run on what vtrepro wrote, other processes):
every one is ``slow``, by its folder."""


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """The fast tier (``-m "not slow"``) does not import ``tests/integration/``: every test there is slow, and
    its modules' imports (ModernBERT's modelling code, every shipped spec) cost seconds of collection."""
    if config.option.markexpr.strip() == "not slow" and collection_path == INTEGRATION_DIR:
        return True
    return None


def pytest_collection_modifyitems(config, items) -> None:
    """Mark every test under ``tests/integration/`` slow (the tiers: pyproject.toml's markers, docs/testing.md)."""
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.slow)


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


@dataclass
class SharedGuard:
    """What no test may change in a session fixture's value: ``fingerprint()`` now against ``baseline``
    (taken when the fixture was made), and ``restore()`` that puts the value back, or None where that
    is too costly (the failure then names the test and later tests may fail too)."""

    fingerprint: Callable[[], dict[str, Any]]
    baseline: dict[str, Any]
    restore: Callable[[], None] | None = None

    def changes(self) -> list[str]:
        """The parts of the fingerprint that differ from the baseline."""
        now = self.fingerprint()
        return sorted(key for key in {*now, *self.baseline} if now.get(key) != self.baseline.get(key))


_GUARDS: dict[str, SharedGuard] = {}
"""Guarded session fixtures by name, registered by :func:`guard` as each is made."""


def guard(name: str, fingerprint: Callable[[], dict[str, Any]], restore: Callable[[], None] | None = None) -> None:
    """Guard the session fixture ``name`` from here on: its current fingerprint is the baseline."""
    _GUARDS[name] = SharedGuard(fingerprint, fingerprint(), restore)


@pytest.fixture(autouse=True)
def _shared_fixtures_unchanged(request):
    """After each test, fail it by name when it (or a fixture it uses) changed a guarded session fixture."""
    yield
    for name in request.fixturenames:
        shared = _GUARDS.get(name)
        if shared is None:
            continue
        changed = shared.changes()
        if not changed:
            continue
        if shared.restore is not None:
            shared.restore()
        pytest.fail(f"{request.node.nodeid} changed the session fixture '{name}' ({', '.join(changed)}), which "
                    f"other tests share; work on a copy instead{'' if shared.restore else ' (not restored)'}",
                    pytrace=False)


def folder_fingerprint(folder: Path, pattern: str = "**/*") -> dict[str, Any]:
    """SHA-256 of each file under ``folder`` matching ``pattern``, by relative path."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob(pattern)) if path.is_file()}


def restore_folder(folder: Path, snapshot: Path) -> Callable[[], None]:
    """Copy ``folder`` to ``snapshot`` now; the function returned puts that copy back in its place."""
    shutil.copytree(folder, snapshot)

    def restore() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(snapshot, folder)

    return restore


@pytest.fixture(scope="session")
def scifact_sample(data_dir: Path):
    """The first 60 scifact documents: small enough to encode several times in a test."""
    from vtrepro.data.beir import load_dataset

    sample = load_dataset("scifact", data_dir).corpus()[:60]
    pristine = tuple(sample)  # documents are frozen: the list itself is what a test could change

    def restore() -> None:
        sample[:] = pristine

    guard("scifact_sample", lambda: {"documents": tuple(sample)}, restore)
    return sample


def encoder_state(encoder) -> dict[str, Any]:
    """What a test could change in a loaded SpladeEncoder: its weights (checksum, dtypes, devices,
    requires_grad), train/eval mode, settings, tokenizer and vocabulary. The projection timer is left out:
    encoding moves it."""
    import torch

    weights = hashlib.sha256()
    for name, tensor in encoder.model.state_dict(keep_vars=True).items():
        weights.update(f"{name} {tensor.dtype} {tensor.device} {tuple(tensor.shape)} {tensor.requires_grad}".encode())
        weights.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    tokenizer = encoder.tokenizer
    settings = ("device", "options")
    return {
        "weights": weights.hexdigest(),
        "training": tuple(name for name, module in encoder.model.named_modules() if module.training),
        **{name: getattr(encoder, name) for name in settings},
        "parts": (type(encoder.model).__name__, type(tokenizer).__name__, type(encoder.screened).__name__,
                  encoder._decoder is encoder.model.get_output_embeddings()),
        "tokenizer": (len(tokenizer), tokenizer.model_max_length, tokenizer.padding_side, tokenizer.truncation_side),
        "vocabulary": hashlib.sha256("\n".join(encoder.vocabulary).encode()).hexdigest(),
        "special_ids": encoder.special_ids,
        "dropped_ids": tuple(encoder._dropped_ids.tolist()),
    }


@pytest.fixture(scope="session")
def tiny_encoder(splade_tiny: Path):
    """One loaded splade-tiny SpladeEncoder per test session (max_length_doc 256, the dense projection: the
    reference the screened one is compared with), guarded: a test that changes it fails, and a deep copy made
    at load restores it in place for the next."""
    from vtrepro.model.encoder_options import EncoderOptions
    from vtrepro.model.splade import SpladeEncoder

    encoder = SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=256, projection="dense"))
    pristine = copy.deepcopy(encoder)

    def restore() -> None:
        fresh = vars(copy.deepcopy(pristine))
        vars(encoder).clear()
        vars(encoder).update(fresh)

    guard("tiny_encoder", lambda: encoder_state(encoder), restore)
    return encoder


@pytest.fixture(scope="session")
def gpt2_bpe(tmp_path_factory) -> Path:
    """A folder holding a real cased byte-level BPE tokenizer: GPT-2's exact files in RoBERTa's layout
    (guarded: restored from a copy when a test changes it)."""
    from vtrepro.vocabulary.gpt2 import write_gpt2_bpe_tokenizer

    folder = write_gpt2_bpe_tokenizer(tmp_path_factory.mktemp("gpt2-bpe"))
    guard("gpt2_bpe", lambda: folder_fingerprint(folder),
          restore_folder(folder, tmp_path_factory.mktemp("gpt2-bpe-pristine") / "copy"))
    return folder


@pytest.fixture
def mini_beir(tmp_path: Path) -> Path:
    """A data root holding beir/mini (see ``write_mini_beir``)."""
    return write_mini_beir(tmp_path)


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
    restore_index = restore_folder(index, tmp_path_factory.mktemp("impact-index-pristine") / "copy")
    pristine = copy.deepcopy(stats)

    def restore() -> None:
        restore_index()
        stats.clear()
        stats.update(copy.deepcopy(pristine))

    guard("impact_index", lambda: {**folder_fingerprint(index), "stats": copy.deepcopy(stats)}, restore)
    return index, stats


RUN_ARTIFACTS = ("*/*/run.trec", "*/*/queries.jsonl", "*/*/vectors/*.jsonl")
"""What other tests read of a regression run and a rerun leaves byte for byte (its report, timings and
index are rewritten): each ``<condition>/<dataset>/``'s run file, query vectors and corpus vectors."""


def guard_run(name: str, out_dir: Path) -> None:
    """Guard a regression run's :data:`RUN_ARTIFACTS` by checksum (too large to keep a copy of, so not restored)."""
    guard(name, lambda: {path: digest for pattern in RUN_ARTIFACTS
                         for path, digest in folder_fingerprint(out_dir, pattern).items()})


_ENCODE_CACHE: list[EncodeCache] = []
"""The session's encode cache, once made (read by :func:`pytest_terminal_summary`)."""
FULL_CORPUS_DOCUMENTS = 1000
"""From this many documents an encoding counts as a real corpus's, which no session may encode twice."""


@pytest.fixture(scope="session")
def encode_cache(tmp_path_factory) -> EncodeCache:
    """The session's :class:`helpers.EncodeCache`: every test that needs a real corpus encoded asks it."""
    cache = EncodeCache(cache_root(tmp_path_factory.mktemp("encode-cache")))
    _ENCODE_CACHE.append(cache)
    return cache


_SECONDS_BY_FOLDER: dict[str, float] = {}


def timed_folder(nodeid: str) -> str:
    """The folder a test is timed under: ``unit/<package>``, ``integration`` or ``catalogue``."""
    parts = nodeid.split("::")[0].split("/")[1:-1]
    return "/".join(parts[:2] if parts[:1] == ["unit"] else parts[:1]) or "tests"


def pytest_runtest_logreport(report) -> None:
    """Add each test's setup, call and teardown time to its folder's (fixtures count where they are built)."""
    folder = timed_folder(report.nodeid)
    _SECONDS_BY_FOLDER[folder] = _SECONDS_BY_FOLDER.get(folder, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Seconds per test folder; the encode cache's hits and misses, and any real corpus encoded twice with the
    same settings."""
    if _SECONDS_BY_FOLDER:
        terminalreporter.write_line("seconds per folder: " + ", ".join(
            f"{folder} {seconds:.0f}" for folder, seconds in sorted(_SECONDS_BY_FOLDER.items(), key=lambda item: -item[1])))
    if not _ENCODE_CACHE:
        return
    terminalreporter.write_line(_ENCODE_CACHE[0].summary())
    basetemp = config._tmp_path_factory.getbasetemp()
    repeated = repeated_encodings(basetemp, FULL_CORPUS_DOCUMENTS)
    terminalreporter.write_line("corpora of >= {} documents encoded twice: {}".format(
        FULL_CORPUS_DOCUMENTS, "; ".join(repeated) if repeated else "none"))


@pytest.fixture(scope="session")
def splade_tiny_run(tmp_path_factory, data_dir, models_dir, encode_cache):
    """One regression run of beir_splade_tiny per test session, from the encode cache's encodings:
    ``(args, results folder, exit code)``; the arguments are a tuple, so no test can change them."""
    from vtrepro.core.shipped import SHIPPED_DIR
    from vtrepro.regress.command import main as regress

    output = tmp_path_factory.mktemp("runs")
    spec = SHIPPED_DIR / "beir_splade_tiny.yaml"
    seed_spec_encodings(spec, output, models_dir, data_dir, encode_cache)
    args = ("--spec", str(spec), "--data-dir", str(data_dir),
            "--model-dir", str(models_dir), "--runs", str(output))
    code = regress(list(args))
    guard_run("splade_tiny_run", output / "beir_splade_tiny")
    return args, output / "beir_splade_tiny", code


@pytest.fixture(scope="session")
def exported(splade_tiny_run, data_dir, tmp_path_factory):
    """``export index`` of the session's beir_splade_tiny run, scifact only: ``(the run's folder, the output
    folder holding the tarball, its checksums and prebuilt.json)``."""
    from vtrepro.core.cli import cli_entry
    from vtrepro.core.shipped import SHIPPED_DIR
    from vtrepro.regress.command import export_main as export

    _, run_root, code = splade_tiny_run
    assert code == 0
    output = tmp_path_factory.mktemp("prebuilt")
    assert cli_entry(export)(["index", "--spec", str(SHIPPED_DIR / "beir_splade_tiny.yaml"), "--runs",
                              str(run_root.parent), "--datasets", "scifact", "--data-dir", str(data_dir),
                              "--output", str(output)]) == 0
    guard("exported", lambda: folder_fingerprint(output))  # the tarball, its checksums and prebuilt.json
    return run_root / "splade-tiny" / "scifact", output


@pytest.fixture(scope="session")
def bm25_flat_run(tmp_path_factory, data_dir):
    """One regression run of beir_bm25_flat per test session: ``(results folder, exit code)``."""
    from vtrepro.core.shipped import SHIPPED_DIR
    from vtrepro.regress.command import main as regress

    output = tmp_path_factory.mktemp("runs")
    code = regress(["--spec", str(SHIPPED_DIR / "beir_bm25_flat.yaml"), "--data-dir", str(data_dir),
                    "--output", str(output)])
    guard_run("bm25_flat_run", output / "beir_bm25_flat")
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


def pytest_collection_finish(session) -> None:
    """What collection leaves alive (imported modules, parametrize tables) lives for the whole session: frozen,
    it is never walked again by a garbage collection, so each one (the automatic ones and the one after each
    module) costs what the tests allocate, not the 0.2-0.3 s a full walk of torch and transformers took."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _memory_returned_after_each_module():
    """The whole suite runs in one process on a 24 GB machine: after each module its figures are closed, its
    garbage collected and the freed heap handed back to the system (glibc's ``malloc_trim``), so the memory of
    one module's large transient reads (vocabularies, JSON, corpora) is not kept by the process for the rest."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to hand back this way
        ctypes.CDLL("libc.so.6").malloc_trim(0)
