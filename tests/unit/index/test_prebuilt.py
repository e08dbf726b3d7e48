"""Prebuilt-index tarballs: deterministic writing, the topics format, and the opener refusing hostile archives.

The index here is a folder of stand-in files: the format and the opener never read Lucene's files, only
their bytes and checksums (Anserini reads a real exported index in tests/integration/test_export_index.py)."""
import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import replace

import pytest

from vtrepro.core.anserini import installed_release
from vtrepro.core.errors import VtreproError
from vtrepro.index.prebuilt import (
    HEADER_NAME,
    MAX_QUERY_TOKENS,
    PrebuiltRun,
    checksum_paths,
    open_prebuilt,
    read_topics,
    tarball_name,
    topic_line,
    write_prebuilt,
)

QUERIES = {"q1": {"cat": 3, "100%25": 2, "dog": 1}, "q2": {"%20x": 1}}
STATS = {"documents": 2, "non_empty_documents": 2, "unique_terms": 4, "total_terms": 9}


def make_run(tmp_path, name="lucene-impact.spec.cond.mini"):
    index = tmp_path / "run" / "index"
    index.mkdir(parents=True)
    (index / "segments_1").write_bytes(b"segments")
    (index / "_0.cfs").write_bytes(bytes(range(256)) * 4)
    header = {"spec": "spec", "condition": "cond", "dataset": "mini", "split": "test", "k": 10, "remove_query_id": True,
              "encoder": {"model": "m"}}
    return PrebuiltRun(name, index, QUERIES, {"q1": {"d1": 1}}, header)


@pytest.fixture
def exported(tmp_path):
    run = make_run(tmp_path)
    info = write_prebuilt(run, tmp_path / "out", STATS, "# readme\n")
    return tmp_path / "out" / info["filename"], info


