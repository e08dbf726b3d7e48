"""The encoder's options, importable without torch: specs, the encode command and torchrun's command line
are all read from :class:`EncoderOptions`, the one place each option's default and bounds are written.

Adding an option is one field here (and its test): a spec's ``encoder:`` block, ``--flag-name`` on the
encode command and :meth:`~vtrepro.core.options.Options.to_argv` for subprocesses take it from the field.
"""
from __future__ import annotations

from dataclasses import dataclass

from vtrepro.core.options import Options, option
from vtrepro.core.schema import MAX_BATCH_SIZE, MAX_TEXT_TOKENS, Field

PRECISIONS = ("float32", "bfloat16", "float16")
"""Precisions of the encoder body; the head, pooling and bias stay float32."""
PROJECTIONS = ("auto", "dense", "screened", "screened-int8", "screened-bfloat16")
"""How the vocabulary is projected (:mod:`vtrepro.model.projection`): ``dense`` is the reference, a full
float32 product; ``screened`` takes the int8 screen on CPU (where its integer products are exact) and the
bfloat16 screen elsewhere; ``screened-int8`` and ``screened-bfloat16`` name their screen. None drops a column
the dense projection activates; their quantized vectors equalled dense's in every run measured (weights may
differ in float32's last bits). ``auto`` (the default) is ``screened`` on a CPU with VNNI or AMX int8
instructions (read from its flags, so every process of a machine chooses alike: int8 products ran 2.8-8x
float32's on an AVX-512 EPYC with VNNI, 24x slower on an AVX2 EPYC without it, where PyTorch has no fast int8
kernel) and ``dense``
everywhere else, GPUs included, where the screen's speed has not been measured
(:func:`vtrepro.model.projection.resolve_projection`)."""
ACTIVATIONS = ("log1p", "log1p-log1p")
"""Term weight from a max-pooled logit x: ``log1p`` is SPLADE's log(1 + relu(x)); ``log1p-log1p`` is
log(1 + log(1 + relu(x))), the OpenSearch neural-sparse v3 document models' (their model cards)."""
SCREENS = ("auto", "int8", "bfloat16")
"""The screens of the screened projection, ``auto`` choosing by device."""


IDF_NAME = "idf.json"
"""The file of an inference-free model's query weights ({token: idf}) in its folder (:mod:`vtrepro.model.idf`)."""

MAX_SORT_WINDOW = 100_000
"""Most texts per sort window: a window is tokenized at once and its vectors held in memory (50 times the default)."""


@dataclass(frozen=True)
class EncoderOptions(Options):
    """How a SPLADE encoder (:class:`vtrepro.model.splade.SpladeEncoder`) reads and computes texts.

    A text's float32 weights depend on the batch it shares (padded length, matrix shapes), so the batch
    size and sort window are settings of the vectors, like the lengths and the precision. A half-precision
    ``dtype`` gives other vectors than float32 (their own pins in a spec); a screened ``projection`` gave
    float32's quantized vectors in every run measured. Lengths beyond the model's positions are refused
    where the model is loaded.
    """

    max_length_doc: int = option(Field(int, 512, minimum=1, maximum=MAX_TEXT_TOKENS,
                                       help=f"tokens per document, at most {MAX_TEXT_TOKENS} and the model's positions"))
    max_length_query: int = option(Field(int, 64, minimum=1, maximum=MAX_TEXT_TOKENS,
                                         help=f"tokens per query, at most {MAX_TEXT_TOKENS} and the model's positions"))
    batch_size: int = option(Field(int, 32, minimum=1, maximum=MAX_BATCH_SIZE,
                                   help=f"texts per batch, 1 to {MAX_BATCH_SIZE}"))
    sort_window: int = option(Field(
        int, 2000, minimum=1, maximum=MAX_SORT_WINDOW,
        help=f"texts sorted by length into batches together, 1 to {MAX_SORT_WINDOW}; vectors depend on it, so it is "
             "part of the settings. Give processes whole windows: a multiple of it as --shard-size"))
    """Texts are tokenized and sorted by length into batches within consecutive windows of this many texts,
    so batches are a function of the input order, this window and the batch size alone; windows also bound
    memory."""
    dtype: str = option(Field(str, "float32", PRECISIONS,
                              help="precision of the encoder body; head, pooling and bias stay float32"))
    activation: str = option(Field(
        str, "log1p", ACTIVATIONS,
        help="term weight from a max-pooled logit: log1p (SPLADE's log(1+relu(x))) or log1p-log1p "
             "(log(1+log(1+relu(x))), OpenSearch's v3 document models)"))
    projection: str = option(Field(
        str, "auto", PROJECTIONS,
        help="dense: the full float32 product (the reference); screened: a low-precision pass with a rigorous "
             "error bound picks the columns that can activate, computed exactly in float32; its screen is int8 on "
             "CPU and bfloat16 on GPUs, or named (screened-int8, screened-bfloat16); auto (default): screened on "
             "a CPU whose int8 products run at least twice float32's speed (probed), dense elsewhere; see "
             "docs/performance.md"))
