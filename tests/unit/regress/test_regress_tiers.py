"""Two tiers of pinned figures, and vector bundles that make every figure exact on another machine.

Runs the real pipeline (splade-tiny, Lucene, pytrec_eval) on a three-document collection."""
import io
import json
import re
import shutil
import tarfile

import pytest
from ruamel.yaml import YAML

from helpers import record_mini_spec
from vtrepro.core.cli import cli_entry
from vtrepro.encode import scan as scan_module
from vtrepro.encode.bundle import checksum_path
from vtrepro.regress.command import export_main
from vtrepro.regress.command import main as regress_main

regress = cli_entry(regress_main)
export = cli_entry(export_main)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, splade_tiny):
    """A spec recorded by ``regress --record`` on the mini collection, its data root and its runs folder."""
    return record_mini_spec(tmp_path_factory.mktemp("tiers"), splade_tiny)


def test_recording_pins_the_judged_rows_and_leaves_the_measured_ones_measured(recorded):
    rows = json.loads((recorded[2] / "mini_spec" / "results.json").read_text())["rows"]
    kinds = {row["kind"]: {other["status"] for other in rows if other["kind"] == row["kind"]} for row in rows}
    assert kinds["efficiency"] == {"MEASURED"} and kinds["score"] == {"OK"}


def edited(spec, tmp_path, change, name="mini_spec.yaml"):
    """A copy of ``spec`` with ``change(document)`` applied."""
    yaml = YAML()
    document = yaml.load(spec.read_text())
    change(document)
    path = tmp_path / name
    with open(path, "w") as handle:
        yaml.dump(document, handle)
    return path


def rows_of(runs, spec_name="mini_spec"):
    """The judged rows of a run by metric (efficiency figures are recorded, never judged)."""
    rows = json.loads((runs / spec_name / "results.json").read_text())["rows"]
    return {row["metric"]: row for row in rows if row["kind"] != "efficiency"}


def run(spec, data, output, *extra):
    return regress(["--spec", str(spec), "--data-dir", str(data), "--runs", str(output), *extra])


def pinned(document):
    return document["conditions"]["tiny"]["datasets"]["mini"]


def test_record_pins_fingerprints_and_a_rerun_is_exact(recorded, tmp_path):
    spec, data, _ = recorded
    vectors = pinned(YAML().load(spec.read_text()))["vectors"]
    assert all(re.fullmatch(r"[0-9a-f]{64}", vectors[name]) for name in ("corpus", "queries"))
    assert run(spec, data, tmp_path) == 0
    rows = rows_of(tmp_path)
    assert {row["tier"] for row in rows.values()} == {"fixed"} and {row["status"] for row in rows.values()} == {"OK"}


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_other_vectors_are_judged_within_the_tolerance(recorded, tmp_path):
    """Vectors that differ from the pinned ones (as on another CPU): small moves are OKISH, --strict fails them."""
    spec, data, _ = recorded

    def another_machine(document):
        entry = pinned(document)
        entry["vectors"]["corpus"] = "0" * 64
        entry["index"]["total_terms"] += 1
        entry["scores"]["ndcg@10"] = round(entry["scores"]["ndcg@10"] - 0.0003, 4)
        document["conditions"]["tiny"]["tolerance"] = {"total_terms": 0.01}

    other = edited(spec, tmp_path, another_machine)
    assert run(other, data, tmp_path / "runs") == 0
    rows = rows_of(tmp_path / "runs")
    assert rows["vectors.corpus"]["status"] == "OKISH" and rows["vectors.queries"]["status"] == "OK"
    assert rows["total_terms"]["status"] == "OKISH" and rows["total_terms"]["note"].startswith("-1 ")
    assert rows["ndcg@10"]["status"] == "OKISH" and rows["ndcg@10"]["note"] == "+0.0003"
    assert rows["documents"]["status"] == "OK" and {row["tier"] for row in rows.values()} == {"encoded"}
    assert run(other, data, tmp_path / "runs", "--strict") == 1


def test_beyond_the_tolerance_is_a_failure(recorded, tmp_path):
    spec, data, _ = recorded

    def far(document):
        pinned(document)["vectors"]["corpus"] = "0" * 64
        pinned(document)["scores"]["ndcg@10"] = round(pinned(document)["scores"]["ndcg@10"] - 0.01, 4)

    assert run(edited(spec, tmp_path, far), data, tmp_path / "runs") == 1
    assert rows_of(tmp_path / "runs")["ndcg@10"]["status"] == "FAIL"


