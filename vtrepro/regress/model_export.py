"""``python -m vtrepro export model``: a model as a folder ``sentence_transformers.SparseEncoder(DIR)`` loads as
it is, with a model card.

``export model --model M --output DIR`` writes the masked LM (safetensors), its tokenizer and the
sentence-transformers modules (:mod:`vtrepro.model.sentence_transformers`); an inference-free model
(``--idf idf.json``, the model folder's ``idf.json``, or a spec condition with ``query_encoder: idf``) gets
its IDF query side. ``--spec S`` takes the lengths and quantization of the spec's condition for the model
(``--condition`` names it) and puts its pinned figures into the card; ``--runs DIR`` adds the figures that
run observed (``DIR/<spec>/results.json``). The card (``README.md``) says how the model was made, its
figures, how vtrepro quantizes and escapes, and how to use it in vtrepro, sentence-transformers, Pyserini
and OpenSearch; every value it quotes is escaped for markdown.
"""
from __future__ import annotations

import importlib.metadata as metadata
import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_output
from vtrepro.core.markdown import fenced, md
from vtrepro.encode.vectors import Quantization
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.folder_checks import check_model_file
from vtrepro.model.idf import IDF_NAME, read_idf_table
from vtrepro.model.loading import find_model, resolve_model
from vtrepro.model.sentence_transformers import ExportedModel, write_sparse_encoder
from vtrepro.regress.spec import Condition, Spec, load_spec
from vtrepro.report.results import RESULTS_NAME, load_results

MAX_REPORT_ENTRIES = 12
"""The most values of one vtrepro report the card quotes (its scalars, in file order)."""


@dataclass
class CardFacts:
    """What the card says beyond the exported model itself: where the figures come from."""

    name: str
    output: Path
    quantization: Quantization
    spec: Spec | None = None
    condition: Condition | None = None
    observed: dict[tuple[str, str], Any] = field(default_factory=dict)  # (dataset, metric) -> observed value


@dataclass(frozen=True)
class ModelExport:
    """What ``export model`` exports, where, and from which spec, condition and runs (``--flag`` -> field)."""

    model: str
    output: Path
    model_dir: str | None = None
    spec: str | None = None
    condition: str | None = None
    runs: Path | None = None
    idf: Path | None = None
    max_length_doc: int | None = None
    max_length_query: int | None = None
    trust_remote_code: bool = False


def export_model(args: ModelExport) -> int:
    """Export ``args.model`` to ``args.output``; prints one result line."""
    found = find_model(args.model, args.model_dir)
    spec = load_spec(args.spec) if args.spec else None
    condition = _condition(spec, args.condition, args.model, args.model_dir) if spec is not None else None
    idf_path = _idf_path(args.idf, found.source, condition)
    results_folder = args.runs / spec.name if spec is not None and args.runs is not None else None
    check_output(args.output, [found.source, spec.path if spec else None, results_folder, idf_path], kind="folder")
    encoder = condition.encoder if condition is not None else EncoderOptions()
    encoder = encoder.replace(**{key: value for key, value in (("max_length_doc", args.max_length_doc),
                                                                ("max_length_query", args.max_length_query))
                                 if value is not None})
    facts = CardFacts(name=Path(args.output).name, output=args.output, spec=spec, condition=condition,
                      quantization=condition.quantization if condition is not None else Quantization(),
                      observed=_observed(results_folder, condition))
    exported = write_sparse_encoder(args.model, args.output, encoder, idf=_read_idf(idf_path),
                                    card=lambda exported: model_card(exported, facts), model_dir=args.model_dir,
                                    trust_remote_code=args.trust_remote_code)
    kind = "inference-free SparseEncoder (IDF queries)" if exported.inference_free else "SparseEncoder"
    print(f"{args.model} -> {args.output} (sentence-transformers {kind}, {exported.vocabulary_size} dimensions)")
    return 0


def _condition(spec: Spec, name: str | None, model: str, model_dir: str | None) -> Condition:
    """The spec's impact condition named ``name``, or the only one whose model is ``model``."""
    impact = [condition for condition in spec.conditions if condition.retrieval == "impact"]
    names = ", ".join(condition.name for condition in impact) or "none"
    if name is not None:
        chosen = [condition for condition in impact if condition.name == name]
        if not chosen:
            raise VtreproError(f"{spec.path}: no impact condition {name!r}; its impact conditions: {names}")
        return chosen[0]
    wanted = resolve_model(model, model_dir)
    chosen = [condition for condition in impact if condition.model is not None
              and (condition.model == model or resolve_model(condition.model, model_dir) == wanted)]
    if len(chosen) != 1:
        how = "none of" if not chosen else "several of"
        raise VtreproError(f"{spec.path}: {how} its impact conditions ({names}) use model {model}; "
                           "name one with --condition")
    return chosen[0]


