"""The YAML schema engine: bounded reading with file:line errors, Field's words and Checker's contract per kind."""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from ruamel.yaml.comments import CommentedMap

from vtrepro.core import schema
from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import (
    BOOLEAN_FIX,
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    REQUIRED,
    Checker,
    Field,
    bounds_text,
    check_expansion,
    is_boolean,
    read_mapping_file,
    read_yaml,
    round_trip_yaml,
    within,
)


def write(tmp_path: Path, text: str | bytes, name: str = "doc.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, *fragments: str) -> str:
    """read_yaml's one error for ``path``, holding every fragment."""
    with pytest.raises(VtreproError) as caught:
        read_yaml(path)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


# ---------------------------------------------------------------------------- read_yaml


def test_read_yaml_keeps_order_comments_and_line_numbers(tmp_path):
    document = read_yaml(write(tmp_path, "# a spec\nb: 1  # one\na:\n  - x\n  - y\n"))
    assert isinstance(document, CommentedMap)
    assert list(document) == ["b", "a"] and document["a"] == ["x", "y"]
    assert document.lc.key("a")[0] == 2 and document["a"].lc.item(1)[0] == 4


def test_an_empty_file_reads_as_none(tmp_path):
    assert read_yaml(write(tmp_path, "")) is None
    assert read_yaml(write(tmp_path, "# only a comment\n", "comment.yaml")) is None


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("a: 1\nb: [1, 2\nc: 3\n", 3, "expected ',' or ']'"),
    ("a: 1\nb:\n\t- x\n", 3, "'\\t' that cannot start any token"),
    ("a: 1\na: 2\n", 2, 'duplicate key "a"'),
])
def test_malformed_yaml_names_the_file_and_line(tmp_path, text, line, problem):
    path = write(tmp_path, text)
    message = refused(path, problem, "fix the syntax")
    assert message.startswith(f"{path}:{line}: malformed YAML (")


def test_invalid_utf8_names_the_line_and_byte(tmp_path):
    path = write(tmp_path, b"a: 1\nb: caf\xe9\n")
    assert refused(path) == f"{path}:2: not valid UTF-8 (byte 11); save the file as UTF-8"


def test_the_size_limit_is_inclusive(tmp_path):
    assert read_yaml(write(tmp_path, "#" * (MAX_YAML_BYTES - 1) + "\n")) is None
    path = write(tmp_path, "#" * MAX_YAML_BYTES + "\n", "big.yaml")
    assert refused(path).startswith(f"{path}: larger than {MAX_YAML_BYTES} bytes")