def test_matching_fingerprints_leave_no_tolerance(recorded, tmp_path):
    """Same vectors, another index total: exact tier, so even a one-impact difference fails."""
    spec, data, _ = recorded

    def off_by_one(document):
        pinned(document)["index"]["total_terms"] += 1
        document["conditions"]["tiny"]["tolerance"] = {"total_terms": 0.5}

    assert run(edited(spec, tmp_path, off_by_one), data, tmp_path / "runs") == 1
    row = rows_of(tmp_path / "runs")["total_terms"]
    assert (row["tier"], row["status"]) == ("fixed", "FAIL")


@pytest.fixture(scope="module")
def bundle(recorded, tmp_path_factory):
    spec, _, runs = recorded
    path = tmp_path_factory.mktemp("bundle") / "mini.tar"
    assert export(["vectors", "--spec", str(spec), "--runs", str(runs), "--output", str(path)]) == 0
    return path


def test_a_bundle_reproduces_every_figure_without_the_model(recorded, bundle, tmp_path):
    spec, data, _ = recorded
    no_model = edited(spec, tmp_path, lambda d: d["conditions"]["tiny"].update(model=str(tmp_path / "gone")))
    assert run(no_model, data, tmp_path / "runs", "--vectors", str(bundle), "--strict") == 0
    rows = rows_of(tmp_path / "runs")
    assert {row["tier"] for row in rows.values()} == {"fixed"} and {row["status"] for row in rows.values()} == {"OK"}
    assert checksum_path(bundle).read_text().split()[0] == __import__("hashlib").sha256(bundle.read_bytes()).hexdigest()


def test_bundles_are_byte_identical_for_the_same_vectors(recorded, bundle, tmp_path):
    spec, _, runs = recorded
    again = tmp_path / "again.tar"
    assert export(["vectors", "--spec", str(spec), "--runs", str(runs), "--output", str(again)]) == 0
    assert again.read_bytes() == bundle.read_bytes()


def runs_folder_with(runs, folder, edit):
    """A folder laid out like a regress output holding the recorded run, its one shard's lines edited."""
    source = runs / "mini_spec" / "tiny" / "mini"
    target = folder / "tiny" / "mini"
    (target / "vectors").mkdir(parents=True)
    (target / "queries.jsonl").write_bytes((source / "queries.jsonl").read_bytes())
    shard = target / "vectors" / "part-00000.jsonl"
    shard.write_text("\n".join(edit((source / "vectors" / shard.name).read_text().splitlines())) + "\n")
    return shard


def test_reference_vectors_count_the_documents_that_differ(recorded, bundle, tmp_path):
    spec, data, runs = recorded

    def raise_one_impact(lines):
        records = [json.loads(line) for line in lines]
        term = next(iter(records[1]["vector"]))
        records[1]["vector"][term] += 2
        return [json.dumps(record) for record in records]

    tampered = tmp_path / "ref"
    runs_folder_with(runs, tampered, raise_one_impact)
    assert run(spec, data, tmp_path / "runs", "--reference-vectors", str(tampered)) == 0
    note = rows_of(tmp_path / "runs")["vectors.corpus"]["note"]
    assert "vs reference: 1 documents differ (1 impacts, max |delta| 2, total -2)" in note


def one_line_error(capsys, *names):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for name in names:
        assert name in err, err
    return err


def test_a_damaged_bundle_is_refused_by_its_checksum(recorded, bundle, tmp_path, capsys):
    spec, data, _ = recorded
    damaged = tmp_path / "mini.tar"
    content = bytearray(bundle.read_bytes())
    content[len(content) // 2] ^= 0x01
    damaged.write_bytes(bytes(content))
    checksum_path(damaged).write_bytes(checksum_path(bundle).read_bytes())
    assert run(spec, data, tmp_path / "runs", "--vectors", str(damaged)) == 2
    one_line_error(capsys, str(damaged), "does not match")


def test_a_truncated_bundle_is_refused(recorded, bundle, tmp_path, capsys):
    spec, data, _ = recorded
    truncated = tmp_path / "cut.tar"
    truncated.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2 + 100])
    assert run(spec, data, tmp_path / "runs", "--vectors", str(truncated)) == 2
    one_line_error(capsys, str(truncated), "damaged or truncated")


