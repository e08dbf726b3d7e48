"""``bench scale``: synthetic collections drawn from a real encoding's statistics, and every stage after encoding
measured on them (both engines' runs identical)."""
import importlib.util
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from vtrepro.bench.command import main as bench
from vtrepro.bench.scale import _peak_rss_bytes, fit_statistics, growth_exponents, run_stage, write_collection
from vtrepro.encode.reader import read_vectors, vector_files

TERMS = [f"t{index}" for index in range(40)] + ["caf\u00e9", "%25x"]


def write_source(folder, documents=60, seed=3):
    """A small encoded-looking corpus: Zipf-like terms, varied lengths and impacts."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    weights = 1 / np.arange(1, len(TERMS) + 1)
    with open(folder / "part-00000.jsonl", "w", encoding="utf-8") as handle:
        for number in range(documents):
            chosen = rng.choice(len(TERMS), size=int(rng.integers(3, 15)), replace=False, p=weights / weights.sum())
            vector = {TERMS[index]: int(rng.integers(1, 300)) for index in chosen}
            handle.write(json.dumps({"id": f"s{number}", "contents": "", "vector": vector}) + "\n")
    return folder


def test_a_synthetic_collection_follows_the_fitted_statistics_and_is_reproducible(tmp_path):
    statistics = fit_statistics(write_source(tmp_path / "source"))
    assert statistics.documents == 60 and set(statistics.terms) <= set(TERMS)
    write_collection(statistics, 500, tmp_path / "a")
    write_collection(statistics, 500, tmp_path / "b")
    first, second = (sorted(path.read_bytes() for path in vector_files(tmp_path / name)) for name in "ab")
    assert first == second  # the same seed, the same collection
    records = list(read_vectors(vector_files(tmp_path / "a")))
    assert [doc_id for _, _, doc_id, _ in records] == [f"d{number}" for number in range(500)]
    lengths = {len(vector) for *_, vector in records}
    assert lengths <= set(statistics.terms_per_document.tolist())  # every length was observed
    impacts = {impact for *_, vector in records for impact in vector.values()}
    assert impacts <= set(statistics.impact_values.tolist())
    frequency = {term: sum(term in vector for *_, vector in records) for term in statistics.terms}
    assert frequency["t0"] > frequency["t30"]  # the most frequent term stays the most frequent
    assert "terms per document" in statistics.describe()


def test_growth_exponent_is_the_log_log_slope():
    from vtrepro.bench.scale import StageFigures

    figures = [StageFigures("index", 1000, 2.0, 0), StageFigures("index", 10_000, 20.0, 0),
               StageFigures("search", 1000, 1.0, 0), StageFigures("search", 10_000, 100.0, 0),
               StageFigures("once", 1000, 1.0, 0)]
    exponents = growth_exponents(figures)
    assert exponents == pytest.approx({"index": 1.0, "search": 2.0})


def test_a_stage_runs_in_its_own_process_and_reports_its_peak_memory(tmp_path):
    figures = run_stage("fingerprint", 60, _fingerprint, write_source(tmp_path / "source"))
    assert figures.figures == {"count": 60} and figures.peak_rss_bytes > 10 * 2**20 and figures.seconds > 0


def _fingerprint(folder):
    from vtrepro.encode.fingerprint import fingerprint_folder

    return None, {"count": fingerprint_folder(folder).count}


@pytest.mark.parametrize("sizes", ["0", "1,x", "20000000"])
def test_sizes_out_of_bounds_are_refused_before_work(tmp_path, capsys, sizes):
    with pytest.raises(SystemExit) as exit_info:
        bench(["scale", "--vectors", str(tmp_path), "--queries", str(tmp_path / "q.jsonl"), "--sizes", sizes])
    assert exit_info.value.code == 2 and "--sizes" in capsys.readouterr().err


@pytest.mark.slow
def test_every_stage_at_two_sizes_with_identical_runs(tmp_path, capsys):
    source = write_source(tmp_path / "source")
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{number}", "vector": {TERMS[number]: 3, TERMS[number + 5]: 1}}) + "\n"
                               for number in range(8)))
    output = tmp_path / "scale"
    assert bench(["scale", "--vectors", str(source), "--queries", str(queries), "--sizes", "200,4500",
                  "--build-threads", "2", "--output", str(output)]) == 0
    results = json.loads((output / "scale.json").read_text())
    stages = {(stage["stage"], stage["documents"]): stage for stage in results["stages"]}
    assert {("index pisa t=1", 4500), ("index pisa t=2", 4500), ("search lucene k=1000", 200), ("evaluate", 4500), ("write", 200),
            ("index lucene t=1", 200), ("index lucene t=2", 4500), ("search lucene k=10 t=2", 4500)} <= set(stages)
    assert all(stage["figures"]["runs_identical"] for stage in results["stages"]
               if stage["stage"].startswith(("search pisa", "search lucene k=10 t=2", "search lucene k=1000 t=2")))
    two_threads = stages[("index lucene t=2", 4500)]["figures"]  # 3 vector files of 2,000: both threads have work
    assert two_threads["speed_up"] == pytest.approx(stages[("index lucene t=1", 4500)]["figures"]["build_seconds"]
                                                    / two_threads["build_seconds"])
    assert two_threads["efficiency"] == pytest.approx(two_threads["speed_up"] / 2) and two_threads["segments"] >= 1
    assert stages[("index pisa t=2", 4500)]["figures"]["index_identical"]  # every file the one-process build's
    assert all(stage["cpu_seconds"] > 0 for stage in results["stages"])
    assert set(results["growth_exponents"]) >= {"write", "index lucene t=1", "search pisa k=10"}
    assert not list(output.glob("work-*"))  # work folders removed
    out = capsys.readouterr().out
    assert "identical at every size" in out and "docs/s/thread" in out


@pytest.mark.slow
def test_one_engine_alone_is_measured_without_the_other(tmp_path, capsys):
    """``--engines lucene``: only Lucene's builds and searches (the 10^6 run of docs/scale.md), no comparison."""
    source = write_source(tmp_path / "source")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": "q0", "vector": {TERMS[0]: 3}}) + "\n")
    output = tmp_path / "scale"
    assert bench(["scale", "--vectors", str(source), "--queries", str(queries), "--sizes", "200", "--build-threads", "1",
                  "--engines", "lucene", "--output", str(output)]) == 0
    stages = [stage["stage"] for stage in json.loads((output / "scale.json").read_text())["stages"]]
    assert stages == ["write", "fingerprint+statistics", "index lucene t=1", "search lucene k=10", "search lucene k=1000",
                      "evaluate"]
    assert "lucene builds" in capsys.readouterr().out


