"""Building a condition's model (its own, a trained recipe's, or a transferred and calibrated
checkpoint) and running it over one dataset: encode or reuse vectors, index, search, score."""
from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file, write_json
from vtrepro.core.launch import Job, Shared, launch
from vtrepro.encode.fingerprint import VectorDiff, VectorSetSummary, fingerprint_vectors
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.queries import encode_queries
from vtrepro.encode.reader import read_query_vectors
from vtrepro.encode.writer import encode_corpus
from vtrepro.evaluate.trec import evaluate_per_query, mean_scores
from vtrepro.index.lucene import build_bm25_index, build_impact_index
from vtrepro.regress.compare import Observation
from vtrepro.regress.context import RunContext
from vtrepro.regress.efficiency import Efficiency, measure
from vtrepro.regress.sources import scan_encoded, vector_differences
from vtrepro.regress.spec import Condition, DatasetRun, EncodedVectors, Spec
from vtrepro.report.results import PER_QUERY_NAME
from vtrepro.search.lucene import search_bm25, search_impact
from vtrepro.search.runs import SearchTiming, read_trec_run, write_trec_run
from vtrepro.training.recipe import load_recipe
from vtrepro.training.run_folder import TRAINING_REPORT, stage_dir
from vtrepro.training.stages import Stage, stage_job

logger = logging.getLogger(__name__)

# The SPLADE and IDF encoders (torch, transformers) are imported where a model is loaded, on purpose:
# BM25 conditions, pinned-vector runs, `--dry-run` and `--help` never pay for them.


def _stamp(folder: Path) -> Path:
    return folder.parent / f"{folder.name}.build.json"


def _is_built(folder: Path, settings: dict[str, Any]) -> bool:
    """Whether ``folder`` was built from ``settings`` (its ``build.json`` stamp, read by the one bounded JSON
    reader, says so)."""
    stamp = _stamp(folder)
    return folder.is_dir() and os.path.lexists(stamp) and read_json_file(
        stamp, f"remove it and {folder} to build them again", JSON_FILE_BYTES["stamp"], folder.parent) == settings


def _cached_build(folder: Path, settings: dict[str, Any], build: Callable[[Path], object]) -> Path:
    """Build ``folder`` unless it was already built from the same settings (``build.json`` stamp)."""
    if _is_built(folder, settings):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    build(folder)
    write_json(_stamp(folder), settings)
    return folder


SOURCES_DIRNAME = ".sources"
"""Under a run's folder: the transfer sources its spec declares built (``source: {build: ..., from: ...}``),
each built once for every condition that transfers from it."""
_SOURCE_BUILDS = {"round_trip": "moved onto GPT-2's BPE vocabulary"}
"""What each build of :data:`vtrepro.regress.spec.SOURCE_BUILDS` makes of its ``from`` model."""


