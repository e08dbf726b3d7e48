"""SpladeEncoder on the real splade-tiny checkpoint, checked against the model's own full logits."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vtrepro.core.errors import VtreproError
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.splade import SpladeEncoder, splade_activation

MAX_LENGTH_DOC = 48
MAX_LENGTH_QUERY = 16
TEXTS = [
    "what causes heart attacks",
    "",
    "Protein folding in the endoplasmic reticulum. " * 20,  # longer than both max lengths
    "[CLS] [SEP] [MASK] literal special tokens",
    "Vitamin D deficiency and bone density in elderly women",
    "cells",
]


@pytest.fixture(scope="module")
def encoder(splade_tiny: Path) -> SpladeEncoder:
    return SpladeEncoder(
        splade_tiny, EncoderOptions(max_length_doc=MAX_LENGTH_DOC, max_length_query=MAX_LENGTH_QUERY, batch_size=4,
                                    projection="dense")  # compared with dense references, bit for bit
    )


def naive_max_logits(encoder: SpladeEncoder, texts: list[str], max_length: int) -> torch.Tensor:
    """The reference: full (batch, length, vocab) logits from model(**batch), max over real tokens."""
    batch = encoder.tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    with torch.inference_mode():
        logits = encoder.model(**batch).logits
    padding = ~batch["attention_mask"].bool()
    return logits.masked_fill(padding[..., None], float("-inf")).amax(dim=1)


def dense(encoder: SpladeEncoder, vectors: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    matrix = np.zeros((len(vectors), encoder.model.config.vocab_size), dtype=np.float32)
    for row, (term_ids, weights) in zip(matrix, vectors):
        row[term_ids] = weights
    return matrix


@pytest.mark.parametrize(("kind", "max_length"), [("doc", MAX_LENGTH_DOC), ("query", MAX_LENGTH_QUERY)])
def test_packed_path_equals_full_logits(encoder: SpladeEncoder, kind: str, max_length: int) -> None:
    expected = naive_max_logits(encoder, TEXTS, max_length)
    actual = encoder.max_logits(TEXTS, kind)
    assert actual.shape == expected.shape
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=0)

    reference = splade_activation(expected)
    reference[:, sorted(encoder.special_ids)] = 0
    np.testing.assert_allclose(dense(encoder, encoder.encode(TEXTS, kind)), reference.numpy(), atol=1e-4, rtol=0)


def test_truncation_applies(encoder: SpladeEncoder) -> None:
    long_text = TEXTS[2]
    as_doc = encoder.max_logits([long_text], "doc")
    torch.testing.assert_close(as_doc, naive_max_logits(encoder, [long_text], MAX_LENGTH_DOC), atol=1e-4, rtol=0)
    assert not torch.equal(as_doc, encoder.max_logits([long_text], "query"))


def test_query_top_terms(encoder: SpladeEncoder) -> None:
    term_ids, weights = encoder.encode(["what causes heart attacks"], "query")[0]
    top = {encoder.vocabulary[i] for i in term_ids[np.argsort(-weights)[:6]]}
    assert {"heart", "causes", "attack"} <= top


def test_vector_format(encoder: SpladeEncoder) -> None:
    for term_ids, weights in encoder.encode(TEXTS, "doc"):
        assert term_ids.dtype == np.int64 and weights.dtype == np.float32
        assert len(term_ids) == len(weights)
        assert np.all(np.diff(term_ids) > 0)
        assert np.all(weights > 0)
        assert not encoder.special_ids & set(term_ids.tolist())


def test_special_tokens_are_dropped(encoder: SpladeEncoder) -> None:
    assert {encoder.tokenizer.cls_token_id, encoder.tokenizer.sep_token_id, encoder.tokenizer.pad_token_id} <= encoder.special_ids
    text = "[UNK] [PAD]"  # gives [UNK] a positive weight on splade-tiny
    raw = splade_activation(encoder.max_logits([text], "query"))[0]
    assert raw[encoder.tokenizer.unk_token_id] > 0, "the check below needs a special term with weight"
    term_ids, _ = encoder.encode([text], "query")[0]
    assert len(term_ids) > 0
    assert not encoder.special_ids & set(term_ids.tolist())


def test_input_order_is_preserved(encoder: SpladeEncoder) -> None:
    texts = TEXTS  # unsorted lengths, two batches of 4
    together = dense(encoder, encoder.encode(texts, "doc"))
    one_by_one = dense(encoder, [encoder.encode([text], "doc")[0] for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-4, rtol=0)


def test_deterministic(encoder: SpladeEncoder) -> None:
    first, second = encoder.encode(TEXTS, "doc"), encoder.encode(TEXTS, "doc")
    for (ids_a, weights_a), (ids_b, weights_b) in zip(first, second):
        assert np.array_equal(ids_a, ids_b) and np.array_equal(weights_a, weights_b)


def test_max_logits_consistent_with_encode(encoder: SpladeEncoder) -> None:
    weights = splade_activation(encoder.max_logits(TEXTS, "query"))
    weights[:, sorted(encoder.special_ids)] = 0
    assert np.array_equal(dense(encoder, encoder.encode(TEXTS, "query")), weights.numpy())


def test_vocabulary(encoder: SpladeEncoder) -> None:
    assert len(encoder.vocabulary) == 30522
    assert encoder.vocabulary[encoder.tokenizer.convert_tokens_to_ids("heart")] == "heart"


def test_empty_input(encoder: SpladeEncoder) -> None:
    assert encoder.encode([], "doc") == []
    assert encoder.max_logits([], "doc").shape == (0, 30522)


def test_bad_settings(splade_tiny: Path, encoder: SpladeEncoder) -> None:
    with pytest.raises(VtreproError, match="exceeds"):
        SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=4096))
    with pytest.raises(VtreproError, match="batch_size"):
        EncoderOptions(batch_size=0)
    with pytest.raises(ValueError, match="kind"):
        encoder.encode(["x"], "passage")


SMALL = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, pad_token_id=0)
ARCHITECTURES = {
    "roberta": dict(SMALL, max_position_embeddings=514),
    "distilbert": dict(vocab_size=30522, dim=32, n_layers=1, n_heads=2, hidden_dim=64, pad_token_id=0),
    "modernbert": dict(SMALL, global_attn_every_n_layers=1, local_attention=16, cls_token_id=101, sep_token_id=102),
}


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_other_architectures(architecture: str, splade_tiny: Path, tmp_path: Path) -> None:
    """Heads of other MLM families are found and split correctly (randomly initialised, splade-tiny's tokenizer)."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(AutoConfig.for_model(architecture, **ARCHITECTURES[architecture])).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(splade_tiny / name, tmp_path / name)  # copies: a model folder's files lie inside it
    encoder = SpladeEncoder(tmp_path, EncoderOptions(max_length_doc=MAX_LENGTH_DOC))
    torch.testing.assert_close(encoder.max_logits(TEXTS), naive_max_logits(encoder, TEXTS, MAX_LENGTH_DOC), atol=1e-4, rtol=0)


@pytest.mark.slow  # over 1.5 s (AVX-512 EPYC): keeps the fast tier under 90 s
def test_a_bfloat16_body_keeps_the_head_in_float32_and_agrees_with_float32(tiny_encoder, splade_tiny, scifact_sample):
    """The half-precision path on CPU: the body in bfloat16, the head, pooling and bias in float32. Its vectors
    are their own tier: measured here on 60 SciFact documents, 99% of active terms shared on average."""
    half = SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=256, dtype="bfloat16"))
    assert next(half.model.base_model.parameters()).dtype == torch.bfloat16
    assert half._decoder.weight.dtype == torch.float32 and half._decoder.bias.dtype == torch.float32
    texts = [document.contents for document in scifact_sample]
    shared = [len(set(a[0]) & set(b[0])) / len(set(a[0]) | set(b[0]))
              for a, b in zip(tiny_encoder.encode(texts, "doc"), half.encode(texts, "doc"))]
    assert np.mean(shared) > 0.97 and min(shared) > 0.9, (np.mean(shared), min(shared))
    with pytest.raises(VtreproError, match="dtype must be one of float32, bfloat16, float16"):
        EncoderOptions(dtype="int8")


