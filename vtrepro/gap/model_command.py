"""``vtrepro gap model`` and ``gap training``: the vocabulary gap in encoded runs, side by side, and over training
(docs/vocabulary-gap.md, "In the model" and "Over training").

Each run is a folder ``vtrepro encode`` wrote, given by ``--vectors``; ``--model M --dataset D`` encodes it first
into ``<output>/runs/<model>-<dataset>/`` with ``vtrepro encode`` itself (the one encoder). A run is read with its
``--tokenizer``, else with the model its manifest names.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, check_output, write_json
from vtrepro.encode.folder import EncodedFolder
from vtrepro.gap.model import FIX_RUN, model_figures, read_run_manifest
from vtrepro.gap.study import model_markdown, training_markdown
from vtrepro.gap.vocabularies import Vocabulary, load_vocabulary

logger = logging.getLogger(__name__)

RUNS_DIRNAME = "runs"
"""Under ``--output``: the runs ``--model`` encodes."""


def _encode(models: list[str], args: argparse.Namespace, output: Path) -> list[Path]:
    """Each of ``models`` encoded on ``--dataset`` by ``vtrepro encode`` (resumed where a folder is there)."""
    from vtrepro.core.launch import Job, Shared, launch

    if models and not args.dataset:
        raise VtreproError("gap model --model encodes the model on a dataset first: give --dataset (or give an "
                           "encoded run as --vectors)")
    runs = []
    for model in models:
        folder = output / RUNS_DIRNAME / f"{Path(model).name}-{Path(args.dataset).name}"
        if not EncodedFolder(folder).is_complete():
            job = Job("encode", ("--model", model, "--dataset", args.dataset, "--split", args.split,
                                 "--output", str(folder)))
            launch(job, Shared(args.data_dir, args.model_dir), mode="subprocess",
                   resume=f"rerunning resumes the encoding in {folder}")
        runs.append(folder)
    return runs


def _vocabularies(runs: list[Path], tokenizers: list[str] | None, model_dir: Any) -> list[Vocabulary]:
    """Each run's vocabulary: ``--tokenizer`` (one per run, or one for all), else its manifest's model."""
    if tokenizers and len(tokenizers) not in (1, len(runs)):
        raise VtreproError(f"{len(tokenizers)} --tokenizer for {len(runs)} runs: give one per run, in order, or one "
                           "for all")
    names: list[str] = []
    for number, run in enumerate(runs):
        if tokenizers:
            names.append(tokenizers[0] if len(tokenizers) == 1 else tokenizers[number])
            continue
        manifest = read_run_manifest(EncodedFolder.around(run))
        model = (manifest or {}).get("model")
        if not isinstance(model, str) or not model:
            raise VtreproError(f"{run}: no manifest naming the model that encoded it; give its --tokenizer")
        names.append(model)
    loaded: dict[str, Vocabulary] = {}
    for name in names:
        if name not in loaded:
            loaded[name] = load_vocabulary(name, model_dir)
    return [loaded[name] for name in names]


def run_model_part(args: argparse.Namespace) -> int:
    """The ``model`` part: figures of every run into ``model.json`` and ``model.md``."""
    given = [Path(path) for path in args.vectors or []]
    if not given and not args.model:
        raise VtreproError("gap model needs runs: give --vectors RUN (an encoded folder) or --model M --dataset D")
    for path in given:
        if not EncodedFolder.around(path).root.is_dir():
            raise VtreproError(f"{path}: no such run folder; {FIX_RUN}")
    output = check_output(args.output, given, kind="folder")
    output.mkdir(parents=True, exist_ok=True)
    runs = given + _encode(args.model or [], args, output)
    names = [EncodedFolder.around(run).root.name for run in runs]
    if len(set(names)) != len(names):
        names = [f"{number + 1}:{name}" for number, name in enumerate(names)]
    vocabularies = _vocabularies(runs, args.tokenizer, args.model_dir)
    figures = {"runs": [model_figures(run, vocabulary, name)
                        for run, vocabulary, name in zip(runs, vocabularies, names)]}
    write_json(output / "model.json", figures)
    with atomic_write(output / "model.md") as handle:
        handle.write(model_markdown(figures))
    for run in figures["runs"]:
        docs = run["duplicates_documents"]
        logger.info(f"{run['run']} ({run['tokenizer']}): {docs['duplicate_share']:.1%} of documents activate two "
                    f"forms of one unit, {docs['redundant_mass']:.1%} of impact mass redundant, {run['dead']['dead']:,} "
                    f"dead terms, {run['density_documents']['mean']:.1f} terms per document")
    print(f"model: {output / 'model.json'} and model.md")
    return 0


def run_training_part(args: argparse.Namespace) -> int:
    """The ``training`` part: every log's curves into ``training.json``, ``training.md``, ``.png`` and ``.svg``."""
    from vtrepro.core.machine import cpu_model
    from vtrepro.gap.training import check_one_recipe, draw_curves, read_training_log, summary

    output = check_output(args.output, args.log, kind="folder")
    runs = [read_training_log(path) for path in args.log]
    names = [run["run"] for run in runs]
    if len(set(names)) != len(names):
        for number, run in enumerate(runs):
            run["run"] = f"{number + 1}:{run['run']}"
    check_one_recipe(runs)
    output.mkdir(parents=True, exist_ok=True)
    figures = {"machine": cpu_model(), "runs": [{**run, "summary": summary(run)} for run in runs]}
    write_json(output / "training.json", figures)
    with atomic_write(output / "training.md") as handle:
        handle.write(training_markdown(figures))
    draw_curves(runs, output)
    print(f"training: {output / 'training.json'}, training.md, training.png and training.svg")
    return 0
