"""Transfer presets: the authors' released transform and vtrepro's own choices, as named settings.

``authors`` reproduces ``vocab_trans/transform.py`` (zhichao-aws/opensearch-sparse-model-tuning-sample,
commit 887dd22) as its README runs it (``--set_bias``, no ``--rescale_norm``, target norm on by
default): FOCUS matching, new rows as the plain sparsemax-weighted sum of overlap rows, the
reference's MLM bias z-mapped onto the source bias with statistics over all rows and applied to every
row, embeddings and bias rescaled to the reference's mean overlap norm, the decoder tied to the new
embeddings, and bos/eos/pad/sep/cls ids in the config taken from the target's BERT token names.

``vtrepro`` is this toolkit's default: case- and accent-folded matching that blends every candidate,
norm-keeping combinations, bias statistics over ordinary tokens with special biases copied by role,
no target norm. Each of the four ablation choices can be overridden alone, which is how the ablation
isolates it; the released transform's output layout (tied decoder, zero bias without a reference MLM
bias, specials where the target puts them, config ids by token name) comes with the preset.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

# transformers is only a type hint here, so importing this module stays fast (see transfer.py).
if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

MATCHINGS = ("normalized", "focus")
BIAS_STATISTICS = ("ordinary", "all")
AUTHORS_CONFIG_TOKENS = {"bos_token_id": "[CLS]", "eos_token_id": "[SEP]", "pad_token_id": "[PAD]",
                         "sep_token_id": "[SEP]", "cls_token_id": "[CLS]"}
"""The config ids the released transform sets, by the target token name it looks up."""


@dataclass(frozen=True)
class TransferChoices:
    """Every choice in which the presets differ: the first four are the ablation's single differences
    (:data:`ABLATION_CHOICES`, each overridable), the rest the released transform's output layout."""

    matching: str  # "normalized" (folded, blended, specials by role) or "focus" (the authors' FOCUS rule)
    keep_norm: bool  # rescale each combined row to the weighted norm of the rows it combines
    bias_statistics: str  # "ordinary" (z-map over non-special rows, special biases copied) or "all"
    target_norm: bool  # rescale embeddings and bias to the reference's mean overlap-row norm
    tie_decoder: bool = False  # a new decoder is a copy of the new embeddings (the released transform ties them)
    zero_bias_without_reference: bool = False  # no reference MLM bias: zeros rather than the transferred rows
    specials_by_role: bool = True  # special rows installed at the target's special ids by role
    config_ids_by_name: bool = False  # config bos/eos/pad/sep/cls ids from the target's BERT token names

    def ablation(self) -> dict[str, Any]:
        """The ablation choices by name (what a transfer report lists)."""
        return {name: getattr(self, name) for name in ABLATION_CHOICES}


ABLATION_CHOICES = ("matching", "keep_norm", "bias_statistics", "target_norm")
"""The choices a transfer may override one at a time (the ablation's single differences)."""
PRESET_NAMES = ("vtrepro", "authors")
"""The presets of every stage that has them (transfer, MLM, calibration): this toolkit's choices, or the
authors' released ones."""
PRESET_CHOICES = {
    "vtrepro": TransferChoices(matching="normalized", keep_norm=True, bias_statistics="ordinary", target_norm=False),
    "authors": TransferChoices(matching="focus", keep_norm=False, bias_statistics="all", target_norm=True,
                               tie_decoder=True, zero_bias_without_reference=True, specials_by_role=False,
                               config_ids_by_name=True),
}


def transfer_choices(preset: str, **overrides: Any) -> TransferChoices:
    """The preset's choices with every ablation override that is not None applied."""
    return replace(PRESET_CHOICES[preset], **{name: value for name, value in overrides.items() if value is not None})


def set_authors_config_ids(model: PreTrainedModel, target_tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """Point the config's bos/eos/pad/sep/cls ids at the target's [CLS]/[SEP]/[PAD] where it has them."""
    vocabulary = target_tokenizer.get_vocab()
    ids = {key: vocabulary[name] for key, name in AUTHORS_CONFIG_TOKENS.items() if name in vocabulary}
    for key, index in ids.items():
        setattr(model.config, key, index)
    return ids
