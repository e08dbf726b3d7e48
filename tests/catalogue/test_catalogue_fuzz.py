"""Fuzzing every kind of file a stranger can hand vtrepro: JSON, JSONL, TSV, YAML and tar inputs, each in
nested, oversized, mis-encoded, mis-typed and truncated variants generated from a valid seed, through the real
commands in process; and every kind of folder (issue 44): vector, PISA and Lucene index, bundle, model and run
folders, each JSON file in them replaced by a FIFO, a link to ``/dev/zero`` or out of the folder, and by those
variants. Every variant must end in exit 0 or 2 (never an internal error), with one ``error:`` line when
refused, bounded memory, and nothing written outside the command's output."""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import tarfile
import tracemalloc
from pathlib import Path
from typing import Callable

import pytest
from test_catalogue_folders import hang_guard

from helpers import MINI_CORPUS, run_command, write_jsonl
from vtrepro.core.archives import MAX_LINE_BYTES
from vtrepro.encode.bundle import BUNDLE_FORMAT
from vtrepro.encode.command import encode_main as encode
from vtrepro.evaluate.command import main as evaluate
from vtrepro.index.command import main as index
from vtrepro.index.pisa import META_NAME
from vtrepro.regress.command import main as regress
from vtrepro.report.command import main as report
from vtrepro.search.command import main as search

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

MEMORY_BOUND = 256 * 2**20
"""Most memory Python may allocate for one variant (traced): every input here is under 1 MiB but the oversized
line (64 MiB + 1, read at most once: 64 MiB), so anything near this bound means a reader expanded what it was
given."""


