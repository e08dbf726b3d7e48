"""The catalogue's compressed-input class (docs/input-validation.md 6.9): a compressed or archived input is
bounded before it expands, and outputs never land on an input's checksum or inside ``--vectors``.

The hostile files are made here, small: a gzip member whose deflate body is mostly zero bytes expands 1,032
times (:func:`gz_bomb`: a 2 MB file holds a 2 GiB line or a 2 GB long name, as in issue 31). The memory cases
run the real command in a fresh process under a 2 GiB address-space limit and report its own peak resident
memory (``os.wait4``); the others run in-process through ``cli_entry``.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest
from test_catalogue_outputs import bundle_world, run_command, write_bundle_with  # noqa: F401  (a fixture)

import vtrepro
from helpers import assert_one_error_line
from vtrepro.bench.command import main as bench_main
from vtrepro.core import archives
from vtrepro.core.archives import MAX_EXTENDED_HEADER_BYTES, MAX_EXTENDED_HEADERS, MAX_LINE_BYTES, extract_zip
from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import read_corpus
from vtrepro.encode.command import fingerprint_main
from vtrepro.encode.reader import MAX_VECTOR_TERMS
from vtrepro.index.prebuilt import HEADER_NAME, MAX_TOPICS, PREBUILT_FORMAT
from vtrepro.regress.command import main as regress_main
from vtrepro.search.command import main as search_main

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

ADDRESS_SPACE = 2 << 30
SOURCE_ROOT = Path(vtrepro.__file__).resolve().parents[1]
"""The checkout under test, first on the fresh process's path (an installed vtrepro may be another)."""
PEAK_BYTES = 512 << 20
"""Peak resident memory allowed to a refused command (imports and all: about 100 MB here; 6.2 GB before)."""
TOP = "lucene-impact.s.c.d"


def gz_bomb(prefix: bytes, zeros: int) -> bytes:
    """A gzip member of ``prefix`` then about ``zeros`` zero bytes, about ``zeros / 1032`` bytes long: the middle of
    a deflated run of zeros is zero bytes each worth 1,032 output bytes, so more of them make the run longer.
    Its trailer is not checked: every reader here stops long before it."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = compressor.compress(prefix + bytes(8 << 20)) + compressor.flush()
    run = body.index(bytes(64), 8)
    body = body[:run] + bytes(-(-max(0, zeros - (8 << 20)) // 1032)) + body[run:]  # at least ``zeros`` zeros
    head = zlib.decompressobj(-15).decompress(body, len(prefix) + 4096)
    assert head.startswith(prefix) and not head[len(prefix):].strip(b"\0")
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + body + bytes(8)


def header(name: str, kind: bytes, size: int) -> bytes:
    """One raw 512-byte tar header block (GNU format) declaring ``size`` bytes, whatever follows it."""
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, size, 0o644
    return info.tobuf(format=tarfile.GNU_FORMAT)


PEAK_PROBE = ("import atexit, runpy, sys\n"
              "out = sys.argv[1]\n"
              "def peak():\n"
              "    high = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
              "    open(out, 'w').write(str(int(high.split()[1]) * 1024))\n"
              "atexit.register(peak)\n"
              "sys.argv = ['vtrepro', *sys.argv[2:]]\n"
              "runpy.run_module('vtrepro', run_name='__main__')\n")
"""``python -m vtrepro`` that writes its own peak resident bytes at exit: ``VmHWM`` of the process's memory
since its exec. The child's ``ru_maxrss`` would not do: a forked child counts the parent's pages (the pytest
process, over 512 MB late in a full run) until it execs."""


def peak_run(*args: str, cwd: Path) -> tuple[int, str, int]:
    """``python -m vtrepro ARGS`` in a fresh process under a 2 GiB address-space limit: (status, stderr, its
    own peak resident bytes)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    stderr, peak = cwd / "stderr.txt", cwd / "peak.txt"
    with open(stderr, "w") as errors:
        process = subprocess.run([sys.executable, "-c", PEAK_PROBE, str(peak), *args], stdout=subprocess.DEVNULL,
                                 stderr=errors, cwd=cwd, preexec_fn=limit, timeout=120,
                                 env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(SOURCE_ROOT)})
    return process.returncode, stderr.read_text(), int(peak.read_text())


