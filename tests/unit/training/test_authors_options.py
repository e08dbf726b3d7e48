"""The authors' later training options (zhichao-aws/opensearch-sparse-model-tuning-sample, branches main and
mdbert) as vtrepro options: each test writes the authors' arithmetic out as their code runs it and checks
vtrepro's against it on one batch.

Sources (full commits):
  main   7cbe00469c09f3b2e233c28f307f653cdf96ecb0 (configs/config_l0.yaml)
  mdbert 65b2e82a60a20cbb6e785d0ae86f8d7ffa790c85 (configs/config_mdbert_ft.yaml, run_mlm.sh, run_mlm.py)
  scripts/model/sparse_encoders.py, scripts/train/trainer.py and scripts/train/loss.py compute the same
  on both branches (their diff is import order and formatting); line numbers below are mdbert's.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import helpers
from helpers import write_recipe
from vtrepro.core.errors import VtreproError
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.splade import ACTIVATION_FILE, SpladeEncoder, check_activation, recorded_activation, write_activation
from vtrepro.training import losses
from vtrepro.training.recipe import load_recipe
from vtrepro.training.splade_model import SpladeModel
from vtrepro.training.train import run_recipe

RECIPE = {"model": "splade-tiny", "data": {"format": "triples", "path": "triples.tsv"},
          "loss": {"ranking": "infonce", "lambda_d": 0.08, "doc_active_threshold": 150},
          "training": {"steps": 2}}


def _batch(seed: int, queries: int = 4, group: int = 2, vocabulary: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-negative sparse-ish representations, documents query-major (each query's group contiguous)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.relu(torch.randn(queries, vocabulary, generator=generator))
    d = torch.relu(torch.randn(queries * group, vocabulary, generator=generator) - 0.3)
    return q, d


# ---------------------------------------------------------------------------- activation (use_l0)


def _authors_encode(logits: torch.Tensor, attention_mask: torch.Tensor, use_l0: bool) -> torch.Tensor:
    """SparseModel._encode, scripts/model/sparse_encoders.py:108-115@65b2e82 (107-114@7cbe004), as written:
    max over tokens of the logits times the mask, log1p(relu(.)), then log1p once more with use_l0."""
    values, _ = torch.max(logits * attention_mask.unsqueeze(-1), dim=1)
    values = torch.log1p(torch.relu(values))
    if use_l0:
        values = torch.log1p(values)
    return values


def test_training_activation_log1p_log1p_is_the_authors_use_l0(tiny_encoder, scifact_sample) -> None:
    texts = [document.contents for document in scifact_sample[:3]]
    tokenizer = tiny_encoder.tokenizer
    batch = dict(tokenizer(texts, padding=True, truncation=True, max_length=48, return_tensors="pt"))
    model = SpladeModel("splade-tiny", tiny_encoder.model, tokenizer, "log1p-log1p").eval()
    assert model.activation == "log1p-log1p"
    with torch.no_grad():
        logits = tiny_encoder.model(**batch).logits
        for activation, use_l0 in (("log1p", False), ("log1p-log1p", True)):
            model.activation = activation
            (ours,) = model(batch)
            theirs = _authors_encode(logits, batch["attention_mask"], use_l0)
            # vtrepro zeroes special-token terms (SpladeModel.keep); the authors' _encode keeps them.
            assert torch.allclose(ours, theirs * model.keep, atol=1e-5), activation
    assert (ours > 0).any()


def test_the_activation_is_read_from_the_recipe_and_kept_out_of_old_fingerprints(tmp_path: Path) -> None:
    plain = load_recipe(write_recipe(tmp_path / "plain.yaml", RECIPE))
    default = load_recipe(write_recipe(tmp_path / "default.yaml", {**RECIPE, "activation": "log1p"}))
    l0 = load_recipe(write_recipe(tmp_path / "l0.yaml", {**RECIPE, "activation": "log1p-log1p"}))
    assert (plain.activation, l0.activation) == ("log1p", "log1p-log1p")
    assert plain.fingerprint() == default.fingerprint() != l0.fingerprint()
    with pytest.raises(VtreproError, match=r"bad\.yaml:\d+: activation must be one of log1p, log1p-log1p"):
        load_recipe(write_recipe(tmp_path / "bad.yaml", {**RECIPE, "activation": "l0"}))


def test_a_model_trained_with_log1p_log1p_is_encoded_only_with_it(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    write_activation(tmp_path / "plain", "log1p")
    assert not (tmp_path / "plain" / ACTIVATION_FILE).exists() and recorded_activation(tmp_path / "plain") is None
    (tmp_path / "l0").mkdir()
    write_activation(tmp_path / "l0", "log1p-log1p")
    assert recorded_activation(tmp_path / "l0") == "log1p-log1p"
    check_activation(tmp_path / "l0", "log1p-log1p")
    with pytest.raises(VtreproError, match="trained with activation log1p-log1p .* encode it with --activation log1p-log1p"):
        SpladeEncoder(tmp_path / "l0", EncoderOptions(), device="cpu")  # refused before the model is read


@pytest.mark.slow  # a one-step training run and two encoder loads: about 8 s on 2 shared cores
def test_a_trained_log1p_log1p_model_records_its_activation(tmp_path: Path, splade_tiny: Path, data_dir: Path) -> None:
    triples = helpers.nfcorpus_triples(tmp_path / "triples.tsv", data_dir, 4)
    recipe = {**helpers.triples_recipe(splade_tiny, triples), "activation": "log1p-log1p"}
    final = run_recipe(load_recipe(write_recipe(tmp_path / "l0.yaml", recipe)), tmp_path / "run")
    assert recorded_activation(final) == "log1p-log1p"
    with pytest.raises(VtreproError, match="trained with activation log1p-log1p"):
        SpladeEncoder(final, EncoderOptions(), device="cpu")
    (ids, weights), = SpladeEncoder(final, EncoderOptions(activation="log1p-log1p"), device="cpu").encode(
        ["heart attack"], kind="doc")
    assert len(ids) and float(weights.max()) < float(torch.log1p(torch.log1p(torch.tensor(100.0))))


# ---------------------------------------------------------------------------- flops_threshold


def _authors_flops_value(representation: torch.Tensor, group_num: int, flops_threshold: int | None) -> torch.Tensor:
    """SparseModelTrainer.flops_value, scripts/train/trainer.py:61-73@65b2e82 (same lines @7cbe004), as written;
    called for documents with group_num = d_rep.shape[0] // q_rep.shape[0] (trainer.py:105)."""
    representation = representation.reshape(-1, group_num, representation.shape[-1])
    if flops_threshold is None:
        return torch.sum(torch.mean(torch.abs(representation), dim=0) ** 2)
    w_j_per_doc = torch.abs(representation)
    doc_length = torch.norm(w_j_per_doc, p=0, dim=2)
    mask = (doc_length > flops_threshold).float()
    mask = mask.unsqueeze(2).repeat(1, 1, w_j_per_doc.shape[2])
    flops_per_average_token = torch.mean(mask * w_j_per_doc, dim=0) ** 2
    return torch.sum(flops_per_average_token)


