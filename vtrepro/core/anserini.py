"""The installed Pyserini and its Anserini: the one place that knows which major runs and what differs.

vtrepro runs on two Anserini majors through one code path:

=========  ========  ======  ===========
Pyserini   Anserini  Lucene  Python
=========  ========  ======  ===========
1.6.x      1.7.1     9       3.11
2.x        2.3+      10      3.12 and up
=========  ========  ======  ===========

The Java API vtrepro calls (``IndexCollection$Args``, ``SimpleImpactSearcher``, ``SimpleSearcher``,
``IndexReaderUtils.getReader``, the log4j classes) has the same classes and signatures in both, and both
write and score alike, so what differs lives here: which Pyserini is installed (:func:`installed_release`,
checked when the JVM starts), its fat jar (:func:`anserini_jar`, named after the Anserini inside), the Lucene
major it writes and reads (a Lucene reads its own major's indexes and the previous one's, never a newer one:
:func:`check_readable`), what to install on this Python (:func:`install_hint`), and whether Anserini's
``SearchCollection`` command and Pyserini's ``pyserini.search`` read the prebuilt-index registry on GitHub
first (Anserini 2.3 and Pyserini 2.4: offline they fail even for a folder that exists; vtrepro's own indexing
and search call the Java API above and never do).

Nothing here starts the JVM: the versions come from the installed package and the jar's name.
"""
from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from vtrepro.core.errors import VtreproError

JAR_PATTERN = "anserini-*-fatjar.jar"
_JAR_VERSION = re.compile(r"anserini-(.+)-fatjar\.jar")


@dataclass(frozen=True)
class Release:
    """One supported Pyserini line: the requirement that installs it, the Python it runs on, its Anserini, the
    Lucene major that Anserini writes, and whether Anserini's ``SearchCollection`` and Pyserini's ``pyserini.search``
    read the prebuilt-index registry from GitHub before anything else (then offline they fail, for a local folder
    too; the Java API vtrepro calls never reads it)."""

    line: str  # the Pyserini versions of this line, as messages name them
    requirement: str
    python: str
    anserini: str
    lucene_major: int
    online_registry: bool

    def accepts(self, version: str) -> bool:
        """Whether Pyserini ``version`` belongs to this release line."""
        prefix = self.line.removesuffix("x")
        return version.startswith(prefix) or version == prefix.rstrip(".")


RELEASES = (
    Release("1.6.x", "pyserini==1.6.0", "Python 3.11", "1.7.1", 9, online_registry=False),
    Release("2.x", "pyserini>=2.4,<3", "Python 3.12 or later", "2.3+", 10, online_registry=True),
)
SUPPORTED = " or ".join(f"{release.line} ({release.python})" for release in RELEASES)
"""The supported range in words, for messages."""


def release_for_python() -> Release:
    """The release this Python installs: Pyserini 1.6 on 3.11, 2.x from 3.12 on."""
    return RELEASES[0] if sys.version_info < (3, 12) else RELEASES[1]


def install_hint(*flags: str) -> str:
    """The pip command that installs the supported Pyserini on this Python."""
    options = "".join(f"{flag} " for flag in flags)
    return f"run 'pip install {options}\"{release_for_python().requirement}\"'"


def pyserini_version() -> str:
    """The installed Pyserini's version; a one-line error when none is installed."""
    try:
        return metadata.version("pyserini")
    except metadata.PackageNotFoundError:
        raise VtreproError(f"Pyserini is not installed; vtrepro runs on Pyserini {SUPPORTED}: {install_hint()}") from None


@functools.cache
def installed_release() -> Release:
    """The release line of the installed Pyserini; a one-line error naming what to install when it is outside them."""
    version = pyserini_version()
    release = next((release for release in RELEASES if release.accepts(version)), None)
    if release is None:
        raise VtreproError(f"Pyserini {version} is installed, but vtrepro runs on Pyserini {SUPPORTED}: {install_hint()}")
    return release


def anserini_jar() -> Path:
    """The Anserini fat jar inside the installed Pyserini (``pyserini/resources/jars/anserini-<version>-fatjar.jar``)."""
    from importlib.util import find_spec

    spec = find_spec("pyserini")
    folder = Path(spec.origin).parent / "resources" / "jars" if spec and spec.origin else None
    jars = sorted(folder.glob(JAR_PATTERN)) if folder else []
    if not jars:
        raise VtreproError(f"the Anserini fat jar is missing from Pyserini {pyserini_version()} (no {JAR_PATTERN} in "
                           f"{folder}); vtrepro runs on Pyserini {SUPPORTED}: {install_hint('--force-reinstall')}")
    return jars[-1]


def jar_name(anserini: str) -> str:
    """The fat jar's file name for Anserini version ``anserini``."""
    return JAR_PATTERN.replace("*", anserini)


def anserini_version(jar: Path | None = None) -> str:
    """The Anserini version inside ``jar`` (default: the installed Pyserini's), read from its name."""
    jar = jar or anserini_jar()
    match = _JAR_VERSION.fullmatch(jar.name)
    return match.group(1) if match else "unknown"


def lucene_major(version: str) -> int | None:
    """The major of a Lucene version such as ``"10.5.0"``, or None when it is not one."""
    match = re.match(r"(\d+)\.", str(version))
    return int(match.group(1)) if match else None


def readers(lucene: str) -> list[Release]:
    """The releases whose Lucene opens an index written by Lucene ``lucene`` (its own major and the next)."""
    written = lucene_major(lucene)
    return [release for release in RELEASES if written is None or release.lucene_major in (written, written + 1)]


def newer_lucene_fix(written: int | None = None) -> str:
    """What reads an index of a Lucene newer than the installed one (of major ``written`` when known)."""
    installed = installed_release().lucene_major
    reader = next((release for release in RELEASES if release.lucene_major >= (written or installed + 1)), None)
    if reader is None:
        return "search it with the Anserini that wrote it"
    return f"install \"{reader.requirement}\" ({reader.python}) to search it"


def check_readable(what: str | Path, lucene: str, anserini: str | None = None) -> None:
    """Refuse in one line an index written by Lucene ``lucene`` (inside Anserini ``anserini``) when the installed
    Lucene is an older major (Lucene opens its own major's indexes and the previous one's only), naming the
    Pyserini that reads it."""
    written = lucene_major(lucene)
    installed = installed_release()
    if written is None or written <= installed.lucene_major:
        return
    writer = f"Lucene {lucene}" + (f" (Anserini {anserini})" if anserini else "")
    raise VtreproError(f"{what}: written by {writer}, which the installed Pyserini {pyserini_version()} (Lucene "
                       f"{installed.lucene_major}) cannot read; {newer_lucene_fix(written)}, or rebuild it from its vectors")