def disk_use(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def prebuilt(path: Path, topics: bytes) -> Path:
    """A prebuilt index tarball whose header lists its files' sha256 (so it opens), with these ``topics``."""
    files = {"index/segments_1": b"segments", "topics.tsv": topics, "qrels.txt": b"q1 0 d1 1\n", "README.md": b"#\n"}
    head = {"format": PREBUILT_FORMAT, "name": TOP, "queries_fingerprint": "0" * 64,
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
    files[HEADER_NAME] = json.dumps(head).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for folder in (TOP, f"{TOP}/index"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    return path


# -- tar headers: an extended header is bounded from its block, before tarfile reads its payload ---------------

HOSTILE_HEADERS = {
    "GNU long name of 2 GB": (header("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2_000_000_000),
                              "declaring 2000000000 bytes"),
    "PAX header of 1 GiB": (header("././@PaxHeader", tarfile.XHDTYPE, 1 << 30), "declaring 1073741824 bytes"),
    "extended headers in a row": (header("././@PaxHeader", tarfile.XHDTYPE, 0) * (MAX_EXTENDED_HEADERS + 1),
                                  f"follows more than {MAX_EXTENDED_HEADERS} extended headers in a row"),
    "old GNU sparse header": (header(f"{TOP}/index/_0.cfs", tarfile.GNUTYPE_SPARSE, 1 << 30), "is a sparse file"),
}


@pytest.mark.parametrize("case", HOSTILE_HEADERS, ids=list(HOSTILE_HEADERS))
def test_an_extended_header_is_refused_from_its_block_in_a_prebuilt_index(case, tmp_path, capsys):
    raw, fragment = HOSTILE_HEADERS[case]
    tarball = tmp_path / "hostile.tar.gz"
    tarball.write_bytes(gzip.compress(raw + bytes(1024), mtime=0))
    code, stderr = run_command(search_main, ["--index", tarball, "--output", tmp_path / "out" / "run.trec"], capsys)
    assert_one_error_line(code, stderr, f"{tarball}: member ", fragment, "refused before reading it")
    assert list((tmp_path / "out").iterdir()) == []  # the temporary extraction folder is gone, nothing written


def test_a_long_name_declaring_2_gb_in_a_bundle_is_refused_from_its_block(bundle_world, tmp_path, capsys):  # noqa: F811
    spec, data = bundle_world

    def long_name(archive: tarfile.TarFile) -> None:
        raw = header("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2_000_000_000)
        archive.fileobj.write(raw)  # type: ignore[union-attr]
        archive.offset += len(raw)

    bundle = write_bundle_with(tmp_path / "long-name.tar", long_name)
    code, stderr = run_command(regress_main, ["--spec", spec, "--data-dir", data, "--vectors", bundle,
                                              "--output", tmp_path / "runs"], capsys)
    assert_one_error_line(code, stderr, f"{bundle}: member '././@LongLink'", "declaring 2000000000 bytes",
                          f"more than the {MAX_EXTENDED_HEADER_BYTES}")
    assert list((tmp_path / "runs" / ".bundles").iterdir()) == []


def test_a_2_gb_long_name_in_a_2_mb_tarball_is_refused_within_2_gib(tmp_path):
    """Issue 31: a 3 MB .tar.gz whose long-name header declares 2 GB took the process to 6.2 GB (tarfile read
    the name whole). Here its payload really expands to 2 GiB; the refusal reads one block."""
    tarball = tmp_path / "bomb.tar.gz"
    tarball.write_bytes(gz_bomb(header("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2_000_000_000), 2 << 30))
    assert tarball.stat().st_size < 3 << 20
    code, stderr, peak = peak_run("search", "--index", str(tarball), "--output", str(tmp_path / "out" / "run.trec"),
                                  cwd=tmp_path)
    assert_one_error_line(code, stderr, f"{tarball}: member '././@LongLink'", "declaring 2000000000 bytes")
    assert peak < PEAK_BYTES, peak
    assert list((tmp_path / "out").iterdir()) == []


# -- declared member sizes: within the archive's allowance and the disk's room, before a byte is written -------

def test_a_member_declaring_100_gib_is_refused_before_anything_is_written(tmp_path, capsys):
    """Issue 31: a 1.5 MB tarball wrote 1.5 GiB before it was refused (sizes up to 256 GiB were allowed). Here the
    member's data really expands to 1 GiB; its declared 100 GiB is refused from its header."""
    member = header(f"{TOP}/index/_0.cfs", tarfile.REGTYPE, 100 << 30)
    tarball = tmp_path / "huge.tar.gz"
    tarball.write_bytes(gz_bomb(header(TOP, tarfile.DIRTYPE, 0) + header(f"{TOP}/index", tarfile.DIRTYPE, 0) + member,
                                1 << 30))
    code, stderr = run_command(search_main, ["--index", tarball, "--output", tmp_path / "out" / "run.trec"], capsys)
    assert_one_error_line(code, stderr, f"{tarball}: member '{TOP}/index/_0.cfs'",
                          "brings the declared sizes to 107374182400 bytes, more than the",
                          "32 x its", "compressed bytes")
    assert list((tmp_path / "out").iterdir()) == [] and disk_use(tmp_path) < 2 << 20


def test_a_member_larger_than_the_free_disk_is_refused_before_it_is_written(tmp_path, capsys, monkeypatch):
    tarball = prebuilt(tmp_path / "fine.tar.gz", b"q1\tcat\n")
    real = archives.shutil.disk_usage
    monkeypatch.setattr(archives.shutil, "disk_usage", lambda path: real(path)._replace(free=4))
    code, stderr = run_command(search_main, ["--index", tarball, "--output", tmp_path / "out" / "run.trec"], capsys)
    assert_one_error_line(code, stderr, f"{tarball}: member '{TOP}/index/segments_1' needs 8 bytes",
                          "has 4 free; free disk space")
    assert list((tmp_path / "out").iterdir()) == []


# -- lines: at most MAX_LINE_BYTES, read in bounded pieces -----------------------------------------------------

def test_a_2_gib_line_in_a_2_mb_gz_is_refused_within_2_gib(tmp_path):
    """Issue 31: one 2 GiB line in a 2 MB corpus.jsonl.gz exhausted memory (exit 3). Every line reader reads at
    most MAX_LINE_BYTES + 1 bytes at a time (here the vectors' reader, the one of corpora, queries and qrels)."""
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    shard = vectors / "part-00000.jsonl.gz"
    shard.write_bytes(gz_bomb(b'{"id": "d1", "vector": {"', 2 << 30))
    assert shard.stat().st_size < 3 << 20
    code, stderr, peak = peak_run("fingerprint", str(vectors), cwd=tmp_path)
    assert_one_error_line(code, stderr, f"{shard}:1: a line longer than {MAX_LINE_BYTES} bytes")
    assert peak < PEAK_BYTES, peak


def test_a_corpus_line_just_over_the_bound_is_refused_with_its_line(tmp_path):
    corpus = tmp_path / "corpus.jsonl.gz"
    corpus.write_bytes(gzip.compress(b'{"_id": "d1", "text": "fine"}\n', mtime=0) +
                       gz_bomb(b'{"_id": "d2", "text": "', MAX_LINE_BYTES + 1))  # two gzip members, as gzip reads
    with pytest.raises(VtreproError) as refused:
        read_corpus(corpus)
    assert str(refused.value).startswith(f"{corpus}:2: a line longer than {MAX_LINE_BYTES} bytes")
    assert "\n" not in str(refused.value)


def test_a_vector_of_more_terms_than_any_vocabulary_is_refused(tmp_path, capsys):
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    terms = ",".join(f'"t{i}":1' for i in range(MAX_VECTOR_TERMS + 1))
    shard = vectors / "part-00000.jsonl"
    shard.write_text(f'{{"id": "d1", "contents": "", "vector": {{{terms}}}}}\n')
    code, stderr = run_command(fingerprint_main, ["--vectors", vectors], capsys)
    assert_one_error_line(code, stderr, f"{shard}:1: 'vector' holds {MAX_VECTOR_TERMS + 1} terms, more than the "
                                        f"{MAX_VECTOR_TERMS}")


# -- counts and names inside a prebuilt index --------------------------------------------------------------------

def test_topics_beyond_their_bound_are_refused_naming_the_tarball_and_member(tmp_path, capsys):
    """Issue 31: a 9 MiB tarball holding 4 million topics had no stated bound; now a count of the line breaks
    refuses MAX_TOPICS + 1 before any is parsed."""
    tarball = prebuilt(tmp_path / "topics.tar.gz", b"q\n" * (MAX_TOPICS + 1))
    code, stderr = run_command(search_main, ["--index", tarball, "--output", tmp_path / "out" / "run.trec"], capsys)
    line = assert_one_error_line(code, stderr, f"{tarball}: member {TOP}/topics.tsv: more than {MAX_TOPICS} topics")
    assert "prebuilt-" not in line  # not the temporary folder it was extracted into, gone by now
    assert list((tmp_path / "out").iterdir()) == []


def test_a_bad_topic_line_names_the_tarball_and_member_not_a_temporary_path(tmp_path, capsys):
    tarball = prebuilt(tmp_path / "bad.tar.gz", b"q1 without a tab\n")
    code, stderr = run_command(search_main, ["--index", tarball, "--output", tmp_path / "out" / "run.trec"], capsys)
    line = assert_one_error_line(code, stderr, f"{tarball}: member {TOP}/topics.tsv:1: expected 'qid<TAB>terms'")
    assert "prebuilt-" not in line


# -- outputs: an input's checksum sidecar is an input; --vectors itself is an input folder ---------------------

def test_search_output_onto_the_tarball_checksum_is_refused(tmp_path, capsys):
    """Issue 31: ``search --output X.tar.gz.sha256`` overwrote the checksum it had just read."""
    tarball = prebuilt(tmp_path / "index.tar.gz", b"q1\tcat\n")
    sidecar = tmp_path / "index.tar.gz.sha256"
    sidecar.write_text(f"{hashlib.sha256(tarball.read_bytes()).hexdigest()}  index.tar.gz\n")
    before = sidecar.read_bytes()
    code, stderr = run_command(search_main, ["--index", tarball, "--output", sidecar], capsys)
    assert_one_error_line(code, stderr, f"{sidecar}: is the input file {sidecar}")
    assert sidecar.read_bytes() == before


@pytest.mark.parametrize("command", ["scale --output", "search --index-dir"])
def test_bench_outputs_inside_the_vectors_folder_are_refused(command, tmp_path, capsys):
    """Issue 31: the check knew the encoded corpus's ``vectors/`` but not the ``--vectors`` folder around it."""
    encoded = tmp_path / "encoded"
    (encoded / "vectors").mkdir(parents=True)
    (encoded / "manifest.json").write_text("{}")
    (encoded / "vectors" / "part-00000.jsonl").write_text('{"id": "d1", "contents": "", "vector": {"a": 1}}\n')
    (encoded / "queries.jsonl").write_text('{"id": "q1", "vector": {"a": 1}}\n')
    name, option = command.split()
    code, stderr = run_command(bench_main, [name, "--vectors", encoded, "--queries", encoded / "queries.jsonl",
                                            option, encoded / "bench"], capsys)
    assert_one_error_line(code, stderr, f"{encoded / 'bench'}: lies inside the input folder {encoded}")
    assert not (encoded / "bench").exists()


# -- dataset zips ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry, data, fragment", [
    ("../escaped.jsonl", b"{}\n", "has a path that leaves the archive"),
    ("/tmp/vtrepro-escaped.jsonl", b"{}\n", "has a path that leaves the archive"),
    ("mini/corpus.jsonl", bytes(2 << 20), "more than the 1048576 allowed"),
], ids=["parent path", "absolute path", "2 MiB over a 1 MiB bound"])
def test_a_dataset_zip_is_checked_before_anything_is_extracted(entry, data, fragment, tmp_path):
    path = tmp_path / "mini.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(entry, data)
    with pytest.raises(VtreproError, match=fragment):
        extract_zip(path, tmp_path / "extracted", "https://example.org/mini.zip", max_bytes=1 << 20)
    assert not (tmp_path / "extracted").exists() and not (tmp_path.parent / "escaped.jsonl").exists()
