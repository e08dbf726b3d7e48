"""``projection: auto`` takes the screened projection only on a CPU whose int8 products pay for the screen."""
import torch

from vtrepro.model.projection import INT8_SPEEDUP_REQUIRED, int8_speedup, resolve_projection


def test_auto_follows_the_measured_int8_speed_on_cpu() -> None:
    speedup = int8_speedup(128, torch.get_num_threads())
    assert speedup > 0
    expected = "screened" if speedup >= INT8_SPEEDUP_REQUIRED else "dense"
    assert resolve_projection("auto", torch.device("cpu"), 128) == expected
    assert int8_speedup(128, torch.get_num_threads()) == speedup  # probed once per process and shape


def test_auto_is_dense_off_cpu_and_named_projections_stay() -> None:
    assert resolve_projection("auto", torch.device("cuda"), 128) == "dense"
    for name in ("dense", "screened", "screened-int8", "screened-bfloat16"):
        assert resolve_projection(name, torch.device("cpu"), 128) == name
