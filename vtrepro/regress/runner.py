"""Run a regression spec end to end and check every score against its pinned value.

``python -m vtrepro.regress --spec regressions/beir_splade_tiny.yaml`` encodes each corpus into
quantized JSON vectors, builds an Anserini impact index (or a BM25 index), searches it, scores the
run with pytrec_eval and compares each metric with the spec (exactly, at 4 decimals) and with the
published reference where the spec gives one.

Figures are judged in one of two tiers. *fixed*: the vectors' fingerprints equal the pinned ones (or
the run is BM25 over fixed text), so every figure must match exactly. *encoded*: the vectors were
encoded here and differ from the pinned ones (another CPU, another float path), so index totals and
scores may move within the spec's tolerance: status OKISH, with the difference shown. ``--vectors``
takes published vectors (a bundle from ``python -m vtrepro export``) instead of encoding, which makes
every row exact on any machine. Exit status: 0 all OK or OKISH, 1 any FAIL (``--strict``: OKISH
too), 2 bad input.
"""
from __future__ import annotations

import argparse
import functools
import json
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from vtrepro.core.cli import cli_entry, command_parser, os_error_message, positive_int
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK, VtreproError
from vtrepro.core.io import atomic_write, check_output_folder, write_json
from vtrepro.encode.fingerprint import (
    VectorDiff,
    VectorSetSummary,
    compare_vectors,
    fingerprint_folder,
    fingerprint_vectors,
    load_vectors,
    vector_files,
)
from vtrepro.regress.bundle import BUNDLE_MANIFEST, QUERIES_NAME, open_bundle, read_bundle_manifest, verify_runs
from vtrepro.regress.spec import Condition, DatasetRun, EncodedVectors, Spec, load_spec, record_observed

STATUS_OK, STATUS_OKISH, STATUS_FAIL = "OK", "OKISH", "FAIL"
STATUS_UNPINNED, STATUS_SKIPPED, STATUS_ERROR = "UNPINNED", "SKIPPED", "ERROR"
TIER_FIXED, TIER_ENCODED, TIER_PUBLISHED = "fixed", "encoded", "published"


@dataclass
class ResultRow:
    condition: str
    dataset: str
    metric: str
    kind: str  # "vectors" (fingerprint), "index" (index statistic), "score" (pinned), "reference" (published)
    expected: float | int | str | None
    observed: float | int | str | None
    status: str
    tier: str = TIER_FIXED
    note: str = ""


@dataclass
class Observation:
    scores: dict[str, float]
    index: dict[str, int]
    seconds: float
    vectors: dict[str, VectorSetSummary] = field(default_factory=dict)  # empty for BM25
    differences: dict[str, VectorDiff] = field(default_factory=dict)  # against --reference-vectors


def _same(expected: float | int, observed: float | int) -> bool:
    return f"{expected:.4f}" == f"{observed:.4f}"


def _status(expected, observed, exact: bool, within: bool) -> str:
    if expected is None:
        return STATUS_UNPINNED
    if exact:
        return STATUS_OK
    return STATUS_OKISH if within else STATUS_FAIL


def tier_of(dataset: DatasetRun, observation: Observation) -> str:
    """``fixed`` when there are no vectors (BM25) or every pinned fingerprint matches, else ``encoded``."""
    if not observation.vectors:
        return TIER_FIXED
    matches = [dataset.vectors.get(name) == summary.sha256 for name, summary in observation.vectors.items()]
    return TIER_FIXED if all(matches) else TIER_ENCODED


def _vector_note(name: str, observation: Observation) -> str:
    summary = observation.vectors[name]
    what = "documents" if name == "corpus" else "queries"
    note = f"{summary.count} {what}, total impact {summary.total_impact}"
    diff = observation.differences.get(name)
    if diff is not None:
        note += (f"; vs reference: {diff.records_differing} {what} differ ({diff.impacts_differing} impacts, "
                 f"max |delta| {diff.max_impact_delta}, total {diff.total_impact_delta:+d})")
        if diff.only_in_first or diff.only_in_second:
            note += f", {diff.only_in_first} only in the reference, {diff.only_in_second} only here"
    return note