def test_the_tarball_is_deterministic_and_its_checksums_are_sha256sum_and_md5sum_lines(tmp_path, exported):
    tarball, info = exported
    again = write_prebuilt(make_run(tmp_path / "again"), tmp_path / "out2", STATS, "# readme\n")
    assert again["sha256"] == info["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert checksum_paths(tarball)["sha256"].read_text() == f"{info['sha256']}  {tarball.name}\n"
    assert checksum_paths(tarball)["md5"].read_text() == f"{hashlib.md5(tarball.read_bytes()).hexdigest()}  {tarball.name}\n"
    assert info["size compressed (bytes)"] == tarball.stat().st_size and info["documents"] == 2
    with tarfile.open(tarball) as archive:
        members = archive.getmembers()
    names = [member.name for member in members]
    assert names == sorted(names) and {member.mtime for member in members} == {0}
    assert {member.uname for member in members} == {""}
    assert set(names) == {"lucene-impact.spec.cond.mini", *(f"lucene-impact.spec.cond.mini/{name}" for name in (
        "index", "index/segments_1", "index/_0.cfs", "topics.tsv", "qrels.txt", "README.md", HEADER_NAME))}


def test_topics_repeat_each_term_by_its_weight_and_read_back_to_the_same_vectors(tmp_path, exported):
    assert topic_line("q1", QUERIES["q1"]) == "q1\t100%25 100%25 cat cat cat dog\n"
    opened = open_prebuilt(exported[0], tmp_path / "cache")
    assert read_topics(opened.topics, opened.header["queries_fingerprint"]) == QUERIES
    assert (opened.qrels).read_text() == "q1 0 d1 1\n"
    with pytest.raises(VtreproError, match="more than"):
        topic_line("q", {"t": MAX_QUERY_TOKENS + 1})


def test_an_opened_tarball_is_reused_from_the_cache(tmp_path, exported):
    first = open_prebuilt(exported[0], tmp_path / "cache")
    assert open_prebuilt(exported[0], tmp_path / "cache").root == first.root
    assert (first.index / "segments_1").read_bytes() == b"segments"


def test_the_header_records_what_wrote_the_index_and_a_newer_lucene_is_refused_on_opening(tmp_path):
    """The Lucene, Anserini and Pyserini versions go into vtrepro.json and prebuilt.json; a Lucene major newer
    than the installed one is one line naming the Pyserini that reads it, from the cache too."""
    major = installed_release().lucene_major
    run = make_run(tmp_path)
    for lucene, name in ((f"{major - 1}.12.0", "older"), (f"{major + 1}.0.0", "newer")):
        header = {**run.header, "anserini_lucene": lucene, "anserini": f"{major}.9.9", "pyserini": "9.9.9"}
        info = write_prebuilt(replace(run, name=f"lucene-impact.{name}.c.d", header=header), tmp_path / name, STATS, "")
        assert info["vtrepro"] == {"spec": "spec", "condition": "cond", "dataset": "mini", "split": "test",
                                   "anserini_lucene": lucene, "anserini": f"{major}.9.9", "pyserini": "9.9.9"}
        tarball = tmp_path / name / info["filename"]
        with tarfile.open(tarball) as archive:
            recorded = json.load(archive.extractfile(f"lucene-impact.{name}.c.d/{HEADER_NAME}"))
        assert (recorded["anserini_lucene"], recorded["anserini"], recorded["pyserini"]) == (lucene, f"{major}.9.9", "9.9.9")
        if name == "older":
            assert open_prebuilt(tarball, tmp_path / "cache").header["anserini_lucene"] == lucene
            continue
        for _ in range(2):  # extracted, then from the cache
            with pytest.raises(VtreproError, match=f"written by Lucene {lucene} \\(Anserini {major}.9.9\\), which the "
                                                   f"installed Pyserini .* \\(Lucene {major}\\) cannot read"):
                open_prebuilt(tarball, tmp_path / "cache")


def test_a_checksum_that_does_not_match_the_sidecar_is_refused(tmp_path, exported):
    tarball, _ = exported
    checksum_paths(tarball)["sha256"].write_text("0" * 64 + f"  {tarball.name}\n")
    with pytest.raises(VtreproError, match="does not match"):
        open_prebuilt(tarball, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def hostile(tmp_path, members, name="bad.tar.gz"):
    """A .tar.gz of ``members``: (TarInfo fields, bytes or None), without sidecars."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for fields, content in members:
            info = tarfile.TarInfo(fields.pop("name"))
            info.type = tarfile.REGTYPE if content is not None else tarfile.DIRTYPE
            for key, value in fields.items():
                setattr(info, key, value)
            if content is not None:
                info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if content is not None else None)
    path = tmp_path / name
    path.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    return path


@pytest.mark.parametrize("members, problem", [
    ([({"name": "top/../../evil"}, b"x")], "leaves the archive"),
    ([({"name": "/etc/evil"}, b"x")], "leaves the archive"),
    ([({"name": "top"}, None), ({"name": "top/link", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}, None)],
     "not a plain file"),
    ([({"name": "top/hard", "type": tarfile.LNKTYPE, "linkname": "top/x"}, None)], "not a plain file"),
    ([({"name": "top/fifo", "type": tarfile.FIFOTYPE}, None)], "not a plain file"),
    ([({"name": "top/a"}, b"x"), ({"name": "other/b"}, b"y")], "one top folder"),
    ([({"name": "loose.txt"}, b"x")], "one top folder"),
    ([({"name": "top/a"}, b"x"), ({"name": "top/a"}, b"y")], "appears twice"),
    ([({"name": "top/index"}, b"x"), ({"name": "top/index/b"}, b"y")], "collides"),
    ([({"name": "top/deep/er/file"}, b"x")], "not a file of a prebuilt index"),
    ([({"name": "top/big"}, b"x" * 5000)], "more than the 4096 allowed"),
])
def test_hostile_members_are_refused_and_nothing_is_kept(tmp_path, members, problem):
    with pytest.raises(VtreproError, match=problem):
        open_prebuilt(hostile(tmp_path, members), tmp_path / "cache", max_bytes=4096)
    assert not (tmp_path / "evil").exists()
    assert not list((tmp_path / "cache").iterdir())


def test_an_altered_file_or_an_extra_one_is_refused_against_the_header(tmp_path, exported):
    tarball, _ = exported
    with tarfile.open(tarball) as archive:
        contents = {member.name: (archive.extractfile(member).read() if member.isfile() else None)
                    for member in archive.getmembers()}
    top = "lucene-impact.spec.cond.mini"
    altered = dict(contents, **{f"{top}/index/_0.cfs": b"flipped"})
    with pytest.raises(VtreproError, match="sha256"):
        open_prebuilt(hostile(tmp_path, [({"name": name}, data) for name, data in altered.items()]), tmp_path / "c1")
    extra = dict(contents, **{f"{top}/index/_1.cfs": b"more"})
    with pytest.raises(VtreproError, match="beyond"):
        open_prebuilt(hostile(tmp_path, [({"name": name}, data) for name, data in extra.items()], "x.tar.gz"),
                      tmp_path / "c2")
    header = json.loads(contents[f"{top}/{HEADER_NAME}"])
    header["queries_fingerprint"] = "0" * 64
    forged = dict(contents, **{f"{top}/{HEADER_NAME}": json.dumps(header).encode()})
    opened = open_prebuilt(hostile(tmp_path, [({"name": name}, data) for name, data in forged.items()], "y.tar.gz"),
                           tmp_path / "c3")
    with pytest.raises(VtreproError, match="fingerprint"):
        read_topics(opened.topics, opened.header["queries_fingerprint"])


def test_damaged_or_foreign_files_are_one_line_errors(tmp_path, exported):
    truncated = tmp_path / "cut.tar.gz"
    truncated.write_bytes(exported[0].read_bytes()[:-200])
    with pytest.raises(VtreproError, match="damaged or truncated"):
        open_prebuilt(truncated, tmp_path / "cache")
    plain = tmp_path / "plain.tar.gz"
    plain.write_bytes(b"not gzip at all")
    with pytest.raises(VtreproError, match="not a readable"):
        open_prebuilt(plain, tmp_path / "cache")
    with pytest.raises(VtreproError, match="no such prebuilt index"):
        open_prebuilt(tmp_path / "missing.tar.gz", tmp_path / "cache")


def test_names_are_checked():
    assert tarball_name("beir", "splade", "cqadupstack/android") == "lucene-impact.beir.splade.cqadupstack-android"
    with pytest.raises(VtreproError, match="not a usable"):
        tarball_name("a b", "c", "d")


def test_a_header_naming_a_path_as_its_condition_writes_nothing_outside_the_cache(tmp_path):
    """regress --vectors names folders after the header's condition and dataset: a path there is refused."""
    from vtrepro.regress.sources import _prebuilt_vectors

    outside = tmp_path / "outside"
    run = make_run(tmp_path)
    run.header["condition"] = str(outside)
    info = write_prebuilt(run, tmp_path / "out", STATS, "# readme\n")
    with pytest.raises(VtreproError, match="not a plain name"):
        _prebuilt_vectors(tmp_path / "out" / info["filename"], tmp_path / "cache")
    assert not outside.exists()


@pytest.mark.parametrize("line, what", [("q 1\tparis paris\n", "query id"), ("q\x0b1\tparis\n", "query id"),
                                        ("q1\tparis pa\x1bris\n", "term"), ("q1\tparis\tx\n", "term")])
def test_topic_ids_and_terms_that_would_forge_run_lines_are_refused(tmp_path, line, what):
    """A query id with a space would write a seven-field TREC line; control characters are refused as in vectors."""
    topics = tmp_path / "topics.tsv"
    topics.write_text("ok\tparis\n" + line, encoding="utf-8")
    with pytest.raises(VtreproError, match=rf"topics\.tsv:2: {what}"):
        read_topics(topics)
