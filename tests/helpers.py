"""Helpers the tests share: small input writers, commands run in process, real sub-collections and the
session's encode cache. Fixtures live in ``conftest.py``; every plain function or constant a test imports
lives here, once (no test imports ``conftest``: ``tests/unit/test_helpers_module.py``)."""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import runpy
import shutil
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import yaml

from vtrepro.core.cli import cli_entry
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file
from vtrepro.encode.folder import TIMINGS_NAME
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, escape_term

REPO_ROOT = Path(__file__).resolve().parent.parent


# Small input files ---------------------------------------------------------------------------------------

def write_jsonl(path: Path, records: list[dict]) -> Path:
    """``records`` as JSON lines at ``path`` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def write_vectors(folder: Path, documents: dict[str, dict[str, int]] | list[dict],
                  extra_line: str | bytes | None = None) -> Path:
    """A JsonVectorCollection folder of one shard: ``documents`` as id -> term -> impact (written as Pyserini's
    records), or records as they are (malformed ones too), then ``extra_line`` as it is."""
    folder.mkdir(parents=True, exist_ok=True)
    records = documents if isinstance(documents, list) else [{"id": doc_id, "contents": "", "vector": vector}
                                                             for doc_id, vector in documents.items()]
    data = "".join(json.dumps(record) + "\n" for record in records).encode()
    if extra_line is not None:
        data += extra_line if isinstance(extra_line, bytes) else extra_line.encode() + b"\n"
    (folder / "part-00000.jsonl").write_bytes(data)
    return folder


def write_recipe(path: Path, recipe: dict) -> Path:
    """A training recipe (a dict) as YAML at ``path``."""
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def triples_recipe(model: Path, triples: Path, **training) -> dict:
    """A recipe of a few training steps on a triples file (InfoNCE, FLOPS weights 0.001): batch 2, lengths 16
    and 32, one step unless ``training`` says otherwise (its keys replace the defaults)."""
    return {"model": str(model), "data": {"format": "triples", "path": str(triples)},
            "loss": {"ranking": "infonce", "lambda_q": 0.001, "lambda_d": 0.001},
            "training": {"steps": 1, "batch_size": 2, "lr": 5.0e-5, "max_length_query": 16, "max_length_doc": 32,
                         "save_every": 100, **training}}


def nfcorpus_triples(path: Path, data_dir: Path, count: int) -> Path:
    """The first ``count`` NFCorpus train queries, each with a judged document and a seeded random unjudged one
    as ``query<TAB>positive<TAB>negative`` lines."""
    from vtrepro.data.beir import load_dataset

    dataset = load_dataset("nfcorpus", data_dir)
    corpus = {document.doc_id: document.contents for document in dataset.corpus()}
    queries, qrels = dataset.queries("train"), dataset.qrels("train")
    rng, ids, lines = random.Random(0), sorted(corpus), []
    for qid, judged in list(qrels.items())[:count]:
        positive = next(doc_id for doc_id in judged if doc_id in corpus)
        negative = rng.choice([doc_id for doc_id in rng.sample(ids, 5) if doc_id not in judged])
        lines.append(f"{queries[qid]}\t{corpus[positive]}\t{corpus[negative]}")
    path.write_text("\n".join(lines) + "\n")
    return path


# Commands in process -------------------------------------------------------------------------------------

def run_command(main: Callable[..., Any], argv: list, capsys) -> tuple[int, str, str]:
    """A command run in process as its ``python -m`` entry runs it (argparse's exit included):
    ``(exit status, stdout, stderr)``."""
    try:
        code = cli_entry(main)([str(arg) for arg in argv])
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 0 if exited.code is None else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_module(module: str, *args, capsys) -> tuple[int, str, str]:
    """``python -m <module> <args>`` run in this process as the interpreter runs it (``runpy``: the module's, or
    its package's ``__main__``, with ``sys.argv`` set): ``(exit status, stdout, stderr)``. For tests of a
    command's behaviour; a test whose point is a separate process (its start, a kill, a whole process's
    stderr with Java's) starts one."""
    argv = sys.argv
    sys.argv = [module, *map(str, args)]
    try:
        with warnings.catch_warnings():  # runpy warns when the module (vtrepro.__main__) was imported before: not a user's case
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 0 if exited.code is None else 1
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# Real sub-collections ------------------------------------------------------------------------------------

def write_sub_collection(source, root: Path, name: str, distractors: int, split: str = "test") -> Path:
    """A BEIR folder ``root/beir/<name>`` cut from the dataset ``source``: every document judged for ``split``'s
    queries and the first ``distractors`` others, in corpus order, with that split's queries and qrels. Each
    query keeps all its judged documents, so its ideal ranking (nDCG's denominator) is the full collection's;
    only the unjudged competition shrinks. Returns the data root ``root``."""
    qrels = source.qrels(split)
    judged = {doc_id for documents in qrels.values() for doc_id in documents}
    others = 0
    kept = []
    for document in source.corpus():
        if document.doc_id in judged:
            kept.append(document)
        elif others < distractors:
            kept.append(document)
            others += 1
    folder = root / "beir" / name
    write_jsonl(folder / "corpus.jsonl", [{"_id": document.doc_id, "title": document.title, "text": document.text}
                                          for document in kept])
    write_jsonl(folder / "queries.jsonl", [{"_id": qid, "text": text} for qid, text in source.queries(split).items()])
    present = {document.doc_id for document in kept}
    (folder / "qrels").mkdir()
    (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{qid}\t{doc_id}\t{score}\n" for qid, documents in qrels.items()
        for doc_id, score in documents.items() if doc_id in present))
    return root


# The encode cache ----------------------------------------------------------------------------------------

CODE_FOLDERS = ("vtrepro/model", "vtrepro/encode")
"""The code that makes encoded vectors: its source is part of every cache key, so a kept cache
(``VTREPRO_TEST_CACHE``) is never reused across a change to it."""


def _code_digest() -> str:
    digest = hashlib.sha256()
    for folder in CODE_FOLDERS:
        for path in sorted((REPO_ROOT / folder).glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class EncodeCache:
    """Encoded corpora by what makes them (model weights and vocabulary, corpus, every encoder, quantization
    and shard setting: the manifest's own settings, and the encoding code), so a test session encodes each
    corpus once whatever number of tests ask for it. Entries are complete ``encode`` folders; :meth:`seed`
    copies one where a command will look for it, whose resumable shards then find every shard done.

    The cache lives in the session's temporary folder, or in ``VTREPRO_TEST_CACHE`` to keep it between
    sessions (keys include the code's digest, so a change to the encoder invalidates it)."""

    def __init__(self, root: Path):
        self.root = root
        self.hits: list[str] = []
        self.misses: list[str] = []
        self._code = _code_digest()

    def folder(self, encoder, documents, quantization=None) -> Path:
        """The complete encoded folder of ``documents`` by ``encoder`` (with ``quantization``, default the
        toolkit's), encoded now unless the cache has it."""
        from vtrepro.encode.manifest import settings_digest
        from vtrepro.encode.vectors import Quantization
        from vtrepro.encode.writer import encode_corpus, encoding_settings

        quantization = quantization or Quantization()
        settings = encoding_settings(encoder, documents, quantization)
        key = hashlib.sha256(f"{settings_digest(settings)} {self._code}".encode()).hexdigest()[:20]
        folder = self.root / key
        label = f"{Path(str(getattr(encoder.model, 'name_or_path', ''))).name}: {len(documents)} documents ({key})"
        if (folder / "manifest.json").is_file() and json.loads((folder / "manifest.json").read_text())["complete"]:
            self.hits.append(label)
            return folder
        self.misses.append(label)
        shutil.rmtree(folder, ignore_errors=True)
        encode_corpus(encoder, documents, folder, quantization, show_progress=False)
        return folder

    @staticmethod
    def seed(folder: Path, target: Path) -> Path:
        """Copy the cached encoded ``folder`` (manifest, shards, receipts) to ``target``, a folder that
        ``encode`` or ``regress`` will then resume with nothing left to encode."""
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, target)
        return target

    def summary(self) -> str:
        """One line: hits and misses, then each miss (what was encoded)."""
        return (f"encode cache: {len(self.hits)} hits, {len(self.misses)} misses"
                + "".join(f"\n  encoded: {label}" for label in self.misses)
                + "".join(f"\n  reused:  {label}" for label in self.hits))


def cache_root(default: Path) -> Path:
    """Where the session's encode cache lives: ``VTREPRO_TEST_CACHE`` when set, else ``default``."""
    kept = os.environ.get("VTREPRO_TEST_CACHE")
    return Path(kept).resolve() if kept else default


def repeated_encodings(root: Path, minimum_documents: int) -> list[str]:
    """Encoded folders under ``root`` (a test session's temporary folders) whose manifests record the same
    settings but whose timings differ: the same corpus encoded more than once (a copy from the cache carries
    its ``timings.json`` byte for byte, an encoding writes its own seconds; vectors unpacked from a bundle or a
    prebuilt index come without one, and were not encoded here). Only corpora of at least
    ``minimum_documents`` documents count: encoding tests encode small inputs on purpose."""
    encodings: dict[str, set[str]] = {}
    for manifest_path in root.rglob("manifest.json"):
        try:  # the bounded reader: tests leave FIFOs and links to /dev/zero named manifest.json here on purpose
            manifest = read_json_file(manifest_path, "a test's own file", JSON_FILE_BYTES["manifest"])
        except VtreproError:
            continue
        if not isinstance(manifest, dict) or not manifest.get("complete") or manifest.get("documents", 0) < minimum_documents:
            continue
        timings = manifest_path.parent / TIMINGS_NAME
        if not timings.is_file():  # not encoded here: vectors read from a bundle or a prebuilt index
            continue
        settings = json.dumps(manifest.get("settings"), sort_keys=True)
        encodings.setdefault(settings, set()).add(hashlib.sha256(timings.read_bytes()).hexdigest())
    return [f"corpus {json.loads(settings)['corpus_sha256'][:12]}: encoded {len(runs)} times with the same settings"
            for settings, runs in encodings.items() if len(runs) > 1]


# The other Anserini major --------------------------------------------------------------------------------

ANSERINI_SEARCH = """
import collections, sys
import jnius_config
jar, index, topics, hits, output = sys.argv[1:]
jnius_config.add_classpath(jar)
jnius_config.add_options("-Xrs")
from jnius import autoclass
HashMap, Integer = autoclass("java.util.HashMap"), autoclass("java.lang.Integer")
searcher = autoclass("io.anserini.search.SimpleImpactSearcher")(index)
with open(topics, encoding="utf-8") as lines, open(output, "w", encoding="utf-8") as run:
    for line in lines:
        qid, _, text = line.rstrip("\\n").partition("\\t")
        query = HashMap()
        for term, count in collections.Counter(text.split(" ")).items():
            query.put(term, Integer(count))
        for rank, hit in enumerate(searcher.search(query, int(hits)), start=1):
            run.write(f"{qid} Q0 {hit.docid} {rank} {hit.score:.6f} anserini\\n")
"""
"""Search pretokenized impact topics (``qid<TAB>terms``, a term's count its weight, as Anserini's topic reader
reads them) with Anserini's ``SimpleImpactSearcher`` in a JVM of its own holding only ``jar``: argv ``jar index
topics hits output``. Anserini 2's command-line search (``SearchCollection``) first looks ``-index`` up in the
prebuilt-index registry on GitHub, so offline only its API opens a local folder."""


def anserini_jar_cache() -> Path:
    """Where fat jars taken from Pyserini's source distributions are kept between sessions."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vtrepro" / "anserini-jars"


def other_anserini_jar(release) -> Path | str:
    """The fat jar of ``release`` (a :class:`vtrepro.core.anserini.Release`) from its Pyserini's source
    distribution on the package index (``pip download``, kept in :func:`anserini_jar_cache`), or why it cannot
    be had."""
    cache = anserini_jar_cache() / re.sub(r"[^A-Za-z0-9.]+", "_", release.requirement)
    jars = sorted(cache.glob("anserini-*-fatjar.jar"))
    if jars:
        return jars[-1]
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--ignore-requires-python", "--quiet", release.requirement, "--dest", download]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return f"'pip download {release.requirement}' took over 15 minutes"
        sdists = sorted(Path(download).glob("pyserini-*.tar.gz"))
        if result.returncode != 0 or not sdists:
            return f"'pip download {release.requirement}' failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}"
        with tarfile.open(sdists[-1]) as archive:
            member = next((member for member in archive.getmembers()
                           if Path(member.name).match("pyserini/resources/jars/anserini-*-fatjar.jar")), None)
            if member is None:
                return f"{sdists[-1].name} holds no Anserini fat jar"
            cache.mkdir(parents=True, exist_ok=True)
            staged = cache / f".{Path(member.name).name}.part"
            with archive.extractfile(member) as source, open(staged, "wb") as target:
                shutil.copyfileobj(source, target)
            return staged.rename(cache / Path(member.name).name)

# Small data roots, specs and command failures (tests import these; conftest's fixtures use them too) ------

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


def record_mini_spec(root: Path, model: Path) -> tuple[Path, Path, Path]:
    """A spec of splade-tiny on the mini collection (:func:`write_mini_beir`), recorded by ``regress --record``
    into ``root``: ``(spec, data root, runs folder)``."""
    from vtrepro.regress.command import main as regress_main

    data = write_mini_beir(root / "data")
    spec = root / "mini_spec.yaml"
    spec.write_text(f"conditions:\n  tiny:\n    model: {model}\n"
                    "    encoder: {max_length_doc: 64, max_length_query: 16, batch_size: 2}\n"
                    "    datasets:\n      mini:\n")
    runs = root / "runs"
    assert cli_entry(regress_main)(["--spec", str(spec), "--data-dir", str(data), "--runs", str(runs), "--record"]) == 0
    return spec, data, runs


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


def seed_spec_encodings(spec: Path, output: Path, models_dir: Path, data_dir: Path, cache: EncodeCache) -> None:
    """Put the cache's encodings of every SPLADE condition and dataset of ``spec`` where ``regress --output
    output`` looks for them (``<output>/<spec>/<condition>/<dataset>/``), encoding what the cache lacks."""
    from vtrepro.data.beir import load_dataset
    from vtrepro.model.splade import SpladeEncoder
    from vtrepro.regress.spec import load_spec

    loaded = load_spec(spec)
    for condition in loaded.conditions:
        encoder = SpladeEncoder(condition.model, condition.encoder, model_dir=str(models_dir))
        for dataset_run in condition.datasets:
            documents = load_dataset(dataset_run.name, data_dir).corpus()
            folder = cache.folder(encoder, documents, condition.quantization)
            cache.seed(folder, output / loaded.name / condition.name / dataset_run.name)