def test_nesting_is_bounded(tmp_path):
    nested = read_yaml(write(tmp_path, "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH))
    for _ in range(MAX_YAML_DEPTH - 1):
        nested = nested[0]
    assert nested == []
    deeper = MAX_YAML_DEPTH + 1
    path = write(tmp_path, "[" * deeper + "]" * deeper, "deep.yaml")
    assert refused(path).startswith(f"{path}:1: YAML nested deeper than {MAX_YAML_DEPTH} levels")


def test_the_node_limit_is_inclusive_and_counts_plain_nodes(tmp_path, monkeypatch):
    limit = 1000  # the rule, at a size that parses in milliseconds (the real limit's file takes ~10 s)
    monkeypatch.setattr(schema, "MAX_YAML_NODES", limit)
    fits = read_yaml(write(tmp_path, "[" + ",".join(["1"] * (limit - 1)) + "]"))  # and the list itself
    assert len(fits) == limit - 1
    path = write(tmp_path, "[" + ",".join(["1"] * limit) + "]", "many.yaml")
    assert refused(path).startswith(f"{path}:1: the YAML holds more than {limit} nodes")


def test_aliases_that_expand_past_the_limit_are_refused_before_building(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for name, previous in zip("bcde", "abcd"):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]")
    path = write(tmp_path, "\n".join(lines) + "\n")
    message = refused(path, "each alias counted at every use")
    assert message.startswith(f"{path}:5: YAML aliases expand to more than {MAX_YAML_NODES} nodes")


def test_aliases_within_the_limit_read_as_shared_values(tmp_path):
    document = read_yaml(write(tmp_path, "base: &base {k1: 0.9, b: 0.4}\none: *base\ntwo: {<<: *base, b: 0.5}\n"))
    assert document["one"] == {"k1": 0.9, "b": 0.4} and document["two"]["b"] == 0.5 and document["two"]["k1"] == 0.9


def test_an_alias_inside_the_collection_it_names_is_refused(tmp_path):
    path = write(tmp_path, "a: &x\n  - 1\n  - *x\n")
    assert refused(path).startswith(f"{path}:1: a YAML alias sits inside the collection it names")


def test_check_expansion_accepts_nothing_and_a_repeated_scalar(tmp_path):
    check_expansion(None, tmp_path / "none.yaml")
    root = round_trip_yaml().compose("a: &s word\nb: [*s, *s, *s]\n")
    check_expansion(root, tmp_path / "scalars.yaml")


# ---------------------------------------------------------------------------- read_mapping_file


def test_read_mapping_file_returns_the_mapping_and_a_checker_calling_it_by_name(tmp_path):
    path = write(tmp_path, "conditions: []\n")
    document, check = read_mapping_file(path, "spec", "a 'conditions' key")
    assert document == {"conditions": []} and check.path == path and check.top == "the spec"


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", ""])
def test_read_mapping_file_refuses_anything_but_a_mapping(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(VtreproError, match="a recipe must be a YAML mapping with a 'training' key$") as caught:
        read_mapping_file(path, "recipe", "a 'training' key")
    assert str(caught.value).startswith(f"{path}:1: ")


# ---------------------------------------------------------------------------- booleans, bounds


def test_only_true_and_false_are_booleans(tmp_path):
    document = read_yaml(write(tmp_path, "a: true\nb: False\nc: yes\nd: 'true'\ne: 1\nf: off\n"))
    assert [is_boolean(document[key]) for key in "abcdef"] == [True, True, False, False, False, False]
    assert is_boolean(False) and not is_boolean(0) and not is_boolean(None)


@pytest.mark.parametrize(("bounds", "text"), [
    ({}, ""),
    ({"minimum": 1}, ">= 1"),
    ({"above": 0}, "> 0"),
    ({"maximum": 1}, "<= 1"),
    ({"below": 1}, "< 1"),
    ({"minimum": 0, "maximum": 1}, "in [0, 1]"),
    ({"above": 0, "below": 1}, "in (0, 1)"),
    ({"minimum": 0, "below": 1}, "in [0, 1)"),
    ({"above": 0, "maximum": 1.5}, "in (0, 1.5]"),
    ({"minimum": 1e7}, ">= 10000000"),
    ({"maximum": 2.0}, "<= 2"),
    ({"below": 1e-5}, "< 1e-05"),
])
def test_bounds_text(bounds, text):
    assert bounds_text(**bounds) == text


@pytest.mark.parametrize(("value", "bounds", "inside"), [
    (1, {"minimum": 1}, True),
    (1, {"above": 1}, False),
    (1, {"maximum": 1}, True),
    (1, {"below": 1}, False),
    (0.5, {"above": 0, "below": 1}, True),
    (-0.1, {"minimum": 0}, False),
    (5, {}, True),
    (math.inf, {}, False),
    (-math.inf, {"maximum": 0}, False),
    (math.nan, {}, False),
    (10 ** 400, {"minimum": 1}, False),  # beyond float range: refused, not an OverflowError
    (-(10 ** 400), {}, False),
])
def test_within(value, bounds, inside):
    assert within(value, **bounds) is inside


# ---------------------------------------------------------------------------- Field


@pytest.mark.parametrize(("field", "expected"), [
    (Field(int), "an integer"),
    (Field(int, minimum=1), "an integer >= 1"),
    (Field(float, above=0, maximum=1), "a number in (0, 1]"),
    (Field(str), "a non-empty string"),
    (Field(str, minimum=1), "a non-empty string"),  # bounds speak of numbers only
    (Field(str, choices=("dense", "screened")), "one of dense, screened"),
    (Field(bool), "true or false"),
    (Field("mapping"), "a mapping"),
    (Field("list"), "a list"),
    (Field("str_list"), "a non-empty list of strings"),
    (Field(int, minimum=1, what="a positive count of steps"), "a positive count of steps"),
])
def test_field_expected_says_what_a_valid_value_is(field, expected):
    assert field.expected() == expected


def test_a_field_is_required_unless_it_has_a_default():
    assert Field(int).default is REQUIRED and Field(int, 3).default == 3
    assert Field(float, minimum=0, maximum=1, above=-1, below=2).bounds == (0, 1, -1, 2)


# ---------------------------------------------------------------------------- Checker


SCHEMA = {
    "steps": Field(int, minimum=1),
    "lr": Field(float, 1e-4, above=0),
    "name": Field(str, "splade"),
    "projection": Field(str, "dense", choices=("dense", "screened")),
    "fp16": Field(bool, False),
    "extra": Field("mapping", None, nullable=True),
    "layers": Field("list", ()),
    "datasets": Field("str_list", ("scifact",)),
}


@pytest.fixture
def recipe(tmp_path) -> tuple[CommentedMap, Checker]:
    path = write(tmp_path, (
        "training:\n"            # 1
        "  steps: 10\n"          # 2
        "  lr: 1\n"              # 3
        "  projection: dense\n"  # 4
        "  fp16: true\n"         # 5
        "  datasets: [a, b]\n"   # 6
        "  extra:\n"             # 7
        "list:\n"                # 8
        "  - x\n"                # 9
        "  - y\n"                # 10
    ), "recipe.yaml")
    return read_mapping_file(path, "recipe", "a 'training' key")


def test_read_checks_converts_and_fills_defaults(recipe):
    document, check = recipe
    values = check.read(document, "training", SCHEMA, "training")
    assert values == {"steps": 10, "lr": 1.0, "name": "splade", "projection": "dense", "fp16": True, "extra": None,
                      "layers": (), "datasets": ("a", "b")}
    assert type(values["lr"]) is float and type(values["steps"]) is int and type(values["fp16"]) is bool


def test_read_without_fill_returns_only_the_given_keys(recipe):
    document, check = recipe
    assert set(check.read(document, "training", SCHEMA, "training", fill=False)) == \
        {"steps", "lr", "projection", "fp16", "datasets", "extra"}


def test_a_missing_required_key_is_named_at_its_mapping(recipe):
    document, check = recipe
    with pytest.raises(VtreproError) as caught:
        check.read(document, "training", {**SCHEMA, "warmup": Field(int)}, "training")
    assert str(caught.value) == f"{check.path}:1: training needs 'warmup'"


def test_an_unknown_key_is_named_at_its_line_with_the_known_ones(recipe):
    document, check = recipe
    with pytest.raises(VtreproError) as caught:
        check.mapping(document, None, {"training"}, "")
    assert str(caught.value) == f"{check.path}:8: unknown key 'list' in the recipe; expected one of training"


def test_mapping_of_a_null_is_empty_and_of_a_list_is_refused(recipe):
    document, check = recipe
    assert check.mapping(document["training"], "extra", {"a"}, "training.extra") == {}
    assert check.mapping(document, "absent", {"a"}, "absent") == {}
    with pytest.raises(VtreproError) as caught:
        check.mapping(document, "list", {"a"}, "list")
    assert str(caught.value) == f"{check.path}:8: list must be a mapping"


def test_location_is_the_key_line_the_item_line_or_the_node_line(recipe):
    document, check = recipe
    assert check.location(document, "list") == f"{check.path}:8"
    assert check.location(document["list"], 1) == f"{check.path}:10"
    assert check.location(document["list"], 7) == f"{check.path}:9"  # no such item: the list's own line
    assert check.location({"plain": "dict"}, "plain") == str(check.path)  # no line kept
    assert str(check.fail(document["training"], "lr", "bad")) == f"{check.path}:3: bad"


def test_a_merged_key_is_reported_at_its_mapping(tmp_path):
    path = write(tmp_path, "base: &base {k1: 1}\nrun:\n  <<: *base\n  b: 2\n")
    check = Checker(path, "the spec")
    run = read_yaml(path)["run"]
    assert check.location(run, "k1") == f"{path}:3" and check.location(run, "b") == f"{path}:4"


@pytest.mark.parametrize(("text", "field", "message"), [
    ("true", Field(int), "must be an integer, got True"),
    ("1.5", Field(int), "must be an integer, got 1.5"),
    ("0", Field(int, minimum=1), "must be an integer >= 1, got 0"),
    (".inf", Field(float), "must be a number, got inf"),
    (".nan", Field(float, minimum=0), "must be a number >= 0, got nan"),
    ("'3'", Field(float), "must be a number, got '3'"),
    ("1" * 400, Field(int, minimum=1), f"must be an integer >= 1, got {'1' * 400}"),
    ("1" * 400, Field(float, above=0), f"must be a number > 0, got {'1' * 400}"),
    ("''", Field(str), "must be a non-empty string, got ''"),
    ("'  '", Field(str), "must be a non-empty string, got '  '"),
    ("12", Field(str), "must be a non-empty string, got 12"),
    ("sparse", Field(str, choices=("dense", "screened")), "must be one of dense, screened, got 'sparse'"),
    ("yes", Field(bool), f"must be true or false, got 'yes'; {BOOLEAN_FIX}"),
    ("1", Field(bool), f"must be true or false, got 1; {BOOLEAN_FIX}"),
    ("[a]", Field("mapping"), "must be a mapping, got ['a']"),
    ("{a: 1}", Field("list"), "must be a list, got {'a': 1}"),
    ("[]", Field("str_list"), "must be a non-empty list of strings, got []"),
    ("[a, 1]", Field("str_list"), "must be a non-empty list of strings, got ['a', 1]"),
    ("a", Field("str_list"), "must be a non-empty list of strings, got 'a'"),
    ("", Field(int), "must be an integer, got None"),
])
def test_value_refuses_with_the_label_line_and_what_is_expected(tmp_path, text, field, message):
    path = write(tmp_path, f"top: 1\nkey: {text}\n")
    check = Checker(path, "the spec")
    with pytest.raises(VtreproError) as caught:
        check.value(read_yaml(path), "key", field, "section.key")
    assert str(caught.value) == f"{path}:2: section.key {message}"


@pytest.mark.parametrize(("text", "field", "value"), [
    ("3", Field(int, minimum=1, maximum=3), 3),
    ("3", Field(float, below=3.5), 3.0),
    ("0.25", Field(float, above=0, below=1), 0.25),
    ("screened", Field(str, choices=("dense", "screened")), "screened"),
    ("false", Field(bool), False),
    ("{a: 1}", Field("mapping"), {"a": 1}),
    ("[1, x]", Field("list"), [1, "x"]),
    ("[a, b]", Field("str_list"), ("a", "b")),
    ("", Field(int, nullable=True), None),
    ("~", Field("mapping", nullable=True), None),
])
def test_value_accepts_and_converts(tmp_path, text, field, value):
    path = write(tmp_path, f"key: {text}\n")
    checked = Checker(path, "the spec").value(read_yaml(path), "key", field, "key")
    assert checked == value and isinstance(checked, type(value))


def test_a_fifo_or_a_folder_is_refused_without_waiting(tmp_path):
    """Opening a FIFO blocks until something writes to it: a spec, recipe or table path naming one is refused."""
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(VtreproError, match="not a regular file"):
            read_yaml(path)
