"""Real Anserini impact indexing: documents and impacts kept, clear errors."""
import pytest

from helpers import HAND_MADE_DOCS
from vtrepro.core.errors import VtreproError
from vtrepro.index.lucene import build_impact_index
from vtrepro.index.lucene_checks import index_stats


def test_index_keeps_every_document_and_total_impact(impact_index):
    _, stats = impact_index
    assert stats["documents"] == len(HAND_MADE_DOCS)
    assert stats["total_terms"] == sum(sum(vector.values()) for vector in HAND_MADE_DOCS.values())


def test_missing_index_is_a_clear_error(tmp_path):
    with pytest.raises(VtreproError, match="not a Lucene index"):
        index_stats(tmp_path)
    with pytest.raises(VtreproError, match="no \\*.jsonl"):
        build_impact_index(tmp_path, tmp_path / "idx")


