"""``export index``: a prebuilt Lucene index that Anserini's own SearchCollection, in a JVM of its own with
no vtrepro code, searches into vtrepro's run, and the other Anserini major too where its Lucene reads it;
``search --index`` takes the tarball back, and refuses in one line one a newer Lucene wrote; ``export``'s
subcommands."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

import pytest

from helpers import ANSERINI_SEARCH, assert_one_error_line, other_anserini_jar
from vtrepro.core.anserini import RELEASES, anserini_jar, installed_release
from vtrepro.core.cli import cli_entry
from vtrepro.core.java import find_java_home
from vtrepro.index.prebuilt import HEADER_NAME, checksum_paths
from vtrepro.regress.command import export_main
from vtrepro.regress.readme import anserini_command
from vtrepro.search.command import main as search_main

export = cli_entry(export_main)
search = cli_entry(search_main)
NAME = "lucene-impact.beir_splade_tiny.splade-tiny.scifact"


def hits_by_query(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """A TREC run as qid -> [(docid, rank, score)] in file order (engines write queries in their own order)."""
    run = defaultdict(list)
    for line in path.read_text().splitlines():
        qid, _, docid, rank, score, _ = line.split()
        run[qid].append((docid, rank, score))
    return dict(run)


@pytest.mark.slow
def test_anserini_searchcollection_reproduces_the_run_from_the_extracted_tarball(exported, tmp_path):
    run_dir, output = exported
    tarball = output / f"{NAME}.tar.gz"
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert checksum_paths(tarball)["sha256"].read_text() == f"{digest}  {tarball.name}\n"
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--check", "--status", checksum_paths(tarball)["sha256"].name], cwd=output, check=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(tmp_path, filter="data")
    header = json.loads((tmp_path / NAME / "vtrepro.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (header["statistics"]["documents"], header["statistics"]["total_terms"]) == (manifest["documents"],
                                                                                       manifest["total_terms"])
    info = json.loads((output / "prebuilt.json").read_text())[NAME]
    assert (info["md5"], info["sha256"], info["documents"]) == (hashlib.md5(tarball.read_bytes()).hexdigest(), digest,
                                                                 manifest["documents"])
    assert (header["anserini"], header["pyserini"]) == (info["vtrepro"]["anserini"], info["vtrepro"]["pyserini"])
    assert header["anserini_lucene"].split(".")[0] == str(installed_release().lucene_major)
    # The README's own command, with plain java (no vtrepro, no jnius): Anserini's SearchCollection.
    command = anserini_command(NAME, header["k"], header["remove_query_id"], str(anserini_jar()), "anserini.trec")
    assert f"`{Path(command[2]).name}`" in (tmp_path / NAME / "README.md").read_text()
    command[0] = str(find_java_home() / "bin" / "java")
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    offline = "UnknownHostException" in result.stdout + result.stderr
    if result.returncode != 0 and installed_release().online_registry and offline:
        pytest.skip(f"Anserini {installed_release().anserini}'s SearchCollection looks -index up in the prebuilt-index "
                    "registry on GitHub (api.github.com) before the local folder, and this machine is offline")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    theirs, ours = hits_by_query(tmp_path / "anserini.trec"), hits_by_query(run_dir / "run.trec")
    assert sum(map(len, ours.values())) == 300_000
    assert theirs == ours  # same documents, ranks and scores (ties by docid, no tie adjustment on scifact)


@pytest.mark.slow
def test_the_other_anserini_major_searches_the_tarball_where_its_lucene_reads_it(exported, tmp_path):
    """Anserini 2 (Lucene 10) searches a tarball Anserini 1.7 (Lucene 9) wrote into vtrepro's run; Anserini 1.7 cannot
    open one Anserini 2 wrote. The other major's jar, from its Pyserini's source distribution, runs in a JVM of its
    own with nothing else on the classpath."""
    run_dir, output = exported
    other = next(release for release in RELEASES if release != installed_release())
    jar = other_anserini_jar(other)
    if isinstance(jar, str):
        pytest.skip(f"no Anserini {other.anserini} jar ({other.requirement}) to run: {jar}")
    with tarfile.open(output / f"{NAME}.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    command = [sys.executable, "-c", ANSERINI_SEARCH, str(jar), str(tmp_path / NAME / "index"),
               str(tmp_path / NAME / "topics.tsv"), "1000", str(tmp_path / "other.trec")]
    environment = {**os.environ, "JAVA_HOME": str(find_java_home())}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)
    if other.lucene_major < installed_release().lucene_major:
        written = installed_release().lucene_major
        assert result.returncode != 0 and f"indexCreatedVersionMajor is in the future: {written}" in result.stderr, \
            result.stderr[-2000:]
        return
    assert result.returncode == 0, result.stderr[-2000:]
    theirs, ours = hits_by_query(tmp_path / "other.trec"), hits_by_query(run_dir / "run.trec")
    assert sum(map(len, ours.values())) == 300_000
    assert theirs == ours  # same documents, ranks and integer scores


@pytest.mark.slow
def test_a_tarball_a_newer_lucene_wrote_is_one_line_naming_the_pyserini_that_reads_it(exported, tmp_path, capsys):
    """The header records the Lucene that wrote the index; one newer than the installed major is refused before
    Java reads it (here: this export's header rewritten to the next major, checksums left out)."""
    _, output = exported
    with tarfile.open(output / f"{NAME}.tar.gz") as archive:
        archive.extractall(tmp_path / "x", filter="data")
    header_path = tmp_path / "x" / NAME / HEADER_NAME
    header = json.loads(header_path.read_text())
    newer = installed_release().lucene_major + 1
    header["anserini_lucene"], header["anserini"] = f"{newer}.0.0", "9.9.9"
    header_path.write_text(json.dumps(header))
    tarball = tmp_path / f"{NAME}.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(tmp_path / "x" / NAME, NAME)
    code = search(["--index", str(tarball), "--output", str(tmp_path / "run.trec")])
    reader = next((release for release in RELEASES if release.lucene_major >= newer), None)
    fix = f'install "{reader.requirement}"' if reader else "search it with the Anserini that wrote it"
    assert_one_error_line(code, capsys.readouterr().err, str(tarball), f"written by Lucene {newer}.0.0 (Anserini 9.9.9)",
                          fix)


@pytest.mark.slow
def test_search_takes_the_tarball_and_its_topics(exported, tmp_path):
    run_dir, output = exported
    queries = [line for line in (run_dir / "queries.jsonl").read_text().splitlines()][:20]
    subset = tmp_path / "queries.jsonl"
    subset.write_text("\n".join(queries) + "\n")
    tarball = output / f"{NAME}.tar.gz"
    assert search(["--index", str(tarball), "--queries", str(subset), "--output", str(tmp_path / "run.trec")]) == 0
    ours = hits_by_query(run_dir / "run.trec")
    assert hits_by_query(tmp_path / "run.trec") == {json.loads(line)["id"]: ours[json.loads(line)["id"]]
                                                    for line in queries}
    assert not list(tmp_path.glob(".run.trec.prebuilt-*"))  # the extracted copy is removed
    checksum_paths(tarball)["md5"].write_text("0" * 32 + f"  {tarball.name}\n")
    try:
        assert search(["--index", str(tarball), "--output", str(tmp_path / "other.trec")]) == 2
    finally:
        checksum_paths(tarball)["md5"].write_text(f"{hashlib.md5(tarball.read_bytes()).hexdigest()}  {tarball.name}\n")


def test_export_lists_its_subcommands_and_plain_export_still_means_vectors(capsys, tmp_path):
    with pytest.raises(SystemExit) as exited:
        export(["--help"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    assert all(f"\n    {name} " in listed for name in ("vectors", "index", "model"))
    assert export(["--spec", "beir_splade_tiny", "--runs", str(tmp_path), "--output", str(tmp_path / "b.tar")]) == 2
    err = capsys.readouterr().err
    assert "'export --spec' without a subcommand is deprecated; write 'export vectors --spec'" in err
    assert "no runs of beir_splade_tiny" in err
    assert export(["index", "--spec", "beir_splade_tiny", "--runs", str(tmp_path), "--output", str(tmp_path / "o")]) == 2
    assert "no runs of beir_splade_tiny" in capsys.readouterr().err


@pytest.mark.slow
def test_regress_takes_a_prebuilt_index_in_place_of_encoding_and_every_figure_is_exact(splade_tiny, tmp_path):
    """Three documents: record a spec, export its index, rerun regress from the tarball and from the folder:
    vectors read back from the postings and topics have the pinned fingerprints, so every row is fixed and OK."""
    from helpers import record_mini_spec
    from vtrepro.regress.command import main as regress_main

    regress = cli_entry(regress_main)
    spec, data, runs = record_mini_spec(tmp_path, splade_tiny)
    out = tmp_path / "prebuilt"
    assert export(["index", "--spec", str(spec), "--runs", str(runs), "--data-dir", str(data), "--output", str(out)]) == 0
    tarball = out / "lucene-impact.mini_spec.tiny.mini.tar.gz"
    for source, name in ((tarball, "again"), (out, "folder")):
        assert regress(["--spec", str(spec), "--data-dir", str(data), "--runs", str(tmp_path / name),
                        "--vectors", str(source), "--strict"]) == 0
        rows = json.loads((tmp_path / name / "mini_spec" / "results.json").read_text())["rows"]
        judged = [row for row in rows if row["kind"] != "efficiency"]
        assert {row["tier"] for row in judged} == {"fixed"} and {row["status"] for row in judged} == {"OK"}
        assert any(row["metric"] == "vectors.corpus" for row in judged)
