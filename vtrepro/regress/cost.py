"""What a spec's encoding would cost: FLOPs and GPU-hours per condition, for ``regress --dry-run``.

The estimate is an upper bound in the convention of a recipe's ``train --dry-run``
(:mod:`vtrepro.training.plan`): every document at the condition's ``max_length_doc`` tokens, a forward
pass of 2 FLOPs per parameter used in matrix products per token (a third of training's 6), attention not
counted, at :data:`~vtrepro.training.plan.DEFAULT_GPU_TFLOPS` sustained (an assumption). Queries are not
counted: an inference-free condition (``query_encoder: idf``) runs no model on them, and a SPLADE query
side is a few thousand short texts beside millions of documents. Indexing and search run on CPUs.
"""
from __future__ import annotations

import re
from pathlib import Path

from vtrepro.core.shipped import RECIPES_DIR
from vtrepro.data.download import HUB_DATASETS
from vtrepro.regress.spec import Condition, DatasetRun, Spec
from vtrepro.training.plan import DEFAULT_GPU_TFLOPS, flops_per_token, format_flops, model_architecture
from vtrepro.training.recipe import load_recipe

BEIR_CORPUS_DOCUMENTS: dict[str, int] = {
    "trec-covid": 171_332, "nfcorpus": 3_633, "nq": 2_681_468, "hotpotqa": 5_233_329, "fiqa": 57_638,
    "arguana": 8_674, "webis-touche2020": 382_545, "dbpedia-entity": 4_635_922, "scidocs": 25_657,
    "fever": 5_416_568, "climate-fever": 5_416_593, "scifact": 5_183, "quora": 522_931,
}
"""Documents in each BEIR-13 corpus (``corpus.jsonl`` lines; BEIR, Thakur et al. 2021, Table 1): 24.6M in all,
the figure docs/scale.md uses."""

def corpus_documents(dataset: str) -> int | None:
    """Documents in a known dataset's corpus (BEIR-13, or a Hub retrieval set such as ChemTEB's), or None."""
    if dataset in BEIR_CORPUS_DOCUMENTS:
        return BEIR_CORPUS_DOCUMENTS[dataset]
    return HUB_DATASETS[dataset].documents if dataset in HUB_DATASETS else None


RELEASED_PARAMETERS: dict[str, int] = {
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-distill": 67_000_000,
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-gte": 133_000_000,
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-distill": 67_000_000,
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-mini": 23_000_000,
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v1": 133_000_000,
}
"""Parameters of released Hub models whose shape is not known offline (custom code, or no local config), as
their publishers state them (the "Model Parameters" row of the OpenSearch v3 blog and of the model cards' "Select
the model" table; see regressions/published/opensearch_neural_sparse*.yaml)."""


def forward_flops_per_token(model: str, model_dir: str | None) -> float | None:
    """Forward-pass FLOPs per token of ``model`` (a folder, a Hub id known offline, or a released model with
    stated parameters), or None when its size is not known here."""
    config = model_architecture(model, model_dir)
    if config is not None:
        return flops_per_token(config)[0] / 3
    if model in RELEASED_PARAMETERS:
        return 2.0 * RELEASED_PARAMETERS[model]
    return None


TRAINED_FOLDER = re.compile(r"^(?:\./)?runs/train/(?P<recipe>[A-Za-z0-9_.-]+)/final/?$")
"""A condition model that is a shipped recipe's training output, as the specs name it."""


def recipe_of_trained_folder(model: str) -> str | None:
    """The shipped recipe whose run folder ``model`` names (``runs/train/<recipe>/final``), or None."""
    match = TRAINED_FOLDER.match(model)
    if match and (RECIPES_DIR / f"{match['recipe']}.yaml").is_file():
        return match["recipe"]
    return None


def _encoded_model(condition: Condition) -> str | None:
    """The model whose shape encodes the documents: the condition's own, or its recipe's starting model (also
    for a shipped recipe's run folder not trained yet)."""
    recipe = condition.train or (recipe_of_trained_folder(condition.model) if condition.model else None)
    if recipe and not (condition.model and Path(condition.model).is_dir()):
        return load_recipe(recipe).model
    return condition.model


def encoding_cost(spec: Spec, selected: list[tuple[Condition, DatasetRun]], model_dir: str | None,
                  gpu_tflops: float = DEFAULT_GPU_TFLOPS) -> list[str]:
    """Lines estimating each impact condition's encoding FLOPs and GPU-hours over its selected datasets, and
    the total; BM25 conditions and pinned encoded vectors cost no GPU time."""
    lines, total = [], 0.0
    for condition in spec.conditions:
        runs = [dataset for chosen, dataset in selected if chosen is condition and not dataset.encoded]
        model = _encoded_model(condition)
        if condition.retrieval != "impact" or not runs or model is None:
            continue
        per_token = forward_flops_per_token(model, model_dir)
        sizes = {dataset.name: corpus_documents(dataset.name) for dataset in runs}
        unknown = [name for name, size in sizes.items() if size is None]
        documents = sum(size or 0 for size in sizes.values())
        length = condition.encoder.max_length_doc
        if per_token is None:
            lines.append(f"  {condition.name}: cost unknown (size of {model} not known offline; put it under "
                         "--model-dir for an estimate)")
            continue
        flop = per_token * documents * length
        total += flop
        missing = f"; not counted: {', '.join(unknown)} (corpus size not known)" if unknown else ""
        lines.append(f"  {condition.name}: {documents:,} documents x <= {length} tokens x "
                     f"{per_token / 1e9:.2f} GFLOP/token = {format_flops(flop)}, {_hours(flop, gpu_tflops)}{missing}")
    if not lines:
        return []
    head = (f"encoding cost (upper bound: every document at max_length_doc, attention not counted; "
            f"{gpu_tflops:g} TFLOP/s sustained, an assumption as in train --dry-run; training not included):")
    return [head, *lines, f"  total ~{format_flops(total)}, {_hours(total, gpu_tflops)}"]


def _hours(flop: float, gpu_tflops: float) -> str:
    hours = flop / (gpu_tflops * 1e12) / 3600
    return f"~{hours:.2f} GPU-hours" if hours >= 0.01 else "under 0.01 GPU-hours"