def compare(condition: Condition, dataset: DatasetRun, observation: Observation) -> list[ResultRow]:
    """Rows for one dataset: fingerprints, index stats, scores, published references.

    In the fixed tier every pinned figure must be equal; in the encoded tier index totals and scores
    may differ within the condition's tolerance (OKISH). Document counts are always exact.
    """
    tier = tier_of(dataset, observation)
    tolerance = condition.tolerance
    rows = []
    for name, summary in observation.vectors.items():
        if name not in dataset.vectors:
            continue  # a spec recorded before fingerprints: judged in the encoded tier
        expected = dataset.vectors[name]
        status = _status(expected, summary.sha256, expected == summary.sha256, within=True)
        rows.append(ResultRow(condition.name, dataset.name, f"vectors.{name}", "vectors", expected, summary.sha256,
                              status, tier, _vector_note(name, observation)))
    for stat, observed in observation.index.items():
        if stat in dataset.index:
            expected = dataset.index[stat]
            within = (expected is not None and stat == "total_terms" and tier == TIER_ENCODED
                      and abs(observed - expected) <= tolerance.total_terms * abs(expected))
            delta = None if expected is None else observed - expected
            note = "" if not delta else f"{delta:+d} ({delta / max(expected, 1):+.1e})"
            rows.append(ResultRow(condition.name, dataset.name, stat, "index", expected, observed,
                                  _status(expected, observed, expected == observed, within), tier, note))
    for metric, observed in observation.scores.items():
        expected = dataset.scores.get(metric)
        same = expected is not None and _same(expected, observed)
        delta = None if expected is None else round(observed, 4) - expected
        within = tier == TIER_ENCODED and delta is not None and abs(delta) <= tolerance.scores + 1e-9
        rows.append(ResultRow(condition.name, dataset.name, metric, "score", expected, observed,
                              _status(expected, observed, same, within), tier,
                              "" if same or delta is None else f"{delta:+.4f}"))
    for metric, published in dataset.reference.items():
        within = abs(round(observation.scores[metric], 4) - published) <= condition.reference_tolerance + 1e-9
        rows.append(ResultRow(condition.name, dataset.name, metric, "reference", published,
                              observation.scores[metric], STATUS_OK if within else STATUS_FAIL, TIER_PUBLISHED))
    return rows


def compare_averages(condition: Condition, observations: dict[str, Observation]) -> list[ResultRow]:
    """The condition's published averages, checked only when every one of its datasets ran."""
    rows = []
    complete = all(dataset.name in observations for dataset in condition.datasets)
    for metric, published in condition.reference_average.items():
        if not complete:
            rows.append(ResultRow(condition.name, "average", metric, "reference", published, None, STATUS_SKIPPED,
                                  TIER_PUBLISHED))
            continue
        mean = round(sum(obs.scores[metric] for obs in observations.values()) / len(observations), 4)
        within = abs(mean - published) <= condition.reference_tolerance + 1e-9
        rows.append(ResultRow(condition.name, "average", metric, "reference", published, mean,
                              STATUS_OK if within else STATUS_FAIL, TIER_PUBLISHED))
    return rows


def _cached_build(folder: Path, settings: dict[str, Any], build: Callable[[Path], None]) -> Path:
    """Build ``folder`` unless it was already built from the same settings (``build.json`` stamp)."""
    stamp = folder.parent / f"{folder.name}.build.json"
    if folder.is_dir() and stamp.is_file() and json.loads(stamp.read_text()) == settings:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    build(folder)
    write_json(stamp, settings)
    return folder


