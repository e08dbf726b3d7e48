"""EncoderOptions (and Quantization, declared the same way): defaults and bounds written once, read alike from
Python, a spec's YAML, the encode command line and the command line handed to torchrun's processes."""
from __future__ import annotations

import pytest

from vtrepro.core.cli import options_from_args
from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Checker, read_yaml
from vtrepro.encode.command import build_encode_parser as build_parser
from vtrepro.encode.vectors import MAX_SCALE, MIN_SCALE, Quantization
from vtrepro.model.encoder_options import MAX_SORT_WINDOW, PRECISIONS, PROJECTIONS, EncoderOptions

REQUIRED_ARGUMENTS = ["--model", "m", "--corpus", "c.jsonl", "--output", "out"]


def test_defaults_and_bounds_are_declared_once():
    assert EncoderOptions().to_dict() == {"max_length_doc": 512, "max_length_query": 64, "batch_size": 32,
                                          "sort_window": 2000, "dtype": "float32", "activation": "log1p",
                                          "projection": "auto"}
    schema = EncoderOptions.schema()
    assert {name: (field.minimum, field.maximum) for name, field in schema.items() if field.kind is int} == {
        "max_length_doc": (1, MAX_TEXT_TOKENS), "max_length_query": (1, MAX_TEXT_TOKENS),
        "batch_size": (1, MAX_BATCH_SIZE), "sort_window": (1, MAX_SORT_WINDOW)}
    assert schema["dtype"].choices == PRECISIONS and schema["projection"].choices == PROJECTIONS
    assert (Quantization.schema()["scale"].minimum, Quantization.schema()["scale"].maximum) == (MIN_SCALE, MAX_SCALE)


@pytest.mark.parametrize(("changes", "message"), [
    ({"max_length_doc": 0}, r"EncoderOptions\.max_length_doc must be an integer in \[1, 8192\], got 0"),
    ({"sort_window": MAX_SORT_WINDOW + 1}, r"EncoderOptions\.sort_window must be an integer in \[1, 100000\]"),
    ({"batch_size": 2.5}, r"EncoderOptions\.batch_size must be an integer in \[1, 4096\], got 2\.5"),
    ({"projection": "sparse"}, r"EncoderOptions\.projection must be one of auto, dense, screened, "),
])
def test_an_object_outside_its_declaration_cannot_be_made(changes, message):
    with pytest.raises(VtreproError, match=message):
        EncoderOptions(**changes)
    with pytest.raises(VtreproError, match=message):
        EncoderOptions().replace(**changes)


def test_a_spec_block_is_read_with_its_defaults_and_bad_values_name_the_file_and_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("conditions:\n  tiny:\n    encoder: {max_length_doc: 256, dtype: bfloat16}\n"
                    "    quantization: {rounding: truncate}\n  bad:\n    encoder:\n      batch_size: 0\n")
    document, check = read_yaml(path), Checker(path, "the spec")
    tiny = document["conditions"]["tiny"]
    assert EncoderOptions.read(check, tiny, "encoder", "tiny.encoder") == EncoderOptions(max_length_doc=256,
                                                                                       dtype="bfloat16")
    assert Quantization.read(check, tiny, "quantization", "tiny.quantization") == Quantization(rounding="truncate")
    assert EncoderOptions.read(check, {}, "encoder", "none.encoder") == EncoderOptions()
    with pytest.raises(VtreproError, match=rf"^{path}:7: bad\.encoder\.batch_size must be an integer in \[1, 4096\], got 0$"):
        EncoderOptions.read(check, document["conditions"]["bad"], "encoder", "bad.encoder")


@pytest.mark.parametrize("options", [
    EncoderOptions(),
    EncoderOptions(max_length_doc=128, max_length_query=16, batch_size=8, sort_window=40, dtype="bfloat16",
                   projection="screened-int8"),
])
def test_to_argv_round_trips_through_the_encode_command_line(options):
    quantization = Quantization(scale=51.2, rounding="half-up")
    args = build_parser().parse_args([*REQUIRED_ARGUMENTS, *options.to_argv(), *quantization.to_argv()])
    assert options_from_args(EncoderOptions, args) == options
    assert options_from_args(Quantization, args) == quantization


def test_the_encode_command_line_refuses_what_the_declaration_refuses(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*REQUIRED_ARGUMENTS, "--sort-window", str(MAX_SORT_WINDOW + 1)])
    assert "argument --sort-window: expected an integer in [1, 100000]" in capsys.readouterr().err