@pytest.mark.parametrize("screen", ["int8", "bfloat16"])
@pytest.mark.parametrize("scale", [0.01, 1.0, 300.0])
def test_a_screen_bounds_every_dense_max_pooled_logit(screen, scale):
    """Each screen's bound is at least the dense float32 max-pooled logit plus bias, and at least the exact
    one, for texts spanning chunk boundaries; with a bias that activates ~1% of columns it keeps few."""
    from vtrepro.model.projection import SCREEN_CLASSES, dense_max_logits

    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(600, 128, generator=generator) * scale
    rows[5, 3] = 40 * scale  # one outlier component coarsens its text's int8 scale
    decoder = torch.nn.Linear(128, 3000).requires_grad_(False)
    decoder.weight.data = torch.randn(3000, 128, generator=generator) * torch.rand(3000, 1, generator=generator)
    lengths = [1, 40, 300, 259]
    decoder.bias.data.zero_()
    raw = dense_max_logits(rows, lengths, decoder)
    decoder.bias.data = -torch.quantile(raw.flatten(), 0.99).expand(3000).clone()
    dense = dense_max_logits(rows, lengths, decoder)
    starts = np.cumsum([0, *lengths[:-1]])
    exact = torch.stack([(rows[start:start + length].double() @ decoder.weight.double().T).amax(dim=0)
                         for start, length in zip(starts, lengths)]) + decoder.bias.double()
    bounds = SCREEN_CLASSES[screen](decoder.weight.detach(), decoder.bias.detach())(rows, lengths)
    assert (bounds >= dense).all() and (bounds.double() >= exact).all()
    assert 0.005 < (dense > 0).double().mean() < (bounds > 0).double().mean() < 0.1