def trained_model(recipe_name: str, train_root: Path, model_dir: str | None, data_dir: str | None) -> str:
    """``<train_root>/<recipe>/final``, trained first by ``python -m vtrepro train`` unless it exists.

    A finished model trained from other recipe settings is refused rather than silently evaluated.
    """
    from vtrepro.training.recipe import load_recipe
    from vtrepro.training.run_folder import REPORT_NAME

    recipe = load_recipe(recipe_name)
    output = train_root / recipe.name
    final = output / "final"
    if final.is_dir():
        report = final / REPORT_NAME
        fingerprint = json.loads(report.read_text()).get("fingerprint") if report.is_file() else None
        if fingerprint != recipe.fingerprint():
            raise VtreproError(f"{final} was not trained from the current {recipe.path}; "
                               f"remove {output} to retrain it, or choose another --output")
        return str(final)
    command = [sys.executable, "-m", "vtrepro", "train", "--config", str(recipe.path), "--output", str(output)]
    command += ["--data-dir", data_dir] if data_dir else []
    command += ["--model-dir", model_dir] if model_dir else []
    print(f"training {recipe.path} -> {final}", file=sys.stderr, flush=True)
    if subprocess.run(command).returncode != 0:
        raise VtreproError(f"training {recipe.path} failed (its error is above); "
                           f"rerunning resumes from the last checkpoint in {output}")
    return str(final)


def build_model(condition: Condition, work_dir: Path, model_dir: str | None, data_dir: str | None,
                train_root: Path = Path("runs/train")) -> str:
    """The condition's model: its ``model``, the final model of its ``train`` recipe, or the
    checkpoint its transfer/calibrate blocks build."""
    if condition.train:
        return trained_model(condition.train, train_root, model_dir, data_dir)
    model = condition.model
    if condition.transfer:
        from vtrepro.vocabulary.transfer import DEFAULT_TARGET, run_transfer

        settings = dict(condition.transfer)
        source = settings.pop("source")
        target = settings.pop("target_tokenizer", DEFAULT_TARGET)
        reference = settings.pop("reference", None)
        init = settings.pop("init", "topology")
        stamp = {"source": source, "target_tokenizer": target, "reference": reference, "init": init, **settings}
        model = str(_cached_build(
            work_dir / "transferred", stamp,
            lambda folder: run_transfer(source, target, reference, init, folder, model_dir=model_dir, **settings),
        ))
    if condition.calibrate:
        from vtrepro.vocabulary.calibrate import run_calibration

        settings = dict(condition.calibrate)
        dataset = settings.pop("dataset")
        model = str(_cached_build(
            work_dir / "calibrated", {"model": model, **condition.calibrate},
            lambda folder: run_calibration(model, folder, dataset=dataset, data_dir=data_dir, model_dir=model_dir, **settings),
        ))
    return model


