"""Run a regression spec end to end and check every score against its pinned value.

``python -m vtrepro regress --spec regressions/beir_splade_tiny.yaml`` encodes each corpus into
quantized JSON vectors, builds an Anserini impact index (or a BM25 index), searches it, scores the
run with pytrec_eval and compares each metric with the spec (exactly, at 4 decimals) and with the
published reference where the spec gives one.

Figures are judged in one of two tiers. *fixed*: the vectors' fingerprints equal the pinned ones (or
the run is BM25 over fixed text), so every figure must match exactly. *encoded*: the vectors were
encoded here and differ from the pinned ones (another CPU, another float path), so index totals and
scores may move within the spec's tolerance: status OKISH, with the difference shown. ``--vectors``
takes published vectors (a bundle from ``python -m vtrepro export``) instead of encoding, which makes
every row exact on any machine. Exit status: 0 all OK or OKISH, 1 any FAIL (``--strict``: OKISH
too), 2 bad input.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from vtrepro.core.cli import (
    grant_remote_code,
    os_error_message,
)
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK, VtreproError
from vtrepro.core.io import check_output, check_replaceable, check_within
from vtrepro.core.java import start_jvm
from vtrepro.data.availability import check_dataset_split
from vtrepro.data.beir import load_dataset
from vtrepro.encode.reader import full_reads, reset_full_reads, vector_files
from vtrepro.gap.model import flat_figures
from vtrepro.model.loading import model_availability, resolve_model
from vtrepro.regress.agreement import vector_agreement
from vtrepro.regress.compare import (
    TIER_FIXED,
    Observation,
    ResultRow,
    agreement_rows,
    compare,
    compare_averages,
    tier_of,
)
from vtrepro.regress.conditions import ConditionRunner, describe_source
from vtrepro.regress.context import RunContext
from vtrepro.regress.cost import encoding_cost, recipe_of_trained_folder
from vtrepro.regress.gap import MODEL_PINNED, GapBlock, gap_rows, model_rows, record_gap
from vtrepro.regress.results_folder import format_table, judged, tally, write_report
from vtrepro.regress.sources import check_encoded, vector_sources
from vtrepro.regress.spec import Condition, DatasetRun, EncodedVectors, Spec, load_spec, record_observed
from vtrepro.regress.spec_rehearsal import rehearsal_spec
from vtrepro.report.results import (
    NOT_OK,
    STATUS_ERROR,
    STATUS_FAIL,
    STATUS_MEASURED,
    STATUS_OK,
    STATUS_OKISH,
    STATUS_UNPINNED,
)
from vtrepro.training.plan import DEFAULT_GPU_TFLOPS, estimate_cost
from vtrepro.training.recipe import load_recipe
from vtrepro.training.rehearsal import STANDINS_NAME, Rehearsal, describe_rehearsal, write_rehearsal_record
from vtrepro.training.stages import Stage

logger = logging.getLogger(__name__)


def selected_runs(spec: Spec, datasets: str | None) -> Iterable[tuple[Condition, DatasetRun]]:
    wanted = None
    if datasets:
        wanted = [name.strip() for name in datasets.split(",") if name.strip()]
        known = {dataset.name for condition in spec.conditions for dataset in condition.datasets}
        known |= set(spec.gap.datasets if spec.gap else ())
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise VtreproError(
                f"--datasets names {', '.join(unknown)}, which {spec.path} does not list; choose from {', '.join(sorted(known))}"
            )
    for condition in spec.conditions:
        for dataset in condition.datasets:
            if wanted is None or dataset.name in wanted:
                yield condition, dataset


def _training_plan(recipe_name: str, train_root: Path) -> str:
    recipe = load_recipe(recipe_name)
    final = train_root / recipe.name / "final"
    state = "trained" if final.is_dir() else f"to train first: {recipe.training.steps} steps"
    return f"model {final} from recipe {recipe.path} ({state})"


def describe_plan(spec: Spec, selected: list[tuple[Condition, DatasetRun]], context: RunContext,
                  cost: bool = True) -> str:
    """What a run would do, whether each model and dataset is available here, and (``cost``) its encoding cost."""
    lines = [f"{spec.path}: {len(selected)} run(s), metrics {', '.join(spec.metrics)}, top {spec.k}"]
    problems: dict[str, str] = {}
    for condition, dataset in selected:
        if condition.retrieval == "bm25":
            what = f"BM25 k1={condition.bm25.k1} b={condition.bm25.b}"
        elif dataset.encoded:
            what = f"encoded vectors {dataset.encoded.corpus} and {dataset.encoded.queries}"
        elif condition.train:
            what = _training_plan(condition.train, context.train_root)
        else:
            base = str(condition.model)
            where, problem = model_availability(base, context.model_dir)
            if problem:
                problems[base] = problem
            what = (f"model {base} ({where})" + describe_source(condition, context.output / spec.name)
                    + "".join(_describe_stage(stage) for stage in condition.stages))
        local = check_dataset_split(dataset.name, dataset.split, context.data_dir)  # what the real run checks first
        pinned = sum(value is not None for value in dataset.scores.values())
        lines.append(
            f"  {condition.name} / {dataset.name} [{dataset.split}]: {what}; data "
            f"{'local' if local else 'to download'}; {pinned} pinned score(s), {len(dataset.reference)} published"
        )
    if spec.gap is not None:
        lines.append(describe_gap(spec.gap, gap_datasets(spec, context.datasets), context))
    lines += [f"missing: {problem}" for problem in problems.values()]
    lines += encoding_cost(spec, selected, context.model_dir) if cost else []
    return "\n".join(lines)


def _local_dataset(name: str, data_dir: str | None) -> Path | None:
    """The folder of dataset ``name`` when it is here (a dataset still to download is not yet an input)."""
    try:
        return load_dataset(name, data_dir, download=False).path
    except VtreproError:
        return None


def run_inputs(spec: Spec, selected: list[tuple[Condition, DatasetRun]], context: RunContext) -> list[Path | str | None]:
    """The files and folders a regression reads: the spec, ``--vectors``/``--reference-vectors``, the
    datasets, each condition's encoded vectors, local model folder and training recipe."""
    inputs: list[Path | str | None] = [spec.path, context.vectors, context.reference_vectors]
    for condition, dataset in selected:
        inputs.append(_local_dataset(dataset.name, context.data_dir))
        if dataset.encoded:
            inputs += [dataset.encoded.corpus, dataset.encoded.queries]
        if condition.model:
            inputs.append(resolve_model(condition.model, context.model_dir))
    inputs += [load_recipe(recipe).path for recipe in _trained_recipes(selected)]
    return inputs