def test_a_bundle_whose_fingerprints_do_not_match_its_content_is_refused(recorded, bundle, tmp_path, capsys):
    spec, data, _ = recorded
    altered = tmp_path / "altered.tar"
    with tarfile.open(bundle) as source, tarfile.open(altered, "w") as target:
        for member in source.getmembers():
            data_bytes = source.extractfile(member).read()
            if member.name.endswith("part-00000.jsonl"):
                data_bytes = re.sub(rb'": (\d+)}', lambda m: b'": ' + str(int(m.group(1)) + 1).encode() + b"}",
                                    data_bytes, count=1)
                member.size = len(data_bytes)
            target.addfile(member, io.BytesIO(data_bytes))
    assert run(spec, data, tmp_path / "runs", "--vectors", str(altered)) == 2
    one_line_error(capsys, str(altered), "altered or damaged")


def test_a_vector_folder_with_a_duplicate_id_is_refused(recorded, tmp_path, capsys):
    spec, data, runs = recorded
    folder = tmp_path / "vectors"
    shard = runs_folder_with(runs, folder, lambda lines: [*lines, lines[0]])
    assert run(spec, data, tmp_path / "runs", "--vectors", str(folder)) == 2
    one_line_error(capsys, f"{shard}:4", "duplicate id 'd1'")


def test_a_spec_condition_can_name_encoded_vectors_instead_of_a_model(recorded, tmp_path, capsys):
    spec, data, runs = recorded
    source = runs / "mini_spec" / "tiny" / "mini"
    entry = pinned(YAML().load(spec.read_text()))
    shutil.copytree(source / "vectors", tmp_path / "collection")  # any JsonVectorCollection folder
    shutil.copy(source / "queries.jsonl", tmp_path / "queries.jsonl")
    published = tmp_path / "published.yaml"
    published.write_text(
        "defaults: {metrics: [ndcg@10]}\nconditions:\n  published:\n    datasets:\n      mini:\n"
        "        encoded: {corpus: collection, queries: queries.jsonl}\n"
        f"        vectors: {{corpus: {entry['vectors']['corpus']}, queries: {entry['vectors']['queries']}}}\n"
        f"        scores: {{ndcg@10: {entry['scores']['ndcg@10']}}}\n")
    assert run(published, data, tmp_path / "runs", "--dry-run") == 0
    assert "encoded vectors" in capsys.readouterr().out
    assert run(published, data, tmp_path / "runs", "--strict") == 0
    rows = rows_of(tmp_path / "runs", "published")
    assert rows["ndcg@10"]["status"] == "OK" and {row["tier"] for row in rows.values()} == {"fixed"}


def test_given_vectors_are_read_once_and_once_more_by_the_index_build(recorded, tmp_path, capsys):
    """One pass checks, fingerprints and measures the given vectors (recorded in the run's folder, never in theirs);
    Anserini reads them once more; a rerun reuses the recorded pass (``--verbose`` logs the count per condition)."""
    spec, data, runs = recorded
    given = tmp_path / "given"
    shutil.copytree(runs / "mini_spec" / "tiny" / "mini", given)
    listing = sorted(given.rglob("*"))
    line = "[tiny / mini] full reads of the vectors (the index build's included): documents {}, queries 2"
    for reads in (2, 1):
        scan_module._remembered.clear()  # as in a new process
        assert regress_main(["--spec", str(spec), "--data-dir", str(data), "--output", str(tmp_path / "runs"),
                             "--vectors", str(given), "--verbose"]) == 0
        assert line.format(reads) in capsys.readouterr().err
    assert sorted(given.rglob("*")) == listing and (tmp_path / "runs" / "mini_spec" / "tiny" / "mini" / "scan.json").is_file()


@pytest.mark.slow
def test_encoding_with_two_processes_reproduces_the_pinned_vectors(recorded, tmp_path):
    """``regress --encode-procs 2`` (torchrun, gloo on CPU) gives the pinned fingerprints: every figure exact."""
    spec, data, _ = recorded
    assert run(spec, data, tmp_path, "--encode-procs", "2") == 0
    rows = rows_of(tmp_path)
    assert rows["vectors.corpus"]["status"] == "OK" and {row["tier"] for row in rows.values()} == {"fixed"}