def _idf_path(given: Path | None, source: str, condition: Condition | None) -> Path | None:
    """The IDF table of an inference-free export: ``--idf``, else the model folder's (needed when the spec's
    condition is inference-free), else none."""
    if given is not None:
        return given
    beside = Path(source) / IDF_NAME
    if Path(source).is_dir() and check_model_file(Path(source), IDF_NAME):
        return beside
    if condition is not None and condition.query_encoder == "idf":
        raise VtreproError(f"condition {condition.name} is inference-free (query_encoder: idf) but {source} has no "
                           f"{IDF_NAME}; pass its IDF table with --idf")
    return None


def _read_idf(path: Path | None) -> dict[str, float] | None:
    return None if path is None else read_idf_table(path)


def _observed(folder: Path | None, condition: Condition | None) -> dict[tuple[str, str], Any]:
    """(dataset, metric) -> the score a regression observed for ``condition`` in ``folder``."""
    if folder is None or condition is None:
        return {}
    if not (folder / RESULTS_NAME).is_file():
        raise VtreproError(f"{folder / RESULTS_NAME}: missing; run 'python -m vtrepro regress' with this --runs "
                           "first, or leave out --runs")
    rows = load_results(folder).rows
    rows = rows[(rows["condition"] == condition.name) & (rows["kind"] == "score")]
    return {(row.dataset, row.metric): row.observed for row in rows.itertuples()}


def model_card(exported: ExportedModel, facts: CardFacts) -> str:
    """The ``README.md`` of an exported model."""
    sections = [_front_matter(), f"# {md(facts.name)}\n",
                f"A SPLADE sparse encoder exported by vtrepro {md(metadata.version('vtrepro'))} for sentence-transformers "
                f"(`SparseEncoder`), from {md(exported.source)}.\n",
                _made(exported), _figures(facts), _vectors(exported, facts), _usage(exported, facts)]
    return "\n".join(sections)


def _front_matter() -> str:
    return ("---\nlibrary_name: sentence-transformers\npipeline_tag: feature-extraction\ntags:\n- sentence-transformers\n"
            "- sparse-encoder\n- sparse\n- splade\n- vtrepro\n---\n")


def _made(exported: ExportedModel) -> str:
    options = exported.options
    lines = ["## How it was made\n",
             f"- Source model: {md(exported.source)} ({md(exported.architecture)}); weights fingerprint "
             f"(SHA-256 over parameter names and bytes): {md(exported.fingerprint)}",
             f"- Output: {exported.vocabulary_size} dimensions, one per MLM vocabulary row; "
             f"max length {options.max_length_doc} tokens per document, {options.max_length_query} per query",
             "- Queries: " + ("inference-free, each distinct query token weighted by its IDF (`idf.json`)"
                              if exported.inference_free else "encoded by the same SPLADE model")]
    for name, report in exported.reports.items():
        scalars = [(key, value) for key, value in report.items()
                   if isinstance(value, (str, int, float, bool)) or value is None][:MAX_REPORT_ENTRIES]
        quoted = "; ".join(f"{md(key)}: {md(value)}" for key, value in scalars) or "no scalar values"
        lines.append(f"- vtrepro report {md(name)}: {quoted}")
    if not exported.reports:
        lines.append("- No vtrepro report (transfer, calibration, MLM or training) lay in the model folder")
    return "\n".join(lines) + "\n"


def _figures(facts: CardFacts) -> str:
    if facts.spec is None or facts.condition is None:
        return ("## Regression figures\n\nNone given: `python -m vtrepro export model --spec SPEC` puts the pinned "
                "figures of the spec's condition for this model here.\n")
    header = (f"## Regression figures\n\nPinned in spec {md(facts.spec.name)}, condition {md(facts.condition.name)} "
              f"(quantization x{facts.quantization.scale:g}, {md(facts.quantization.rounding)}); "
              "observed: the regression run given with `--runs`.\n\n"
              "| dataset | split | metric | pinned | observed |\n|---|---|---|---|---|")
    rows = [f"| {md(run.name)} | {md(run.split)} | {md(metric)} | {_number(value)} | "
            f"{_number(facts.observed.get((run.name, metric)))} |"
            for run in facts.condition.datasets for metric, value in run.scores.items()]
    return "\n".join([header, *rows]) + "\n"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-" if value is None else md(value)
    return f"{value:.4f}"


