"""``python -m vtrepro <command> --help`` builds every command's parser without the heavy libraries: each is
imported where the work starts, so help (and an argument error) answers at once, not after torch's seconds."""
from __future__ import annotations

import json
import subprocess
import sys

from vtrepro.__main__ import COMMANDS

HEAVY_MODULES = ("torch", "transformers", "tokenizers", "safetensors", "sentence_transformers", "datasets", "pandas",
                 "scipy", "matplotlib", "pyserini", "jnius", "numpy", "seismic", "bmp")
"""Libraries no parser needs, each costing from a tenth of a second (numpy) to many seconds (torch) to import."""

# One process for every command, each command's help built in turn: a heavy module is charged to the first
# command that brings it in. Prints {command: [heavy modules it imported, or a note that no help was shown]}.
_PROBE = """
import contextlib, io, json, sys
from vtrepro.__main__ import command_functions
heavy, commands, found = sys.argv[1].split(","), json.loads(sys.argv[2]), {}
for name, module in commands.items():
    before = {m for m in heavy if m in sys.modules}
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        try:
            status = command_functions(name)[0](["--help"])
        except SystemExit as done:
            status = done.code
    wrong = [m for m in heavy if m in sys.modules and m not in before]
    if status != 0 or not shown.getvalue().startswith("usage: python -m vtrepro " + name):
        wrong.append("no help (exit %r)" % status)
    if wrong:
        found[name] = wrong
print(json.dumps(found))
"""


def test_help_imports_no_heavy_module() -> None:
    commands = dict(COMMANDS)
    result = subprocess.run([sys.executable, "-c", _PROBE, ",".join(HEAVY_MODULES), json.dumps(commands)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert not found, f"imported while building --help (move each import to where the work starts): {found}"
