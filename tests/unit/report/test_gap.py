"""The report's "Vocabulary gap" section (vtrepro.report.gap): the files of a results folder's ``gap/`` as tables
and PNG and SVG figures, in ``vtrepro report`` and in regress's own report; hostile files end in one line or are
escaped; a results folder without ``gap/`` gives the report it gave before."""
from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_command
from vtrepro.core.errors import VtreproError
from vtrepro.regress.compare import ResultRow
from vtrepro.report import plots
from vtrepro.report.command import main as report_main
from vtrepro.report.gap import GAP_FIGURES, figure_stems, gap_folder, gap_section
from vtrepro.report.render import build_report, html_text, markdown_text, report_files, report_paths
from vtrepro.report.results import RESULTS_NAME, check_results

CENSUS = {"tokenizers": [
    {"name": "gpt2-bpe", "source": "GPT-2 byte-level BPE", "scheme": "byte-level BPE", "entries": 50257, "specials": 1,
     "units": 33073, "units_without_accents": 32972, "coarse_graining": 1.5195, "coarse_graining_without_accents": 1.5242,
     "forms_per_unit": {"1": 23590, "2": 5397, "3": 1707, "4": 1545, "5+": 834}, "multi_form_share": 0.5306,
     "largest_groups": [{"unit": "db", "forms": ["db", "DB", "ĠDB", "Ġdb", "ĠdB", "dB", "Db"]},
                        {"unit": "it", "forms": ["it", "Ġit", "ĠIt", "It", "IT", "ĠiT", "ĠIT"]}],
     "variants": {"marked": 4710, "marked_capitalized": 4385, "capitalized": 2355, "case_variants": 10885}},
    {"name": "bert-cased", "source": "BERT-base-cased WordPiece", "scheme": "WordPiece", "entries": 28996, "specials": 106,
     "units": 22645, "units_without_accents": 22363, "coarse_graining": 1.2758, "coarse_graining_without_accents": 1.2919,
     "forms_per_unit": {"1": 17523, "2": 4235, "3": 682, "4": 175, "5+": 30}, "multi_form_share": 0.3935,
     "largest_groups": [{"unit": "as", "forms": ["as", "As", "##as", "##AS", "AS", "##As"]}],
     "variants": {"marked": None, "marked_capitalized": None, "capitalized": 3869, "position_twins": 1970,
                  "case_variants": 3868}},
]}
CORPUS = {"figures": [
    {"tokenizer": name, "dataset": "nfcorpus", "split": "test", "documents": 3633, "queries": 323, "relevant_pairs": 12334,
     "document_tokens": 1241977, "query_tokens": 1774, "variant_mass_documents": 0.8484, "variant_mass_queries": 0.8388,
     "form_entropy_documents": 0.4941, "form_entropy_queries": 0.3902,
     "match_rate": {"raw": exact, "markers": 0.1505, "case": 0.1424, "both": unit}, "exact_match": exact,
     "unit_match": unit, "pairs_gained_by_units": 0.299,
     "examples": [{"query_form": "in", "document_form": "Ġin", "unit": "in", "pairs": 263, "query_id": "PLAIN-2",
                   "document_id": "MED-2427"}]}
    for name, exact, unit in (("gpt2-bpe", 0.1096, 0.1948), ("bert-cased", 0.1991, 0.2527))
]}


def _run(normalization: str, ndcg: float) -> dict:
    against = {} if normalization == "raw" else {
        metric: {"run": ndcg, "baseline": 0.30, "difference": ndcg - 0.30, "wins": 40, "losses": 20, "ties": 263,
                 "p_t_test": 0.012, "p_randomization": 0.0131} for metric in ("ndcg@10", "recall@100")}
    return {"tokenizer": "gpt2-bpe", "dataset": "nfcorpus", "normalization": normalization,
            "index": {"documents": 3633, "total_terms": 1241977}, "scores": {"ndcg@10": ndcg, "recall@100": 0.25},
            "against_raw": against}


BM25 = {"runs": [_run(normalization, ndcg) for normalization, ndcg in
                 (("raw", 0.30), ("markers", 0.3112), ("case", 0.3051), ("both", 0.3187))]}
INTEGRITY = {"tokenizers": [{"tokenizer": "gpt2-bpe", "dataset": "nfcorpus", "groups_measured": 500,
                             "mean_divergence": 0.21, "random_pair_divergence": 0.63, "groups_at_baseline": 1,
                             "at_risk": [{"unit": "us", "forms": ["us", "US"], "divergence": 0.71}],
                             "preserved": [{"unit": "db", "forms": ["db", "DB"], "divergence": 0.1}]}]}
