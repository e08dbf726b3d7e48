"""What identifies a model: a digest of its weights, not of the folder or Hub id they were loaded from.
An encoded corpus records it among its settings, so an encoding resumes only with the same weights."""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 over a model's parameter names and bytes: identifies the weights, wherever they came from
    (in the precision they are used in: numpy has no bfloat16, so the raw bytes are read)."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
