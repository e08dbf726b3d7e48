"""``vtrepro train`` and ``vtrepro mlm``: their parsers and runs; the work is :mod:`vtrepro.training.train`
and :mod:`vtrepro.training.mlm`."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from vtrepro.core.cli import (
    add_checkpoint_arguments,
    add_data_dir,
    add_dry_run,
    add_limit,
    add_model_dir,
    add_option_flags,
    add_output_folder,
    add_rehearse,
    add_renamed,
    add_trust_remote_code,
    cli_entry,
    command_parser,
    grant_remote_code,
    options_from_args,
    positive_float,
)
from vtrepro.core.io import check_output
from vtrepro.model.loading import resolve_model
from vtrepro.training import mlm, train
from vtrepro.training.inputs import required_inputs
from vtrepro.training.mlm import OLD_DTYPES, MlmOptions, run_mlm
from vtrepro.training.plan import DEFAULT_GPU_TFLOPS, check_recipe_lengths, describe_plan
from vtrepro.training.recipe import load_recipe
from vtrepro.training.train import rehearse, run_recipe


def build_train_parser() -> argparse.ArgumentParser:
    parser = command_parser("train", train.__doc__)
    parser.add_argument("--recipe", required=True, metavar="RECIPE",
                        help="recipe YAML file, or a name in regressions/recipes/")
    add_renamed(parser, "--config", "--recipe")
    add_output_folder(parser, "run folder (default: runs/train/<recipe name>)", required=False,
                      rule="an unfinished run of the same recipe there is resumed")
    add_data_dir(parser)
    add_model_dir(parser)
    add_dry_run(parser, help="validate the recipe, print the plan and cost, run nothing")
    add_rehearse(parser,
                 help="run the whole recipe at miniature size on stand-in models and data in their published "
                             "formats (default --output runs/rehearse/train/<recipe name>); prints what it replaced")
    parser.add_argument("--gpu-tflops", type=positive_float, default=DEFAULT_GPU_TFLOPS,
                        help="sustained TFLOP/s assumed by the --dry-run cost estimate (default: %(default)s)")
    add_trust_remote_code(parser)
    return parser


@cli_entry
def train_main(argv: list[str] | None = None) -> int:
    args = build_train_parser().parse_args(argv)
    recipe = load_recipe(args.recipe)
    grant_remote_code(recipe.path, ["the recipe"] if recipe.trust_remote_code else [], args.trust_remote_code)
    if args.rehearse:
        return rehearse(recipe, args.output or Path("runs") / "rehearse" / "train" / recipe.name, args.model_dir,
                        args.gpu_tflops, args.dry_run)
    check_recipe_lengths(recipe, args.model_dir)
    output = args.output or Path("runs") / "train" / recipe.name
    inputs = [resolve_model(value, args.model_dir) if kind == "model" else value
              for _, kind, value in required_inputs(recipe, output)]
    check_output(output, [recipe.path, *inputs], kind="folder")
    if args.dry_run:
        print(describe_plan(recipe, output, args.data_dir, args.model_dir, args.gpu_tflops))
        return 0
    final = run_recipe(recipe, output, args.data_dir, args.model_dir)
    if int(os.environ.get("RANK", "0")) == 0:
        train.logger.info(f"trained model: {final}")
    return 0


def build_mlm_parser() -> argparse.ArgumentParser:
    parser = command_parser("mlm", mlm.__doc__)
    add_checkpoint_arguments(parser, "masked-LM checkpoint", "the training texts")
    add_option_flags(parser, MlmOptions, [name for name in MlmOptions.schema() if name not in ("dataset", "corpus")])
    add_renamed(parser, "--precision", "--dtype", values=OLD_DTYPES)
    add_limit(parser, "texts of the corpus")
    add_renamed(parser, "--max-texts", "--limit")
    return parser


@cli_entry
def mlm_main(argv: list[str] | None = None) -> int:
    args = build_mlm_parser().parse_args(argv)
    check_output(args.output, [resolve_model(args.model, args.model_dir), args.dataset, args.corpus], kind="folder")
    args.corpus = None if args.corpus is None else str(args.corpus)  # a path in words, as a recipe gives it
    report = run_mlm(args.model, args.output, options_from_args(MlmOptions, args), data_dir=args.data_dir, max_texts=args.limit,
                     model_dir=args.model_dir, trust_remote_code=args.trust_remote_code)
    mlm.logger.info(f"{args.output}: {report['steps']} steps on {report['texts']} texts, loss "
                    f"{report['loss_first_10_percent']} -> "
                    f"{report['loss_last_10_percent']} in {report['seconds']} s")
    return 0