class ConditionRunner:
    """Runs one condition over datasets, keeping artifacts under ``<output>/<condition>/<dataset>/``
    (models of ``train`` recipes under ``<train_root>/<recipe>/``)."""

    def __init__(self, condition: Condition, spec: Spec, output: Path, model_dir: str | None, data_dir: str | None,
                 threads: int, train_root: Path = Path("runs/train")):
        self.condition, self.spec, self.output, self.train_root = condition, spec, output, train_root
        self.model_dir, self.data_dir, self.threads = model_dir, data_dir, threads
        self._encoder = None
        self._model = None
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
        """The SPLADE encoder itself, or for ``query_encoder: idf`` the model's IDF table (inference-free)."""
        if self.condition.query_encoder == "idf":
            from vtrepro.model.idf import IdfQueryEncoder

            return IdfQueryEncoder.load(self.model, self.model_dir, self.condition.encoder.max_length_query)
        return self.encoder

    @property
    def encoder(self):
        if self._encoder is None:
            from vtrepro.model.splade import SpladeEncoder

            settings = self.condition.encoder
            self._encoder = SpladeEncoder(
                self.model,
                model_dir=self.model_dir,
                max_length_doc=settings.max_length_doc,
                max_length_query=settings.max_length_query,
                batch_size=settings.batch_size,
                trust_remote_code=self.condition.trust_remote_code,
            )
        return self._encoder

    def run(self, dataset_run: DatasetRun, dataset, encoded: EncodedVectors | None = None,
            reference: EncodedVectors | None = None) -> Observation:
        """Run one dataset: from ``encoded`` vectors when given (else the spec's, else encode here);
        ``reference`` vectors, when given, are only compared with the ones used."""
        from vtrepro.evaluate.trec import evaluate_run
        from vtrepro.search.lucene import read_trec_run, write_trec_run

        started = time.perf_counter()
        artifacts = self.output / self.condition.name / dataset_run.name
        queries = dataset.queries(dataset_run.split)
        qrels = dataset.qrels(dataset_run.split)
        vectors: dict[str, VectorSetSummary] = {}
        differences: dict[str, VectorDiff] = {}
        if self.condition.retrieval == "bm25":
            run, stats = self._bm25(dataset, queries, artifacts)
        else:
            source = encoded or dataset_run.encoded
            run, stats, vectors, used = self._impact(dataset, queries, artifacts, source)
            if reference is not None:
                differences = vector_differences(reference, used)
        write_trec_run(run, artifacts / "run.trec", tag=f"vtrepro-{self.condition.name}")
        # Score the file as written, exactly what trec_eval on run.trec reports.
        scores = evaluate_run(read_trec_run(artifacts / "run.trec"), qrels, self.spec.metrics)
        return Observation(scores, {key: stats[key] for key in ("documents", "total_terms")},
                           round(time.perf_counter() - started, 1), vectors, differences)

    def _bm25(self, dataset, queries: dict[str, str], artifacts: Path):
        from vtrepro.index.lucene import build_bm25_index
        from vtrepro.search.lucene import search_bm25

        documents = ((document.doc_id, document.contents) for document in dataset.corpus())
        stats = build_bm25_index(documents, artifacts / "index", threads=1)
        run = search_bm25(artifacts / "index", queries, self.spec.k, self.threads, **self.condition.bm25)
        return run, stats

    def _impact(self, dataset, queries: dict[str, str], artifacts: Path, encoded: EncodedVectors | None):
        """Search with ``encoded`` vectors, or encode the corpus and queries here first."""
        from vtrepro.encode.writer import QUERIES_NAME, VECTORS_DIRNAME, encode_corpus, encode_queries
        from vtrepro.index.lucene import build_impact_index
        from vtrepro.search.lucene import read_query_vectors, search_impact

        quantization = self.condition.quantization
        if encoded is None:
            manifest = encode_corpus(self.encoder, dataset.corpus(), artifacts, quantization, replace_other_settings=True)
            query_vectors = encode_queries(self.query_encoder, queries, artifacts / QUERIES_NAME, quantization)
            corpus = VectorSetSummary(manifest["fingerprint"], manifest["documents"], manifest["total_terms"])
            encoded = EncodedVectors(artifacts / VECTORS_DIRNAME, artifacts / QUERIES_NAME)
        else:
            print(f"  using vectors from {encoded.corpus} and {encoded.queries}", file=sys.stderr, flush=True)
            query_vectors = read_query_vectors(encoded.queries)
            corpus = cached_fingerprint(encoded.corpus)
        stats = build_impact_index(encoded.corpus, artifacts / "index", threads=1, expected=corpus)
        run = search_impact(artifacts / "index", query_vectors, self.spec.k, self.threads)
        return run, stats, {"corpus": corpus, "queries": fingerprint_vectors(query_vectors)}, encoded


def vector_differences(reference: EncodedVectors, used: EncodedVectors) -> dict[str, VectorDiff]:
    """How the vectors used differ from reference vectors, for corpus and queries."""
    from vtrepro.search.lucene import read_query_vectors

    return {
        "corpus": compare_vectors(load_vectors(vector_files(reference.corpus)), load_vectors(vector_files(used.corpus))),
        "queries": compare_vectors(read_query_vectors(reference.queries), read_query_vectors(used.queries)),
    }


