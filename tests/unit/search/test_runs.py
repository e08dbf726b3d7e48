"""The top-k cut on tied scores: a run holds the same documents whatever order the engine met the ties in."""
import random

import pytest

from vtrepro.search.runs import holds_cut, rank_hits, search_until_complete, top_hits

# Scores of a collection with long ties: 4 documents at 9, 30 at 5, 30 at 3, 6 at 1.
SCORES = {f"d{number:02d}": score for number, score in
          enumerate([9] * 4 + [5] * 30 + [3] * 30 + [1] * 6)}


def engine(internal_order: list[str]):
    """An engine's exact top ``depth`` in scores that keeps, of a tie at its last score, the documents it
    meets first in ``internal_order`` (what Lucene's collector does by internal document id, PISA's heap by
    its own); also counts its calls and their depths."""
    position = {doc: number for number, doc in enumerate(internal_order)}
    calls: list[int] = []

    def search(queries: list[int], depth: int) -> list[list[tuple[str, float]]]:
        calls.append(depth)
        best = sorted(SCORES, key=lambda doc: (-SCORES[doc], position[doc]))[:depth]
        return [rank_hits((doc, float(SCORES[doc])) for doc in best) for _ in queries]

    return search, calls


def orders(count: int) -> list[list[str]]:
    documents = sorted(SCORES)
    shuffled = [documents, documents[::-1]]
    for seed in range(count - 2):
        shuffled.append(random.Random(seed).sample(documents, len(documents)))
    return shuffled


@pytest.mark.parametrize("k", [1, 3, 4, 5, 10, 33, 34, 35, 63, 64, 69, 70, 100])
@pytest.mark.parametrize("remove_query_id", [True, False])
def test_the_cut_is_the_same_in_every_internal_order(k, remove_query_id):
    k_cut = min(k, len(SCORES))
    wanted = k_cut + int(remove_query_id)
    expected = dict(sorted(((doc, float(score)) for doc, score in SCORES.items() if not (remove_query_id and doc == "d00")),
                           key=lambda hit: (-hit[1], hit[0]))[:k_cut])
    for order in orders(8):
        search, _ = engine(order)
        hits = search_until_complete(search, [0], wanted, len(SCORES))[0]
        assert top_hits("d00", hits, k_cut, remove_query_id, ranked=True) == expected


def test_without_completion_the_engine_order_leaks():
    """The engine's own top 11 differ by internal order (the tie at 5 is cut); completed, they do not."""
    own = {tuple(doc for doc, _ in engine(order)[0]([0], 11)[0]) for order in orders(4)}
    assert len(own) > 1
    completed = {tuple(top_hits("q", search_until_complete(engine(order)[0], [0], 10, len(SCORES))[0], 10, True,
                                ranked=True)) for order in orders(4)}
    assert completed == {("d00", "d01", "d02", "d03", "d04", "d05", "d06", "d07", "d08", "d09")}


def test_deeper_searches_only_while_the_last_hit_ties_the_cut():
    search, calls = engine(sorted(SCORES))
    search_until_complete(search, [0], 3, len(SCORES))  # the 3rd scores 9, the 4th fetched 9: 8 hits, then 5 < 9
    assert calls == [4, 8]
    search, calls = engine(sorted(SCORES))
    search_until_complete(search, [0], 10, len(SCORES))  # the 5-tie runs from 5th to 34th: 11, 22, 44 (3 < 5)
    assert calls == [11, 22, 44]
    search, calls = engine(sorted(SCORES))
    search_until_complete(search, [0], 65, len(SCORES))  # never past the documents + 1: then every match is in
    assert calls == [66, 71]


def test_holds_cut():
    assert holds_cut([("a", 3.0), ("b", 2.0)], 2, 1)  # the 1st scores above the last fetched
    assert not holds_cut([("a", 3.0), ("b", 3.0)], 2, 1)  # the tie may go on past the last fetched
    assert holds_cut([("a", 3.0)], 2, 1)  # fewer hits than asked for: every match is in
