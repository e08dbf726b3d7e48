"""``projection: auto`` takes the screened projection only on a CPU whose int8 instructions pay for the screen,
decided by the processor's flags, not by a timing: every process of one machine chooses alike under any load."""
import torch

from vtrepro.model.projection import INT8_INSTRUCTIONS, cpu_flags, resolve_projection


def test_auto_follows_the_cpus_int8_instructions() -> None:
    expected = "screened" if set(INT8_INSTRUCTIONS) & cpu_flags() else "dense"
    assert all(resolve_projection("auto", torch.device("cpu")) == expected for _ in range(3))


def test_auto_is_dense_off_cpu_and_named_projections_stay() -> None:
    assert resolve_projection("auto", torch.device("cuda")) == "dense"
    for name in ("dense", "screened", "screened-int8", "screened-bfloat16"):
        assert resolve_projection(name, torch.device("cpu")) == name
