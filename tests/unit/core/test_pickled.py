"""Pickles read as plain data, never unpickled: the published teacher scores in every protocol, and a catalogue
of planted pickles that reach for code, each refused with one line before any object it names exists."""
from __future__ import annotations

import builtins
import collections
import gzip
import os
import pickle
import struct
import subprocess
from pathlib import Path

import pytest

import vtrepro.core.pickled as pickled
from vtrepro.core.errors import VtreproError
from vtrepro.core.pickled import read_plain_pickle
from vtrepro.training.examples import read_teacher_scores

SCORES = {1185869: {8841662: 5.9, 2: -7.25}, 1185868: {7: 0.5}}
"""The published layout: integer query ids to integer passage ids to float scores."""


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_published_scores_read_in_every_protocol(protocol: int, tmp_path: Path) -> None:
    path = tmp_path / "scores.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps(SCORES, protocol=protocol)))
    assert read_plain_pickle(path) == SCORES
    assert read_teacher_scores(path) == {"1185869": {"8841662": 5.9, "2": -7.25}, "1185868": {"7": 0.5}}
    assert read_teacher_scores(path, {"1185869": {"2"}}) == {"1185869": {"2": -7.25}}


def test_unwanted_queries_are_dropped_as_read(tmp_path: Path) -> None:
    """The outermost dict keeps only wanted keys; a shared value referred to again is refused, not revived."""
    path = tmp_path / "s.pkl"
    path.write_bytes(pickle.dumps({query: {query: float(query)} for query in range(3000)}, protocol=4))
    assert read_plain_pickle(path, keep=lambda query: query % 1000 == 0) == {0: {0: 0.0}, 1000: {1000: 1000.0},
                                                                            2000: {2000: 2000.0}}
    shared = {1: 1.0}  # set under "a" in the first batch of 1,000 items, referred to again under "b" in the second
    path.write_bytes(pickle.dumps({"a": shared, **{index: 0.0 for index in range(1000)}, "b": shared}, protocol=4))
    with pytest.raises(VtreproError, match="a reference to a dropped entry"):
        read_plain_pickle(path, keep=lambda query: query == "b")


class Reduce:
    """Unpickling calls ``function(*arguments)``: the way a pickle runs code."""

    def __init__(self, function, *arguments) -> None:
        self.function, self.arguments = function, arguments

    def __reduce__(self):
        return self.function, self.arguments


class WithState:
    """An instance restored by ``BUILD`` (``__setstate__``)."""

    def __init__(self) -> None:
        self.x = 1


def _planted(marker: Path) -> dict[str, bytes]:
    touch = f"touch {marker}"
    return {
        "os.system, protocol 0 (GLOBAL, REDUCE)": pickle.dumps({"q": Reduce(os.system, touch)}, protocol=0),
        "os.system, protocol 2 (GLOBAL, REDUCE)": pickle.dumps({"q": Reduce(os.system, touch)}, protocol=2),
        "os.system, protocol 4 (STACK_GLOBAL)": pickle.dumps({"q": Reduce(os.system, touch)}, protocol=4),
        "builtins.eval": pickle.dumps(Reduce(builtins.eval, f"open({str(marker)!r}, 'w')"), protocol=4),
        "builtins.exec": pickle.dumps(Reduce(builtins.exec, f"open({str(marker)!r}, 'w')"), protocol=2),
        "subprocess.Popen": pickle.dumps(Reduce(subprocess.Popen, ["touch", str(marker)]), protocol=5),
        "a class of vtrepro's own": pickle.dumps({"q": VtreproError("planted")}, protocol=4),
        "a harmless class (OrderedDict)": pickle.dumps(collections.OrderedDict(q={"d": 1.0}), protocol=4),
        "BUILD (__setstate__)": pickle.dumps(WithState(), protocol=2),
        "INST (protocol 0 instance)": b"(ios\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.",
        "OBJ (protocol 1 instance)": b"(cos\nsystem\nX\x04\x00\x00\x00trueo.",
        "a persistent id (PERSID)": b"Pfile\n.",
        "a persistent id (BINPERSID)": b"\x80\x02X\x04\x00\x00\x00fileQ.",
        "an extension code (EXT1)": b"\x80\x02\x82\x01.",
        "a set (EMPTY_SET)": pickle.dumps({"q": {1, 2}}, protocol=4),
    }


def test_planted_pickles_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    refused = {}
    for kind, data in _planted(marker).items():
        path = tmp_path / "scores.pkl.gz"
        path.write_bytes(gzip.compress(data))
        with pytest.raises(VtreproError) as error:
            read_teacher_scores(path)
        refused[kind] = str(error.value)
        assert "\n" not in refused[kind] and str(path) in refused[kind]
    assert not marker.exists()
    assert len(refused) == 15 and all("opcode" in message for message in refused.values()), refused


def test_a_gzip_bomb_stops_at_the_byte_bound(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(pickled, "MAX_PICKLE_BYTES", 10**6)
    path = tmp_path / "bomb.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps({"q": [f"{index:0>1000}" for index in range(5000)]}, protocol=4)))
    with pytest.raises(VtreproError, match="decompresses to more than 1,000,000 bytes"):
        read_plain_pickle(path)


@pytest.mark.parametrize(("data", "message"), [
    (b"\x80\x04\x8d" + struct.pack("<Q", 2**40) + b"abc", "declares 1,099,511,627,776 bytes"),
    (b"\x80\x04" + b"(" * 40 + b"l" * 40 + b".", "nested deeper than 16"),
    (pickle.dumps(SCORES, protocol=4)[:-1], "ends without its STOP opcode"),
    (pickle.dumps(SCORES, protocol=4)[:-9], "not a readable pickle"),
    (b"\x80\x04K\x01K\x02.", "does not end with exactly one value"),
])
def test_oversized_deep_and_truncated_pickles_are_one_line(data: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "p.pkl"
    path.write_bytes(data)
    with pytest.raises(VtreproError, match=message):
        read_plain_pickle(path)


@pytest.mark.parametrize(("value", "message"), [
    ([1, 2], "expected a pickled dict"),
    ({1: {2: "high"}}, "passage 2: expected an int or str id and a number, got int and str"),
    ({1: [2.0]}, "query 1: expected {qid: {passage id: score}}"),
    ({1: {2: True}}, "got int and bool"),
])
def test_scores_of_the_wrong_shape_are_one_line(value, message: str, tmp_path: Path) -> None:
    path = tmp_path / "s.pkl"
    path.write_bytes(pickle.dumps(value, protocol=4))
    with pytest.raises(VtreproError, match=message.replace("{", r"\{").replace("}", r"\}")):
        read_teacher_scores(path)
