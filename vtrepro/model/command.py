"""``vtrepro export model``: a model as a sentence-transformers SparseEncoder folder with a model card.

The subcommand's arguments and its run; ``vtrepro export`` (:mod:`vtrepro.regress.command`) assembles it with
the other exports. The work is :func:`vtrepro.regress.model_export.export_model`, imported when it runs: it
loads torch.
"""
from __future__ import annotations

import argparse
import importlib

from vtrepro.core.cli import (
    add_model,
    add_model_dir,
    add_output_folder,
    add_path,
    add_runs,
    add_spec,
    add_trust_remote_code,
    number_in,
)
from vtrepro.core.schema import MAX_TEXT_TOKENS
from vtrepro.model.encoder_options import IDF_NAME, EncoderOptions

EXPORT_MODEL = "a sentence-transformers SparseEncoder folder with a model card"
"""``export model`` in one line (its help and description)."""


def add_export_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``export model``."""
    add_model(parser, "masked-LM SPLADE model to export")
    add_model_dir(parser)
    add_output_folder(parser, old_spelling=True)
    add_spec(parser, required=False, what=": lengths, quantization and pinned figures of its condition for this "
                                          "model go into the folder and its card")
    parser.add_argument("--condition", help="the spec's condition for this model (default: the one impact condition "
                                            "whose model is --model)")
    add_runs(parser, "the --runs folder regress used: the figures observed there (<runs>/<spec>/results.json) join "
                     "the card (default: none)", default=None)
    add_path(parser, "--idf", "input file", help=f"{IDF_NAME} ({{token: idf}}) of an inference-free model: queries are "
                                                 f"weighted by it (default: the model folder's {IDF_NAME}, if any)")
    for name in ("doc", "query"):
        default = EncoderOptions.schema()[f"max_length_{name}"].default
        parser.add_argument(f"--max-length-{name}", type=number_in(int, 1, MAX_TEXT_TOKENS), default=None,
                            help=f"tokens per {name} (default: the spec condition's, else {default})")
    add_trust_remote_code(parser)


def export_model_main(args: argparse.Namespace) -> int:
    """``export model`` with its parsed arguments: the exit status."""
    model_export = importlib.import_module("vtrepro.regress.model_export")
    return int(model_export.export_model(model_export.ModelExport(
        model=args.model, output=args.output, model_dir=args.model_dir, spec=args.spec, condition=args.condition,
        runs=args.runs, idf=args.idf, max_length_doc=args.max_length_doc, max_length_query=args.max_length_query,
        trust_remote_code=args.trust_remote_code)))
