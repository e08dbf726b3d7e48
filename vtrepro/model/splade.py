"""SPLADE encoding: max over a text's tokens of log(1 + relu(MLM logits)), one weight per vocabulary term.

The vocabulary projection dominates the cost of small encoders, so it is computed only for real
(non-padding) tokens, a few rows at a time, and max-pooled before the activation: log1p(relu(.)) is
monotone, so pooling the raw logits first gives the same weights while activating only one row per text.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal, Sequence, cast

import numpy as np
import torch
from torch import nn

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, read_json_file, write_json
from vtrepro.core.progress import Progress
from vtrepro.model.encoder_options import PRECISIONS, EncoderOptions
from vtrepro.model.folder_checks import check_model_file
from vtrepro.model.loading import load_masked_lm, resolve_model
from vtrepro.model.projection import ScreenedProjection, dense_max_logits, resolve_projection

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedModel, PreTrainedTokenizerBase

Kind = Literal["doc", "query"]
SparseVector = tuple[np.ndarray, np.ndarray]

HEAD_TOLERANCE = 1e-4
UNBOUNDED_LENGTH = 1_000_000
DTYPES = dict(zip(PRECISIONS, (torch.float32, torch.bfloat16, torch.float16)))
"""Precisions of the encoder body; the MLM head, the pooling and the decoder bias stay in float32."""


ACTIVATION_FILE = "splade_activation.json"
"""In a model folder trained with another activation than ``log1p``: ``{"activation": "log1p-log1p"}``
(vtrepro train writes it into every checkpoint and ``final/``); :class:`SpladeEncoder` refuses to encode
such a model with another activation."""

DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
"""The device types vtrepro encodes on; torch parses more (meta, xla, hpu, ...), which would fail mid-run."""
DEVICE_FORMS = "cpu, cuda, cuda:N, mps, xpu or xpu:N"


def default_device() -> str:
    """CUDA when present, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(name: str | None) -> torch.device:
    """The device ``name`` (a ``--device`` value; None: :func:`default_device`) names, checked before any
    work: every command that takes a device calls this. An unknown form, or a device this machine lacks,
    is one line naming the value and the fix."""
    if name is None:
        return torch.device(default_device())
    try:
        device = torch.device(name)
    except RuntimeError:
        raise VtreproError(f"--device {name!r}: not a device; use {DEVICE_FORMS}") from None
    if device.type not in DEVICE_TYPES:
        raise VtreproError(f"--device {name!r}: vtrepro does not encode on {device.type} devices; use {DEVICE_FORMS}")
    present = _devices_present(device.type)
    if present == 0:
        raise VtreproError(f"--device {name!r}: this machine has no {device.type} device (torch {torch.__version__} "
                           "finds none); use --device cpu")
    if (device.index or 0) >= present:
        raise VtreproError(f"--device {name!r}: this machine has {present} {device.type} device(s), "
                           f"{device.type}:0 to {device.type}:{present - 1}; use one of those or --device cpu")
    return device


def _devices_present(device_type: str) -> int:
    """How many devices of ``device_type`` (one of :data:`DEVICE_TYPES`) torch can use here."""
    if device_type == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_type == "xpu":
        return torch.xpu.device_count() if torch.xpu.is_available() else 0
    if device_type == "mps":
        return int(torch.backends.mps.is_available())
    return 1


def splade_activation(max_logits: torch.Tensor, activation: str = EncoderOptions.activation) -> torch.Tensor:
    """Term weights from max-pooled MLM logits: SPLADE's log(1 + relu(x)), or with ``log1p-log1p`` the
    OpenSearch v3 document models' log(1 + log(1 + relu(x))). Both are monotone, so pooling the raw logits
    first gives what pooling the weights would."""
    weights = torch.log1p(torch.relu(max_logits))
    return torch.log1p(weights) if activation == "log1p-log1p" else weights


def write_activation(folder: str | Path, activation: str) -> None:
    """Record in a model folder the activation it was trained with (nothing for SPLADE's ``log1p``)."""
    if activation != "log1p":
        write_json(Path(folder) / ACTIVATION_FILE, {"activation": activation})


def recorded_activation(folder: str | Path) -> str | None:
    """The activation a model folder records (:data:`ACTIVATION_FILE`), None when it records none."""
    path = Path(folder) / ACTIVATION_FILE
    if not check_model_file(Path(folder), ACTIVATION_FILE):
        return None
    recorded = read_json_file(path, 'expected {"activation": "log1p" or "log1p-log1p"}', JSON_FILE_BYTES["model"],
                              Path(folder))
    activation = recorded.get("activation") if isinstance(recorded, dict) else None
    if not isinstance(activation, str):
        raise VtreproError(f"{path}: expected {{\"activation\": \"log1p\" or \"log1p-log1p\"}}")
    return activation


