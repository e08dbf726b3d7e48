"""The ``--dry-run`` plan: a recipe's stages with their equivalent commands, the training setup, the
availability of every input, and an estimate of parameters, FLOPs and GPU time."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vtrepro.model.loading import resolve_model
from vtrepro.model.text_lengths import check_text_lengths, position_limit, text_length_limit
from vtrepro.training.inputs import availability, required_inputs
from vtrepro.training.mlm import MlmOptions
from vtrepro.training.recipe import BeirData, MsmarcoData, PairsData, Recipe, TriplesData
from vtrepro.training.run_folder import stage_dir
from vtrepro.training.stages import Stage
from vtrepro.vocabulary.calibrate import CalibrationOptions
from vtrepro.vocabulary.transfer import TransferOptions

# torch and transformers are imported only for the cost estimate, on purpose: `train --help`, `regress --help`
# and `export --help` stay fast.

DEFAULT_GPU_TFLOPS = 150.0
# Offline stand-ins for the cost estimate of Hub models that are not local: transformers' default
# configs of these model types are documented as those checkpoints' architectures.
_ROBERTA = {"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1}
KNOWN_ARCHITECTURES: dict[str, tuple[str, dict[str, int]]] = {
    "answerdotai/ModernBERT-base": ("modernbert", {}), "bert-base-uncased": ("bert", {}),
    "google-bert/bert-base-uncased": ("bert", {}), "FacebookAI/roberta-base": ("roberta", _ROBERTA),
    "FacebookAI/roberta-large": ("roberta", {**_ROBERTA, "hidden_size": 1024, "num_hidden_layers": 24,
                                             "num_attention_heads": 16, "intermediate_size": 4096}),
    # The authors' MLM-adapted chemistry checkpoint (recipe chem_splade), not on the Hub: "a plain BERT MLM
    # checkpoint" (chem/train_chem.py:169 @6addf32); costed as BERT-base with bert-base-uncased's vocabulary.
    "mlm_model-1000-b3": ("bert", {}),
    # coCondenser (Gao & Callan 2022), the start of the authors' config_l0.yaml (recipe authors_l0): a BERT-base
    # further pre-trained from bert-base-uncased; its config.json is not read here, so costed as bert-base-uncased.
    "Luyu/co-condenser-marco": ("bert", {}),
}
"""Hub models whose shape the cost estimate knows offline: transformers' default config of the model type
with the published config.json's sizes."""


def model_architecture(name: str, model_dir) -> Any | None:
    """The config of a local model, or transformers' default config for a known Hub architecture."""
    from transformers import AutoConfig

    source = resolve_model(name, model_dir)
    if Path(source).is_dir():
        try:
            return AutoConfig.from_pretrained(source)
        except (OSError, ValueError):
            return None
    if name in KNOWN_ARCHITECTURES:
        model_type, sizes = KNOWN_ARCHITECTURES[name]
        return AutoConfig.for_model(model_type, **sizes)
    return None


def check_recipe_lengths(recipe: Recipe, model_dir) -> None:
    """Refuse a recipe whose tokens per text (training's, its mlm and calibrate stages') exceed what its model
    takes: from the model's local files, else from its known architecture (:data:`KNOWN_ARCHITECTURES`);
    nothing is refused for a model known neither way (the schema's bound holds)."""
    limit = text_length_limit(recipe.model, model_dir)
    config = model_architecture(recipe.model, model_dir) if limit is None else None
    if config is not None:
        limit = position_limit(config.to_dict())
    lengths = {f"training.{key}": getattr(recipe.training, key) for key in ("max_length_query", "max_length_doc")}
    lengths |= {f"stages[{index}].{stage.name}.max_length": stage.options.max_length
                for index, stage in enumerate(recipe.stages) if isinstance(stage.options, (MlmOptions, CalibrationOptions))}
    check_text_lengths(lengths, limit, recipe.model, f"{recipe.path}: ")


def flops_per_token(config: Any) -> tuple[float, int]:
    """(training FLOPs per token, parameters): 6 x the parameters used in matrix products, i.e. all but
    the input embedding table, whose rows are looked up (a tied decoder still multiplies by it)."""
    import torch
    from transformers import AutoModelForMaskedLM

    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    embeddings = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is embeddings
    return 6.0 * (parameters - (0 if tied else embeddings.numel())), parameters