@pytest.mark.parametrize("threshold", [None, 10, 18])
def test_flops_threshold_and_position_sums_equal_the_authors_flops_value(threshold) -> None:
    _, documents = _batch(0)
    group = 2
    assert 0 < int((losses.active_terms(documents) > 18).sum()) < len(documents)  # the thresholds keep some rows
    theirs = _authors_flops_value(documents, group, threshold)
    ours = losses.document_regularizer(documents, "flops", threshold, positions=group)
    assert torch.allclose(ours, theirs, rtol=1e-6)
    # With one document per query (their queries' call, trainer.py:111) the sum has one position: vtrepro's default.
    assert torch.allclose(losses.document_regularizer(documents, "flops", threshold),
                          _authors_flops_value(documents, 1, threshold), rtol=1e-6)
    # Over groups of two, vtrepro's default (one mean over all B x G documents) is another number.
    assert not torch.allclose(losses.document_regularizer(documents, "flops", threshold), theirs, rtol=1e-3)


def test_the_flops_warm_up_is_the_authors_get_lambda() -> None:
    def get_lambda(lambda_value: float, lambda_t: int, global_step: int) -> float:  # trainer.py:75-79@65b2e82
        if global_step >= lambda_t:
            return lambda_value
        step = global_step + 1
        return lambda_value * (step / lambda_t) ** 2

    # vtrepro's trainer weighs 0-based step s with warmup_weight(λ, s + 1, T); HF's global_step is s there.
    for step in (0, 1, 19_999, 39_998, 39_999, 40_000, 40_001, 99_999):
        assert losses.warmup_weight(0.08, step + 1, 40_000) == pytest.approx(get_lambda(0.08, 40_000, step), rel=1e-12)


def test_flops_threshold_is_the_other_spelling_of_doc_active_threshold(tmp_path: Path) -> None:
    ours = load_recipe(write_recipe(tmp_path / "ours.yaml", RECIPE))
    theirs_loss = {"ranking": "infonce", "lambda_d": 0.08, "flops_threshold": 150}
    theirs = load_recipe(write_recipe(tmp_path / "theirs.yaml", {**RECIPE, "loss": theirs_loss}))
    assert theirs.loss == ours.loss and theirs.loss.doc_active_threshold == 150
    assert theirs.fingerprint() == ours.fingerprint()
    both = {**RECIPE["loss"], "flops_threshold": 150}
    with pytest.raises(VtreproError, match=r"both\.yaml:\d+: loss\.flops_threshold is another spelling of "
                                           r"loss\.doc_active_threshold; give only one"):
        load_recipe(write_recipe(tmp_path / "both.yaml", {**RECIPE, "loss": both}))