_DUPLICATES = {"vectors": 1000, "with_duplicates": 870, "duplicate_share": 0.87, "duplicate_units_per_vector": 2.1,
               "redundant_mass": 0.0094, "duplicate_group_mass": 0.02}
MODEL = {"runs": [{"run": "splade-tiny-scifact", "tokenizer": "splade-tiny", "vocabulary": 30522,
                   "duplicates_documents": _DUPLICATES, "duplicates_queries": {**_DUPLICATES, "vectors": 300},
                   "dead": {"entries": 30517, "dead": 19232, "dead_multi_form": 2976, "dead_single_form": 16256,
                            "dead_shadowed": 658},
                   "density_documents": {"mean": 283.4, "p50": 281.0, "p99": 432.0},
                   "density_queries": {"mean": 52.3, "p50": 47.5, "p99": 112.1}, "flops": 10.417}]}
TRAINING = {"machine": "AMD EPYC", "runs": [
    {"run": "bert_uncased", "recipe": "r.yaml", "fingerprint": "f" * 64, "device": "cpu", "cpu_threads": 2,
     "train_seconds": 60.0, "curves": {"step": [1, 2], "active_d": [300.0, 280.0], "active_q": [50.0, 45.0],
                                       "inactive_d": [25000, 25100], "loss": [2.0, 1.9]}}]}
FILES = {"census.json": CENSUS, "corpus.json": CORPUS, "bm25.json": BM25, "integrity.json": INTEGRITY,
         "model.json": MODEL, "training.json": TRAINING}
RESULTS = {"spec": "/specs/diagnosis_vocabulary_gap.yaml", "rows": [
    ResultRow("bm25", "scifact", "ndcg@10", "score", None, 0.6789, "UNPINNED", "encoded").__dict__]}


def write_gap(folder: Path, files: dict[str, object] = FILES) -> Path:
    """``folder/gap/`` holding ``files`` (name -> a JSON document, or raw text)."""
    (folder / "gap").mkdir(parents=True, exist_ok=True)
    for name, document in files.items():
        (folder / "gap" / name).write_text(document if isinstance(document, str) else json.dumps(document))
    return folder


def write_results(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULTS_NAME).write_text(json.dumps(RESULTS))
    return folder


MODEL_TITLE = "Duplicate activation, dead terms and density in the model's vectors"
TRAINING_TITLE = "Training runs drawn in the training curves"


def _stub(groups: list[str], *_, **__) -> tuple[bytes, bytes] | None:
    return (b"\x89PNG stub", b"<svg stub/>") if groups else None


def _stub_panels(panels: list, *_, **__) -> tuple[bytes, bytes] | None:
    return (b"\x89PNG stub", b"<svg stub/>") if any(lines for _, lines, _ in panels) else None


@pytest.fixture
def no_drawing(monkeypatch):
    """The gap figures stubbed (each drawn for real takes about 0.4 s here): for tests about tables and hooks."""
    monkeypatch.setattr(plots, "bars_chart", _stub)
    monkeypatch.setattr(plots, "panels_chart", _stub_panels)


def test_a_section_has_every_table_and_a_figure_of_each_kind(tmp_path, no_drawing):
    section = gap_section(write_gap(tmp_path))
    assert section is not None
    titles = [table.title for table in section.tables]
    assert [title.split(":")[0] for title in titles] == ["Census"] * 3 + ["Corpus"] * 2 + ["BM25 on normalized vocabularies",
                                                                                           "Integrity", MODEL_TITLE,
                                                                                           TRAINING_TITLE]
    census, variants, groups, matches, examples, bm25, integrity, model, trained = (table.frame for table in section.tables)
    assert model.loc[0, "docs with duplicates"] == "0.8700" and model.loc[0, "dead terms"] == "19,232"
    assert trained.loc[0, "machine"] == "AMD EPYC" and trained.loc[0, "steps"] == "2"
    assert census.loc[0, "entries"] == "50,257" and census.loc[1, "coarse-graining"] == "1.2758"
    assert census.loc[0, "5+ forms"] == "834" and census.loc[0, "multi-form share"] == "0.5306"
    assert list(variants.loc[1]) == ["bert-cased", "n/a", "n/a", "3,869", "3,868", "1,970"]
    assert list(variants.loc[0])[-1] == "n/a"  # no position twins in a BPE vocabulary
    assert groups.loc[0, "forms"] == "db, DB, ĠDB, Ġdb, ĠdB, dB, Db" and len(groups) == 3
    assert (matches.loc[1, "exact match"], matches.loc[1, "unit match"]) == ("0.1991", "0.2527")
    assert matches.loc[0, "pairs gained by units"] == "0.2990" and matches.loc[0, "variant mass (docs)"] == "0.8484"
    assert list(examples.loc[0, ["query form", "document form", "unit", "pairs"]]) == ["in", "Ġin", "in", "263"]
    assert list(bm25["normalization"]) == ["raw", "markers", "case", "both"]
    assert bm25.loc[0, "Δ ndcg@10"] == "" and bm25.loc[3, "Δ ndcg@10"] == "+0.0187"
    assert bm25.loc[3, "p (randomization) ndcg@10"] == "0.0131*" and bm25.loc[3, "recall@100"] == "0.2500"
    assert integrity.loc[0, "at or above the random pairs"] == "1"  # groups_at_baseline, not the listed groups
    assert integrity.loc[0, "most divergent"] == "us (us, US): 0.7100"
    assert list(section.figures) == figure_stems(0) == [f"gap-{name}" for name in GAP_FIGURES]
    assert figure_stems(1)[0] == "gap-2-forms"