@pytest.mark.parametrize("engines", ["", "lucene,bm25", "LUCENE"])
def test_engines_out_of_the_list_are_refused_before_work(tmp_path, capsys, engines):
    with pytest.raises(SystemExit) as exit_info:
        bench(["scale", "--vectors", str(tmp_path), "--queries", str(tmp_path / "q.jsonl"), "--engines", engines])
    assert exit_info.value.code == 2 and "--engines" in capsys.readouterr().err


def test_build_threads_default_to_powers_of_two_up_to_every_core():
    from vtrepro.bench.command import _powers_of_two

    assert [_powers_of_two(cores) for cores in (1, 2, 3, 16, 24)] == [[1], [1, 2], [1, 2, 3], [1, 2, 4, 8, 16],
                                                                     [1, 2, 4, 8, 16, 24]]


@pytest.mark.parametrize("threads", ["0", "1,x", "2000"])
def test_build_threads_out_of_bounds_are_refused_before_work(tmp_path, capsys, threads):
    with pytest.raises(SystemExit) as exit_info:
        bench(["scale", "--vectors", str(tmp_path), "--queries", str(tmp_path / "q.jsonl"), "--build-threads", threads])
    assert exit_info.value.code == 2 and "--build-threads" in capsys.readouterr().err


def test_fitting_holds_the_distinct_impacts_not_a_histogram_up_to_the_largest(tmp_path):
    """An impact of 2^31 - 1 (the largest Anserini stores) once sized a 16 GB histogram; now it is one entry."""
    folder = tmp_path / "source"
    folder.mkdir()
    (folder / "part-00000.jsonl").write_text(
        json.dumps({"id": "a", "contents": "", "vector": {"x": 2**31 - 1, "y": 3}}) + "\n"
        + json.dumps({"id": "b", "contents": "", "vector": {"y": 3}}) + "\n", encoding="utf-8")
    statistics = fit_statistics(folder)
    assert statistics.impact_values.tolist() == [3, 2**31 - 1] and statistics.impact_counts.tolist() == [2, 1]


