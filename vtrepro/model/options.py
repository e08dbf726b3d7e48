"""The encoder's named options, importable without torch (command lines and specs validate against them)."""
from __future__ import annotations

PRECISIONS = ("float32", "bfloat16", "float16")
"""Precisions of the encoder body; the head, pooling and bias stay float32."""
PROJECTIONS = ("dense", "screened", "screened-int8", "screened-bfloat16")
"""How the vocabulary is projected (:mod:`vtrepro.model.projection`): ``screened`` takes the int8 screen on
CPU (where its integer products are exact) and the bfloat16 screen elsewhere; the others name their
screen. None drops a column the dense projection activates; their quantized vectors equalled dense's in
every run measured (weights may differ in float32's last bits)."""
SCREENS = ("auto", "int8", "bfloat16")
"""The screens of the screened projection, ``auto`` choosing by device."""
