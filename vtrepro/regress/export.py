"""Export a regression's results in forms others use: vector bundles, prebuilt Lucene indexes, models.

``python -m vtrepro export vectors --spec S --output bundle.tar`` (plain ``export --spec S ...``, the old
spelling, still works with a notice)
packs the encoded corpora and query vectors that ``regress`` left in ``runs/<spec>/``, their
fingerprints, the spec and the environment into one ``.tar`` with its sha256 beside it;
``regress --spec S --vectors bundle.tar`` then reproduces every figure exactly, anywhere.

``python -m vtrepro export index --spec S --output DIR`` writes, per impact run, a prebuilt Lucene
index ``DIR/lucene-impact.<spec>.<condition>.<dataset>.tar.gz`` (:mod:`vtrepro.index.prebuilt`: the
index as Anserini wrote it, the queries as Anserini pretokenized impact topics, the qrels and a README
with the commands that search it), its ``.sha256`` and ``.md5``, and ``DIR/prebuilt.json`` describing
them in Pyserini's prebuilt-index metadata shape; each records the Lucene, Anserini and Pyserini that wrote
it. ``search --index X.tar.gz`` and ``regress --vectors X.tar.gz`` (or the folder) take them back.

``python -m vtrepro export model --model M --output DIR`` writes a sentence-transformers model folder
(:mod:`vtrepro.regress.model_export`).
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from vtrepro.core.anserini import anserini_version, pyserini_version
from vtrepro.core.errors import EXIT_OK, VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, check_output, read_json_file, write_json
from vtrepro.core.java import start_jvm
from vtrepro.data.beir import load_dataset
from vtrepro.encode.bundle import checksum_path, write_bundle
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.reader import read_query_vectors
from vtrepro.index.lucene_checks import index_stats, lucene_version
from vtrepro.index.prebuilt import METADATA_NAME, PrebuiltRun, tarball_name, write_prebuilt
from vtrepro.regress.readme import ESCAPING, prebuilt_readme
from vtrepro.regress.results_folder import environment
from vtrepro.regress.runner import selected_runs
from vtrepro.regress.spec import Condition, DatasetRun, Spec, load_spec

logger = logging.getLogger(__name__)
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _impact_runs(spec: Spec, datasets: str | None, run_root: Path, command: str) -> list[tuple[Condition, DatasetRun]]:
    if not run_root.is_dir():
        raise VtreproError(f"{run_root}: no runs of {spec.name}; run 'python -m vtrepro regress --spec {command}' first")
    return [(condition, dataset) for condition, dataset in selected_runs(spec, datasets) if condition.retrieval == "impact"]


def export_vectors(spec_name: str, runs: Path, datasets: str | None, output: Path) -> int:
    """``export vectors``: the impact runs of spec ``spec_name`` under ``runs`` (``datasets``: a subset) as one
    bundle ``output`` with its ``.sha256``."""
    spec = load_spec(spec_name)
    run_root = runs / spec.name
    for path in (output, checksum_path(output)):
        check_output(path, [spec.path, run_root])
    selected = [(condition.name, dataset.name) for condition, dataset in _impact_runs(spec, datasets, run_root, spec_name)]
    digest = write_bundle(run_root, selected, output, spec.path, environment())
    print(f"{len(selected)} run(s) -> {output} (sha256 {digest})")
    return EXIT_OK


def _encoder(condition: Condition, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The encoder as a reader can find it again: its Hub id and revision where known, else its path and hash."""
    settings = (manifest or {}).get("settings", {})
    model = str((manifest or {}).get("model") or condition.model or f"recipe {condition.train}")
    named = condition.model if condition.model and HUB_ID.fullmatch(condition.model) and not condition.stages else None
    return {"model": model, "hub_id": settings.get("hub_id") or named, "revision": settings.get("revision"),
            "model_sha256": settings.get("model_sha256"), "vocabulary_sha256": settings.get("vocabulary_sha256"),
            "max_length_doc": condition.encoder.max_length_doc, "max_length_query": condition.encoder.max_length_query,
            "query_encoder": condition.query_encoder}