def _trained_recipes(selected: list[tuple[Condition, DatasetRun]]) -> list[str]:
    """The recipes the selected conditions train, each once (a condition is selected once per dataset)."""
    return list(dict.fromkeys(condition.train for condition, _ in selected if condition.train))


def check_outputs(spec: Spec, selected: list[tuple[Condition, DatasetRun]], context: RunContext) -> Path:
    """The run's folder ``<output>/<spec>``, checked before any work: it and the other folders regress writes
    under ``--runs`` (the bundle cache, the training root) keep apart from every input
    (:func:`vtrepro.core.io.check_output`), and every artifact folder the spec's names make stays inside
    its root, links followed."""
    out_dir = check_within(context.output / spec.name, context.output)
    folders = [out_dir]
    if context.vectors or context.reference_vectors:
        folders.append(context.bundle_cache)
    train_root = context.train_root
    trained = {load_recipe(recipe).name for recipe in _trained_recipes(selected)}
    folders += [train_root] if trained else []
    inputs = run_inputs(spec, selected, context)
    for folder in folders:
        check_output(folder, inputs, kind="folder")
    for condition, dataset in selected:
        check_within(out_dir / condition.name / dataset.name, out_dir)
    for recipe_name in trained:
        check_within(train_root / recipe_name, train_root)
    return out_dir


