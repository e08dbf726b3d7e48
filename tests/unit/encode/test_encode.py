"""Encoded corpora: JSON-vector shards, manifest, determinism and resume after interruption."""
import copy
import json

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import Document
from vtrepro.encode.folder import EncodedFolder
from vtrepro.encode.queries import encode_queries
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM, Quantization
from vtrepro.encode.writer import encode_corpus
from vtrepro.index.lucene import build_impact_index
from vtrepro.index.lucene_checks import check_against_manifest


class InterruptAfter:
    """The real encoder, interrupted (as by Ctrl-C) when asked for its n-th window of documents."""

    def __init__(self, encoder, calls: int):
        self._encoder, self._calls = encoder, calls

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode(self, texts, kind, progress=None):
        self._calls -= 1
        if self._calls < 0:
            raise KeyboardInterrupt
        return self._encoder.encode(texts, kind, progress)


def windowed(encoder, sort_window: int):
    """The same loaded encoder with another length-sorting window (model weights shared)."""
    other = copy.copy(encoder)
    other.options = encoder.options.replace(sort_window=sort_window)
    return other


def shard_bytes(folder):
    return {path.name: path.read_bytes() for path in sorted((folder / "vectors").glob("*.jsonl"))}


@pytest.mark.slow  # 1.9 s on the AVX2 EPYC: an encoding of 60 documents
def test_shards_are_json_vectors_with_integer_impacts(tmp_path, tiny_encoder, scifact_sample):
    manifest = encode_corpus(tiny_encoder, scifact_sample, tmp_path, shard_size=25, show_progress=False)
    assert manifest["complete"] and manifest["documents"] == 60 and len(manifest["shards"]) == 3
    records = [json.loads(line) for path in sorted((tmp_path / "vectors").glob("*.jsonl"))
               for line in path.read_text().splitlines()]
    assert [record["id"] for record in records] == [document.doc_id for document in scifact_sample]
    assert all(isinstance(weight, int) and weight > 0 for record in records for weight in record["vector"].values())
    assert sum(sum(record["vector"].values()) for record in records) == manifest["total_terms"]
    assert not any(term.startswith("[") and term.endswith("]") for record in records for term in record["vector"])


@pytest.mark.slow  # 3.5 s on the AVX2 EPYC: two encodings of 60 documents
def test_fresh_encodings_are_byte_identical(tmp_path, tiny_encoder, scifact_sample):
    encode_corpus(tiny_encoder, scifact_sample, tmp_path / "a", shard_size=25, show_progress=False)
    encode_corpus(tiny_encoder, scifact_sample, tmp_path / "b", shard_size=25, show_progress=False)
    assert shard_bytes(tmp_path / "a") == shard_bytes(tmp_path / "b")


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_interrupted_encode_resumes_without_duplicates_or_gaps(tmp_path, tiny_encoder, scifact_sample):
    encoder = windowed(tiny_encoder, 10)  # shard of 25 = windows 0-2, then 2 (kept), 3, 4: five encode calls
    reference = encode_corpus(encoder, scifact_sample, tmp_path / "whole", shard_size=25, show_progress=False)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(InterruptAfter(encoder, 4), scifact_sample, tmp_path / "resumed", shard_size=25, show_progress=False)
    partial = EncodedFolder(tmp_path / "resumed").load_manifest()
    assert not partial["complete"] and partial["documents"] == 25
    resumed = encode_corpus(InterruptAfter(encoder, 5), scifact_sample, tmp_path / "resumed", shard_size=25, show_progress=False)
    assert resumed == reference
    assert shard_bytes(tmp_path / "resumed") == shard_bytes(tmp_path / "whole")


@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_vectors_depend_on_neither_shard_size_nor_resume_point(tmp_path, tiny_encoder, scifact_sample):
    """Batches are formed in sort windows counted from the corpus start, so shards of any size and a
    run resumed in the middle of a window hold the same vectors: the same fingerprint."""
    encoder = windowed(tiny_encoder, 16)
    fingerprints = {
        shard_size: encode_corpus(encoder, scifact_sample, tmp_path / f"shards-{shard_size}", shard_size=shard_size,
                                  show_progress=False)["fingerprint"]
        for shard_size in (7, 16, 25, 60)
    }
    with pytest.raises(KeyboardInterrupt):  # after shard 3 of 7 documents: docs 21-27 sit in window 1
        encode_corpus(InterruptAfter(encoder, 2), scifact_sample, tmp_path / "cut", shard_size=7, show_progress=False)
    assert EncodedFolder(tmp_path / "cut").load_manifest()["documents"] == 28
    resumed = encode_corpus(encoder, scifact_sample, tmp_path / "cut", shard_size=7, show_progress=False)
    assert len(set(fingerprints.values())) == 1
    assert resumed["fingerprint"] == fingerprints[7]
    assert shard_bytes(tmp_path / "cut") == shard_bytes(tmp_path / "shards-7")


