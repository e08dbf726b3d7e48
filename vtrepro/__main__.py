"""``python -m vtrepro <command> [options]`` (or ``vtrepro <command>``): every command of the toolkit.

``python -m vtrepro`` alone, or with ``--help``, lists them in pipeline order.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "transfer": ("vtrepro.vocabulary.transfer", "move a masked-LM encoder onto another vocabulary"),
    "calibrate": ("vtrepro.vocabulary.calibrate", "Activation Potential Calibration of the MLM bias"),
    "encode": ("vtrepro.encode.writer", "encode a corpus and its queries into quantized JSON vectors"),
    "fingerprint": ("vtrepro.encode.fingerprint", "content fingerprint of vectors; compare two sets"),
    "index": ("vtrepro.index.lucene", "build a Lucene impact index with Anserini"),
    "search": ("vtrepro.search.lucene", "batch impact search into a TREC run"),
    "evaluate": ("vtrepro.evaluate.trec", "score a run with pytrec_eval; compare two runs"),
    "regress": ("vtrepro.regress.runner", "run a regression spec and check every figure"),
    "export": ("vtrepro.regress.export", "bundle a spec's encoded vectors with their fingerprints"),
    "mlm": ("vtrepro.training.mlm", "masked-language-model adaptation"),
    "train": ("vtrepro.training.train", "train a SPLADE model from a recipe"),
    "bench": ("vtrepro.bench", "benchmarks (encoding throughput)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m vtrepro <command> [options]   (or: vtrepro <command> [options])", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "python -m vtrepro <command> --help shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``argv[0]`` with the remaining arguments; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"{usage()}\n\nerror: unknown command '{argv[0]}'", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
