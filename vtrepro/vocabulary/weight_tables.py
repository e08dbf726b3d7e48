"""A masked LM's vocabulary-indexed weights as tables: read out, known rows filled, installed back.

The tables are the input embeddings, an untied decoder and the MLM bias. :func:`known_rows` fills
the special, exact and merged rows of a :class:`~vtrepro.vocabulary.matching.VocabularyMatch`;
:func:`install_vocabulary` resizes the model, copies the tables in, keeps untied parameters apart,
follows a new pad id and points the config's token ids at the new special tokens.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from vtrepro.vocabulary.matching import ROLES, VocabularyMatch, role_id
from vtrepro.vocabulary.topology import combine_rows, sparse_matrix

# torch and transformers are imported inside the functions, so importing this module stays fast (see transfer.py).
if TYPE_CHECKING:
    from torch import Tensor
    from transformers import PreTrainedModel

CONFIG_ROLE_KEYS = {f"{role}_token_id": role for role in ROLES}


def vocabulary_tables(model: PreTrainedModel) -> tuple[dict[str, Tensor], bool]:
    """Float32 copies of the vocabulary-indexed weights and whether the decoder is tied."""
    embeddings = _input_weight(model)
    head = model.get_output_embeddings()
    tied = head.weight.data_ptr() == embeddings.data_ptr()
    tables = {"embeddings": embeddings.detach().float().clone()}
    if not tied:
        tables["decoder"] = head.weight.detach().float().clone()
    if head.bias is not None:
        tables["bias"] = head.bias.detach().float().clone()
    return tables, tied


def known_rows(table: Tensor, match: VocabularyMatch, size: int) -> Tensor:
    """Target-indexed table with special, exact and merged rows filled (merges keep the norm for matrices)."""
    out = table.new_zeros((size, *table.shape[1:]))
    copies = {**match.special, **match.exact}
    if copies:
        out[list(copies)] = table[list(copies.values())]
    if match.merged:
        targets = list(match.merged)
        rows = [row for row, index in enumerate(targets) for _ in match.merged[index]]
        columns = [source for index in targets for source, _ in match.merged[index]]
        values = [weight for index in targets for _, weight in match.merged[index]]
        weights = sparse_matrix(rows, columns, values, (len(targets), table.shape[0]))
        out[targets] = as_table(combine_rows(weights, as_matrix(table), table.dim() == 2), table)
    return out


def as_matrix(table: Tensor) -> Tensor:
    """A 1-D table (the bias) as a one-column matrix; a matrix unchanged."""
    return table if table.dim() == 2 else table[:, None]


def as_table(rows: Tensor, like: Tensor) -> Tensor:
    """``rows`` back in the shape of ``like``: the inverse of :func:`as_matrix`."""
    return rows if like.dim() == 2 else rows[:, 0]


def install_vocabulary(model: PreTrainedModel, tables: dict[str, Tensor], roles: dict[str, int] | None) -> None:
    """Resize ``model`` to the tables' vocabulary, copy the rows in and point the config's token ids at
    ``roles`` (a new pad id moves the padding rows too); ``roles=None`` leaves config and padding as they are."""
    import torch

    old_pad = model.config.pad_token_id
    shared_before = _sharing(model)
    model.resize_token_embeddings(tables["embeddings"].shape[0], mean_resizing=False)
    head = model.get_output_embeddings()
    with torch.no_grad():
        _input_weight(model).copy_(tables["embeddings"])
        if "decoder" in tables:
            head.weight.copy_(tables["decoder"])
        if "bias" in tables:
            head.bias.copy_(tables["bias"])
    _unshare_new_ties(model, shared_before)
    if roles is None:
        return
    for key, role in CONFIG_ROLE_KEYS.items():
        if getattr(model.config, key, None) is not None or (key == "pad_token_id" and "pad" in roles):
            setattr(model.config, key, role_id(roles, role))
    new_pad = model.config.pad_token_id
    model.get_input_embeddings().padding_idx = new_pad
    if old_pad is not None and new_pad is not None and old_pad != new_pad:
        _move_padding(model, old_pad, new_pad)


def _input_weight(model: PreTrainedModel) -> Tensor:
    """The input embedding matrix (torch types a submodule's attributes as ``Tensor | Module``)."""
    return cast("Tensor", model.get_input_embeddings().weight)


def _sharing(model: PreTrainedModel) -> dict[str, int]:
    """``{parameter name: id}`` with every name of a shared parameter."""
    return {name: id(param) for name, param in model.named_parameters(remove_duplicate=False)}


def _unshare_new_ties(model: PreTrainedModel, before: dict[str, int]) -> None:
    """Give back separate parameters to names that ``resize_token_embeddings`` tied together.

    It ties an untied BERT's ``decoder.bias`` to ``cls.predictions.bias``; saved once, that bias
    would then be missing when the untied checkpoint is loaded.
    """
    import torch

    owners: dict[int, str] = {}
    retie = []
    for name, param in model.named_parameters(remove_duplicate=False):
        first = owners.setdefault(id(param), name)
        if first != name and before.get(first) != before.get(name):
            retie.append((name, param))
    for name, param in retie:
        module, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(module), leaf, torch.nn.Parameter(param.detach().clone()))


def _move_padding(model: PreTrainedModel, old_pad: int, new_pad: int) -> None:
    """Follow a new pad id, keeping RoBERTa-style positions (which start at ``pad + 1``) unchanged."""
    import torch

    for module in model.modules():
        if getattr(module, "padding_idx", None) != old_pad:
            continue
        # torch's stubs allow only Tensor | Module through Module.__setattr__; a plain int is stored as usual
        module.padding_idx = new_pad  # type: ignore[assignment]
        positions = getattr(module, "position_embeddings", None)
        if hasattr(module, "create_position_ids_from_input_ids") and isinstance(positions, torch.nn.Embedding):
            with torch.no_grad():
                positions.weight.copy_(positions.weight.roll(new_pad - old_pad, dims=0))
            positions.padding_idx = new_pad
