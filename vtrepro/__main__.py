"""``python -m vtrepro <command> [options]`` (or ``vtrepro <command>``): every command of the toolkit.

``python -m vtrepro`` alone, or with ``--help``, lists them in pipeline order.
"""
from __future__ import annotations

import importlib
import re
import sys
from typing import Any, Callable

from vtrepro.core.cli import usage_error

# Every command: the stages in the order the pipeline runs them, a blank line, then the tools. Name, its command
# module under vtrepro/ (a stage's command.py; ``:name`` where the module holds several commands: their functions
# are ``<name>_main`` and ``build_<name>_parser``, else ``main`` and ``build_parser``), one-line summary; each of
# export's subcommands is listed under the stage whose output it exports (export itself is regress.command:export,
# which takes each subcommand's arguments from that stage's command module).
_TABLE = """
transfer        vocabulary.command:transfer    move a masked-LM encoder onto another vocabulary
mlm             training.command:mlm           masked-language-model adaptation
calibrate       vocabulary.command:calibrate   Activation Potential Calibration of the MLM bias
train           training.command:train         train a SPLADE model from a recipe
export model    regress.command:export         a model as a sentence-transformers SparseEncoder folder with a model card
encode          encode.command:encode          encode a corpus and its queries into quantized JSON vectors
fingerprint     encode.command:fingerprint     content fingerprint of vectors; compare two sets
export vectors  regress.command:export         bundle a spec's encoded vectors with their fingerprints (one .tar)
index           index.command                  build an impact index: Lucene (Anserini) or PISA
export index    regress.command:export         prebuilt Lucene impact indexes (Anserini, Pyserini) of a spec's runs
search          search.command                 batch impact search into a TREC run
evaluate        evaluate.command               score a run with pytrec_eval; compare two runs
gap             gap.command                    the vocabulary gap: census, corpus figures, BM25 over tokens, integrity
regress         regress.command                run a regression spec and check every figure
report          report.command                 compare results with each other and with published tables

pyserini        search.command:pyserini        run a Pyserini command-line module on vtrepro's Java (search, trec_eval)
anserini        search.command:anserini        run an Anserini program from the installed fat jar on vtrepro's Java 21
bench           bench.command                  benchmarks: encode, search (Lucene vs PISA), transfer, base-size, scale
"""
_SECTIONS = {title: [re.split(r"\s{2,}", line, maxsplit=2) for line in block.splitlines()]
             for title, block in zip(("commands", "tools"), _TABLE.strip().split("\n\n"))}
COMMANDS: dict[str, str] = {name.split()[0]: f"vtrepro.{module}"
                            for rows in _SECTIONS.values() for name, module, _ in rows}
"""Command name -> its command module, ``vtrepro.<stage>.command[:name]`` (``export``'s subcommands share one)."""


def command_functions(name: str) -> tuple[Callable[[list[str] | None], int], Callable[[], Any]]:
    """The ``main`` and ``build_parser`` of command ``name`` (a key of :data:`COMMANDS`)."""
    module_name, _, part = COMMANDS[name].partition(":")
    module = importlib.import_module(module_name)
    if not part:
        return module.main, module.build_parser
    return getattr(module, f"{part}_main"), getattr(module, f"build_{part}_parser")


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
    main_of_command, _ = command_functions(argv[0])
    return main_of_command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
