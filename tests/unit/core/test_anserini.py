"""The installed Pyserini/Anserini: the supported release lines, the jar, and which Lucene reads which index."""
import subprocess
import sys

import pytest

from helpers import assert_one_error_line
from vtrepro.core.anserini import (
    RELEASES,
    anserini_jar,
    anserini_version,
    check_readable,
    installed_release,
    jar_name,
    pyserini_version,
    readers,
    release_for_python,
)
from vtrepro.core.errors import VtreproError


@pytest.mark.parametrize("version, line", [("1.6.0", "1.6.x"), ("1.6.1", "1.6.x"), ("2.4.0", "2.x"), ("2.10.1", "2.x"),
                                           ("1.5.2", None), ("1.60.0", None), ("3.0.0", None), ("20.1", None)])
def test_each_pyserini_version_belongs_to_at_most_one_release_line(version, line):
    accepted = [release.line for release in RELEASES if release.accepts(version)]
    assert accepted == ([line] if line else [])


def test_the_installed_pyserini_is_this_pythons_release_and_its_jar_names_its_anserini():
    release = installed_release()
    assert release == release_for_python() and release.accepts(pyserini_version())
    jar = anserini_jar()
    assert jar.is_file() and jar.name == jar_name(anserini_version(jar))
    assert anserini_version(jar).split(".")[0] == release.anserini.split(".")[0]


def test_a_lucene_reads_its_own_major_and_the_previous_one_never_a_newer_one():
    assert readers("9.12.1") == list(RELEASES) and readers("10.5.0") == [RELEASES[1]]
    major = installed_release().lucene_major
    check_readable("index", f"{major}.1.0")
    check_readable("index", f"{major - 1}.12.0")
    newer = next((release for release in RELEASES if release.lucene_major > major), None)
    fix = f'install "{newer.requirement}" ({newer.python})' if newer else "search it with the Anserini that wrote it"
    with pytest.raises(VtreproError) as refused:
        check_readable("index", f"{major + 1}.0.0", "9.9.9")
    assert str(refused.value).startswith(f"index: written by Lucene {major + 1}.0.0 (Anserini 9.9.9), ")
    assert fix in str(refused.value)


def test_a_pyserini_outside_the_supported_lines_is_one_line_naming_what_to_install(tmp_path):
    """A real distribution record of Pyserini 1.5.0 ahead of the installed one on the path: the JVM never starts."""
    record = tmp_path / "site" / "pyserini-1.5.0.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: pyserini\nVersion: 1.5.0\n")
    command = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); from vtrepro.__main__ import main; "
               "sys.exit(main())", str(tmp_path / "site"), "index", "--vectors", str(tmp_path), "--output",
               str(tmp_path / "index")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert_one_error_line(result.returncode, result.stderr, "Pyserini 1.5.0 is installed", "1.6.x (Python 3.11)",
                          "2.x (Python 3.12 or later)", f'pip install "{release_for_python().requirement}"')
