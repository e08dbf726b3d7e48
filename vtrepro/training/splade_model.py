"""The SPLADE encoder being trained: a masked LM whose max-pooled MLM logits are computed with a sparse
backward (:class:`MaxPooledProjection`), and the dropout setting of a recipe."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.splade import mlm_head_transform, splade_activation

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class MaxPooledProjection(torch.autograd.Function):
    """Per text, the max over its rows of ``rows @ weight.T + bias``, with a sparse backward.

    ``rows`` are the texts' token rows concatenated (``lengths`` per text). Only each (text, term)'s
    maximal row gets gradient, and only where the incoming gradient is non-zero (SPLADE's relu zeroes
    it for inactive terms), so the backward costs O(active terms x hidden) instead of another pass over
    the tokens x vocabulary logits, which are never stored: the forward keeps one text's logits at a time.
    """

    @staticmethod
    def forward(ctx, rows: Tensor, weight: Tensor, bias: Tensor | None, lengths: list[int]) -> Tensor:
        values = rows.new_empty(len(lengths), weight.shape[0])
        argmax = torch.empty(len(lengths), weight.shape[0], dtype=torch.long, device=rows.device)
        start = 0
        for text, length in enumerate(lengths):
            torch.max(rows[start:start + length] @ weight.T, dim=0, out=(values[text], argmax[text]))
            argmax[text] += start
            start += length
        ctx.save_for_backward(rows, weight, argmax)
        ctx.has_bias = bias is not None
        return values + bias if bias is not None else values

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor | None, None]:
        rows, weight, argmax = ctx.saved_tensors
        texts, terms = grad.nonzero(as_tuple=True)
        scale = grad[texts, terms].unsqueeze(1).float()
        source = argmax[texts, terms]
        grad_rows = torch.zeros_like(rows).index_add_(0, source, (scale * weight[terms].float()).to(rows.dtype))
        grad_weight = torch.zeros_like(weight).index_add_(0, terms, (scale * rows[source].float()).to(weight.dtype))
        return grad_rows, grad_weight, grad.sum(dim=0) if ctx.has_bias else None, None


class SpladeModel(nn.Module):
    """A masked LM as a SPLADE encoder: (texts) -> (n, V) weights log(1 + relu(max over real tokens of
    the MLM logits)), or with ``activation`` log1p-log1p log(1 + log(1 + relu(.))) (the encoder's
    :func:`~vtrepro.model.splade.splade_activation`), special-token terms zeroed. ``forward`` takes several
    tokenized batches at once so DDP sees one forward per step."""

    keep: Tensor  # buffer: 0.0 for special-token terms and ids past the tokenizer, else 1.0

    def __init__(self, name: str, mlm: PreTrainedModel, tokenizer: Any, activation: str = EncoderOptions.activation):
        super().__init__()
        self.mlm = mlm
        self.activation = activation
        self.head = mlm_head_transform(name, mlm.eval(), tokenizer)  # shares the MLM head's parameters
        self.decoder: nn.Linear = mlm.get_output_embeddings()  # a Linear: mlm_head_transform checks it
        keep = torch.ones(self.decoder.out_features)
        keep[sorted(set(tokenizer.all_special_ids) | set(range(len(tokenizer), len(keep))))] = 0.0
        self.register_buffer("keep", keep, persistent=False)

    def encode(self, batch: dict[str, Tensor]) -> Tensor:
        hidden = self.mlm.base_model(**batch)[0]
        mask = batch["attention_mask"].bool()
        pooled = MaxPooledProjection.apply(self.head(hidden[mask]), self.decoder.weight, self.decoder.bias,
                                           mask.sum(dim=1).tolist())
        return splade_activation(pooled.float(), self.activation) * self.keep

    def forward(self, *batches: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return tuple(self.encode(batch) for batch in batches)


def set_dropout(model: nn.Module, probability: float) -> None:
    """Set every dropout of the model (modules and attention-dropout attributes) to ``probability``."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = probability
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, probability)
