"""Bundle a regression's encoded vectors for exact reproduction elsewhere.

``python -m vtrepro export --spec regressions/beir_splade_tiny.yaml --output splade_tiny.tar`` packs
the encoded corpora and query vectors that ``regress`` left in ``runs/<spec>/``, their fingerprints,
the spec and the environment into one ``.tar`` and writes its sha256 beside it. On any machine,
``python -m vtrepro.regress --spec ... --vectors splade_tiny.tar`` then reproduces every figure exactly.
"""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.cli import cli_entry, command_parser
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.regress.bundle import checksum_path, write_bundle
from vtrepro.regress.report import environment
from vtrepro.regress.runner import selected_runs
from vtrepro.regress.spec import load_spec


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("export", __doc__)
    parser.add_argument("--spec", required=True, help="spec file, or a name in regressions/")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="the --output folder regress used (default runs/)")
    parser.add_argument("--datasets", help="comma-separated subset of the spec's datasets")
    parser.add_argument("--output", required=True, type=Path, help="bundle file to write (.tar); <output>.sha256 beside it")
    args = parser.parse_args(argv)

    spec = load_spec(args.spec)
    run_root = args.runs / spec.name
    for output in (args.output, checksum_path(args.output)):
        check_output(output, [spec.path, run_root])
    if not run_root.is_dir():
        raise VtreproError(f"{run_root}: no runs of {spec.name}; run 'python -m vtrepro.regress --spec {args.spec}' first")
    runs = [(condition.name, dataset.name) for condition, dataset in selected_runs(spec, args.datasets)
            if condition.retrieval == "impact"]
    digest = write_bundle(run_root, runs, args.output, spec.path, environment())
    print(f"{len(runs)} run(s) -> {args.output} (sha256 {digest})")
    return 0
