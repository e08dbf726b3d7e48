"""Published tables: every shipped table loads with citations; bad tables and bad references fail on one line."""
import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.regress.spec import load_spec
from vtrepro.report.published import PUBLISHED_DIR, beir_average, load_system, load_table


def test_every_shipped_table_loads_and_cites_every_value():
    tables = sorted(PUBLISHED_DIR.glob("*.yaml"))
    assert {path.stem for path in tables} >= {"pyserini_bm25_flat", "anserini_splade_v3", "anserini_splade_pp_ed",
                                               "opensearch_neural_sparse", "paper_vocabulary_transfer"}
    for path in tables:
        for system in load_table(path).values():
            assert system.citation and system.source
            assert system.datasets or system.average


def test_the_paper_and_model_card_figures():
    assert load_system("paper_vocabulary_transfer/modernbert-vt").average == {"ndcg@10": 0.524}
    derived = load_system("paper_vocabulary_transfer/modernbert")
    assert derived.average == {"ndcg@10": 0.477} and "4.7" in derived.derived
    cards = load_table("opensearch_neural_sparse")
    assert sorted(system.average["ndcg@10"] for system in cards.values()) == [0.49, 0.497, 0.504, 0.524, 0.528]
    assert all(len(system.average_datasets) == 13 for system in cards.values())


def test_specs_refer_to_tables_instead_of_repeating_numbers():
    bm25 = load_spec("beir_bm25_flat").conditions[0]
    assert bm25.published is not None and bm25.published.key == "pyserini_bm25_flat/bm25-flat"
    assert {dataset.name: dataset.reference["ndcg@10"] for dataset in bm25.datasets} == {
        name: bm25.published.datasets[name]["ndcg@10"] for name in ("scifact", "nfcorpus")}
    assert load_spec("beir_modernbert_vt").conditions[0].reference_average == {"ndcg@10": 0.524}


def test_cqadupstack_forums_are_averaged_first():
    forums = {f"cqadupstack/{name}": value for name, value in (("android", 0.2), ("gis", 0.4))}
    assert beir_average({"scifact": 0.7, **forums}) == pytest.approx((0.7 + 0.3) / 2)


@pytest.mark.parametrize("body, fragment", [
    ("source: s\nsystems:\n  x:\n    label: X\n    citation: c\n    datasets:\n      scifact: {ndcg@10: 1.5}\n",
     ":7: system 'x'.datasets.scifact.ndcg@10 must be a number in [0, 1]"),
    ("source: s\nsystems:\n  x:\n    label: X\n    citation: c\n    datasets:\n      scifact: {ndgc@10: 0.5}\n",
     ":7: system 'x'.datasets.scifact: unknown metric"),
    ("source: s\nsystems:\n  x:\n    label: X\n    citation: c\n    average: {ndcg@10: 0.5}\n",
     ":3: system 'x': 'average' and 'average_datasets' go together"),
    ("source: s\nsystems:\n  x:\n    label: X\n", ":3: system 'x' needs 'citation'"),
])
def test_a_bad_table_names_file_and_line(tmp_path, body, fragment):
    path = tmp_path / "table.yaml"
    path.write_text(body)
    with pytest.raises(VtreproError) as error:
        load_table(path)
    assert str(error.value).startswith(str(path)) and fragment in str(error.value)


def test_a_spec_naming_an_unknown_system_or_repeating_references_fails(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("conditions:\n  bm25:\n    retrieval: bm25\n    published: pyserini_bm25_flat/bm25\n"
                    "    datasets: {scifact: }\n")
    with pytest.raises(VtreproError, match=r"spec.yaml:4: condition 'bm25'.published: .*has no system 'bm25'"):
        load_spec(spec)
    spec.write_text("conditions:\n  bm25:\n    retrieval: bm25\n    published: pyserini_bm25_flat/bm25-flat\n"
                    "    datasets:\n      scifact: {reference: {ndcg@10: 0.6789}}\n")
    with pytest.raises(VtreproError, match=r"has its own 'reference' and 'published: pyserini_bm25_flat/bm25-flat'"):
        load_spec(spec)
