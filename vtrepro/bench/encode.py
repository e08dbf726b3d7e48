"""``python -m vtrepro bench encode``: document encoding with :class:`~vtrepro.model.splade.SpladeEncoder`
against sentence-transformers' ``SparseEncoder`` on the same model and documents.

It checks that both give the same vectors (special tokens dropped) and prints the device and dtype, the
achieved GFLOP/s of the vocabulary projection and of the whole encoder against a plain matrix product at
the same shapes measured in the same run (:mod:`vtrepro.bench.throughput`), all for the dense projection
(the reference), then the screened projection's speed-up (over dense and over sentence-transformers) and
its agreement with dense; ``--projection`` is encode's option (``auto`` resolved as encode resolves it: when
it is dense on the device, there is no screened timing). Exit status 1
when a weight differs by more than :data:`WEIGHT_TOLERANCE`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

import numpy as np

from vtrepro.bench.machine import machine_line
from vtrepro.core.errors import EXIT_MISMATCH, EXIT_OK
from vtrepro.data.beir import load_dataset
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.loading import resolve_model

# torch and the encoders (transformers) are imported where they are used, on purpose: `--help` and
# argument errors stay fast.
if TYPE_CHECKING:
    import torch

SparseVector = tuple[np.ndarray, np.ndarray]
T = TypeVar("T")
QUANTIZATION_SCALE = 100
WEIGHT_TOLERANCE = 1e-4
"""Largest weight difference accepted as float32 rounding; quantized impacts may then differ by 1 at .5 ties."""


@dataclass(frozen=True)
class Timing:
    name: str
    seconds: float
    cpu_seconds: float
    documents: int

    @property
    def docs_per_second(self) -> float:
        return self.documents / self.seconds

    @property
    def cores_used(self) -> float:
        """Average cores this process kept busy: below the thread count when other jobs took CPU."""
        return self.cpu_seconds / self.seconds


@dataclass(frozen=True)
class Agreement:
    documents: int
    max_abs_difference: float
    identical_quantized: int
    differing_impacts: int
    max_impact_difference: int

    @property
    def identical_fraction(self) -> float:
        return self.identical_quantized / self.documents if self.documents else 1.0


@dataclass(frozen=True)
class EncodeBench:
    """What ``bench encode`` runs: the model, the first ``limit`` documents of ``dataset`` (None: all), the
    encoder's options (batch size, document length, body dtype, and the projection compared with the dense
    reference, resolved as encode resolves it) and device, how many timed runs of each
    encoder (the fastest kept), and whether the model may run the code it ships."""

    model: str
    dataset: str = "scifact"
    data_dir: str | None = None
    limit: int | None = None
    encoder: EncoderOptions = EncoderOptions()
    repeat: int = 1
    device: str | None = None
    trust_remote_code: bool = False


def bench_encode(bench: EncodeBench) -> int:
    """Time both encoders on the same documents, print throughput and vector agreement, the achieved
    GFLOP/s against the device's matrix-product rate, and the screened projection's speed-up."""
    from vtrepro.model.splade import SpladeEncoder, check_device

    check_device(bench.device)  # before the dataset and both models load
    from sentence_transformers import SparseEncoder

    documents = load_dataset(bench.dataset, bench.data_dir).corpus()
    texts = [document.contents for document in (documents[:bench.limit] if bench.limit else documents)]
    ours = SpladeEncoder(bench.model, bench.encoder.replace(projection="dense"), device=bench.device,  # the reference
                         trust_remote_code=bench.trust_remote_code)
    theirs = SparseEncoder(resolve_model(bench.model), device=str(ours.device), trust_remote_code=bench.trust_remote_code)
    theirs.max_seq_length = bench.encoder.max_length_doc
    token_counts = [len(ids) for ids in
                    ours.tokenizer(texts, truncation=True, max_length=bench.encoder.max_length_doc)["input_ids"]]
    print(machine_line(with_torch=True))
    print(f"documents: {len(texts)} of {bench.dataset}, mean {np.mean(token_counts):.0f} tokens "
          f"(max length {bench.encoder.max_length_doc}, batch size {bench.encoder.batch_size}), model {bench.model}")

    def encode_ours(batch: list[str]) -> list[SparseVector]:
        return ours.encode(batch, kind="doc")

    def encode_theirs(batch: list[str]) -> torch.Tensor:
        return theirs.encode_document(batch, batch_size=bench.encoder.batch_size)

    encode_ours(texts[:bench.encoder.batch_size]), encode_theirs(texts[:bench.encoder.batch_size])  # warm-up: lazy initialisation
    ours.projection_seconds = 0.0
    our_timing, our_vectors = _best_of(bench.repeat, "vtrepro SpladeEncoder (dense projection)", encode_ours, texts)
    their_timing, their_embeddings = _best_of(bench.repeat, "sentence-transformers SparseEncoder", encode_theirs,
                                              texts)
    for timing in (our_timing, their_timing):
        print(f"{timing.name}: {timing.docs_per_second:.1f} docs/s "
              f"({timing.seconds:.1f} s, {timing.cores_used:.2f} cores busy)")
    print(f"speedup: {our_timing.docs_per_second / their_timing.docs_per_second:.2f}x")
    print(f"device {ours.device}, body dtype {bench.encoder.dtype}")
    _report_arithmetic(ours, sum(token_counts), our_timing, bench.repeat)
    screened = _bench_screened(bench, texts, (our_timing, their_timing), our_vectors)

    agreement = compare(our_vectors, _sparse_rows(their_embeddings, ours.special_ids))
    print(f"vectors: max |weight difference| {agreement.max_abs_difference:.2e}; "
          f"quantized round(w*{QUANTIZATION_SCALE}) identical for {agreement.identical_quantized}/{agreement.documents} "
          f"docs ({agreement.identical_fraction:.2%}); {agreement.differing_impacts} impacts differ, "
          f"by at most {agreement.max_impact_difference}")
    agreed = all(result.max_abs_difference <= WEIGHT_TOLERANCE for result in (agreement, screened) if result is not None)
    return EXIT_OK if agreed else EXIT_MISMATCH


def _report_arithmetic(encoder, tokens: int, timing: Timing, repeat: int) -> None:
    """Achieved GFLOP/s of the projection and of the whole encoder, against a plain matrix product's rate
    at the projection's shapes measured now on the same device."""
    from vtrepro.bench.throughput import encoder_flops, matmul_rate, projection_flops

    ceiling = matmul_rate(encoder)
    projection_seconds = encoder.projection_seconds / repeat
    projection = projection_flops(tokens, encoder) / projection_seconds / 1e9
    whole = encoder_flops(tokens, encoder) / timing.seconds / 1e9
    print(f"arithmetic: float32 matmul at the projection's shapes {ceiling:.1f} GFLOP/s; projection "
          f"{projection:.1f} GFLOP/s ({projection / ceiling:.0%}); whole encoder {whole:.1f} GFLOP/s "
          f"({whole / ceiling:.0%}); the projection takes {projection_seconds / timing.seconds:.0%} of the time")