@pytest.mark.slow  # 35-70 s on an AVX2-only CPU, where bfloat16 is emulated and the int8 probe covers more shapes
@pytest.mark.parametrize("projection", ["screened-int8", "screened-bfloat16"])
def test_the_screened_projection_keeps_every_activated_column(splade_tiny, scifact_sample, tiny_encoder, projection):
    """Every column the dense path activates is computed exactly; the vectors equal the dense ones."""
    screened = SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=256, projection=projection), device="cpu")
    texts = [document.contents for document in scifact_sample]
    dense_logits = tiny_encoder.max_logits(texts, "doc")
    screened_logits = torch.cat([pooled for _, pooled in screened._pooled_batches(texts, "doc", screened=True)])
    order = [position for positions, _ in screened._pooled_batches(texts, "doc") for position in positions]
    dense_logits = dense_logits[order]
    assert torch.isfinite(screened_logits[dense_logits > 0]).all()
    assert screened.screened is not None and screened.screened.kept / screened.screened.columns < 0.05
    for (dense_ids, dense_weights), (ids, weights) in zip(tiny_encoder.encode(texts, "doc"), screened.encode(texts, "doc")):
        assert np.array_equal(dense_ids, ids) and np.allclose(dense_weights, weights, rtol=1e-5, atol=0)


def test_the_int8_bound_holds_where_every_rounding_error_points_the_same_way():
    """Rows and columns whose components all sit just under half a quantization step above a level, all
    positive: every residual and cross term has the same sign, the worst case for the int8 bound."""
    from vtrepro.model.projection import Int8Screen

    generator = torch.Generator().manual_seed(1)
    levels = torch.randint(0, 60, (300, 128), generator=generator).float()
    rows = (levels + 0.499) / 127  # the text scale is max/127 = (59 + 0.499)/127 at most; near-half residuals
    rows[:, 0] = 1.0  # fixes every row's scale at 1/127
    columns = (torch.randint(0, 60, (500, 128), generator=generator).float() + 0.499) / 64
    columns[:, 0] = 127 / 64
    bias = -(rows.double() @ columns.double().T).amax(dim=0).float()  # every column right at its threshold
    bounds = Int8Screen(columns, bias)(rows, [300])
    exact = (rows.double() @ columns.double().T).amax(dim=0) + bias.double()
    assert (bounds.double() >= exact).all() and (bounds > 0).all()


def test_where_integer_products_are_not_exact_auto_screens_in_bfloat16_and_int8_is_refused(monkeypatch):
    from vtrepro.model.projection import ScreenedProjection

    monkeypatch.setattr("vtrepro.model.projection.COLUMN_LEVELS", ())  # no level passes the probe
    decoder = torch.nn.Linear(16, 40).requires_grad_(False)
    assert ScreenedProjection(decoder).screen == "bfloat16"
    with pytest.raises(VtreproError, match="int8 matrix products are not exact on this CPU: use --projection "
                                           "screened-bfloat16"):
        ScreenedProjection(decoder, "int8")


def test_the_v3_activation_takes_one_more_log_of_the_same_terms(splade_tiny, tiny_encoder):
    """``activation: log1p-log1p`` (OpenSearch's v3 document models): log(1 + w) of SPLADE's weight w, same terms."""
    v3 = SpladeEncoder(splade_tiny, EncoderOptions(max_length_doc=256, projection="dense", activation="log1p-log1p"))
    for (ids, weights), (v3_ids, v3_weights) in zip(tiny_encoder.encode(TEXTS, "doc"), v3.encode(TEXTS, "doc")):
        assert np.array_equal(ids, v3_ids)
        assert np.allclose(np.log1p(weights), v3_weights, rtol=1e-6, atol=0)  # float32 log1p: last bits vary by path
