"""The vocabulary gap, measured for any tokenizer and corpus (docs/vocabulary-gap.md).

``python -m vtrepro gap <part> --tokenizer T [--tokenizer T2 ...] --output DIR``:

- ``census``: surface forms per normalized unit, and the variant classes (``Ġx``, ``ĠX``, ``X``; WordPiece's
  ``x``/``##x``), for each tokenizer (no dataset needed);
- ``corpus --dataset D``: the share of the text on units of several forms, H(form | unit), and the query-document
  matches that ids miss and units find;
- ``bm25 --dataset D``: BM25 through Lucene over the tokens, raw and with markers, case or both merged, each
  against raw with paired tests;
- ``integrity --dataset D``: how far each merged group's forms diverge in context, against random pairs;
- ``all --dataset D``: the four;
- ``model --vectors RUN [--vectors RUN2 ...]`` (or ``--model M --dataset D``, encoded first by ``vtrepro encode``):
  duplicate activation, dead terms and density of a model's vectors, the runs side by side;
- ``training --log train_log.jsonl [--log ...]``: active terms, dead terms and loss against step, from training logs.

``--tokenizer`` takes a built-in offline vocabulary (gpt2-bpe, olmo-bpe, olmo-dolma2, bert-cased, mbert-cased,
xlm-r, clip-bpe) or what ``--model`` takes: a folder, a name under ``--model-dir``, a Hub id. Each part writes
``<part>.json`` and ``<part>.md`` into ``--output``. ``model`` reads each run with ``--tokenizer`` (one per run, or one
for all), else with the model its manifest names.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.cli import (
    add_data_dir,
    add_model_dir,
    add_output_folder,
    add_path,
    add_split,
    add_threads,
    cli_entry,
    command_parser,
)
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, check_output, write_json
from vtrepro.encode.folder import EncodedFolder

if TYPE_CHECKING:
    from vtrepro.gap.vocabularies import Vocabulary

logger = logging.getLogger(__name__)

# The measuring modules (tokenizers, numpy, Lucene) are imported once the command runs, on purpose: `--help` stays
# fast and loads neither torch nor numpy.

_HELP = {
    "census": "surface forms per unit and the variant classes of each tokenizer",
    "corpus": "variant mass, form entropy and matches lost on a dataset",
    "bm25": "BM25 (Lucene) over the tokens: raw, markers, case, both, with paired tests",
    "integrity": "context divergence of each merged group against random pairs",
    "all": "census, corpus, bm25 and integrity",
}
_MODEL_HELP = "duplicate activation, dead terms and density of a model's encoded vectors"
_TRAINING_HELP = "active terms, inactive terms and loss against step, from training logs of one recipe"


def check_empty_output(output: Path) -> Path:
    """``--output`` must not exist or be an empty folder: refused before any work, not when the result is renamed."""
    if output.is_dir() and any(output.iterdir()):
        raise VtreproError(f"{output}: exists and is not empty; give a new folder (or an empty one) as --output")
    return output


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("gap", __doc__)
    parts = parser.add_subparsers(dest="part", required=True,
                                  metavar="{census,corpus,bm25,integrity,all,model,training}")
    for part, summary in _HELP.items():
        sub = parts.add_parser(part, help=summary, description=summary)
        sub.add_argument("--tokenizer", action="append", required=True, metavar="TOKENIZER",
                         help="a built-in vocabulary name, a tokenizer or model folder, a name under --model-dir, or "
                              "a Hub id; repeat it to compare vocabularies side by side")
        add_model_dir(sub)
        if part != "census":
            sub.add_argument("--dataset", required=True, help="BEIR dataset name or folder")
            add_data_dir(sub)
            add_split(sub, "queries and qrels")
        if part in ("bm25", "all"):
            add_threads(sub, "indexing and search threads")
        if part in ("integrity", "all"):
            sub.add_argument("--model", metavar="MODEL",
                             help="a model (folder or Hub id) whose input-embedding rows of each merged group are "
                                  "compared by cosine against random pairs; its tokenizer must be --tokenizer's")
        add_output_folder(sub, "folder for <part>.json and <part>.md")
    add_model_parser(parts)
    sub = parts.add_parser("training", help=_TRAINING_HELP, description=_TRAINING_HELP)
    add_path(sub, "--log", "input path", action="append", required=True,
             help="a train_log.jsonl `vtrepro train` wrote, or its run folder; repeat it to draw runs of one recipe "
                  "together")
    add_output_folder(sub, "folder for training.json, training.md, training.png and training.svg")
    return parser


def add_model_parser(parts: argparse._SubParsersAction) -> None:
    sub = parts.add_parser("model", help=_MODEL_HELP, description=_MODEL_HELP)
    add_path(sub, "--vectors", "input path", action="append", metavar="RUN",
             help="an encoded run (the folder `vtrepro encode` wrote, or its vectors/); repeat it to set runs side "
                  "by side")
    sub.add_argument("--model", action="append", metavar="MODEL",
                     help="a model to encode on --dataset first (with `vtrepro encode`), in place of --vectors; "
                          "repeatable")
    sub.add_argument("--tokenizer", action="append", metavar="TOKENIZER",
                     help="the vocabulary the run was encoded with (a built-in name, a tokenizer or model folder, a "
                          "name under --model-dir): one per run, or one for all (default: the model the run's "
                          "manifest names)")
    add_model_dir(sub)
    sub.add_argument("--dataset", help="BEIR dataset the --model runs are encoded on")
    add_data_dir(sub)
    add_split(sub, "queries encoded with --model")
    add_output_folder(sub, "folder for model.json and model.md (and the encoded runs of --model)")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.part == "model":
        return run_model_part(args)
    if args.part == "training":
        return run_training_part(args)
    from vtrepro.core.checkpoints import staged_folder
    from vtrepro.data.beir import load_dataset
    from vtrepro.gap.study import PARTS, Study, run_study
    from vtrepro.gap.vocabularies import load_vocabulary

    datasets = [] if args.part == "census" else [load_dataset(args.dataset, args.data_dir)]
    vocabularies = [load_vocabulary(name, args.model_dir) for name in args.tokenizer]
    inputs = [dataset.path for dataset in datasets] + [vocabulary.folder for vocabulary in vocabularies]
    if getattr(args, "model", None):
        from vtrepro.model.loading import resolve_model

        inputs.append(Path(resolve_model(args.model, args.model_dir)))
    output = check_empty_output(check_output(args.output, inputs, kind="folder"))
    if args.part != "census":
        datasets[0].queries(args.split)  # the split's qrels and queries, checked before any work
    study = Study(vocabularies, datasets, PARTS if args.part == "all" else (args.part,),
                  split=getattr(args, "split", "test"), threads=getattr(args, "threads", 1),
                  model=getattr(args, "model", None), model_dir=args.model_dir)
    with staged_folder(output) as staging:
        results = run_study(study, staging)
    for part in results:
        print(f"{part}: {output / (part + '.json')} and {part}.md")
    return 0


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
    from vtrepro.gap.model import read_run_manifest
    from vtrepro.gap.vocabularies import load_vocabulary

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
    from vtrepro.gap.model import FIX_RUN, model_figures
    from vtrepro.gap.study import model_markdown

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
    from vtrepro.core.processor import cpu_model
    from vtrepro.gap.study import training_markdown
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