def _bench_screened(bench: EncodeBench, texts: list[str], timings: tuple[Timing, Timing],
                    dense_vectors: Sequence[SparseVector]) -> Agreement | None:
    """The bench's projection, resolved as encode resolves it, on the same documents when it is screened: its
    speed-up over the dense one and over sentence-transformers (``timings``: dense, sentence-transformers), and
    its agreement with dense (None when it is dense)."""
    from vtrepro.model.splade import SpladeEncoder

    encoder = SpladeEncoder(bench.model, bench.encoder, device=bench.device, trust_remote_code=bench.trust_remote_code)
    if encoder.screened is None:  # auto chose dense here, as encode would
        print(f"projection {bench.encoder.projection} is dense on this device: no screened projection to time")
        return None
    encoder.encode(texts[:bench.encoder.batch_size], kind="doc")  # warm-up
    encoder.screened.kept = encoder.screened.columns = 0
    timing, vectors = _best_of(bench.repeat, "vtrepro screened", lambda batch: encoder.encode(batch, kind="doc"), texts)
    agreement = compare(vectors, dense_vectors)
    dense, theirs = timings
    print(f"screened projection ({encoder.screened.screen} screen): {timing.docs_per_second:.1f} docs/s, "
          f"{timing.docs_per_second / dense.docs_per_second:.2f}x the dense encoder, "
          f"{timing.docs_per_second / theirs.docs_per_second:.2f}x sentence-transformers; "
          f"{encoder.screened.kept / encoder.screened.columns:.2%} of columns computed exactly; max |weight "
          f"difference| to dense {agreement.max_abs_difference:.2e}, identical quantized vectors "
          f"{agreement.identical_quantized}/{agreement.documents}")
    return agreement