def estimate_cost(recipe: Recipe, model_dir, gpu_tflops: float) -> list[str]:
    """Lines estimating parameters, FLOPs and GPU hours of the MLM stage and SPLADE training."""
    config = model_architecture(recipe.model, model_dir)
    if config is None:
        return [f"cost: unknown (no local config for {recipe.model}; put it under --model-dir for an estimate)"]
    for stage in recipe.stages:
        if isinstance(stage.options, TransferOptions):
            target = model_architecture(stage.options.target_tokenizer, model_dir)
            if target is None:
                return [f"cost: unknown (vocabulary size of {stage.options.target_tokenizer} not known offline)"]
            config.vocab_size, config.pad_token_id = target.vocab_size, target.pad_token_id
    per_token, parameters = flops_per_token(config)
    lines = [f"model: {config.model_type}, {parameters / 1e6:.1f}M parameters (vocabulary {config.vocab_size}, "
             f"hidden {config.hidden_size}); ~{per_token / 1e9:.2f} GFLOP per training token"]
    total = 0.0
    for stage in recipe.stages:
        options = stage.options
        if isinstance(options, MlmOptions):
            flop = per_token * options.steps * options.batch_size * options.max_length
            lines.append(f"  mlm: {options.steps} steps x {options.batch_size} x {options.max_length} tokens "
                         f"= {format_flops(flop)}")
            total += flop
        elif isinstance(options, CalibrationOptions):
            flop = per_token / 3 * min(options.docs, options.max_sample) * options.max_length
            lines.append(f"  calibrate: {min(options.docs, options.max_sample)} documents = {format_flops(flop)}")
            total += flop
    training = recipe.training
    query_tokens = training.max_length_query if recipe.query_encoder == "splade" else 0
    tokens = training.batch_size * (query_tokens + recipe.group_size * training.max_length_doc)
    flop = per_token * training.steps * tokens
    lines.append(f"  splade: {training.steps} steps x {training.batch_size} queries x "
                 f"({query_tokens} + {recipe.group_size} x {training.max_length_doc}) tokens = {format_flops(flop)}")
    total += flop
    hours = total / (gpu_tflops * 1e12) / 3600
    duration = f"{hours:.1f} GPU-hours" if hours >= 1 else f"{hours * 60:.1f} GPU-minutes"
    lines.append(f"  total ~{format_flops(total)} (upper bound: every text at its max length; attention not counted): "
                 f"~{duration} at {gpu_tflops:g} TFLOP/s sustained (an assumption; --gpu-tflops)")
    return lines


def format_flops(value: float) -> str:
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1e9:.1f} GFLOP"


def describe_plan(recipe: Recipe, output: Path, data_dir, model_dir, gpu_tflops: float = DEFAULT_GPU_TFLOPS) -> str:
    """The recipe's stages, training setup, input availability and estimated cost."""
    lines = [f"{recipe.path}: {recipe.description}".rstrip(": "), f"output: {output}"]
    current = recipe.model
    for index, stage in enumerate(recipe.stages):
        out = stage_dir(output, index, stage)
        done = " (done)" if out.is_dir() else ""
        lines.append(f"{index + 1}. {stage.name} {current} -> {out}{done}")
        lines.append(f"   {_stage_command(stage, current, out)}")
        current = str(out)
    data, loss, training = recipe.data, recipe.loss, recipe.training
    if isinstance(data, BeirData):
        mined = f"BM25 negatives from the top {data.depth}" if data.mining == "bm25" else "no mined negatives"
        source = f"BEIR {data.dataset} {data.split} qrels, {mined}"
    elif isinstance(data, TriplesData):
        source = f"triples {data.path}"
    elif isinstance(data, PairsData):
        kept = f", {data.max_examples} kept" if data.max_examples else ""
        source = (f"pairs ({data.query_field}, {data.document_field}) from {data.path or data.hub}"
                  f"{kept}, in-batch negatives")
    else:
        assert isinstance(data, MsmarcoData)
        source = (f"MS MARCO hard negatives {data.hard_negatives} "
                  f"(systems: {', '.join(data.systems) if data.systems else 'all'})")
    teacher = f", teacher {data.teacher}" if data.teacher else ""
    lines.append(f"{len(recipe.stages) + 1}. train SPLADE from {current} -> {output / 'final'}")
    lines.append(f"   data: {source}; {data.negatives} negative(s) per query{teacher}")
    lines.append(f"   queries: {'IDF (inference-free)' if recipe.query_encoder == 'idf' else 'SPLADE encoder'}; "
                 f"loss {loss.ranking}, {loss.query_regularizer} q {loss.lambda_q:g}, "
                 f"{loss.doc_regularizer} d {loss.lambda_d:g}, warm-up {loss.flops_warmup_steps} steps"
                 + _loss_extras(recipe))
    lines.append(f"   {training.steps} steps x {training.batch_size} queries, lr {training.lr:g} "
                 f"({training.schedule}, warm-up {training.lr_warmup_steps}), max length q {training.max_length_query} "
                 f"/ d {training.max_length_doc}, {training.dtype}, checkpoint every {training.save_every}")
    lines.append("inputs:")
    for label, kind, value in required_inputs(recipe, output):
        where, problem = availability(kind, value, data_dir, model_dir)
        lines.append(f"  {label}: {kind} {value}: {where}" + (f" ({problem})" if problem else ""))
    return "\n".join(lines + estimate_cost(recipe, model_dir, gpu_tflops))


def _loss_extras(recipe: Recipe) -> str:
    """The non-default document-term and activation settings, as the plan's loss line ends."""
    loss = recipe.loss
    threshold = loss.doc_active_threshold
    extras = [f"d on documents over {threshold} active terms"] if threshold is not None else []
    extras += ["d summed over group positions"] if loss.doc_flops_by_position else []
    extras += [f"activation {recipe.activation}"] if recipe.activation != "log1p" else []
    return "".join(f", {extra}" for extra in extras)


def _stage_command(stage: Stage, model: str, out: Path) -> str:
    """The command line that runs ``stage`` alone: every option that differs from its default."""
    options = stage.options
    changed = [name for name, field in options.schema().items()
               if getattr(options, name) is not None and getattr(options, name) != field.default]
    return " ".join(["python -m vtrepro", stage.name, "--model", model, *options.to_argv(changed), "--output", str(out)])
