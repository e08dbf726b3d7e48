"""Vocabulary transfer (VT): move a masked-LM encoder onto another, normalized vocabulary.

``python -m vtrepro transfer --model answerdotai/ModernBERT-base --target-tokenizer bert-base-uncased
--init topology --output runs/modernbert-vt`` writes a checkpoint that loads with
``AutoModelForMaskedLM`` / ``AutoTokenizer``, plus ``transfer_report.json``.

Steps (docs/vocabulary-transfer.md has the formulas):

1. Overlap: every vocabulary entry is reduced to its text (WordPiece ``##``, byte-level ``Ġ`` and
   SentencePiece ``▁`` markers removed, GPT-2 byte characters decoded, the target tokenizer's
   normalizer applied) and its position (word start or continuation). A target token whose text
   matches one source token at its position copies that row; one matching several gets their
   norm-preserving weighted mean (weights in :func:`merge_weights`).
2. Remaining target tokens: ``topology`` (sparsemax over reference-space similarities to the
   overlap tokens), or the ablations ``subword-mean``, ``mean``, ``random``.
3. Decoder and bias: a tied decoder follows the embeddings, an untied one is built the same way;
   the bias is the reference's MLM bias mapped onto the source bias distribution (z-score), or
   transferred like the rows when the reference has no MLM head.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from vtrepro.core.checkpoints import check_out, save_checkpoint
from vtrepro.core.errors import VtreproError
from vtrepro.core.options import Options, option
from vtrepro.core.progress import Progress
from vtrepro.core.schema import Field
from vtrepro.model.loading import load_masked_lm, resolve_model
from vtrepro.vocabulary.focus import focus_match
from vtrepro.vocabulary.initialize import NewRows, initialize_new
from vtrepro.vocabulary.leaveout import make_leaveout_source
from vtrepro.vocabulary.matching import VocabularyMatch, match_vocabularies, special_ids, special_roles
from vtrepro.vocabulary.presets import (
    BIAS_STATISTICS,
    MATCHINGS,
    PRESET_NAMES,
    TransferChoices,
    set_authors_config_ids,
    transfer_choices,
)
from vtrepro.vocabulary.target import find_reference, load_reference, load_tokenizer
from vtrepro.vocabulary.topology import DEFAULT_CHUNK_SIZE
from vtrepro.vocabulary.weight_tables import install_vocabulary, known_rows, vocabulary_tables

# torch, transformers and tokenizers are imported where they are used, on purpose: `--help`, argument
# errors and the spec and recipe loaders (which import INITS and SIMILARITIES) stay fast. The modules
# imported above follow the same rule.
if TYPE_CHECKING:
    from torch import Tensor
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

INITS = ("topology", "subword-mean", "mean", "random")
SIMILARITIES = ("cosine", "zscore", "pmi")
TRANSFER_REPORT = "transfer_report.json"
DEFAULT_TARGET = "bert-base-uncased"



@dataclass(frozen=True)
class LeaveoutOptions(Options):
    """The leave-out experiment: a seeded share of the source's tokens removed before the transfer."""

    fraction: float = option(Field(float, 0.1, above=0, below=1,
                                   help="share of the source's ordinary WordPiece tokens removed"))
    seed: int = option(Field(int, 0, minimum=0, help="seed of the removed share"))