def _describe_stage(stage: Stage) -> str:
    options = stage.options.to_dict()
    if stage.name == "transfer":
        leaveout = options["leaveout"]
        held_out = f" after leaving out {leaveout['fraction']:.0%} of its tokens" if leaveout else ""
        overrides = "".join(f", {name} {options[name]}" for name in ("matching", "keep_norm", "bias_statistics",
                                                                   "target_norm") if options[name] is not None)
        return f", transferred ({options['preset']} preset, {options['init']}{overrides}){held_out}"
    return f", calibrated on {options['dataset'] or options['corpus']}"


def _remote_code_askers(spec: Spec) -> list[str]:
    """The conditions of ``spec`` (directly or through their training recipe) that ask for model code to run."""
    return [f"condition '{condition.name}'" for condition in spec.conditions
            if condition.trust_remote_code or (condition.train and load_recipe(condition.train).trust_remote_code)]


def run_regression(spec: Spec, context: RunContext, dry_run: bool = False,
                   rehearsal: tuple[Rehearsal, list[str]] | None = None) -> int:
    """Run ``spec`` as ``context`` says (``dry_run``: validate and print the plan; ``rehearsal``: the stand-ins
    and the real run's cost of a ``--rehearse`` run, from :func:`rehearse_spec`): every selected condition and
    dataset, compared with the pins and reported; the exit status."""
    selected = list(selected_runs(spec, context.datasets))
    grant_remote_code(spec.path, _remote_code_askers(spec), context.trust_remote_code)
    out_dir = check_outputs(spec, selected, context)
    if context.record:
        check_replaceable(spec.path)
    if dry_run:
        print(describe_plan(spec, selected, context, cost=rehearsal is None))  # a rehearsal printed the real cost
        return EXIT_OK
    datasets = {}
    for condition, dataset_run in selected:  # fail on missing data or a bad training recipe before any work
        if dataset_run.name not in datasets:
            datasets[dataset_run.name] = load_dataset(dataset_run.name, context.data_dir)
        datasets[dataset_run.name].queries(dataset_run.split)  # reads and checks the qrels and the queries
        if condition.train:
            load_recipe(condition.train)
    cache = context.bundle_cache
    reset_full_reads()  # each condition's reads of its vectors are logged, counted from here
    sources = vector_sources(context.vectors, selected, cache) if context.vectors else {}
    references = vector_sources(context.reference_vectors, selected, cache) if context.reference_vectors else {}
    for condition, dataset_run in selected:
        for encoded in (sources.get((condition.name, dataset_run.name)), dataset_run.encoded):
            if encoded is not None:
                check_encoded(encoded, out_dir / condition.name / dataset_run.name)
    start_jvm()

    outcome = run_all(spec, selected, out_dir, context, sources, references, datasets)
    if spec.gap is not None:
        run_gap(spec, out_dir, context, outcome)
    if outcome.model_gap:
        write_model_gap(out_dir, outcome.model_gap)
    rows, record_failure = outcome.rows, None
    if context.record and not outcome.errors:
        record_failure = _record(spec, outcome)
        if record_failure is None:
            rows = recorded_rows(rows)
    if rehearsal is not None:
        rows = rehearsed_rows(rows)
    if context.strict:
        rows = strict_rows(rows)
    write_report(spec, rows, outcome.timings, out_dir, list(context.command), outcome.distributions,
                 train_root=context.train_root)
    if rehearsal is not None:
        write_rehearsal_record(out_dir, *rehearsal)
    print(format_table(rows))
    failed = [row for row in rows if row.status in NOT_OK]
    okish = sum(row.status == STATUS_OKISH for row in rows)
    ok = len(judged(rows)) - len(failed) - okish
    print(f"\n{ok} OK, {okish} OKISH, {len(failed)} not OK; report: {out_dir / 'report.md'} and report.html")
    if outcome.errors:
        others = f"; {len(outcome.errors) - 1} more run(s) failed" if len(outcome.errors) > 1 else ""
        nothing_recorded = "; nothing was recorded into the spec" if context.record else ""
        raise VtreproError(f"{outcome.errors[0]}{others} (every run's outcome is in {out_dir / 'report.md'}"
                           f"{nothing_recorded})")
    if record_failure is not None:
        raise VtreproError(f"{spec.path}: recording the observed values failed ({record_failure}); the spec is "
                           f"unchanged and every run's outcome is in {out_dir / 'report.md'}: fix that and rerun --record")
    return EXIT_MISMATCH if failed else EXIT_OK



