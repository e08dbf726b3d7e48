"""``python -m vtrepro <command> [options]`` (or ``vtrepro <command>``): every command of the toolkit.

``python -m vtrepro`` alone, or with ``--help``, lists them in pipeline order.
"""
from __future__ import annotations

import importlib
import re
import sys

from vtrepro.core.cli import usage_error

# Every command: the stages in the order the pipeline runs them, a blank line, then the tools. Name, module under
# vtrepro/, one-line summary; each of export's subcommands is listed under the stage whose output it exports.
_TABLE = """
transfer        vocabulary.transfer      move a masked-LM encoder onto another vocabulary
mlm             training.mlm             masked-language-model adaptation
calibrate       vocabulary.calibrate     Activation Potential Calibration of the MLM bias
train           training.train           train a SPLADE model from a recipe
export model    regress.export           a model as a sentence-transformers SparseEncoder folder with a model card
encode          encode.writer            encode a corpus and its queries into quantized JSON vectors
fingerprint     encode.fingerprint       content fingerprint of vectors; compare two sets
export vectors  regress.export           bundle a spec's encoded vectors with their fingerprints (one .tar)
index           index.lucene             build an impact index: Lucene (Anserini) or PISA
export index    regress.export           prebuilt Lucene impact indexes (Anserini, Pyserini) of a spec's runs
search          search.command           batch impact search into a TREC run
evaluate        evaluate.trec            score a run with pytrec_eval; compare two runs
gap             gap.command              the vocabulary gap: census, corpus figures, BM25 over tokens, integrity
regress         regress.runner           run a regression spec and check every figure
report          report.command           compare results with each other and with published tables

pyserini        search.pyserini_command  run a Pyserini command-line module on vtrepro's Java (search, trec_eval)
anserini        search.anserini_command  run an Anserini program from the installed fat jar on vtrepro's Java 21
bench           bench.command            benchmarks: encode, search (Lucene vs PISA), transfer, base-size, scale
"""
_SECTIONS = {title: [re.split(r"\s{2,}", line, maxsplit=2) for line in block.splitlines()]
             for title, block in zip(("commands", "tools"), _TABLE.strip().split("\n\n"))}
COMMANDS: dict[str, str] = {name.split()[0]: f"vtrepro.{module}"
                            for rows in _SECTIONS.values() for name, module, _ in rows}
"""Command name -> its module (``export``'s subcommands share one)."""


def usage() -> str:
    labels = {name: f"  {name}" if " " in name else name for rows in _SECTIONS.values() for name, _, _ in rows}
    width = max(map(len, labels.values()))
    lines = ["usage: python -m vtrepro <command> [options]   (or: vtrepro <command> [options])"]
    for title, rows in _SECTIONS.items():
        lines += ["", f"{title}:"] + [f"  {labels[name].ljust(width)}  {summary}" for name, _, summary in rows]
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
    module = importlib.import_module(COMMANDS[argv[0]])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