def prebuilt_run(spec: Spec, condition: Condition, dataset: DatasetRun, run_dir: Path, data_dir: str | None) -> PrebuiltRun:
    """One regress run folder as a :class:`PrebuiltRun`: its index, queries, qrels and what made them."""
    folder = EncodedFolder(run_dir)
    queries_file = folder.queries if folder.queries.is_file() else (dataset.encoded.queries if dataset.encoded else None)
    if queries_file is None or not queries_file.is_file() or not (run_dir / "index").is_dir():
        raise VtreproError(f"{run_dir}: no index/ and queries.jsonl; run 'python -m vtrepro regress --spec {spec.path}' "
                           f"for {condition.name}/{dataset.name} first")
    manifest = folder.load_manifest()
    quantization = (manifest or {}).get("settings", {}).get("quantization") or condition.quantization.to_dict()
    header = {"spec": spec.name, "condition": condition.name, "dataset": dataset.name, "split": dataset.split,
              "k": spec.k, "remove_query_id": True, "encoder": _encoder(condition, manifest),
              "quantization": quantization, "escaping": ESCAPING,
              "corpus_fingerprint": (manifest or {}).get("fingerprint"), "anserini_lucene": lucene_version(),
              "anserini": anserini_version(), "pyserini": pyserini_version()}
    qrels = load_dataset(dataset.name, data_dir, download=False).qrels(dataset.split)
    return PrebuiltRun(tarball_name(spec.name, condition.name, dataset.name), run_dir / "index",
                       read_query_vectors(queries_file), qrels, header)


def read_json_object(path: Path) -> dict[str, Any]:
    """An earlier export's ``prebuilt.json``, kept and added to (another --datasets subset into the same folder)."""
    return read_json_file(path, f"not a {METADATA_NAME} 'export index' wrote: remove it or choose another --output",
                          JSON_FILE_BYTES["prebuilt"], path.parent, {})


def export_index(spec_name: str, runs: Path, datasets: str | None, output: Path, data_dir: str | None) -> int:
    """``export index``: a prebuilt Lucene index tarball per impact run of spec ``spec_name`` under ``runs``
    into the folder ``output``, with ``prebuilt.json``."""
    spec = load_spec(spec_name)
    run_root = runs / spec.name
    check_output(output, [spec.path, run_root], kind="folder")
    selected = _impact_runs(spec, datasets, run_root, spec_name)
    if not selected:
        raise VtreproError(f"{spec.path}: no impact runs selected (BM25 runs are not exported as impact indexes)")
    start_jvm()
    metadata_path = output / METADATA_NAME
    metadata: dict[str, Any] = read_json_object(metadata_path) if os.path.lexists(metadata_path) else {}
    for condition, dataset in selected:
        run = prebuilt_run(spec, condition, dataset, run_root / condition.name / dataset.name, data_dir)
        stats = index_stats(run.index)
        manifest = EncodedFolder(run.index.parent).load_manifest()
        if manifest and {key: stats[key] for key in ("documents", "total_terms")} != \
                {key: manifest[key] for key in ("documents", "total_terms")}:
            raise VtreproError(f"{run.index}: holds {stats['documents']} documents and {stats['total_terms']} impacts but "
                               f"its manifest {manifest['documents']} and {manifest['total_terms']}: the index is stale; "
                               f"rerun 'python -m vtrepro regress --spec {spec.path}'")
        metadata[run.name] = write_prebuilt(run, output, stats, prebuilt_readme(run, stats))
        print(f"{condition.name}/{dataset.name} -> {output / metadata[run.name]['filename']} "
              f"(sha256 {metadata[run.name]['sha256']})")
    write_json(metadata_path, metadata)
    print(f"{len(selected)} prebuilt index(es) -> {output} ({METADATA_NAME})")
    return EXIT_OK