def rehearse_spec(spec: Spec, runs: Path, datasets: str | None, model_dir: str | None,
                  refused: dict[str, bool]) -> tuple[Spec, tuple[Rehearsal, list[str]]]:
    """The rehearsal of ``spec`` (:mod:`vtrepro.regress.spec_rehearsal`) under ``runs``: its rewritten spec, loaded,
    and the rehearsal with the real run's cost (for ``rehearsal.json``); the run then reads the rehearsal's
    ``data_dir`` and ``model_dir``. ``refused``: the flags given that have no meaning on stand-ins (flag ->
    given). What was replaced and the real run's cost are printed first."""
    for flag, given in refused.items():
        if given:
            raise VtreproError(f"--rehearse runs on stand-ins, so {flag} has no meaning with it; drop one of them")
    rehearsal = Rehearsal(runs / STANDINS_NAME)
    cost = encoding_cost(spec, list(selected_runs(spec, datasets)), model_dir)
    trained = dict.fromkeys(condition.train or recipe_of_trained_folder(condition.model or "")
                            for condition in spec.conditions)
    cost += [f"training {name}: {estimate_cost(load_recipe(name), model_dir, DEFAULT_GPU_TFLOPS)[-1].strip()}"
             for name in trained if name]
    rehearsed = load_spec(rehearsal_spec(spec, rehearsal))
    print(describe_rehearsal(rehearsal, cost))
    return rehearsed, (rehearsal, cost)


def recorded_rows(rows: list[ResultRow]) -> list[ResultRow]:
    """``--record``: every pinned figure's row as it reads once its observed value is the expected one."""
    return [row if row.kind == "reference" or row.status == STATUS_MEASURED else
            ResultRow(**{**asdict(row), "expected": row.observed, "status": STATUS_OK, "tier": TIER_FIXED, "note": ""})
            for row in rows]


def rehearsed_rows(rows: list[ResultRow]) -> list[ResultRow]:
    """``--rehearse``: stand-ins' figures are computed to prove their path runs, never judged."""
    return [ResultRow(**{**asdict(row), "status": STATUS_MEASURED, "note": "rehearsal"})
            if row.status == STATUS_UNPINNED else row for row in rows]


def strict_rows(rows: list[ResultRow]) -> list[ResultRow]:
    """``--strict``: OKISH (within tolerance, not exact) counts as FAIL."""
    return [ResultRow(**{**asdict(row), "status": STATUS_FAIL}) if row.status == STATUS_OKISH else row for row in rows]


def _record(spec: Spec, outcome: Outcome) -> str | None:
    """Write the observed values into the spec; what went wrong, or None. A failure here comes after every
    run, so it is reported after their results and report are written, never instead of them."""
    try:
        if outcome.recorded or spec.conditions:
            record_observed(spec.path, outcome.recorded)
        if outcome.gap is not None:
            record_gap(spec.path, outcome.gap)
    except (VtreproError, OSError) as error:
        return os_error_message(error) if isinstance(error, OSError) else " ".join(str(error).split())
    logger.info(f"recorded observed values into {spec.path}")
    return None