def test_flops_by_position_is_kept_out_of_old_fingerprints_and_needs_flops(tmp_path: Path) -> None:
    plain = load_recipe(write_recipe(tmp_path / "plain.yaml", RECIPE))
    off = load_recipe(write_recipe(tmp_path / "off.yaml", {**RECIPE, "loss": {**RECIPE["loss"],
                                                                              "doc_flops_by_position": False}}))
    on = load_recipe(write_recipe(tmp_path / "on.yaml", {**RECIPE, "loss": {**RECIPE["loss"],
                                                                            "doc_flops_by_position": True}}))
    assert plain.fingerprint() == off.fingerprint() != on.fingerprint()
    l1 = {**RECIPE["loss"], "doc_flops_by_position": True, "doc_regularizer": "l1"}
    with pytest.raises(VtreproError, match=r"l1\.yaml:\d+: loss\.doc_flops_by_position .* set loss\.doc_regularizer to flops"):
        load_recipe(write_recipe(tmp_path / "l1.yaml", {**RECIPE, "loss": l1}))


# ---------------------------------------------------------------------------- kldiv


def _authors_kldiv(q_rep: torch.Tensor, d_rep: torch.Tensor, scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """KLDivLoss.__call__ without in-batch negatives, scripts/train/loss.py:26-44@65b2e82, as written."""
    batch_size = q_rep.shape[0]
    d_rep = d_rep.reshape(batch_size, d_rep.shape[0] // batch_size, d_rep.shape[-1])
    student_scores = torch.bmm(d_rep, q_rep.reshape(batch_size, -1, 1)).squeeze()
    student_scores = torch.log_softmax(student_scores / temperature, dim=1)
    teacher_scores = torch.softmax(scores / temperature, dim=1)
    return torch.nn.KLDivLoss(reduction="none")(student_scores, teacher_scores).sum(dim=1).mean(dim=0)


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_kl_is_the_authors_kldiv(temperature: float) -> None:
    queries, documents = _batch(1, queries=5, group=3)
    teacher = torch.randn(5, 3, generator=torch.Generator().manual_seed(2)) * 4
    ours = losses.kl_distillation(losses.group_scores(queries, documents), teacher, temperature)
    assert torch.allclose(ours, _authors_kldiv(queries, documents, teacher, temperature), rtol=1e-5)


def test_the_authors_loss_names_are_read_as_vtrepros(tmp_path: Path) -> None:
    distilled = {**RECIPE, "data": {"format": "msmarco", "hard_negatives": "h.jsonl.gz", "collection": "c.tsv",
                                    "queries": "q.tsv", "teacher": "t.jsonl"}}
    for theirs, ours in (("kldiv", "kl"), ("marginmse", "margin_mse")):
        recipe = {**distilled, "loss": {**RECIPE["loss"], "ranking": theirs}}
        same = {**distilled, "loss": {**RECIPE["loss"], "ranking": ours}}
        read = load_recipe(write_recipe(tmp_path / f"{theirs}.yaml", recipe))
        assert read.loss.ranking == ours
        assert read.fingerprint() == load_recipe(write_recipe(tmp_path / f"{ours}.yaml", same)).fingerprint()


# ---------------------------------------------------------------------------- the shipped recipes


def test_the_authors_later_recipes_read_as_their_configs() -> None:
    l0, mdbert, emb = (load_recipe(name) for name in ("authors_l0", "modernbert_mdbert_ft", "modernbert_mdbert_emb_ft"))
    # config_mdbert_ft.yaml lines 9-34 are config_l0.yaml's but output_dir and save_steps.
    assert l0.data == mdbert.data == emb.data and l0.loss == mdbert.loss == emb.loss
    assert l0.training.replace(save_every=1) == mdbert.training.replace(save_every=1) == emb.training.replace(save_every=1)
    assert (l0.activation, l0.query_encoder, l0.loss.ranking, l0.loss.doc_active_threshold) == (
        "log1p-log1p", "idf", "kl", 150)
    assert l0.loss.doc_flops_by_position and l0.loss.lambda_d == 0.08 and l0.loss.flops_warmup_steps == 40_000
    full, embeddings_only = mdbert.stages[1].options.to_dict(), emb.stages[1].options.to_dict()
    assert not full["train_only_embeddings"] and embeddings_only["train_only_embeddings"]
    assert {**full, "train_only_embeddings": True} == embeddings_only
    assert (full["steps"], full["batch_size"], full["lr"], full["warmup_steps"], full["mask_rate"], full["max_length"],
            full["schedule"]) == (140_000, 2048, 3e-4, 4000, 0.3, 128, "cosine")
