"""Vector fingerprints: the same vectors hash alike in any files and order; any changed impact changes them."""
import json

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.encode.command import fingerprint_main as main
from vtrepro.encode.fingerprint import compare_vectors, fingerprint_folder, fingerprint_vectors
from vtrepro.encode.reader import load_vectors, vector_files
from vtrepro.encode.scan import scan_files
from vtrepro.encode.writer import encode_corpus


@pytest.fixture(scope="module")
def encoded(tmp_path_factory, tiny_encoder, scifact_sample):
    folder = tmp_path_factory.mktemp("encoded")
    manifest = encode_corpus(tiny_encoder, scifact_sample, folder, shard_size=25, show_progress=False)
    return folder, manifest


def records(folder):
    return [json.loads(line) for path in vector_files(folder / "vectors") for line in path.read_text().splitlines()]


def write_records(folder, parts):
    folder.mkdir()
    for number, part in enumerate(parts):
        (folder / f"other-{number}.jsonl").write_text("".join(json.dumps(record, indent=None) + "\n" for record in part))
    return folder


def test_manifest_fingerprint_is_the_folders(encoded):
    folder, manifest = encoded
    summary = fingerprint_folder(folder / "vectors")
    assert summary.sha256 == manifest["fingerprint"]
    assert (summary.count, summary.total_impact) == (manifest["documents"], manifest["total_terms"])


def test_the_one_pass_fingerprints_as_the_fingerprint_alone(encoded):
    vectors = encoded[0] / "vectors"
    assert scan_files(vector_files(vectors)).fingerprint == fingerprint_folder(vectors)


def test_same_vectors_in_other_files_and_order_hash_alike(encoded, tmp_path):
    folder, manifest = encoded
    shuffled = [{"vector": dict(reversed(record["vector"].items())), "id": record["id"]}  # no contents, keys reversed
                for record in reversed(records(folder))]
    other = write_records(tmp_path / "other", [shuffled[:7], shuffled[7:40], shuffled[40:]])
    assert fingerprint_folder(other).sha256 == manifest["fingerprint"]
    assert fingerprint_vectors({r["id"]: r["vector"] for r in shuffled}).sha256 == manifest["fingerprint"]


def test_one_changed_impact_changes_the_fingerprint(encoded, tmp_path):
    folder, manifest = encoded
    changed = records(folder)
    term = next(iter(changed[30]["vector"]))
    changed[30]["vector"][term] += 1
    other = write_records(tmp_path / "other", [changed])
    assert fingerprint_folder(other).sha256 != manifest["fingerprint"]
    diff = compare_vectors(load_vectors(vector_files(folder / "vectors")), load_vectors(vector_files(other)))
    assert (diff.records_differing, diff.impacts_differing, diff.max_impact_delta, diff.total_impact_delta) == (1, 1, 1, 1)


def test_a_renamed_document_changes_the_fingerprint(encoded, tmp_path):
    folder, manifest = encoded
    renamed = records(folder)
    renamed[0]["id"] += "x"
    assert fingerprint_folder(write_records(tmp_path / "other", [renamed])).sha256 != manifest["fingerprint"]


def test_duplicate_ids_are_named_with_both_places(encoded, tmp_path):
    folder, _ = encoded
    all_records = records(folder)
    other = write_records(tmp_path / "other", [all_records[:10], all_records[9:12]])
    with pytest.raises(VtreproError, match=r"other-1\.jsonl:1: duplicate id .* \(first at .*other-0\.jsonl:10\)"):
        fingerprint_folder(other)


@pytest.mark.parametrize("vector, message", [
    ({"heart": 2.7}, "must be an integer"),
    ({"heart": 0}, "must be an integer in 1"),
    ({"heart": True}, "must be an integer"),
    ({"heart attack": 3}, "whitespace"),
    ({}, "non-empty object"),
])
def test_values_anserini_would_change_are_refused(tmp_path, vector, message):
    folder = write_records(tmp_path / "bad", [[{"id": "d1", "vector": {"fine": 1}}, {"id": "d2", "vector": vector}]])
    with pytest.raises(VtreproError, match=rf"other-0\.jsonl:2: .*{message}"):
        fingerprint_folder(folder)


def test_hidden_temporary_files_are_not_vectors(encoded, tmp_path):
    folder, manifest = encoded
    other = write_records(tmp_path / "other", [records(folder)])
    (other / ".part-00001.jsonl.tmp").write_text('{"id": "partial"')
    (other / ".hidden.jsonl").write_text('{"id": "partial"')
    assert fingerprint_folder(other).sha256 == manifest["fingerprint"]


def test_the_command_prints_fingerprints_and_the_difference(encoded, tmp_path, capsys):
    folder, manifest = encoded
    changed = records(folder)
    term = next(iter(changed[3]["vector"]))
    changed[3]["vector"][term] += 5
    assert main(["--vectors", str(folder), "--reference-vectors", str(write_records(tmp_path / "other", [changed]))]) == 0
    first, _, difference = capsys.readouterr().out.splitlines()
    assert first.startswith(f"{manifest['fingerprint']}  60 records, total impact {manifest['total_terms']}")
    assert json.loads(difference) == {"identical": False, "records": 60, "records_differing": 1, "impacts_differing": 1,
                                      "max_impact_delta": 5, "total_impact_delta": 5, "only_in_first": 0,
                                      "only_in_second": 0}