@dataclass
class Outcome:
    """What a regression run produced so far: rows, per-run seconds, observed values, failed runs."""

    rows: list[ResultRow] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    recorded: dict[tuple[str, str], dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    distributions: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # "condition/dataset" -> ...
    gap: dict[str, dict] | None = None  # the figures of the spec's vocabulary-gap study, by part
    model_gap: list[dict] = field(default_factory=list)  # the vocabulary gap in the vectors of gap: true conditions


def _model_gap(model: str, encoded: EncodedVectors, context: RunContext, name: str) -> dict:
    """The vocabulary gap in a condition's vectors (:func:`vtrepro.gap.model.model_figures`), read with its model's
    tokenizer."""
    from vtrepro.gap.model import model_figures
    from vtrepro.gap.vocabularies import load_vocabulary

    return model_figures(encoded.corpus, load_vocabulary(model, context.model_dir), name)


def write_model_gap(out_dir: Path, figures: list[dict]) -> None:
    """``<out_dir>/gap/model.json`` and ``model.md``: what the report's vocabulary-gap section shows of the models."""
    from vtrepro.core.io import atomic_write, write_json
    from vtrepro.gap.study import model_markdown

    (out_dir / "gap").mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "gap" / "model.json", {"runs": figures})
    with atomic_write(out_dir / "gap" / "model.md") as handle:
        handle.write(model_markdown({"runs": figures}))


def gap_datasets(spec: Spec, wanted: str | None) -> list[str]:
    """The gap study's datasets, those of ``--datasets`` alone when it is given."""
    names = spec.gap.datasets if spec.gap else ()
    chosen = {name.strip() for name in wanted.split(",")} if wanted else None
    return [name for name in names if chosen is None or name in chosen]


def describe_gap(block: GapBlock, datasets: list[str], context: RunContext) -> str:
    return (f"  vocabulary gap: census of {', '.join(block.tokenizers)}; corpus, BM25 and integrity of "
            f"{', '.join(block.corpus_tokenizers)} on {', '.join(datasets) or 'no dataset'} (CPU, minutes)")


def run_gap(spec: Spec, out_dir: Path, context: RunContext, outcome: Outcome) -> None:
    """Run the spec's vocabulary-gap study into ``<out_dir>/gap/`` (replaced) and judge its pins; a failure on bad
    input is an ERROR row, as a run's is."""
    from vtrepro.core.checkpoints import staged_folder
    from vtrepro.gap.study import Study, run_study
    from vtrepro.gap.vocabularies import load_vocabulary

    assert spec.gap is not None
    block = spec.gap
    logger.info("[vocabulary gap] running")
    try:
        names = list(dict.fromkeys([*block.tokenizers, *block.corpus_tokenizers]))
        vocabularies = {name: load_vocabulary(name, context.model_dir) for name in names}
        datasets = [load_dataset(name, context.data_dir) for name in gap_datasets(spec, context.datasets)]
        with staged_folder(out_dir / "gap", replace=True) as staging:
            results = run_study(Study([vocabularies[name] for name in block.tokenizers], parts=("census",)), staging)
            results.update(run_study(Study([vocabularies[name] for name in block.corpus_tokenizers], datasets,
                                           parts=("corpus", "bm25", "integrity"), threads=context.threads), staging))
    except (VtreproError, OSError) as error:
        message = os_error_message(error) if isinstance(error, OSError) else " ".join(str(error).split())
        outcome.errors.append(f"vocabulary gap: {message}")
        outcome.rows.append(ResultRow("gap", "study", "run", "error", None, None, STATUS_ERROR, "", message))
        return
    outcome.gap = results
    outcome.rows += gap_rows(block, results)


def _agreement(condition: Condition, dataset_run: DatasetRun, observation: Observation,
               encodings: dict[tuple[str, str], EncodedVectors]) -> list[ResultRow]:
    """Keep this run's vectors for later conditions; with ``agrees_with``, measure them against that
    condition's on this dataset (a note when it has none: it failed or was not selected)."""
    if observation.encoded is None:
        return []
    encodings[(condition.name, dataset_run.name)] = observation.encoded
    if condition.agrees_with is None:
        return []
    other = encodings.get((condition.agrees_with, dataset_run.name))
    if other is None:
        logger.warning(f"[{condition.name} / {dataset_run.name}] no vectors of '{condition.agrees_with}' on this "
                       "dataset to measure against (it failed or was not selected)")
        return []
    return agreement_rows(condition, dataset_run, vector_agreement(observation.encoded, other))