def _vector_root(path: Path, cache: Path) -> Path:
    """A folder of runs laid out ``<condition>/<dataset>/``: a bundle is checked and extracted first."""
    if path.is_file():
        return open_bundle(path, cache)[0]
    if not path.is_dir():
        raise VtreproError(f"{path}: no such bundle or folder; give a file from 'python -m vtrepro export' or a runs folder")
    if (path / BUNDLE_MANIFEST).is_file():
        verify_runs(path, read_bundle_manifest(path, path), path)
    return path


def vector_sources(path: Path, runs: list[tuple[Condition, DatasetRun]], cache: Path) -> dict[tuple[str, str], EncodedVectors]:
    """Encoded vectors for every impact run from a bundle, a folder of runs or (one run) one encoded folder."""
    root = _vector_root(path, cache)
    impact = [(condition.name, dataset.name) for condition, dataset in runs if condition.retrieval == "impact"]
    if not impact:
        raise VtreproError(f"--vectors {path}: the selected runs are all BM25; they have no vectors")
    sources = {}
    for condition, dataset in impact:
        run_dir = root / condition / dataset
        if not run_dir.is_dir() and len(impact) == 1 and (root / QUERIES_NAME).is_file():
            run_dir = root  # one encoded corpus folder for the one run
        if not (run_dir / QUERIES_NAME).is_file() or not (run_dir / "vectors").is_dir():
            raise VtreproError(f"{path}: no vectors for {condition}/{dataset} (expected {condition}/{dataset}/"
                               f"{QUERIES_NAME} and vectors/); use --datasets to choose runs it holds")
        sources[(condition, dataset)] = EncodedVectors(run_dir / "vectors", run_dir / QUERIES_NAME)
    return sources


@functools.lru_cache(maxsize=None)
def cached_fingerprint(folder: Path) -> VectorSetSummary:
    """Fingerprint of an already-encoded vector folder, read once per process: checked before any work, used after."""
    return fingerprint_folder(folder)


def check_encoded(encoded: EncodedVectors) -> None:
    """Read and check every vector of ``encoded`` (ids unique, integer impacts) before any work starts."""
    from vtrepro.search.lucene import read_query_vectors

    if encoded.queries.resolve() in {path.resolve() for path in vector_files(encoded.corpus)}:
        raise VtreproError(f"{encoded.queries}: the queries file lies in the corpus folder {encoded.corpus}, so it "
                           "would be indexed as documents; move it out of that folder")
    cached_fingerprint(encoded.corpus)
    read_query_vectors(encoded.queries)


def selected_runs(spec: Spec, datasets: str | None) -> Iterable[tuple[Condition, DatasetRun]]:
    wanted = None
    if datasets:
        wanted = [name.strip() for name in datasets.split(",") if name.strip()]
        known = {dataset.name for condition in spec.conditions for dataset in condition.datasets}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise VtreproError(
                f"--datasets names {', '.join(unknown)}, which {spec.path} does not list; choose from {', '.join(sorted(known))}"
            )
    for condition in spec.conditions:
        for dataset in condition.datasets:
            if wanted is None or dataset.name in wanted:
                yield condition, dataset