def _vectors(exported: ExportedModel, facts: CardFacts) -> str:
    quantization = facts.quantization
    return "\n".join([
        "## Vectors: quantization and escaping\n",
        "- Weights: log(1 + relu(MLM logits)), max over the text's tokens (special tokens included as positions).",
        f"- vtrepro leaves out the output dimensions {', '.join(map(str, exported.special_ids))} "
        "(special tokens and rows beyond the tokenizer); sentence-transformers returns them when they activate.",
        f"- Impacts: round(weight x {quantization.scale:g}) computed in float64, rounding {md(quantization.rounding)} "
        "(half-even: numpy.rint); zero impacts dropped.",
        "- Terms: the tokenizer's tokens, `%` written `%25`, whitespace and control characters percent-escaped "
        "as UTF-8 bytes (`%XX`), so Anserini keeps every term whole.",
        "", "These steps in Python, on sentence-transformers' output (vtrepro's tests run this very code):", "",
        fenced(_python_usage(exported, facts), "python")])


def _python_usage(exported: ExportedModel, facts: CardFacts) -> str:
    quantization = facts.quantization
    rounding = {"half-even": "np.rint(scaled)", "half-up": "np.floor(scaled + 0.5)", "truncate": "np.trunc(scaled)"}
    return f'''import unicodedata

import numpy as np
from sentence_transformers import SparseEncoder

model = SparseEncoder({json.dumps(str(facts.output))})
dropped = {json.dumps(list(exported.special_ids))}


def escape(term):
    return "".join("".join(f"%{{byte:02X}}" for byte in char.encode("utf-8"))
                   if char == "%" or char.isspace() or unicodedata.category(char).startswith("C") else char
                   for char in term)


def impact_vectors(texts, task="document"):
    encode = model.encode_query if task == "query" else model.encode_document
    weights = encode(texts, convert_to_tensor=True).to_dense()
    weights[:, dropped] = 0
    tokens = model.tokenizer.convert_ids_to_tokens(list(range(weights.shape[1])))
    vectors = []
    for row in weights:
        ids = row.nonzero().squeeze(1).tolist()
        scaled = row[ids].double().numpy() * {quantization.scale!r}
        impacts = {rounding[quantization.rounding]}.astype(np.int64)
        vectors.append({{escape(tokens[i]): int(impact) for i, impact in zip(ids, impacts) if impact > 0}})
    return vectors
'''


def _usage(exported: ExportedModel, facts: CardFacts) -> str:
    folder = shlex.quote(str(facts.output))
    model = folder if not exported.inference_free else shlex.quote(str(Path(facts.output) / exported.model_folder))
    query_note = ("queries weighted by `idf.json` (a spec condition with `query_encoder: idf` and this `--model`)"
                  if exported.inference_free else "queries encoded by the model")
    return "\n".join([
        "## Use\n", "### vtrepro\n",
        f"The masked LM lies in {'`' + exported.model_folder + '/`' if exported.model_folder else 'the folder root'}; "
        f"encode with it as with any model, {query_note}:\n",
        fenced(f"python -m vtrepro encode --model {model} --dataset scifact --output encoded/ "
               f"--max-length-doc {exported.options.max_length_doc} --max-length-query {exported.options.max_length_query}",
               "bash"),
        "### sentence-transformers\n",
        "`SparseEncoder(folder)` loads it as it is (sentence-transformers 6; `encode_document` and `encode_query` "
        "truncate at the lengths above). Its float weights become vtrepro's integer impacts as in the code above.\n",
        "### Pyserini\n",
        "Index vtrepro's JSON vectors (or the impacts above) as a Lucene impact index and search it with "
        "`LuceneImpactSearcher` on vtrepro's quantized query vectors. Pyserini's own `SpladeQueryEncoder` quantizes "
        "by 51.2, not by the scale above, and leaves `%` unescaped, so its queries rank differently and miss escaped "
        "terms.\n",
        "### OpenSearch\n",
        "Store each document's `{term: weight}` (unescaped tokens; the float weights, or the impacts divided by the "
        "scale) in a `rank_features` field and search it with the `neural_sparse` query's `query_tokens`, built from "
        + ("`idf.json` at the root (the token weights of an inference-free model, as OpenSearch's inference-free "
           "models ship them)." if exported.inference_free else "the query's vector computed the same way."),
        ""])