def run_all(spec: Spec, selected: list[tuple[Condition, DatasetRun]], out_dir: Path, context: RunContext,
            sources: dict, references: dict, datasets: dict) -> Outcome:
    """Run every selected (condition, dataset) with the settings of ``context`` (``sources`` and
    ``references``: the given vectors by (condition, dataset) name; ``datasets``: each loaded dataset by
    name). A run that fails on bad input or the file system is
    recorded as an ERROR row and the others go on; when anything else stops the loop (an interrupt,
    an internal error) the report of what finished is written first."""
    outcome = Outcome()
    chosen = {(condition.name, dataset_run.name) for condition, dataset_run in selected}
    encodings: dict[tuple[str, str], EncodedVectors] = {}  # the vectors each impact run searched
    try:
        for condition in spec.conditions:
            runner = ConditionRunner(condition, spec, out_dir, context)
            observations: dict[str, Observation] = {}
            for dataset_run in condition.datasets:
                key = (condition.name, dataset_run.name)
                if key not in chosen:
                    continue
                logger.info(f"[{condition.name} / {dataset_run.name}] running")
                try:
                    observation = runner.run(dataset_run, datasets[dataset_run.name], sources.get(key),
                                             references.get(key))
                    agreement = _agreement(condition, dataset_run, observation, encodings)
                except (VtreproError, OSError) as error:
                    message = os_error_message(error) if isinstance(error, OSError) else " ".join(str(error).split())
                    outcome.errors.append(f"{condition.name}/{dataset_run.name}: {message}")
                    outcome.rows.append(ResultRow(condition.name, dataset_run.name, "run", "error", None, None,
                                                  STATUS_ERROR, "", message))
                    logger.error(f"[{condition.name} / {dataset_run.name}] failed: {message}")
                    continue
                observations[dataset_run.name] = observation
                if observation.encoded is not None:
                    logger.debug(f"[{condition.name} / {dataset_run.name}] full reads of the vectors (the index "
                                 "build's included): "
                                 f"documents {full_reads(vector_files(observation.encoded.corpus))}, "
                                 f"queries {full_reads([observation.encoded.queries])}")
                outcome.timings[f"{condition.name}/{dataset_run.name}"] = observation.seconds
                if observation.efficiency.distributions:
                    outcome.distributions[f"{condition.name}/{dataset_run.name}"] = observation.efficiency.distributions
                rows = compare(condition, dataset_run, observation) + agreement
                if condition.gap and observation.encoded is not None:
                    figures = _model_gap(runner.model, observation.encoded, context, f"{condition.name}/{dataset_run.name}")
                    outcome.model_gap.append(figures)
                    flat = flat_figures(figures)
                    rows += model_rows(condition.name, dataset_run.name, dataset_run.gap, flat,
                                       tier_of(dataset_run, observation))
                    gap_pins = {name: flat[name] for name in MODEL_PINNED if flat.get(name) is not None}
                else:
                    gap_pins = {}
                outcome.rows += rows
                logger.info(f"[{condition.name} / {dataset_run.name}] done in {observation.seconds} s: {tally(rows)}")
                outcome.recorded[key] = {
                    "scores": observation.scores, "index": observation.index,
                    "vectors": {name: summary.sha256 for name, summary in observation.vectors.items()},
                    "gap": gap_pins,
                }
            outcome.rows += compare_averages(condition, observations)
    except BaseException:  # an interrupt or an internal error: keep what finished, then report the failure
        write_report(spec, outcome.rows, outcome.timings, out_dir, list(context.command), outcome.distributions,
                     interrupted=True, train_root=context.train_root)
        raise
    return outcome