def check_activation(model: str | Path, activation: str, model_dir: str | Path | None = None) -> None:
    """Refuse to encode with ``activation`` a model folder trained with another one."""
    folder = Path(resolve_model(model, model_dir))
    trained = recorded_activation(folder) if folder.is_dir() else None
    if trained is not None and trained != activation:
        raise VtreproError(f"model {model} was trained with activation {trained} ({folder / ACTIVATION_FILE}); "
                           f"encode it with --activation {trained} (a spec: encoder.activation: {trained})")


class SpladeEncoder:
    """Encode texts into sparse SPLADE vectors with any ``AutoModelForMaskedLM`` checkpoint.

    ``options`` say how texts are truncated, batched and computed (lengths beyond the model's positions
    are refused here); ``device`` is checked by :func:`check_device`. ``vocabulary[i]`` is the token of
    term id ``i``. Output vectors never hold special tokens, nor the ids of output rows beyond the
    tokenizer (padding rows some models add to their vocabulary matrix).
    """

    def __init__(
        self,
        model: str | Path,
        options: EncoderOptions = EncoderOptions(),
        *,
        model_dir: str | Path | None = None,
        trust_remote_code: bool = False,
        device: str | None = None,
    ) -> None:
        self.options = options
        self.device = check_device(device)
        check_activation(model, options.activation, model_dir)
        self.model, self.tokenizer = load_masked_lm(model, model_dir, trust_remote_code)
        for value in (options.max_length_doc, options.max_length_query):
            _check_max_length(str(model), self.model, self.tokenizer, value)
        self.vocabulary: list[str] = list(self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer)))))
        self.special_ids: frozenset[int] = frozenset(self.tokenizer.all_special_ids)
        self._decoder = self.model.get_output_embeddings()
        self._head_transform = mlm_head_transform(str(model), self.model, self.tokenizer)
        self._to_device(options.dtype)
        self.projection = resolve_projection(options.projection, self.device)
        """The projection used: ``options.projection`` with ``auto`` resolved for the device (on CPU, by its int8 flags)."""
        screen = self.projection.removeprefix("screened").removeprefix("-") or "auto"
        self.screened = ScreenedProjection(self._decoder, screen) if self.projection != "dense" else None
        self.projection_seconds = 0.0  # time spent in the vocabulary projection (read by the benchmark)
        self._dropped_ids = torch.tensor(
            sorted(self.special_ids | set(range(len(self.tokenizer), self._decoder.out_features))), dtype=torch.long
        )

    def _to_device(self, dtype: str) -> None:
        """Move the model to the device; a half-precision body keeps the head in float32 (a tied decoder
        gets its own float32 copy of the embeddings first)."""
        if dtype != "float32":
            self._decoder.weight = nn.Parameter(self._decoder.weight.detach().clone(), requires_grad=False)
            self.model.base_model.to(DTYPES[dtype])
        cast(nn.Module, self.model).to(self.device)

    def encode(self, texts: Sequence[str], kind: Kind, progress: Progress | None = None) -> list[SparseVector]:
        """Per text: (term ids int64 ascending, weights float32 > 0), special tokens and zeros removed; in input order.

        ``progress`` moves by each batch's number of texts as it is encoded.
        """
        vectors: list[SparseVector | None] = [None] * len(texts)
        for positions, max_logits in self._pooled_batches(texts, kind, screened=self.screened is not None):
            weights = splade_activation(max_logits, self.options.activation)
            weights[:, self._dropped_ids] = 0.0
            for position, row in zip(positions, weights):
                term_ids = torch.nonzero(row).squeeze(1)
                vectors[position] = (term_ids.numpy(), row[term_ids].numpy())
            if progress is not None:
                progress.update(len(positions))
        return cast(list[SparseVector], vectors)  # every position was filled by its batch

    def max_logits(self, texts: Sequence[str], kind: Kind = "doc") -> torch.Tensor:
        """(n, vocab) float32 raw MLM logits max-pooled over non-padding positions (before relu/log1p)."""
        pooled = torch.empty(len(texts), self._decoder.out_features, dtype=torch.float32)
        for positions, max_logits in self._pooled_batches(texts, kind):
            pooled[positions] = max_logits
        return pooled

    def _pooled_batches(self, texts: Sequence[str], kind: Kind, screened: bool = False
                        ) -> Iterator[tuple[list[int], torch.Tensor]]:
        """Yield (input positions, max-pooled logits) per length-sorted batch; ``screened``: only the columns
        that can activate hold their logit, the others -inf (:mod:`vtrepro.model.projection`)."""
        for positions, batch in self._sorted_batches(texts, self._max_length(kind)):
            yield positions, self._pool(batch, screened)

    def _max_length(self, kind: Kind) -> int:
        if kind == "doc":
            return self.options.max_length_doc
        if kind == "query":
            return self.options.max_length_query
        raise ValueError(f"kind must be 'doc' or 'query', got {kind!r}")

    def _sorted_batches(self, texts: Sequence[str], max_length: int) -> Iterator[tuple[list[int], BatchEncoding]]:
        """Tokenize windows of texts and batch each window's texts by token length (longest first)."""
        window, batch_size = self.options.sort_window, self.options.batch_size
        for window_start in range(0, len(texts), window):
            window_texts = list(texts[window_start : window_start + window])
            encoded = self.tokenizer(window_texts, truncation=True, max_length=max_length)
            order = sorted(range(len(window_texts)), key=lambda i: -len(encoded["input_ids"][i]))
            for batch_start in range(0, len(order), batch_size):
                members = order[batch_start : batch_start + batch_size]
                batch = self.tokenizer.pad(
                    {key: [values[i] for i in members] for key, values in encoded.items()}, return_tensors="pt"
                )
                yield [window_start + i for i in members], batch

    @torch.inference_mode()
    def _pool(self, batch: BatchEncoding, screened: bool) -> torch.Tensor:
        """Max-pooled raw logits (batch, vocab): body once, head on real tokens only."""
        batch = batch.to(self.device)
        hidden = self.model.base_model(**batch)[0]
        token_mask = batch["attention_mask"].bool()
        transformed = self._head_transform(hidden[token_mask].float())
        lengths = token_mask.sum(dim=1).tolist()
        started = time.perf_counter()
        if screened and self.screened is not None:
            pooled = self.screened(transformed, lengths)
        else:
            pooled = dense_max_logits(transformed, lengths, self._decoder)
        pooled = pooled.cpu()
        self.projection_seconds += time.perf_counter() - started
        return pooled