def mutations(seed: bytes, rng: random.Random) -> dict[str, bytes]:
    """Variants of a text file: nested, oversized, mis-encoded, mis-typed, truncated and empty."""
    lines = seed.splitlines(keepends=True) or [b"\n"]
    middle = len(lines) // 2
    swapped = [line.replace(b'"', b"'", 2) if index == middle else line for index, line in enumerate(lines)]
    typed = seed.replace(b": \"", b": [").replace(b"\": ", b"\": {\"x\": ", 1)
    return {
        "nested 100k": b"[" * 100_000 + b"]" * 100_000 + b"\n" + seed,
        "nested 10^6, unclosed": b"[" * 10**6,
        "nested object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"\n",
        "oversized line": b"x" * (MAX_LINE_BYTES + 1) + b"\n" + seed,  # the real bound: one byte over it
        "invalid utf-8": seed[: len(seed) // 2] + b"\xff\xfe\xc0\xaf" + seed[len(seed) // 2:],
        "lone surrogate": seed + b'{"_id": "\\ud800", "text": "\\udfff"}\n',
        "nul bytes": seed.replace(b" ", b"\x00", 3),
        "mis-typed": typed,
        "quotes swapped": b"".join(swapped),
        "truncated": seed[: max(1, len(seed) * 2 // 3)],
        "empty": b"",
        "binary": bytes(rng.randrange(256) for _ in range(512)),
        "huge number": seed.replace(b"1", b"9" * 5000, 1),
        "nan": seed.replace(b"1", b"NaN", 1),
        "crlf and tabs": seed.replace(b"\n", b"\r\n").replace(b" ", b"\t", 2),
    }


def tar_mutations(seed: bytes) -> dict[str, bytes]:
    """Variants of a tar archive: truncated, not a tar, a member that climbs out, a link, a huge declared size."""
    def archive(name: str, data: bytes, kind: bytes = tarfile.REGTYPE, link: str = "", size: int | None = None) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data) if size is None else size
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE and size is None else None)
        return buffer.getvalue()
    return {
        "truncated": seed[: len(seed) // 2],
        "not a tar": b"plain text, not an archive\n" * 20,
        "climbing member": archive("../../escaped.txt", b"x"),
        "absolute member": archive("/tmp/vtrepro-fuzz-absolute.txt", b"x"),
        "symlink member": archive("link", b"", tarfile.SYMTYPE, "/etc/passwd"),
        "device member": archive("dev", b"", tarfile.CHRTYPE),
        "declared 1 TiB": archive("big", b"", size=2**40)[:2048],
        "empty": b"",
    }


def _snapshot(root: Path, output: Path) -> dict[str, int]:
    return {str(path): path.stat().st_size for path in root.rglob("*")
            if path.is_file() and output not in path.parents and path != output}


def _run(case: str, command: Callable, argv: list, root: Path, output: Path, capsys) -> tuple[int, int]:
    before = _snapshot(root, output)
    tracemalloc.start()
    try:
        code, _, err = run_command(command, argv, capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code in (0, 2), f"{case}: exit {code}\n{err[-1500:]}"
    if code == 2:
        errors = [line for line in err.splitlines() if "error: " in line]
        assert len(errors) == 1 and "Traceback" not in err, f"{case}: {err[-1500:]}"
    assert peak < MEMORY_BOUND, f"{case}: {peak:,} bytes traced"
    assert _snapshot(root, output) == before, f"{case}: wrote outside {output}"
    return code, peak


def _beir(root: Path) -> Path:
    folder = root / "beir" / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": key, "title": "t", "text": text}) + "\n"
                                                 for key, text in MINI_CORPUS.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what causes heart attacks"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td3\t1\n")
    return folder


SPEC = b"""description: fuzz seed
defaults: {split: test, k: 10, metrics: [ndcg@10]}
conditions:
  bm25:
    retrieval: bm25
    bm25: {k1: 0.9, b: 0.4}
    datasets:
      mini:
        scores: {ndcg@10: 1.0}
"""
RUN = b"q1 Q0 d1 1 2.5 fuzz\nq1 Q0 d3 2 1.5 fuzz\nq1 Q0 d2 3 0.5 fuzz\n"


def test_every_input_kind_fuzzed_ends_in_exit_0_or_2_bounded_and_contained(tmp_path: Path, capsys) -> None:
    """One test over every variant of every input kind, so the count is one figure (printed)."""
    rng = random.Random(20261204)
    counted: dict[str, int] = {}

    def case(kind: str) -> None:
        counted[kind] = counted.get(kind, 0) + 1

    # JSONL corpus, queries and TSV qrels of a BEIR folder, through evaluate (qrels) and regress --dry-run.
    for file, seed_name in (("corpus.jsonl", "corpus"), ("queries.jsonl", "queries"), ("qrels/test.tsv", "qrels")):
        root = tmp_path / f"beir-{seed_name}"
        folder = _beir(root)
        seed = (folder / file).read_bytes()
        for name, data in mutations(seed, rng).items():
            (folder / file).write_bytes(data)
            (root / "run.trec").write_bytes(RUN)
            output = root / "out"
            _run(f"{file} {name}", evaluate, ["--run", root / "run.trec", "--dataset", folder], root, output, capsys)
            _run(f"{file} {name} (regress)", regress, ["--spec", _spec(root, SPEC), "--data-dir", root, "--runs",
                                                       output, "--dry-run"], root, output, capsys)
            case(f"{file} (JSONL/TSV)")
        (folder / file).write_bytes(seed)
    # TREC run files (TSV-like) through evaluate.
    root = tmp_path / "runs"
    folder = _beir(root)
    for name, data in mutations(RUN, rng).items():
        (root / "run.trec").write_bytes(data)
        _run(f"run {name}", evaluate, ["--run", root / "run.trec", "--dataset", folder], root, root / "out", capsys)
        case("run.trec (TSV)")
    # YAML specs through regress --dry-run.
    root = tmp_path / "specs"
    _beir(root)
    for name, data in {**mutations(SPEC, rng), "alias bomb": _alias_bomb(), "tag": b"!!python/object:os.system {}\n"}.items():
        (root / "spec.yaml").write_bytes(data)
        _run(f"spec {name}", regress, ["--spec", root / "spec.yaml", "--data-dir", root, "--runs", root / "out",
                                       "--dry-run"], root, root / "out", capsys)
        case("spec (YAML)")
    # results.json (JSON) through report.
    root = tmp_path / "report"
    results = root / "results" / "spec"
    results.mkdir(parents=True)
    seed = json.dumps({"spec": "spec.yaml", "description": "seed", "rows": [
        {"condition": "c", "dataset": "mini", "metric": "ndcg@10", "kind": "score", "tier": "fixed",
         "expected": 1.0, "observed": 1.0, "status": "OK", "difference": "", "note": ""}]}).encode() + b"\n"
    for name, data in mutations(seed, rng).items():
        (results / "results.json").write_bytes(data)
        _run(f"results.json {name}", report, [results, "--output", root / "out"], root, root / "out", capsys)
        case("results.json (JSON)")
    # Vector bundles (tar) through regress --vectors.
    root = tmp_path / "bundles"
    _beir(root)
    (root / "spec.yaml").write_bytes(SPEC.replace(b"retrieval: bm25\n    bm25: {k1: 0.9, b: 0.4}\n",
                                                  b"model: splade-tiny\n"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("bundle.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    for name, data in tar_mutations(buffer.getvalue()).items():
        (root / "bundle.tar").write_bytes(data)
        _run(f"bundle {name}", regress, ["--spec", root / "spec.yaml", "--data-dir", root, "--runs", root / "out",
                                         "--vectors", root / "bundle.tar"], root, root / "out", capsys)
        case("bundle (tar)")
    assert not Path("/tmp/vtrepro-fuzz-absolute.txt").exists()
    total = sum(counted.values())
    print(f"\nfuzzed inputs: {total} ({', '.join(f'{kind} {count}' for kind, count in counted.items())})")
    assert total >= 80


def _spec(root: Path, text: bytes) -> Path:
    (root / "spec.yaml").write_bytes(text)
    return root / "spec.yaml"


def _alias_bomb() -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return ("\n".join(lines) + "\n").encode()


# -- Folders (issue 44): every JSON file of a vector, index, bundle, model and run folder ---------------------

SPECIAL = ("fifo", "/dev/zero", "outside link")


def _plant(path: Path, variant: str, data: bytes = b"") -> None:
    """Replace ``path`` (never written through: a hard link to a shared file stays untouched) by a FIFO, a link
    to /dev/zero or out of its folder, or by ``data``."""
    path.unlink(missing_ok=True)
    if variant == "fifo":
        os.mkfifo(path)
    elif variant == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif variant == "outside link":
        path.symlink_to(Path(__file__).resolve())
    else:
        path.write_bytes(data)


def _variants(seed: bytes, rng: random.Random, special: bool = True) -> dict[str, bytes]:
    return {**(dict.fromkeys(SPECIAL, b"") if special else {}), **mutations(seed, rng)}


def test_every_folder_kind_fuzzed_ends_in_exit_0_or_2_bounded_and_contained(tmp_path: Path, capsys, impact_index,
                                                                              splade_tiny: Path) -> None:
    """Each JSON file of each kind of folder (and each file of an index folder) in every variant, through the
    command that reads it; the count is printed."""
    rng = random.Random(20261205)
    counted: dict[str, int] = {}

    def fuzz(kind: str, path: Path, variants: dict[str, bytes], command: Callable, argv: list, root: Path,
             output: Path) -> None:
        original = path.read_bytes()
        for name, data in variants.items():
            _plant(path, name, data)
            with hang_guard(path):
                _run(f"{kind} {path.name} {name}", command, argv, root, output, capsys)
            shutil.rmtree(output, ignore_errors=True)
            counted[kind] = counted.get(kind, 0) + 1
        _plant(path, "restored", original)

    # A vector folder: manifest.json and a vector file, through index; timings.json through regress.
    root = tmp_path / "vector-folder"
    vectors = root / "encoded"
    write_jsonl(vectors / "vectors" / "part-00000.jsonl",
                [{"id": doc, "contents": "", "vector": {"heart": weight, "attack": 1}}
                 for doc, weight in (("d1", 9), ("d2", 1), ("d3", 4))])
    write_jsonl(vectors / "queries.jsonl", [{"id": "q1", "vector": {"heart": 2}}])
    manifest = {"format": "vtrepro.encoded-corpus/1", "model": "m", "settings": {}, "complete": True, "documents": 3,
                "total_terms": 17, "shards": [{"file": "vectors/part-00000.jsonl", "documents": 3, "total_terms": 17,
                                               "sha256": "0" * 64}]}
    (vectors / "manifest.json").write_text(json.dumps(manifest) + "\n")
    (vectors / "timings.json").write_text(json.dumps({"device": "cpu", "seconds": {"part-00000.jsonl": 1.5}}) + "\n")
    for name in ("manifest.json", "vectors/part-00000.jsonl"):
        fuzz("vector folder", vectors / name, _variants((vectors / name).read_bytes(), rng), index,
             ["--vectors", vectors, "--output", root / "out"], root, root / "out")
    data = _beir(root)
    spec = root / "spec.yaml"
    spec.write_text("defaults: {metrics: [ndcg@10]}\nconditions:\n  given:\n    datasets:\n      mini:\n"
                    f"        encoded: {{corpus: {vectors}, queries: {vectors / 'queries.jsonl'}}}\n")
    fuzz("vector folder", vectors / "timings.json", _variants((vectors / "timings.json").read_bytes(), rng), regress,
         ["--spec", spec, "--data-dir", data.parent.parent, "--runs", root / "runs"], root, root / "runs")
    # Index folders: a PISA index's header, and any file of a Lucene index, through search.
    root = tmp_path / "index-folders"
    write_jsonl(root / "queries.jsonl", [{"id": "q1", "vector": {"heart": 2}}])
    assert run_command(index, ["--engine", "pisa", "--vectors", vectors / "vectors", "--output", root / "pisa"],
                       capsys)[0] == 0
    search_argv = ["--queries", root / "queries.jsonl", "--output", root / "out" / "run.trec"]
    fuzz("index folder", root / "pisa" / META_NAME, _variants((root / "pisa" / META_NAME).read_bytes(), rng), search,
         ["--engine", "pisa", "--index", root / "pisa", *search_argv], root, root / "out")
    lucene = Path(shutil.copytree(impact_index[0], root / "lucene"))
    for path in sorted(lucene.iterdir()):
        fuzz("index folder", path, dict.fromkeys(SPECIAL, b""), search, ["--index", lucene, *search_argv], root,
             root / "out")
    # Bundles: bundle.json in every variant, inside a tar, through regress --vectors.
    root = tmp_path / "bundle-folder"
    data = _beir(root)
    (root / "spec.yaml").write_bytes(SPEC.replace(b"retrieval: bm25\n    bm25: {k1: 0.9, b: 0.4}\n",
                                                  b"model: splade-tiny\n"))
    header = json.dumps({"format": BUNDLE_FORMAT, "runs": {"bm25/mini": {"corpus": {}, "queries": {}}}}).encode()
    for name, content in mutations(header, rng).items():
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo("bundle.json")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        (root / "bundle.tar").write_bytes(buffer.getvalue())
        _run(f"bundle.json {name}", regress, ["--spec", root / "spec.yaml", "--data-dir", root, "--runs", root / "out",
                                              "--vectors", root / "bundle.tar"], root, root / "out", capsys)
        counted["bundle"] = counted.get("bundle", 0) + 1
    # A model folder: its config.json (hard links to splade-tiny's other files), through encode.
    root = tmp_path / "model-folder"
    model = root / "model"
    model.mkdir(parents=True)
    for path in splade_tiny.iterdir():
        if path.is_file():
            os.link(path.resolve(), model / path.name)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "text": "heart attack"}])
    fuzz("model folder", model / "config.json", _variants((model / "config.json").read_bytes(), rng), encode,
         ["--model", model, "--corpus", root / "corpus.jsonl", "--output", root / "out", "--batch-size", "1"], root,
         root / "out")
    # A run folder: results.json and per_query.json, through report.
    root = tmp_path / "run-folder"
    results = root / "results"
    (results / "c" / "mini").mkdir(parents=True)
    (results / "results.json").write_text(json.dumps({"spec": "spec.yaml", "description": "seed", "rows": [
        {"condition": "c", "dataset": "mini", "metric": "ndcg@10", "kind": "score", "tier": "fixed",
         "expected": 1.0, "observed": 1.0, "status": "OK", "difference": "", "note": ""}]}) + "\n")
    (results / "c" / "mini" / "per_query.json").write_text(json.dumps({"ndcg@10": {"q1": 1.0}}) + "\n")
    for path in (results / "results.json", results / "c" / "mini" / "per_query.json"):
        fuzz("run folder", path, _variants(path.read_bytes(), rng), report, [results, "--output", root / "out"], root,
             root / "out")
    total = sum(counted.values())
    print(f"\nfuzzed folder inputs: {total} ({', '.join(f'{kind} {count}' for kind, count in counted.items())})")
    assert set(counted) == {"vector folder", "index folder", "bundle", "model folder", "run folder"} and total >= 150