def _show(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value[:12]  # a fingerprint: its first 12 hex digits
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _tally(rows: list[ResultRow]) -> str:
    """``"12 OK, 1 OKISH"``: how many rows have each status, in first-seen order."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    return ", ".join(f"{count} {status}" for status, count in counts.items())


def format_table(rows: list[ResultRow]) -> str:
    header = ("condition", "dataset", "metric", "tier", "expected", "observed", "status", "difference")
    lines = [(row.condition, row.dataset, row.metric + (" (ref)" if row.kind == "reference" else ""), row.tier,
              _show(row.expected), _show(row.observed), row.status, row.note) for row in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines)]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in [header, *lines])


def cpu_model() -> str:
    """The processor's model name (Linux), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment() -> dict[str, str]:
    """Versions and the arithmetic path (CPU, torch's SIMD level, threads) that produced a run's vectors."""
    import importlib.metadata as metadata

    import torch

    versions = {name: metadata.version(name) for name in ("vtrepro", "torch", "transformers", "pyserini")}
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_model(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": str(torch.get_num_threads()),
            **versions}


def write_report(spec: Spec, rows: list[ResultRow], timings: dict[str, float], out_dir: Path, argv: list[str],
                 interrupted: bool = False) -> None:
    """``results.json`` and ``report.md`` in ``out_dir``, each replaced only once completely written;
    ``interrupted`` marks a run stopped before every selected run finished."""
    write_json(out_dir / "results.json", {
        "spec": str(spec.path), "environment": environment(), "timings_seconds": timings, "interrupted": interrupted,
        "rows": [asdict(row) for row in rows],
    })
    failed = sum(row.status in (STATUS_FAIL, STATUS_UNPINNED, STATUS_ERROR) for row in rows)
    okish = sum(row.status == STATUS_OKISH for row in rows)
    with atomic_write(out_dir / "report.md") as handle:
        handle.write(f"# Regression report: {spec.name}\n\n{spec.description}\n\n")
        handle.write(f"Command: `python -m vtrepro.regress {' '.join(argv)}`\n\n")
        handle.write("Environment: " + ", ".join(f"{k} {v}" for k, v in environment().items()) + "\n\n")
        verdict = f"{failed} row(s) not OK" if failed else ("all OK" if not okish else f"OK, {okish} row(s) OKISH")
        verdict += " (interrupted: only the runs listed finished)" if interrupted else ""
        handle.write(f"Result: {verdict}\n\n")
        handle.write("Tier *fixed*: the vectors' fingerprints match the pinned ones (or BM25), every figure is exact. "
                     "Tier *encoded*: the vectors were encoded here and differ; figures may move within the spec's "
                     "tolerance (OKISH).\n\n")
        handle.write("| condition | dataset | metric | tier | expected | observed | status | difference |\n"
                     "|---|---|---|---|---:|---:|---|---|\n")
        for row in rows:
            metric = row.metric + (" (published)" if row.kind == "reference" else "")
            handle.write(f"| {row.condition} | {row.dataset} | {metric} | {row.tier} | {_show(row.expected)} | "
                         f"{_show(row.observed)} | {row.status} | {row.note} |\n")
        handle.write("\nSeconds per run: " + ", ".join(f"{key} {value}" for key, value in timings.items()) + "\n")


def _model_availability(name: str, model_dir) -> str:
    from vtrepro.model.loading import resolve_model

    if Path(resolve_model(name, model_dir)).is_dir():
        return "local"
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        return "missing: no such folder"
    return "needs the Hugging Face Hub"


def _training_plan(recipe_name: str, train_root: Path) -> str:
    from vtrepro.training.recipe import load_recipe

    recipe = load_recipe(recipe_name)
    final = train_root / recipe.name / "final"
    state = "trained" if final.is_dir() else f"to train first: {recipe.training['steps']} steps"
    return f"model {final} from recipe {recipe.path} ({state})"


def describe_plan(spec: Spec, selected: list[tuple[Condition, DatasetRun]], data_dir, model_dir,
                  train_root: Path = Path("runs/train")) -> str:
    """What a run would do, and whether each model and dataset is available here."""
    from vtrepro.data.beir import data_root

    lines = [f"{spec.path}: {len(selected)} run(s), metrics {', '.join(spec.metrics)}, top {spec.k}"]
    for condition, dataset in selected:
        if condition.retrieval == "bm25":
            what = f"BM25 k1={condition.bm25['k1']} b={condition.bm25['b']}"
        elif dataset.encoded:
            what = f"encoded vectors {dataset.encoded.corpus} and {dataset.encoded.queries}"
        elif condition.train:
            what = _training_plan(condition.train, train_root)
        else:
            base = condition.model or condition.transfer["source"]
            what = f"model {base} ({_model_availability(base, model_dir)})"
            if condition.transfer:
                what += f", transferred ({condition.transfer.get('init', 'topology')})"
                if "leaveout" in condition.transfer:
                    what += f" after leaving out {condition.transfer['leaveout']['fraction']:.0%} of its tokens"
            if condition.calibrate:
                what += f", calibrated on {condition.calibrate['dataset']}"
        root = data_root(data_dir)
        local = root is not None and any((root / sub / dataset.name).is_dir() for sub in ("beir", "."))
        pinned = sum(value is not None for value in dataset.scores.values())
        lines.append(
            f"  {condition.name} / {dataset.name} [{dataset.split}]: {what}; data "
            f"{'local' if local else 'to download'}; {pinned} pinned score(s), {len(dataset.reference)} published"
        )
    return "\n".join(lines)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = command_parser("regress", __doc__)
    parser.add_argument("--spec", required=True, help="spec file, or a name in regressions/ (e.g. beir_bm25_flat)")
    parser.add_argument("--datasets", help="comma-separated subset of the spec's datasets")
    parser.add_argument("--data-dir", help="data root holding beir/<dataset> (default: $VTREPRO_DATA)")
    parser.add_argument("--model-dir", help="folder of local model copies by hub id (default: $VTREPRO_MODELS)")
    parser.add_argument("--output", type=Path, default=Path("runs"), help="artifacts and reports (default runs/)")
    parser.add_argument("--threads", type=positive_int, default=2, help="search threads (default 2)")
    parser.add_argument("--vectors", type=Path,
                        help="use these encoded vectors instead of encoding: a bundle from 'python -m vtrepro export', "
                             "a folder laid out <condition>/<dataset>/, or one encoded corpus folder for one run")
    parser.add_argument("--reference-vectors", type=Path,
                        help="a bundle or folder like --vectors to count the documents whose vectors differ")
    parser.add_argument("--strict", action="store_true", help="OKISH (within tolerance, not exact) counts as FAIL")
    parser.add_argument("--record", action="store_true", help="write observed values into the spec as expected")
    parser.add_argument("--dry-run", action="store_true", help="validate the spec, print the plan, run nothing")
    args = parser.parse_args(argv)

    from vtrepro.core.java import start_jvm
    from vtrepro.data.beir import load_dataset

    spec = load_spec(args.spec)
    selected = list(selected_runs(spec, args.datasets))
    if args.dry_run:
        print(describe_plan(spec, selected, args.data_dir, args.model_dir, args.output / "train"))
        return EXIT_OK
    out_dir = check_output_folder(args.output / spec.name)
    datasets = {}
    for condition, dataset_run in selected:  # fail on missing data or a bad training recipe before any work
        if dataset_run.name not in datasets:
            datasets[dataset_run.name] = load_dataset(dataset_run.name, args.data_dir)
        datasets[dataset_run.name].qrels(dataset_run.split)
        if condition.train:
            from vtrepro.training.recipe import load_recipe

            load_recipe(condition.train)
    cache = args.output / ".bundles"
    sources = vector_sources(args.vectors, selected, cache) if args.vectors else {}
    references = vector_sources(args.reference_vectors, selected, cache) if args.reference_vectors else {}
    for encoded in [*sources.values(), *(dataset.encoded for _, dataset in selected if dataset.encoded)]:
        check_encoded(encoded)
    start_jvm()

    outcome = run_all(spec, selected, out_dir, args, argv, sources, references, datasets)
    rows = outcome.rows
    if args.record and not outcome.errors:
        record_observed(spec.path, outcome.recorded)
        print(f"recorded observed values into {spec.path}", file=sys.stderr)
        rows = [row if row.kind == "reference" else ResultRow(**{**asdict(row), "expected": row.observed,
                                                               "status": STATUS_OK, "tier": TIER_FIXED, "note": ""})
                for row in rows]
    if args.strict:
        rows = [ResultRow(**{**asdict(row), "status": STATUS_FAIL}) if row.status == STATUS_OKISH else row
                for row in rows]
    write_report(spec, rows, outcome.timings, out_dir, argv)
    print(format_table(rows))
    failed = [row for row in rows if row.status in (STATUS_FAIL, STATUS_UNPINNED, STATUS_ERROR)]
    okish = sum(row.status == STATUS_OKISH for row in rows)
    print(f"\n{len(rows) - len(failed) - okish} OK, {okish} OKISH, {len(failed)} not OK; report: {out_dir / 'report.md'}")
    if outcome.errors:
        others = f"; {len(outcome.errors) - 1} more run(s) failed" if len(outcome.errors) > 1 else ""
        nothing_recorded = "; nothing was recorded into the spec" if args.record else ""
        raise VtreproError(f"{outcome.errors[0]}{others} (every run's outcome is in {out_dir / 'report.md'}"
                           f"{nothing_recorded})")
    return EXIT_MISMATCH if failed else EXIT_OK


@dataclass
class Outcome:
    """What a regression run produced so far: rows, per-run seconds, observed values, failed runs."""

    rows: list[ResultRow] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    recorded: dict[tuple[str, str], dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def run_all(spec: Spec, selected: list[tuple[Condition, DatasetRun]], out_dir: Path, args: argparse.Namespace,
            argv: list[str], sources: dict, references: dict, datasets: dict) -> Outcome:
    """Run every selected (condition, dataset). A run that fails on bad input or the file system is
    recorded as an ERROR row and the others go on; when anything else stops the loop (an interrupt,
    an internal error) the report of what finished is written first."""
    outcome = Outcome()
    chosen = {(condition.name, dataset_run.name) for condition, dataset_run in selected}
    try:
        for condition in spec.conditions:
            runner = ConditionRunner(condition, spec, out_dir, args.model_dir, args.data_dir, args.threads,
                                     args.output / "train")
            observations: dict[str, Observation] = {}
            for dataset_run in condition.datasets:
                key = (condition.name, dataset_run.name)
                if key not in chosen:
                    continue
                print(f"[{condition.name} / {dataset_run.name}] running", file=sys.stderr, flush=True)
                try:
                    observation = runner.run(dataset_run, datasets[dataset_run.name], sources.get(key),
                                             references.get(key))
                except (VtreproError, OSError) as error:
                    message = os_error_message(error) if isinstance(error, OSError) else " ".join(str(error).split())
                    outcome.errors.append(f"{condition.name}/{dataset_run.name}: {message}")
                    outcome.rows.append(ResultRow(condition.name, dataset_run.name, "run", "error", None, None,
                                                  STATUS_ERROR, "", message))
                    print(f"[{condition.name} / {dataset_run.name}] failed: {message}", file=sys.stderr, flush=True)
                    continue
                observations[dataset_run.name] = observation
                outcome.timings[f"{condition.name}/{dataset_run.name}"] = observation.seconds
                rows = compare(condition, dataset_run, observation)
                outcome.rows += rows
                print(f"[{condition.name} / {dataset_run.name}] done in {observation.seconds} s: {_tally(rows)}",
                      file=sys.stderr, flush=True)
                outcome.recorded[key] = {
                    "scores": observation.scores, "index": observation.index,
                    "vectors": {name: summary.sha256 for name, summary in observation.vectors.items()},
                }
            outcome.rows += compare_averages(condition, observations)
    except BaseException:  # an interrupt or an internal error: keep what finished, then report the failure
        write_report(spec, outcome.rows, outcome.timings, out_dir, argv, interrupted=True)
        raise
    return outcome


if __name__ == "__main__":
    sys.exit(main())
