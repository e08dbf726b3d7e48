"""``python -m vtrepro <command> [options]`` (or ``vtrepro <command>``): every command of the toolkit.

``python -m vtrepro`` alone, or with ``--help``, lists them in pipeline order.
"""
from __future__ import annotations

import importlib
import sys

from vtrepro.core.cli import usage_error

# Every command in pipeline order: name, module under vtrepro/, one-line summary.
_TABLE = """
transfer     vocabulary.transfer   move a masked-LM encoder onto another vocabulary
calibrate    vocabulary.calibrate  Activation Potential Calibration of the MLM bias
encode       encode.writer         encode a corpus and its queries into quantized JSON vectors
fingerprint  encode.fingerprint    content fingerprint of vectors; compare two sets
index        index.lucene          build a Lucene impact index with Anserini
search       search.command        batch impact search into a TREC run
pyserini     search.pyserini_command  run a Pyserini command-line module on vtrepro's Java (search, trec_eval)
anserini     search.anserini_command  run an Anserini program from the installed fat jar on vtrepro's Java 21
evaluate     evaluate.trec         score a run with pytrec_eval; compare two runs
regress      regress.runner        run a regression spec and check every figure
export       regress.export        export vectors, prebuilt Lucene indexes (Anserini, Pyserini) or models
report       report.command        compare results with each other and with published tables
mlm          training.mlm          masked-language-model adaptation
train        training.train        train a SPLADE model from a recipe
bench        bench                 benchmarks: encode, search (Lucene vs PISA), transfer, base-size
"""
COMMANDS: dict[str, tuple[str, str]] = {
    name: (f"vtrepro.{module}", summary)
    for name, module, summary in (line.split(maxsplit=2) for line in _TABLE.strip().splitlines())
}
"""Command name -> (module, summary)."""


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
        return usage_error(usage(), f"unknown command '{argv[0]}'")
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