@pytest.mark.slow  # draws the four figures as PNG and SVG: 1.6 s warm, over 3 s with matplotlib's first import
def test_the_four_figures_are_drawn_as_png_and_svg(tmp_path):
    section = gap_section(write_gap(tmp_path))
    assert section is not None and list(section.figures) == [f"gap-{name}" for name in GAP_FIGURES]
    for caption, png, svg in section.figures.values():
        assert caption and png.startswith(b"\x89PNG\r\n\x1a\n") and b"<svg" in svg[:1000]
        assert b"Date" not in svg and b"Matplotlib v" not in svg  # the same figure, the same bytes
    assert gap_section(tmp_path).figures == section.figures


def test_the_report_shows_the_section_and_writes_its_figures(tmp_path, capsys, no_drawing):
    results = write_gap(write_results(tmp_path / "diagnosis_vocabulary_gap"), {"corpus.json": CORPUS})
    code, stdout, _ = run_command(report_main, ["--results", results, "--output", tmp_path / "report"], capsys)
    assert code == 0
    figures = tmp_path / "report" / "figures"
    assert sorted(path.name for path in figures.iterdir()) == ["gap-matches.png", "gap-matches.svg", "scores.png"]
    assert (figures / "gap-matches.svg").read_bytes() == b"<svg stub/>"
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Vocabulary gap\n" in markdown and "### Corpus: matches lost to surface forms" in markdown
    assert "](figures/gap-matches.png) ([SVG](figures/gap-matches.svg))" in markdown
    assert "<h2>Vocabulary gap</h2>" in (tmp_path / "report" / "report.html").read_text()
    assert set(report_paths(tmp_path / "report", [results])) >= set(figures.iterdir())


def test_regress_writes_the_section_into_its_own_report(tmp_path, monkeypatch, no_drawing, caplog):
    from vtrepro.regress import results_folder
    from vtrepro.regress.spec import load_spec

    monkeypatch.setattr(results_folder, "environment", lambda: {"python": "3"})  # no torch imported for a version
    out = write_gap(tmp_path / "regress", {"corpus.json": CORPUS})
    spec, rows = load_spec("beir_bm25_flat"), [ResultRow(**row) for row in RESULTS["rows"]]
    results_folder.write_report(spec, rows, {}, out, ["--spec", "beir_bm25_flat"], {}, train_root=tmp_path / "train")
    assert "## Vocabulary gap\n" in (out / "report.md").read_text()
    assert (out / "figures" / "gap-matches.svg").read_bytes() == b"<svg stub/>"
    (out / "gap" / "corpus.json").write_text('{"figures": 3}')  # a bad gap file costs regress the section, not its record
    (out / RESULTS_NAME).unlink()
    with caplog.at_level(logging.WARNING):
        results_folder.write_report(spec, rows, {}, out, ["--spec", "beir_bm25_flat"], {}, train_root=tmp_path / "train")
    assert (out / RESULTS_NAME).is_file() and "Vocabulary gap" not in (out / "report.md").read_text()
    assert "corpus.json: figures: expected a JSON list, got an integer" in caplog.text


def test_without_a_gap_folder_the_report_is_unchanged(tmp_path):
    results = check_results(RESULTS, write_results(tmp_path / "plain"), tmp_path / "plain" / RESULTS_NAME)
    report = build_report([results], [])
    assert report.gap == [] and gap_folder(results.folder) is None
    assert sorted(report_files(report)) == ["figures/scores.png", "report.html", "report.md", "table.csv"]
    assert "Vocabulary gap" not in markdown_text(report) + html_text(report)
    assert report_paths(tmp_path / "out", [results.folder]) == report_paths(tmp_path / "out")
    (results.folder / "gap").mkdir()  # a gap folder holding none of the files: no section either
    (results.folder / "gap" / "notes.txt").write_text("x")
    assert gap_section(results.folder) is None and build_report([results], []).gap == []


