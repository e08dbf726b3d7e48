"""The comparison report on real regression runs (BM25 and splade-tiny on ../shared), opened in headless Chromium."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix

from vtrepro.encode.reader import read_vectors, vector_files
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM
from vtrepro.regress.efficiency import FIGURES
from vtrepro.report.command import main as report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def comparison(bm25_flat_run, splade_tiny_run, tmp_path_factory):
    """``python -m vtrepro report --results runs/beir_bm25_flat runs/beir_splade_tiny``."""
    output = tmp_path_factory.mktemp("report")
    assert report(["--results", str(bm25_flat_run[0]), str(splade_tiny_run[1]), "--output", str(output)]) == 0
    return output


def test_report_writes_the_three_files_and_the_matrix(comparison):
    assert all((comparison / name).is_file() for name in ("report.md", "report.html", "table.csv"))
    with open(comparison / "table.csv", encoding="utf-8") as handle:
        table = {row["dataset"]: row for row in csv.DictReader(handle)}
    assert {"nfcorpus", "scifact", "average"} <= set(table)
    columns = set(table["scifact"])
    assert {"bm25-flat", "splade-tiny", "bm25-flat Δ published", "splade-tiny p vs bm25-flat"} <= columns
    assert any("BM25 flat" in column and "(published)" in column for column in columns)
    assert any("SPLADE-v3" in column and "(published)" in column for column in columns)
    assert float(table["scifact"]["bm25-flat Δ published"]) == 0.0  # BM25 flat reproduces Pyserini exactly
    observed = [float(table[name]["splade-tiny"]) for name in ("nfcorpus", "scifact")]
    assert float(table["average"]["splade-tiny"]) == pytest.approx(sum(observed) / 2, abs=1e-4)


def test_report_html_renders_every_table_and_image(comparison, browser_render, tmp_path):
    rendering = browser_render(comparison / "report.html", tmp_path / "report.png")
    assert rendering.problems == []
    assert len(rendering.images) >= 3 and not rendering.broken_images  # scores, retention, cost, terms
    matrix = rendering.tables[0]
    assert matrix.rows == 1 + 3 + 1 and matrix.rendered  # header, nfcorpus, scifact, average, stated average
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (comparison / "report.html").read_text(encoding="utf-8")
    assert "<script" not in html and 'src="http' not in html  # self-contained: opens from disk with no server
    assert "python -m vtrepro regress --spec" in html and "--datasets scifact" in html


def test_every_run_has_efficiency_rows(bm25_flat_run, splade_tiny_run):
    for out_dir in (bm25_flat_run[0], splade_tiny_run[1]):
        rows = json.loads((out_dir / "results.json").read_text())["rows"]
        runs = {(row["condition"], row["dataset"]) for row in rows if row["kind"] == "score"}
        efficiency = {(row["condition"], row["dataset"], row["metric"]) for row in rows if row["kind"] == "efficiency"}
        assert runs and all((*run, name) in efficiency for run in runs for name in FIGURES)
        assert all(row["status"] == "MEASURED" for row in rows if row["kind"] == "efficiency")


def _binary(records, vocabulary):
    rows, columns = [], []
    for index, vector in enumerate(records):
        for term in vector:
            if term != EMPTY_DOCUMENT_TERM:
                rows.append(index)
                columns.append(vocabulary.setdefault(term, len(vocabulary)))
    return rows, columns


def test_flops_matches_the_mean_shared_terms_of_every_query_document_pair(splade_tiny_run):
    """FLOPS as the mean over all query-document pairs of the number of terms both hold, from the stored vectors."""
    out_dir = splade_tiny_run[1]
    rows = json.loads((out_dir / "results.json").read_text())["rows"]
    recorded = {row["dataset"]: row["observed"] for row in rows if row["metric"] == "flops"}
    for dataset, flops in recorded.items():
        run = out_dir / "splade-tiny" / dataset
        vocabulary: dict[str, int] = {}
        documents = [vector for *_, vector in read_vectors(vector_files(run / "vectors"))]
        queries = [json.loads(line)["vector"] for line in (run / "queries.jsonl").read_text().splitlines()]
        d_rows, d_columns = _binary(documents, vocabulary)
        q_rows, q_columns = _binary(queries, vocabulary)
        d = csr_matrix((np.ones(len(d_rows)), (d_rows, d_columns)), shape=(len(documents), len(vocabulary)))
        q = csr_matrix((np.ones(len(q_rows)), (q_rows, q_columns)), shape=(len(queries), len(vocabulary)))
        shared = (q @ d.T).sum() / (len(queries) * len(documents))
        assert flops == pytest.approx(shared, rel=1e-9)
        assert 0 < flops < 1000


def test_regress_writes_its_own_comparison_report(splade_tiny_run, browser_render, tmp_path):
    out_dir = splade_tiny_run[1]
    assert {"report.md", "report.html", "table.csv"} <= {path.name for path in out_dir.iterdir()}
    rendering = browser_render(out_dir / "report.html", tmp_path / "own.png")
    assert rendering.problems == [] and rendering.images
    assert "Regression checks: beir_splade_tiny" in (out_dir / "report.md").read_text()
    assert Path(out_dir / "figures" / "terms.png").is_file()
