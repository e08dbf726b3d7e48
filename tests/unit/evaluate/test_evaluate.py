"""Per-query scores and paired comparison of runs, on scifact's real test qrels."""
import json

import pytest

from vtrepro.data.beir import load_dataset
from vtrepro.evaluate.command import main
from vtrepro.evaluate.trec import compare_runs, evaluate_run, per_query_scores
from vtrepro.search.runs import write_trec_run


@pytest.fixture(scope="module")
def qrels(data_dir):
    return load_dataset("scifact", data_dir).qrels("test")


def ranked_at(qrels, rank_of) -> dict:
    """A run placing each query's relevant documents at ``rank_of(query index)`` (1 = top) below fillers."""
    run = {}
    for index, (qid, judged) in enumerate(sorted(qrels.items())):
        rank = rank_of(index)
        hits = {f"filler-{position}": 100.0 - position for position in range(1, rank)}
        hits.update({doc_id: 100.0 - rank - offset * 1e-3 for offset, doc_id in enumerate(sorted(judged))})
        run[qid] = hits
    return run


def test_per_query_scores_average_to_the_reported_mean(qrels) -> None:
    run = ranked_at(qrels, lambda index: 1 + index % 7)
    for metric in ("ndcg@10", "mrr@10", "recall@100"):
        scores = per_query_scores(run, qrels, metric)
        assert list(scores) == sorted(qrels)
        assert round(sum(scores.values()) / len(qrels), 4) == evaluate_run(run, qrels, (metric,))[metric]


def test_a_run_compared_with_itself_ties_everywhere(qrels) -> None:
    run = ranked_at(qrels, lambda index: 1 + index % 4)
    result = compare_runs(run, run, qrels, ("ndcg@10",))["ndcg@10"]
    assert result["difference"] == 0 and result["ties"] == len(qrels) and result["wins"] == result["losses"] == 0
    assert result["p_t_test"] == result["p_randomization"] == 1.0


def test_a_clearly_better_run_wins_with_small_p_values(qrels) -> None:
    top = ranked_at(qrels, lambda index: 1)
    lower = ranked_at(qrels, lambda index: 1 if index % 2 else 6)
    better = compare_runs(top, lower, qrels, ("ndcg@10",))["ndcg@10"]
    assert better["difference"] > 0.1 and better["losses"] == 0 and better["wins"] == len(qrels) // 2
    assert better["p_t_test"] < 1e-6 and better["p_randomization"] < 1e-3
    worse = compare_runs(lower, top, qrels, ("ndcg@10",))["ndcg@10"]
    assert worse["difference"] == -better["difference"] and worse["p_t_test"] == better["p_t_test"]


def test_both_tests_agree_on_a_small_mixed_difference(qrels) -> None:
    first = ranked_at(qrels, lambda index: 1 if index % 3 == 0 else 4)
    second = ranked_at(qrels, lambda index: 1 if index % 3 == 1 else 4)
    result = compare_runs(first, second, qrels, ("ndcg@10",))["ndcg@10"]
    assert result["wins"] > 0 and result["losses"] > 0
    assert result["p_t_test"] > 0.05 and abs(result["p_t_test"] - result["p_randomization"]) < 0.05
    again = compare_runs(first, second, qrels, ("ndcg@10",))["ndcg@10"]
    assert again == result, "compare_runs is not deterministic: the randomization test's p-value must be seeded"


def test_command_line_baseline(tmp_path, data_dir, qrels, capsys) -> None:
    write_trec_run(ranked_at(qrels, lambda index: 1), tmp_path / "a.trec")
    write_trec_run(ranked_at(qrels, lambda index: 3), tmp_path / "b.trec")
    assert main(["--run", str(tmp_path / "a.trec"), "--baseline-run", str(tmp_path / "b.trec"), "--dataset", "scifact",
                 "--data-dir", str(data_dir), "--metrics", "ndcg@10,recall@100"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ndcg@10"]["difference"] > 0 and result["recall@100"]["difference"] == 0