def _changed(name: str, change) -> dict[str, object]:
    files = copy.deepcopy(FILES)
    change(files[name])
    return {name: files[name]}


HOSTILE = {
    "a count as text": (_changed("census.json", lambda d: d["tokenizers"][0].update(entries="many")),
                        "census.json: tokenizers[0].entries: expected a count (an integer >= 0), got 'many'"),
    "a share above 1": (_changed("corpus.json", lambda d: d["figures"][1]["match_rate"].update(both=1.5)),
                        "corpus.json: figures[1].match_rate.both: 1.5 is out of range"),
    "a list for an object": (_changed("bm25.json", lambda d: d["runs"][2].update(scores=[0.3])),
                             "bm25.json: runs[2].scores: expected a JSON object, got a list"),
    "an unknown normalization": (_changed("bm25.json", lambda d: d["runs"][0].update(normalization="<b>stem</b>")),
                                 "bm25.json: runs[0].normalization: '<b>stem</b>' is not one of raw, markers"),
    "a huge list": (_changed("census.json", lambda d: d["tokenizers"][0]["largest_groups"][0].update(
        forms=["x"] * 100_000)), "census.json: tokenizers[0].largest_groups[0].forms: holds 100000 entries; a report "
                                 "reads at most 1000"),
    "too many tokenizers": (_changed("integrity.json", lambda d: d.update(tokenizers=d["tokenizers"] * 1001)),
                            "integrity.json: tokenizers: holds 1001 entries"),
    "a control character in a name": (_changed("corpus.json", lambda d: d["figures"][0].update(dataset="nf\x1b[2J")),
                                      "corpus.json: figures[0].dataset: 'nf\\x1b[2J' is not a name"),
    "another layout": ({"census.json": [1, 2]}, "census.json: the top level: expected a JSON object, got a list"),
    "not JSON": ({"bm25.json": '{"runs": [NaN]}'}, "bm25.json: holds NaN, which is not a number"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_a_bad_gap_file_is_one_line_naming_file_and_place(case, tmp_path, capsys):
    files, fragment = HOSTILE[case]
    results = write_gap(write_results(tmp_path / "results"), files)
    with pytest.raises(VtreproError) as error:
        gap_section(results)
    assert "\n" not in str(error.value) and str(error.value).startswith(str(results / "gap")), error.value
    code, _, stderr = run_command(report_main, ["--results", results, "--output", tmp_path / "report"], capsys)
    assert_one_error_line(code, stderr, fragment)
    assert not (tmp_path / "report").exists()


def test_a_gap_file_leading_outside_the_results_folder_is_not_read(tmp_path, capsys):
    (tmp_path / "elsewhere.json").write_text(json.dumps(CENSUS))
    results = write_gap(write_results(tmp_path / "results"), {})
    (results / "gap" / "census.json").symlink_to(tmp_path / "elsewhere.json")
    code, _, stderr = run_command(report_main, ["--results", results, "--output", tmp_path / "report"], capsys)
    assert_one_error_line(code, stderr, "census.json: leads to", "outside the folder")


MARKUP = '<script>window.__pwned=1</script><img src=x onerror=alert(1)>|`[x](javascript:1)'


def test_markup_in_a_unit_or_a_name_is_escaped_in_markdown_and_html(tmp_path, no_drawing):
    census = copy.deepcopy(CENSUS)
    census["tokenizers"][0]["name"] = "gpt2 " + MARKUP
    census["tokenizers"][0]["source"] = MARKUP
    census["tokenizers"][0]["largest_groups"][0] = {"unit": MARKUP, "forms": [MARKUP, "</td></table>"]}
    corpus = copy.deepcopy(CORPUS)
    corpus["figures"][0]["examples"][0].update(query_form=MARKUP, unit="<script>")
    folder = write_gap(write_results(tmp_path / "results"), {"census.json": census, "corpus.json": corpus})
    report = build_report([check_results(RESULTS, folder, folder / RESULTS_NAME)], [])
    assert len(report.gap) == 1
    page, markdown = html_text(report), markdown_text(report)
    for text in (page, markdown):
        assert "<script" not in text and "<img src=x" not in text and "</td></table>" not in text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page and "&lt;/td&gt;&lt;/table&gt;" in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;\\|\\`\\[x\\](javascript:1)" \
        in markdown


def test_markup_in_a_label_is_drawn_as_text_in_the_svg():
    with plots.drawing():
        png, svg = plots.bars_chart([MARKUP, "$x^{$"], {MARKUP: [0.5, 0.25]}, "share", MARKUP) or (b"", b"")
    assert png.startswith(b"\x89PNG") and b"<svg" in svg
    assert b"<script" not in svg and b"<img" not in svg and b"onerror" not in svg.replace(b"onerror=alert", b"")