def test_other_settings_in_the_same_folder_are_refused(tmp_path, tiny_encoder, scifact_sample):
    encode_corpus(tiny_encoder, scifact_sample[:10], tmp_path, shard_size=25, show_progress=False)
    with pytest.raises(VtreproError, match="other settings"):
        encode_corpus(tiny_encoder, scifact_sample[:10], tmp_path, Quantization(scale=10), shard_size=25, show_progress=False)


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_a_regression_folder_from_other_settings_is_encoded_again(tmp_path, tiny_encoder, scifact_sample):
    """Regress owns its artifact folders: after a spec change it re-encodes rather than refusing."""
    encode_corpus(tiny_encoder, scifact_sample[:30], tmp_path / "reused", shard_size=10, show_progress=False)
    coarse = Quantization(scale=10)
    fresh = encode_corpus(tiny_encoder, scifact_sample[:20], tmp_path / "fresh", coarse, shard_size=10, show_progress=False)
    replaced = encode_corpus(tiny_encoder, scifact_sample[:20], tmp_path / "reused", coarse, shard_size=10,
                             show_progress=False, replace_other_settings=True)
    assert replaced == fresh
    assert shard_bytes(tmp_path / "reused") == shard_bytes(tmp_path / "fresh")  # no shard of the old run is left


def test_documents_without_any_impact_are_still_indexed(tmp_path, tiny_encoder):
    documents = [Document("full", "", "heart attack causes"), Document("empty", "", "")]
    coarse = Quantization(scale=0.3)  # the empty text's weights (1.53 at most) round to 0, not all of the other's
    manifest = encode_corpus(tiny_encoder, documents, tmp_path / "enc", coarse, show_progress=False)
    shard = tmp_path / "enc" / "vectors" / "part-00000.jsonl"
    vectors = [json.loads(line)["vector"] for line in shard.read_text().splitlines()]
    assert vectors[1] == {EMPTY_DOCUMENT_TERM: 1} and EMPTY_DOCUMENT_TERM not in vectors[0]
    stats = build_impact_index(tmp_path / "enc" / "vectors", tmp_path / "index")
    check_against_manifest(stats, manifest)
    assert stats["documents"] == 2 and stats["total_terms"] == sum(vectors[0].values()) + 1


def test_queries_file_holds_integer_vectors(tmp_path, tiny_encoder):
    vectors = encode_queries(tiny_encoder, {"q1": "what causes heart attacks", "q2": ""}, tmp_path / "queries.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "queries.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == ["q1", "q2"]
    assert lines[0]["vector"] == vectors["q1"] and "heart" in vectors["q1"]
    assert all(isinstance(weight, int) for weight in vectors["q1"].values())


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_progress_moves_per_batch_and_resumes_at_the_window(tmp_path, tiny_encoder, scifact_sample, capsys, monkeypatch):
    """In a log, with interim lines forced on, one line per batch of documents (not per shard), then the summary."""
    import vtrepro.core.progress

    monkeypatch.setattr(vtrepro.core.progress, "LOG_INTERVAL_S", 0.0)
    encoder = windowed(tiny_encoder, 16)
    encoder.options = encoder.options.replace(batch_size=8)  # windows of 16 documents: two batches each
    with pytest.raises(KeyboardInterrupt):  # after shard 3 of 7 documents, in window 1
        encode_corpus(InterruptAfter(encoder, 2), scifact_sample, tmp_path, shard_size=7)
    capsys.readouterr()
    encode_corpus(encoder, scifact_sample, tmp_path, shard_size=7)
    lines = capsys.readouterr().err.splitlines()
    counts = [int(line.split(": ")[1].split("/")[0]) for line in lines[:-1]]
    assert counts == [24, 32, 40, 48, 56, 60]  # window 1 (16-31) is encoded whole again, batch by batch
    assert all("/60 doc, resumed at 16 (" in line and "doc/s" in line for line in lines[:-1]), lines
    assert lines[-1].startswith("encode documents: 60 doc, resumed at 16 in ")


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_temporary_files_of_a_killed_run_are_removed_on_resume(tmp_path, tiny_encoder, scifact_sample):
    """atomic_write's hidden temporary files survive a kill -9: resuming deletes them, and they are never counted."""
    reference = encode_corpus(tiny_encoder, scifact_sample, tmp_path / "whole", shard_size=25, show_progress=False)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(InterruptAfter(tiny_encoder, 0), scifact_sample, tmp_path / "killed", shard_size=25,
                      show_progress=False)
    leftovers = [tmp_path / "killed" / "vectors" / ".part-00000.jsonl.k9x2_f.tmp",
                 tmp_path / "killed" / ".manifest.json.a1b2c3.tmp", tmp_path / "killed" / ".queries.jsonl.zz.tmp"]
    for path in leftovers:
        path.write_text('{"id": "half a rec')
    resumed = encode_corpus(tiny_encoder, scifact_sample, tmp_path / "killed", shard_size=25, show_progress=False)
    assert not any(path.exists() for path in leftovers)
    assert resumed == reference
    assert shard_bytes(tmp_path / "killed") == shard_bytes(tmp_path / "whole")