def mlm_head_transform(name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> nn.Module:
    """The MLM head minus its vocabulary projection, as a module mapping hidden states to decoder inputs.

    The head is whatever direct children of the model its forward calls after the body (BERT ``cls``,
    RoBERTa ``lm_head``, ModernBERT ``head`` + ``decoder``, DistilBERT ``vocab_*``), found by tracing one
    forward pass. They are copied with the decoder replaced by an identity, sharing every parameter with
    the model. The split is checked against the model's own logits on that pass.
    """
    decoder = model.get_output_embeddings()
    if not isinstance(decoder, nn.Linear):
        raise VtreproError(f"model {name}: output embeddings are {type(decoder).__name__}, expected a Linear projection")
    probe = tokenizer(["a short probe", "a longer probe sentence for the head"], padding=True, return_tensors="pt")
    called: list[nn.Module] = []
    hooks = [
        child.register_forward_hook(lambda module, args, output: called.append(module))
        for child in model.children()
        if child is not model.base_model
    ]
    try:
        with torch.inference_mode():
            expected = model(**probe).logits
    finally:
        for hook in hooks:
            hook.remove()
    shared = {id(tensor): tensor for tensor in [*model.parameters(), *model.buffers()]}
    transform = copy.deepcopy(nn.Sequential(*dict.fromkeys(called)), memo={id(decoder): nn.Identity(), **shared})
    with torch.inference_mode():
        hidden = model.base_model(**probe)[0]
        actual = decoder(transform(hidden))
    if actual.shape != expected.shape or not torch.allclose(actual, expected, atol=HEAD_TOLERANCE, rtol=HEAD_TOLERANCE):
        raise VtreproError(
            f"model {name}: unsupported masked-LM architecture {type(model).__name__} "
            "(its logits are not head(body(x)) ending in a linear vocabulary projection)"
        )
    return transform


def _check_max_length(name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_length: int) -> None:
    """Reject a max length beyond what the model's position embeddings allow."""
    limit = tokenizer.model_max_length
    if limit >= UNBOUNDED_LENGTH:
        limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max_length > limit:
        raise VtreproError(f"model {name}: max length {max_length} exceeds the model's limit of {limit} tokens")