def compare(ours: Sequence[SparseVector], theirs: Sequence[SparseVector]) -> Agreement:
    """Largest weight difference over all terms (a missing term weighs 0), and how the quantized vectors differ."""
    max_difference, identical, differing_impacts, max_impact_difference = 0.0, 0, 0, 0
    for (our_ids, our_weights), (their_ids, their_weights) in zip(ours, theirs, strict=True):
        our_terms = dict(zip(our_ids.tolist(), our_weights.tolist()))
        their_terms = dict(zip(their_ids.tolist(), their_weights.tolist()))
        for term in our_terms.keys() | their_terms.keys():
            max_difference = max(max_difference, abs(our_terms.get(term, 0.0) - their_terms.get(term, 0.0)))
        our_impacts, their_impacts = _quantized(our_ids, our_weights), _quantized(their_ids, their_weights)
        impact_differences = [
            abs(our_impacts.get(term, 0) - their_impacts.get(term, 0)) for term in our_impacts.keys() | their_impacts.keys()
        ]
        differing = sum(difference > 0 for difference in impact_differences)
        identical += differing == 0
        differing_impacts += differing
        max_impact_difference = max([max_impact_difference, *impact_differences])
    return Agreement(len(ours), max_difference, identical, differing_impacts, max_impact_difference)


def _quantized(term_ids: np.ndarray, weights: np.ndarray) -> dict[int, int]:
    impacts = np.rint(weights * QUANTIZATION_SCALE).astype(np.int64)
    return {term: impact for term, impact in zip(term_ids.tolist(), impacts.tolist()) if impact > 0}


def _best_of(repeat: int, name: str, encode: Callable[[list[str]], T], texts: list[str]) -> tuple[Timing, T]:
    """Fastest of ``repeat`` timed runs, with the output of the last."""
    best: Timing | None = None
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        output = encode(texts)
        timing = Timing(name, time.perf_counter() - started, time.process_time() - cpu_started, len(texts))
        if best is None or timing.seconds < best.seconds:
            best = timing
    assert best is not None, "repeat is at least 1 (checked by the parser)"
    return best, output


def _sparse_rows(embeddings: torch.Tensor, special_ids: frozenset[int]) -> list[SparseVector]:
    """Rows of a sparse COO (docs, vocab) tensor as (ascending term ids, weights), special ids and zeros dropped."""
    embeddings = embeddings.coalesce().cpu()  # sentence-transformers leaves them on the GPU
    rows, term_ids = embeddings.indices().numpy()
    weights = embeddings.values().numpy().astype(np.float32)
    boundaries = np.searchsorted(rows, np.arange(1, embeddings.shape[0]))
    return [
        _without((ids.astype(np.int64), values), special_ids)
        for ids, values in zip(np.split(term_ids, boundaries), np.split(weights, boundaries))
    ]


def _without(vector: SparseVector, special_ids: frozenset[int]) -> SparseVector:
    term_ids, weights = vector
    keep = (weights > 0) & ~np.isin(term_ids, list(special_ids))
    return term_ids[keep], weights[keep]
