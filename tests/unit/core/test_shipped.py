"""Shipped specs, recipes and published tables by name from any folder; a user's own file by path."""
from __future__ import annotations

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.core.shipped import PUBLISHED_DIR, RECIPES_DIR, SHIPPED_DIR, find_shipped, shipped_names
from vtrepro.regress.spec import find_spec
from vtrepro.report.published import find_table
from vtrepro.training.recipe import find_recipe


def test_shipped_folders_are_the_package_data():
    import vtrepro

    assert SHIPPED_DIR.parent.samefile(vtrepro.__path__[0])
    assert {"beir_bm25_flat", "beir_splade_tiny"} <= set(shipped_names(SHIPPED_DIR))
    assert "modernbert_vt" in shipped_names(RECIPES_DIR)
    assert "pyserini_bm25_flat" in shipped_names(PUBLISHED_DIR)


def test_names_are_found_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_spec("beir_bm25_flat") == SHIPPED_DIR / "beir_bm25_flat.yaml"
    assert find_spec("beir_bm25_flat.yaml") == SHIPPED_DIR / "beir_bm25_flat.yaml"
    assert find_recipe("modernbert_vt") == RECIPES_DIR / "modernbert_vt.yaml"
    assert find_table("pyserini_bm25_flat") == PUBLISHED_DIR / "pyserini_bm25_flat.yaml"


def test_a_path_names_a_users_own_file(tmp_path, monkeypatch):
    own = tmp_path / "mine" / "beir_bm25_flat.yaml"
    own.parent.mkdir()
    own.write_text("description: mine\n")
    monkeypatch.chdir(tmp_path)
    for find in (find_spec, find_recipe, find_table):
        assert find(str(own)) == own
        assert find("mine/beir_bm25_flat.yaml") == own.relative_to(tmp_path)


def test_a_checkouts_regressions_folder_comes_first_for_specs_and_recipes(tmp_path, monkeypatch):
    (tmp_path / "regressions" / "recipes").mkdir(parents=True)
    (tmp_path / "regressions" / "published").mkdir()
    for relative in ("beir_bm25_flat.yaml", "recipes/modernbert_vt.yaml", "published/pyserini_bm25_flat.yaml"):
        (tmp_path / "regressions" / relative).write_text("description: edited\n")
    monkeypatch.chdir(tmp_path)
    assert find_spec("beir_bm25_flat").resolve() == (tmp_path / "regressions" / "beir_bm25_flat.yaml").resolve()
    assert find_recipe("modernbert_vt").resolve() == (tmp_path / "regressions" / "recipes" / "modernbert_vt.yaml").resolve()
    # published tables: only the package's (reports and results check table names against it)
    assert find_table("pyserini_bm25_flat") == PUBLISHED_DIR / "pyserini_bm25_flat.yaml"


@pytest.mark.parametrize(("find", "kind", "folder"), [(find_spec, "spec", SHIPPED_DIR), (find_recipe, "recipe", RECIPES_DIR),
                                                     (find_table, "published table", PUBLISHED_DIR)])
def test_not_found_lists_the_shipped_names(find, kind, folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VtreproError) as raised:
        find("no_such_name")
    message = str(raised.value)
    assert message.startswith(f"{kind} 'no_such_name' not found: give a YAML file path or a shipped name (")
    assert all(name in message for name in shipped_names(folder)) and str(folder) in message
    assert "\n" not in message


def test_an_empty_folder_says_none():
    with pytest.raises(VtreproError, match=r"a shipped name \(none; in "):
        find_shipped("x", SHIPPED_DIR / "no_such_folder", "spec", checkout=False)
