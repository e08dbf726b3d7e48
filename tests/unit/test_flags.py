"""One meaning per flag, one flag per meaning, across every command (read from the parsers, nothing run), the
table of shared flags in docs/flags.md, and every old spelling still working with its one-line notice."""
import argparse
import logging
from pathlib import Path

import pytest

from helpers import REPO_ROOT, run_command, write_vectors
from vtrepro.bench.command import build_parser as bench_parser
from vtrepro.core.cli import add_path, add_renamed, command_parser
from vtrepro.encode.command import build_fingerprint_parser as fingerprint_parser
from vtrepro.encode.command import fingerprint_main as fingerprint
from vtrepro.evaluate.command import build_parser as evaluate_parser
from vtrepro.flag_audit import RETIRED, all_flags, command_flags, command_parsers, conflicts, markdown, shared
from vtrepro.index.command import build_parser as index_parser
from vtrepro.regress.command import build_export_parser as export_parser
from vtrepro.regress.command import build_parser as regress_parser
from vtrepro.regress.command import export_main as export
from vtrepro.report.command import build_parser as report_parser
from vtrepro.report.command import main as report
from vtrepro.search.command import main as search
from vtrepro.training.command import build_mlm_parser as mlm_parser
from vtrepro.training.command import build_train_parser as train_parser
from vtrepro.vocabulary.command import build_calibrate_parser as calibrate_parser
from vtrepro.vocabulary.command import build_transfer_parser as transfer_parser


def test_every_command_and_subcommand_has_a_parser():
    commands = [name for name, _ in command_parsers()]
    for expected in ("transfer", "calibrate", "encode", "fingerprint", "index", "search", "evaluate", "regress",
                     "export vectors", "export index", "export model", "report", "mlm", "train", "bench encode",
                     "bench search", "bench scale", "bench transfer", "bench base-size", "scripts/gpu_check.sh"):
        assert expected in commands


def test_one_name_one_meaning_and_one_meaning_one_name():
    assert conflicts(all_flags()) == []


def test_the_old_synonyms_of_limit_are_only_deprecated_spellings():
    names = {flag.name for flag in all_flags()}
    assert not names & {"--docs", "--max-texts", "--documents", "--metric", "--precision", "--screen"}
    assert {RETIRED[old] for old in ("--docs", "--max-texts", "--documents")} == {"--limit"}
    assert "--limit" in shared(all_flags())


def test_a_name_with_two_meanings_is_caught():
    first, second = argparse.ArgumentParser(), argparse.ArgumentParser()
    first.add_argument("--split", default="test")
    second.add_argument("--split", default="train")
    add_path(first, "--queries", "input file", help="read")
    add_path(second, "--queries", "created file", help="written")
    found = conflicts(command_flags("a", first) + command_flags("b", second))
    assert [problem.split(" has ")[0] for problem in found if " meanings" in problem] == ["--split", "--queries"]
    assert any("--queries: shared" not in problem for problem in found)


def test_an_old_spelling_declared_anew_and_an_untyped_path_are_caught():
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int)
    parser.add_argument("--index", type=Path)
    found = conflicts(command_flags("a", parser))
    assert any("--docs: an old spelling of --limit" in problem for problem in found)
    assert any("--index: a path flag without a kind" in problem for problem in found)


def test_docs_flags_md_is_what_the_parsers_give():
    assert (REPO_ROOT / "docs" / "flags.md").read_text(encoding="utf-8") == markdown(), \
        "regenerate it: python -m vtrepro.flag_audit > docs/flags.md"


def test_the_renaming_mechanism_keeps_the_new_flags_type_requirement_and_group(caplog):
    parser = command_parser("test", "a test command")
    parser.add_argument("--recipe", required=True)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--limit", type=int)
    group.add_argument("--all", action="store_true")
    add_renamed(parser, "--docs", "--limit")
    add_renamed(parser, "--config", "--recipe")
    for wrong in (["--config", "r", "--docs", "x"], ["--config", "r", "--docs", "3", "--all"], ["--docs", "3"]):
        with pytest.raises(SystemExit):
            parser.parse_args(wrong)
    assert parser.parse_args(["--config=r", "--docs", "3"]).limit == 3
    assert "--docs" not in parser.format_help() and "--config" not in parser.format_help()