def _source_folder(condition: Condition, run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Where the condition's built source goes, and the settings its stamp records."""
    assert condition.source_build is not None and condition.model is not None
    folder = run_dir / SOURCES_DIRNAME / f"{condition.source_build}-{Path(condition.model).name}"
    return folder, {"build": condition.source_build, "from": condition.model}


def built_source(condition: Condition, run_dir: Path, model_dir: str | None) -> Path:
    """The condition's transfer source, built once from its ``model`` under ``run_dir`` (``round_trip``:
    :func:`vtrepro.vocabulary.gpt2.write_round_trip_source`)."""
    from vtrepro.vocabulary.gpt2 import write_round_trip_source  # tokenizers and GPT-2's files: only this build

    folder, settings = _source_folder(condition, run_dir)
    return _cached_build(folder, settings, lambda out: write_round_trip_source(settings["from"], out, model_dir))


def describe_source(condition: Condition, run_dir: Path) -> str:
    """For a plan: what the condition's built source is and where it is (or will be) built; '' for none."""
    if condition.source_build is None:
        return ""
    folder, settings = _source_folder(condition, run_dir)
    state = "built" if _is_built(folder, settings) else "to build once"
    return f", {_SOURCE_BUILDS[condition.source_build]} ({condition.source_build} source, {state} in {folder})"


def _corpus_file(folder: Path) -> Path:
    """A BEIR folder's corpus file (``corpus.jsonl`` or ``corpus.jsonl.gz``)."""
    plain = folder / "corpus.jsonl"
    return plain if plain.is_file() else folder / "corpus.jsonl.gz"


def trained_model(recipe_name: str, train_root: Path, model_dir: str | None, data_dir: str | None) -> str:
    """``<train_root>/<recipe>/final``, trained first by ``python -m vtrepro train`` unless it exists.

    A finished model trained from other recipe settings is refused rather than silently evaluated.
    """

    recipe = load_recipe(recipe_name)
    output = train_root / recipe.name
    final = output / "final"
    if final.is_dir():
        report = final / TRAINING_REPORT
        fingerprint = read_json_file(report, f"remove {output} to retrain it", JSON_FILE_BYTES["model"], final,
                                     {"fingerprint": str})["fingerprint"] if os.path.lexists(report) else None
        if fingerprint != recipe.fingerprint():
            raise VtreproError(f"{final} was not trained from the current {recipe.path}; "
                               f"remove {output} to retrain it, or choose another --output")
        return str(final)
    logger.info(f"training {recipe.path} -> {final}")
    job = Job("train", ("--recipe", str(recipe.path), "--output", str(output)))
    launch(job, Shared(data_dir, model_dir, recipe.trust_remote_code), "subprocess",  # granted to regress before any run
           failed=f"training {recipe.path}", resume=f"rerunning resumes from the last checkpoint in {output}")
    return str(final)


def _build_stage(stage: Stage, model: str, shared: Shared, out: Path) -> None:
    launch(stage_job(stage, model, out), shared)


def build_model(condition: Condition, work_dir: Path, model_dir: str | None, data_dir: str | None,
                train_root: Path) -> str:
    """The condition's model: its ``model`` (or the source built from it, once for the run, in the folder
    above ``work_dir``), or the final model of its ``train`` recipe, then each of its stages (transfer,
    calibration) applied in order, each built once into ``work_dir``."""
    if condition.train:
        return trained_model(condition.train, train_root, model_dir, data_dir)
    model = str(condition.model)
    if condition.source_build is not None:
        model = str(built_source(condition, work_dir.parent, model_dir))
    shared = Shared(data_dir, model_dir, condition.trust_remote_code)
    for index, stage in enumerate(condition.stages):
        build = functools.partial(_build_stage, stage, model, shared)
        model = str(_cached_build(stage_dir(work_dir, index, stage), {"model": model, **stage.options.to_dict()}, build))
    return model


class ConditionRunner:
    """Runs one condition over datasets, keeping artifacts under ``<output>/<condition>/<dataset>/``
    (models of ``train`` recipes under ``context.train_root/<recipe>/``), with the models, data, threads
    and encode processes of ``context``."""

    def __init__(self, condition: Condition, spec: Spec, output: Path, context: RunContext):
        self.condition, self.spec, self.output, self.train_root = condition, spec, output, context.train_root
        self.model_dir, self.data_dir, self.threads = context.model_dir, context.data_dir, context.threads
        self.encode_processes = context.encode_processes
        self.shared = Shared(self.data_dir, self.model_dir, condition.trust_remote_code)
        """What a command this runner launches shares with it: the folders, and the condition's grant to run
        model code (the spec's ask, granted by regress's --trust-remote-code before any run)."""
        self._encoder = None
        self._idf_encoder = None
        self._model: str | None = None
        self._model_error: VtreproError | None = None

    @property
    def model(self) -> str:
        """The condition's model, built once; a build that failed is not retried for the next dataset."""
        if self._model_error is not None:
            raise self._model_error
        if self._model is None:
            try:
                self._model = build_model(self.condition, self.output / self.condition.name, self.model_dir,
                                          self.data_dir, self.train_root)
            except VtreproError as error:
                self._model_error = error
                raise
        return self._model

    @property
    def query_encoder(self):
        """The SPLADE encoder itself, or for ``query_encoder: idf`` the model's IDF table (inference-free), loaded
        once for every dataset of the condition."""
        if self.condition.query_encoder == "idf":
            if self._idf_encoder is None:
                from vtrepro.model.idf import IdfQueryEncoder

                self._idf_encoder = IdfQueryEncoder.load(self.model, self.model_dir,
                                                         self.condition.encoder.max_length_query)
            return self._idf_encoder
        return self.encoder

    @property
    def encoder(self):
        """The condition's SPLADE encoder with its spec's encoder options, loaded once."""
        if self._encoder is None:
            from vtrepro.model.splade import SpladeEncoder

            self._encoder = SpladeEncoder(self.model, self.condition.encoder, model_dir=self.model_dir,
                                          trust_remote_code=self.shared.trust_remote_code)
        return self._encoder

    def run(self, dataset_run: DatasetRun, dataset, encoded: EncodedVectors | None = None,
            reference: EncodedVectors | None = None) -> Observation:
        """Run one dataset: from ``encoded`` vectors when given (else the spec's, else encode here);
        ``reference`` vectors, when given, are only compared with the ones used."""

        started = time.perf_counter()
        artifacts = self.output / self.condition.name / dataset_run.name
        queries = dataset.queries(dataset_run.split)
        qrels = dataset.qrels(dataset_run.split)
        vectors: dict[str, VectorSetSummary] = {}
        differences: dict[str, VectorDiff] = {}
        used: EncodedVectors | None = None
        if self.condition.retrieval == "bm25":
            run, stats, efficiency = self._bm25(dataset, queries, artifacts)
        else:
            source = encoded or dataset_run.encoded
            run, stats, vectors, used, efficiency = self._impact(dataset, queries, artifacts, source)
            if reference is not None:
                differences = vector_differences(reference, used)
        write_trec_run(run, artifacts / "run.trec", tag=f"vtrepro-{self.condition.name}")
        # Score the file as written, exactly what trec_eval on run.trec reports; per-query scores feed
        # the report's significance tests.
        per_query = evaluate_per_query(read_trec_run(artifacts / "run.trec"), qrels, self.spec.metrics)
        write_json(artifacts / PER_QUERY_NAME, per_query)
        scores = mean_scores(per_query)
        return Observation(scores, {key: stats[key] for key in ("documents", "total_terms")},
                           round(time.perf_counter() - started, 1), vectors, differences, efficiency, used)

    def _bm25(self, dataset, queries: dict[str, str], artifacts: Path):

        documents = ((document.doc_id, document.contents) for document in dataset.corpus())
        began = time.perf_counter()
        stats = build_bm25_index(documents, artifacts / "index", threads=self.threads)
        index_seconds, timing = time.perf_counter() - began, SearchTiming()
        run = search_bm25(artifacts / "index", queries, self.spec.k, self.threads,
                          k1=self.condition.bm25.k1, b=self.condition.bm25.b, timing=timing)
        return run, stats, measure(artifacts / "index", index_seconds, timing)

    def encode_job(self, dataset_folder: Path, artifacts: Path) -> Job:
        """The encode command of the corpus of ``dataset_folder`` into ``artifacts``, with the condition's
        encoder and quantization options."""
        return Job("encode", ("--model", self.model, "--corpus", str(_corpus_file(dataset_folder)),
                              "--output", str(artifacts)), (self.condition.encoder, self.condition.quantization))

    def _encode_with_torchrun(self, dataset_folder: Path, artifacts: Path) -> None:
        """Encode the corpus across ``encode_processes`` local processes (``torchrun``); the in-process
        encode that follows finds every shard done and only checks and merges. The condition's grant to
        run model code passes as ``--trust-remote-code``."""
        launch(self.encode_job(dataset_folder, artifacts), self.shared, "torchrun", self.encode_processes,
               failed=f"the {self.encode_processes}-process encode of {dataset_folder}",
               resume="rerunning resumes at the unfinished shards")

    def _impact(self, dataset, queries: dict[str, str], artifacts: Path, encoded: EncodedVectors | None):
        """Search with ``encoded`` vectors, or encode the corpus and queries here first."""

        quantization = self.condition.quantization
        if encoded is None:
            if self.encode_processes > 1:
                self._encode_with_torchrun(dataset.path, artifacts)
            documents = dataset.corpus()  # read and checked before the model loads
            encode_corpus(self.encoder, documents, artifacts, quantization, replace_other_settings=True)
            folder = EncodedFolder(artifacts)
            query_vectors = encode_queries(self.query_encoder, queries, folder.queries, quantization)
            encoded = EncodedVectors(folder.vectors, folder.queries)
        else:
            logger.info(f"  using vectors from {encoded.corpus} and {encoded.queries}")
            query_vectors = read_query_vectors(encoded.queries)
        scan = scan_encoded(encoded, artifacts)  # the pass that checked them before any work, or encode's, reused
        began = time.perf_counter()
        stats = build_impact_index(encoded.corpus, artifacts / "index", threads=self.threads, expected=scan.fingerprint)
        index_seconds, timing = time.perf_counter() - began, SearchTiming()
        run = search_impact(artifacts / "index", query_vectors, self.spec.k, self.threads, timing=timing)
        efficiency: Efficiency = measure(artifacts / "index", index_seconds, timing, encoded.corpus, scan.sparsity,
                                         query_vectors)
        vectors = {"corpus": scan.fingerprint, "queries": fingerprint_vectors(query_vectors)}
        return run, stats, vectors, encoded, efficiency