@dataclass(frozen=True)
class TransferOptions(Options):
    """What a transfer takes, in a spec's ``transfer:`` block, a recipe's transfer stage and on the command
    line alike (``leaveout`` is ``--leaveout FRACTION --leaveout-seed SEED`` there). The preset and its four
    overrides are resolved once, by :meth:`choices`."""

    target_tokenizer: str = option(Field(str, DEFAULT_TARGET, help="tokenizer folder, Hub id or tokenizer.json"))
    reference: str | None = option(Field(
        str, None, nullable=True, help="model on the target vocabulary whose embedding geometry guides the topology "
                                       "init (default: the target tokenizer's model; none for a tokenizer.json)"))
    init: str = option(Field(str, "topology", INITS, help="initializer of target tokens without a source match"))
    temperature: float = option(Field(float, 1.0, above=0, help="sparsemax temperature"))
    similarity: str = option(Field(str, "cosine", SIMILARITIES,
                                   help="topology scores: cosine, per-token z-scored cosine, or cosine minus log prior"))
    preset: str = option(Field(
        str, "vtrepro", PRESET_NAMES,
        help="authors: the released transform of the paper (FOCUS matching, plain sparsemax sums, bias statistics "
             "over all rows, target norm, tied decoder); vtrepro: this toolkit's choices"))
    matching: str | None = option(Field(
        str, None, MATCHINGS, nullable=True,
        help="overlap rule: normalized (case/accent-folded, blended, specials by role) or focus (the authors'); "
             "default: the preset's"))
    keep_norm: bool | None = option(Field(
        bool, None, nullable=True,
        help="rescale each combined row to the weighted norm of its rows (default: the preset's)"))
    bias_statistics: str | None = option(Field(
        str, None, BIAS_STATISTICS, nullable=True,
        help="z-map the reference bias with statistics over ordinary rows (special biases copied) or over all rows; "
             "default: the preset's"))
    target_norm: bool | None = option(Field(
        bool, None, nullable=True,
        help="rescale rows and bias so the mean overlap-row norm equals the reference's (default: the preset's)"))
    seed: int = option(Field(int, 0, minimum=0, help="seed of --init random"))
    leaveout: LeaveoutOptions | None = option(Field("mapping", None, nullable=True), nested=LeaveoutOptions)

    def choices(self) -> TransferChoices:
        """The preset's choices with this transfer's overrides applied."""
        return transfer_choices(self.preset, matching=self.matching, keep_norm=self.keep_norm,
                                bias_statistics=self.bias_statistics, target_norm=self.target_norm)

    def to_argv(self, names: Sequence[str] | None = None) -> list[str]:
        names = list(self.schema() if names is None else names)
        argv = super().to_argv([name for name in names if name != "leaveout"])
        if "leaveout" in names and self.leaveout is not None:
            argv += ["--leaveout", str(self.leaveout.fraction), "--leaveout-seed", str(self.leaveout.seed)]
        return argv


# ---------------------------------------------------------------------------- transfer


def _zscore_map(
    reference_bias: Tensor, source_bias: Tensor, reference_rows: list[int], source_rows: list[int]
) -> tuple[Tensor, dict[str, float]]:
    """``(b_ref - mean_ref) / std_ref * std_src + mean_src`` as ``b_ref * scale + shift``, in float64."""
    reference, source = reference_bias.double(), source_bias.double()
    if not reference[reference_rows].std() > 0:  # a trained MLM bias varies; a constant one maps to NaN
        raise VtreproError("the reference MLM bias is constant over its rows (an untrained model's zeros?): its "
                           "z-score map is undefined; give a trained reference model")
    scale = (source[source_rows].std() / reference[reference_rows].std()).item()
    shift = (source[source_rows].mean() - scale * reference[reference_rows].mean()).item()
    return (reference * scale + shift).float(), {"scale": scale, "shift": shift}