def test_a_stage_reports_its_own_peak_memory_not_its_parents():
    """Linux carries a parent's resident size at the fork across exec into ``ru_maxrss``; a stage started by a
    bench holding much memory must still report its own peak."""
    held = bytearray(512 * 2**20)  # the parent's 512 MB, touched
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        child_peak = pool.submit(_peak_rss_bytes).result()
    assert len(held) and child_peak < 400 * 2**20


@pytest.mark.slow
def test_approximate_engines_are_measured_against_the_exact_run(tmp_path, capsys):
    """``--engines pisa,seismic,bmp``: each approximate engine built and searched at both k, its recall@10 and
    recall@1000 against PISA's run of the same k recorded, and one row per engine and k printed."""
    pytest.importorskip("bmp", reason="bmp is not installed (pip install 'vtrepro[approximate]')")
    engines = "pisa,seismic,bmp" if importlib.util.find_spec("seismic") else "pisa,bmp"
    source = write_source(tmp_path / "source")
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{number}", "vector": {TERMS[number]: 3, TERMS[number + 5]: 1}}) + "\n"
                               for number in range(8)))
    output = tmp_path / "scale"
    assert bench(["scale", "--vectors", str(source), "--queries", str(queries), "--sizes", "300", "--build-threads", "1",
                  "--engines", engines, "--output", str(output)]) == 0
    stages = {stage["stage"]: stage for stage in json.loads((output / "scale.json").read_text())["stages"]}
    for engine in engines.split(",")[1:]:
        assert stages[f"index {engine}"]["size_bytes"] > 0 and stages[f"index {engine}"]["figures"]["build_seconds"] > 0
        ten, thousand = stages[f"search {engine} k=10"]["figures"], stages[f"search {engine} k=1000"]["figures"]
        assert 0 <= ten["recall@10_vs_exact"] <= 1 and ten["recall@1000_vs_exact"] is None
        assert 0 <= thousand["recall@1000_vs_exact"] <= 1 and thousand["exact_engine"] == "pisa"
        assert {"latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "search_queries_per_s"} <= set(ten)
        assert ten["queries_refused"] == len(ten["refused_ids"]) == 0
    out = capsys.readouterr().out
    assert "R@1000 exact" in out and "     bmp  1000" in out


def test_recall_against_exact_leaves_out_the_queries_the_engine_refused(tmp_path):
    """A query BMP refuses (its 16-bit sums could wrap) is counted apart, not as a query it found nothing for."""
    from vtrepro.bench.scale import recall_figures
    from vtrepro.search.runs import write_trec_run

    write_trec_run({"a": {"d1": 3.0, "d2": 2.0}, "b": {"d3": 1.0}}, tmp_path / "exact.trec")
    write_trec_run({"a": {"d1": 3.0, "d9": 2.5}}, tmp_path / "run.trec")
    assert recall_figures(tmp_path / "run.trec", tmp_path / "exact.trec", 10, "pisa")["recall@10_vs_exact"] == 0.25
    figures = recall_figures(tmp_path / "run.trec", tmp_path / "exact.trec", 10, "pisa", refused=["b"])
    assert figures["recall@10_vs_exact"] == 0.5 and figures["recall@1000_vs_exact"] is None
