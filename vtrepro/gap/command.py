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
from vtrepro.core.io import check_output

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
        from vtrepro.gap.model_command import run_model_part

        return run_model_part(args)
    if args.part == "training":
        from vtrepro.gap.model_command import run_training_part

        return run_training_part(args)
    from vtrepro.core.checkpoints import staged_folder
    from vtrepro.data.beir import load_dataset
    from vtrepro.gap.study import PARTS, Study, run_study
    from vtrepro.gap.vocabularies import load_vocabulary

    datasets = [] if args.part == "census" else [load_dataset(args.dataset, args.data_dir)]
    vocabularies = [load_vocabulary(name, args.model_dir) for name in args.tokenizer]
    inputs = [dataset.path for dataset in datasets] + [vocabulary.folder for vocabulary in vocabularies]
    output = check_output(args.output, inputs, kind="folder")
    if args.part != "census":
        datasets[0].queries(args.split)  # the split's qrels and queries, checked before any work
    study = Study(vocabularies, datasets, PARTS if args.part == "all" else (args.part,),
                  split=getattr(args, "split", "test"), threads=getattr(args, "threads", 1))
    if not vocabularies:
        raise VtreproError("give at least one --tokenizer")
    with staged_folder(output) as staging:
        results = run_study(study, staging)
    for part in results:
        print(f"{part}: {output / (part + '.json')} and {part}.md")
    return 0