OLD_SPELLINGS = [  # (parser, argv ending in the old spelling, dest, value, the new spelling the notice names)
    (transfer_parser, ["--output", "o", "--source", "m"], "model", "m", "--model m"),
    (transfer_parser, ["--model", "m", "--out", "o"], "output", Path("o"), "--output o"),
    (calibrate_parser, ["--model", "m", "--dataset", "d", "--output", "o", "--docs", "5"], "docs", 5, "--limit 5"),
    (calibrate_parser, ["--model", "m", "--dataset", "d", "--output", "o", "--max-length", "128"], "max_length_doc",
     128, "--max-length-doc 128"),
    (mlm_parser, ["--model", "m", "--dataset", "d", "--output", "o", "--max-texts", "7"], "limit", 7, "--limit 7"),
    (mlm_parser, ["--model", "m", "--dataset", "d", "--output", "o", "--precision", "bf16"], "dtype", "bfloat16",
     "--dtype bfloat16"),
    (index_parser, ["--vectors", "v", "--index", "x"], "output", Path("x"), "--output x"),
    (evaluate_parser, ["--run", "r", "--qrels", "q", "--baseline", "b"], "baseline_run", Path("b"),
     "--baseline-run b"),
    (report_parser, ["--results", "r", "--metric", "recall@100"], "metrics", "recall@100", "--metrics recall@100"),
    (regress_parser, ["--spec", "s", "--output", "x"], "runs", Path("x"), "--runs x"),
    (train_parser, ["--config", "r"], "recipe", "r", "--recipe r"),
    (export_parser, ["model", "--model", "m", "--out", "o"], "output", Path("o"), "--output o"),
    (bench_parser, ["encode", "--screen", "int8"], "projection", "screened-int8", "--projection screened-int8"),
    (bench_parser, ["encode", "--max-length", "256"], "max_length_doc", 256, "--max-length-doc 256"),
    (bench_parser, ["base-size", "--documents", "3"], "limit", 3, "--limit 3"),
]


@pytest.mark.parametrize(("build", "argv", "dest", "value", "new"), OLD_SPELLINGS,
                         ids=[f"{case[0].__module__.split('.')[-1]} {case[1][-2]}" for case in OLD_SPELLINGS])
def test_an_old_spelling_still_parses_and_names_the_new_one(build, argv, dest, value, new, caplog):
    with caplog.at_level(logging.WARNING, logger="vtrepro"):
        args = build().parse_args(argv)
    assert getattr(args, dest) == value
    notices = [record.getMessage() for record in caplog.records]
    assert notices == [f"'{' '.join(argv[-2:])}' is deprecated; write '{new}'"]


def test_fingerprint_takes_its_old_positional_arguments_with_a_notice(tmp_path, capsys):
    first = write_vectors(tmp_path / "a", {"d1": {"x": 1}})
    second = write_vectors(tmp_path / "b", {"d1": {"x": 2}})
    code, out, err = run_command(fingerprint, [first, second], capsys)
    assert code == 0 and '"identical": false' in out
    assert f"positional arguments are deprecated; write '--vectors {first} --reference-vectors {second}'" in err
    code, flagged, err = run_command(fingerprint, ["--vectors", first, "--reference-vectors", second], capsys)
    assert (code, flagged, err) == (0, out, "")
    args = fingerprint_parser().parse_args(["--vectors", str(first)])
    assert (args.vectors, args.reference_vectors) == (first, None)


def test_report_takes_its_old_positional_arguments_with_a_notice(tmp_path, capsys):
    code, _, err = run_command(report, [tmp_path / "missing", "--output", tmp_path / "report"], capsys)
    assert code == 2
    assert f"positional arguments are deprecated; write '--results {tmp_path / 'missing'}'" in err


def test_export_without_a_subcommand_means_export_vectors_with_a_notice(tmp_path, capsys):
    code, _, err = run_command(export, ["--spec", "beir_bm25_flat", "--runs", tmp_path, "--output", tmp_path / "b.tar"],
                               capsys)
    assert code == 2
    assert "'export --spec' without a subcommand is deprecated; write 'export vectors --spec'" in err
    assert "no runs of beir_bm25_flat" in err


def test_search_engine_pisa_vectors_names_index_engine_pisa(tmp_path, capsys):
    code, _, err = run_command(search, ["--engine", "pisa", "--vectors", tmp_path / "v", "--index", tmp_path / "i",
                                        "--queries", tmp_path / "q.jsonl", "--output", tmp_path / "run.trec"], capsys)
    assert code == 2
    assert f"build the index with 'index --engine pisa --vectors {tmp_path / 'v'} --output {tmp_path / 'i'}'" in err