def transfer_vocabulary(
    source_model: PreTrainedModel,
    source_tokenizer: PreTrainedTokenizerBase,
    target_tokenizer: PreTrainedTokenizerBase,
    reference_embeddings: Tensor | None,
    reference_decoder_bias: Tensor | None = None,
    options: TransferOptions | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[PreTrainedModel, dict[str, Any]]:
    """Move ``source_model`` (in place) onto ``target_tokenizer``'s vocabulary; return it and a report.

    ``reference_embeddings`` are the input embeddings of a model that uses the target vocabulary
    (row i = target id i; any hidden size): only their cosine geometry is used. ``options`` (default:
    :class:`TransferOptions`' defaults) give the initializer and the preset's choices
    (:meth:`TransferOptions.choices`); their tokenizer and reference names are not read here.
    ``chunk_size``: target tokens per similarity chunk (memory, not results).
    """
    options = options or TransferOptions()
    if chunk_size < 1:
        raise VtreproError(f"--chunk-size must be >= 1, got {chunk_size}")
    choices = options.choices()
    started = time.perf_counter()
    size = len(target_tokenizer)
    if reference_embeddings is None and (options.init == "topology" or choices.target_norm):
        raise VtreproError(f"--init {options.init}{' with the target norm' if choices.target_norm else ''} "
                           "needs a --reference model")
    if reference_embeddings is not None and reference_embeddings.shape[0] < size:
        raise VtreproError(
            f"reference has {reference_embeddings.shape[0]} embedding rows but the target vocabulary has {size} tokens"
        )
    with Progress(size, "match vocabularies", "token") as progress:  # about a second: moves once, at the end
        if choices.matching == "focus":
            match = focus_match(source_tokenizer, target_tokenizer)
        else:
            match = match_vocabularies(source_tokenizer, target_tokenizer)
        progress.update(size)
    overlap, new = match.overlap, match.new
    if not overlap:
        raise VtreproError("no target token matches a source token; check --model and --target-tokenizer")
    source_tables, tied = vocabulary_tables(source_model)
    tables = {name: known_rows(table, match, size) for name, table in source_tables.items()}

    report: dict[str, Any] = {}
    if new:
        rows = NewRows(options.init, options.temperature, options.similarity, chunk_size, options.seed,
                       choices.keep_norm, getattr(source_model.config, "initializer_range", 0.02))
        report.update(initialize_new(tables, source_tables, match, source_tokenizer, target_tokenizer,
                                     reference_embeddings, rows))
    if "bias" in tables:
        tables["bias"], report["bias"] = _target_bias(tables["bias"], source_tables["bias"], reference_decoder_bias,
                                                      match, source_tokenizer, choices)
    norm_scale = None
    if choices.target_norm:
        assert reference_embeddings is not None  # refused above without a reference
        norm_scale = (reference_embeddings[overlap].float().norm(dim=1).mean()
                      / tables["embeddings"][overlap].norm(dim=1).mean()).item()
        tables = {name: table * norm_scale for name, table in tables.items()}
    if choices.tie_decoder and "decoder" in tables:
        tables["decoder"] = tables["embeddings"].clone()  # the released transform ties a new decoder to them
    install_vocabulary(source_model, tables, special_roles(target_tokenizer) if choices.specials_by_role else None)
    if choices.config_ids_by_name:
        report["config_ids"] = set_authors_config_ids(source_model, target_tokenizer)

    norms = tables["embeddings"].norm(dim=1)
    report.update({
        "vocabulary": {"source": len(source_tokenizer), "target": size},
        "counts": {"special": len(match.special), "exact": len(match.exact), "merged": len(match.merged),
                   "new": len(new), "merged_sources_mean": round(
                       sum(map(len, match.merged.values())) / max(len(match.merged), 1), 3)},
        "decoder": "tied" if tied else "untied",
        "norms": {
            "source_mean": round(source_tables["embeddings"].norm(dim=1).mean().item(), 4),
            "overlap_mean": round(norms[overlap].mean().item(), 4),
            "new_mean": round(norms[new].mean().item(), 4) if new else None,
            "reference_overlap_mean": None if reference_embeddings is None
            else round(reference_embeddings[overlap].float().norm(dim=1).mean().item(), 4),
            "target_norm_scale": norm_scale,
        },
        "options": {"preset": options.preset, **choices.ablation(), "init": options.init,
                    "temperature": options.temperature, "similarity": options.similarity, "seed": options.seed,
                    "chunk_size": chunk_size},
        "new_ids": new,
        "seconds": round(time.perf_counter() - started, 2),
    })
    return source_model, report


def _target_bias(bias: Tensor, source_bias: Tensor, reference_bias: Tensor | None, match: VocabularyMatch,
                 source_tokenizer: PreTrainedTokenizerBase, choices: TransferChoices) -> tuple[Tensor, dict]:
    """The MLM bias of the target rows and how it was made.

    With a reference MLM bias: the reference bias z-mapped onto the source bias, with statistics over
    ``all`` rows (and applied to all), or over ``ordinary`` rows with special biases copied by role.
    Without one: the rows as transferred, or zeros where the choices say so (the authors' released code
    then leaves the new decoder's bias at zero).
    """
    if reference_bias is None:
        if choices.zero_bias_without_reference:
            return bias.new_zeros(bias.shape), {"from": "zeros (the reference has no MLM bias)"}
        return bias, {"from": "transferred"}
    size = bias.shape[0]
    if choices.bias_statistics == "all":
        mapped, bias_map = _zscore_map(reference_bias[:size], source_bias, list(range(size)),
                                       list(range(source_bias.shape[0])))
        return mapped, {"from": "reference z-score map, all rows", **bias_map}
    special_rows = sorted(match.special)
    ordinary = [index for index in range(size) if index not in match.special]
    source_ordinary = sorted(set(range(source_bias.shape[0])) - special_ids(source_tokenizer))
    mapped, bias_map = _zscore_map(reference_bias[:size], source_bias, ordinary, source_ordinary)
    mapped[special_rows] = source_bias[[match.special[index] for index in special_rows]]
    return mapped, {"from": "reference z-score map, ordinary rows; special rows copied", **bias_map}


# ---------------------------------------------------------------------------- loading and saving


def _adapt_tokenizer(target: PreTrainedTokenizerBase, source: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """``target``, changed in place to the source model's input names (no token_type_ids for
    RoBERTa/ModernBERT) and, when the source sets one, its maximum length."""
    names = list(source.model_input_names)
    target.model_input_names = names
    target.init_kwargs["model_input_names"] = names
    if source.model_max_length < 1e9:
        target.model_max_length = source.model_max_length
    return target


def run_transfer(
    source: str | Path,
    out: str | Path,
    options: TransferOptions | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    model_dir: str | Path | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Load ``source`` (running its own code only with ``trust_remote_code``), transfer it with ``options``
    (default: :class:`TransferOptions`' defaults), and save a checkpoint with ``transfer_report.json`` to
    ``out``; return the report.

    ``options.reference=None`` means the target tokenizer's own model, or none for a ``tokenizer.json``.
    ``options.leaveout`` first removes a seeded share of the source's tokens (:func:`make_leaveout_source`,
    the leave-out experiment); the report lists the held-out tokens.
    """
    options = options or TransferOptions()
    check_out(out)
    target = load_tokenizer(options.target_tokenizer, model_dir)
    reference = options.reference
    if reference is None and not Path(options.target_tokenizer).is_file():
        reference = options.target_tokenizer
    if reference is not None:
        find_reference(reference, model_dir)  # cheap: a reference that cannot load fails before the source loads
    held_out: list[str] = []
    leaveout = options.leaveout
    if leaveout is None:
        model, source_tokenizer = load_masked_lm(source, model_dir, trust_remote_code)
    else:
        model, source_tokenizer, held_out = make_leaveout_source(resolve_model(source, model_dir), leaveout.fraction,
                                                                 leaveout.seed)
    embeddings, bias = load_reference(reference, target, model_dir) if reference is not None else (None, None)
    model, report = transfer_vocabulary(model, source_tokenizer, target, embeddings, bias, options, chunk_size)
    report = {"source": str(source), "target_tokenizer": options.target_tokenizer, "reference": reference, **report}
    if leaveout is not None:
        report["leaveout"] = {**leaveout.to_dict(), "held_out": held_out}
    save_checkpoint(out, model, _adapt_tokenizer(target, source_tokenizer), {TRANSFER_REPORT: report})
    return report


# ---------------------------------------------------------------------------- command line
