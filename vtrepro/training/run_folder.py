"""The layout of a training run folder (``runs/train/<recipe name>/``): file names, stage folders,
checkpoints with their trainer state, and the per-step log with its curves plot.

A checkpoint's trainer state is ``trainer_state.json`` (step, recipe fingerprint, optimizer parameter
groups, scheduler, the scalar parts of every process's RNG states) plus ``trainer_state.safetensors``
(the optimizer's per-parameter tensors and the RNG state vectors). Both are read as data, checked
against the model and optimizer being resumed before they are used; nothing in a run folder is ever
unpickled (a checkpoint holding only an older vtrepro's pickled ``trainer_state.pt`` is refused).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, parse_json, read_json_file, read_jsonl, read_lines, write_json
from vtrepro.model.safetensors_header import check_safetensors
from vtrepro.training.stages import Stage

# matplotlib is imported only to draw the curves plot, on purpose: it is slow to import and optional for a run.
# torch, safetensors and numpy are imported where a trainer state is written or read (numpy also where the
# curves are drawn): the recipe checks, `--help` and `--dry-run` (which find the latest checkpoint) stay fast.
if TYPE_CHECKING:
    import torch

STATE_NAME = "trainer_state.json"
STATE_TENSORS_NAME = "trainer_state.safetensors"
PICKLED_STATE_NAME = "trainer_state.pt"
"""The pickled trainer state of vtrepro before safetensors states: refused, never read."""
STATE_FORMAT = "vtrepro.trainer-state/1"
ADAMW_STATE = ("step", "exp_avg", "exp_avg_sq")
"""The per-parameter state of torch's AdamW (amsgrad off), as the trainer uses it: a scalar step and two
tensors shaped like the parameter."""
MT19937_WORDS = 624
"""Words of a Mersenne Twister state (Python's ``random`` adds its position: 625 values; NumPy keeps it apart)."""
CUDA_RNG_BYTES = 16
"""torch's CUDA generator state: an 8-byte seed and an 8-byte offset."""
SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "U8": "uint8", "I64": "int64"}
MAX_OPTIMIZER_SETTING = 1e3
"""The largest learning rate, weight decay or epsilon a resumed optimizer state may hold (recipes use 1e-5 to
0.1); a NaN, an infinity or a negative value is refused before training on it."""
LOG_NAME = "train_log.jsonl"
PLOT_NAME = "curves.png"
TRAINING_REPORT = "training_report.json"
FAILED_NAME = ".rank0-failed"
PREPARED_NAME = ".prepared"


def stage_dir(output: Path, index: int, stage: Stage) -> Path:
    return output / f"{index + 1:02d}-{stage.name}"


def latest_checkpoint(output: Path) -> Path | None:
    """The finished checkpoint with the highest step (checkpoints are renamed into place when complete).

    One that holds only a pickled trainer state (``trainer_state.pt`` of an older vtrepro) is refused
    here, before any work: vtrepro never unpickles, so it cannot resume from it.
    """
    found = sorted(output.glob("checkpoint-*"), key=lambda path: path.name)
    if not found:
        return None
    pickled = found[-1] / PICKLED_STATE_NAME
    if pickled.is_file() and not (found[-1] / STATE_NAME).is_file():
        raise VtreproError(
            f"{pickled}: a pickled trainer state (an older vtrepro wrote these), which vtrepro never unpickles "
            f"(a pickle can run code), so it cannot resume from it; remove the checkpoint-* folders of {output} to "
            "train again from the start (finished stages and mined data are kept)")
    return found[-1]


def truncate_log(path: Path, step: int) -> None:
    """Keep the log's records up to ``step`` (those after the resumed checkpoint are redone)."""
    if not path.exists():
        return
    kept = []
    for number, line in read_lines(path):
        record = parse_json(line, f"{path}:{number}", "remove that line (or the file: it is rewritten from the "
                                                        "checkpoints' steps on)") if line.strip() else None
        if isinstance(record, dict) and type(record.get("step")) is int:
            if record["step"] <= step:
                kept.append(line.rstrip("\r\n"))
        elif record is not None:
            raise VtreproError(f"{path}:{number}: not a training log record (an object with an integer step); "
                               "remove that line")
    with atomic_write(path) as handle:
        handle.write("".join(line + "\n" for line in kept))


def plot_curves(log_path: Path, out: Path) -> None:
    """curves.png: loss, FLOPS, active terms and learning rate per step."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = [record for _, record in read_jsonl(log_path)]
    if not log:
        return
    steps = [record["step"] for record in log]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [("loss", ("loss", "ranking_loss"), "linear"), ("FLOPS", ("flops_q", "flops_d"), "log"),
              ("active terms", ("active_q", "active_d"), "log"), ("learning rate", ("lr",), "linear")]
    window = max(1, len(log) // 50)
    for axis, (title, keys, scale) in zip(axes.flat, panels):
        smoothed = window > 1 and keys != ("lr",)
        for key in keys:
            values = np.array([max(record[key], 1e-6) if scale == "log" else record[key] for record in log])
            line, = axis.plot(steps, values, alpha=0.3 if smoothed else 1.0, label="_raw" if smoothed else key)
            if smoothed:
                axis.plot(steps[window - 1:], np.convolve(values, np.ones(window) / window, mode="valid"),
                          color=line.get_color(), label=key)
        axis.set_title(f"{title} (lines: mean of {window} steps)" if smoothed else title)
        axis.set_yscale(scale)
        axis.legend()
    for axis in axes[1]:
        axis.set_xlabel("step")
    figure.tight_layout()
    with atomic_write(out, "wb") as handle:
        figure.savefig(handle, format="png", dpi=90)
    plt.close(figure)


# ---------------------------------------------------------------------------- trainer state


@dataclass
class TrainerState:
    """What a checkpoint holds besides the model to resume a run exactly."""

    step: int
    fingerprint: str
    world: int
    cpu_threads: int | None
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: list[dict[str, Any]]
    """Each process's RNG states, in rank order, as ``distributed.rng_state`` returns them."""


def write_trainer_state(folder: Path, state: TrainerState, examples_seen: int) -> None:
    """Write ``state`` into a checkpoint folder being staged: JSON fields and a safetensors file."""
    from safetensors.torch import save_file

    tensors = {f"optimizer.{index}.{name}": value
               for index, entries in state.optimizer["state"].items() for name, value in entries.items()}
    rng_fields = []
    for rank, rng in enumerate(state.rng):
        version, words, gauss_next = rng["python"]
        kind, keys, position, has_gauss, cached_gaussian = rng["numpy"]
        tensors |= {f"rng.{rank}.torch": rng["torch"], f"rng.{rank}.python": _int64(words),
                    f"rng.{rank}.numpy": _int64(keys)}
        if "cuda" in rng:
            tensors[f"rng.{rank}.cuda"] = rng["cuda"]
        rng_fields.append({"python": {"version": version, "gauss_next": gauss_next},
                           "numpy": {"kind": kind, "position": position, "has_gauss": has_gauss,
                                     "cached_gaussian": cached_gaussian}})
    save_file({name: value.detach().cpu().contiguous() for name, value in tensors.items()}, folder / STATE_TENSORS_NAME)
    write_json(folder / STATE_NAME, {
        "format": STATE_FORMAT, "step": state.step, "fingerprint": state.fingerprint, "world": state.world,
        "examples_seen": examples_seen, "cpu_threads": state.cpu_threads,
        "optimizer": {"param_groups": state.optimizer["param_groups"]}, "scheduler": state.scheduler,
        "rng": rng_fields})


def read_trainer_fields(checkpoint: Path, steps: int | None = None) -> dict[str, Any]:
    """The JSON fields of a checkpoint's trainer state, with its tensor file's header checked; any
    problem is one line naming the file. Cheap: read before the model loads. Its step must lie within the
    recipe's ``steps`` (when given), its numbers be finite (the one bounded JSON reader)."""
    path = checkpoint / STATE_NAME
    remove = f"remove {checkpoint} to resume from the checkpoint before it (or all checkpoint-* folders to start over)"
    if not path.is_file():
        raise VtreproError(f"{checkpoint}: no {STATE_NAME}, so not a complete vtrepro checkpoint; {remove}")
    fields = read_json_file(path, remove, JSON_FILE_BYTES["trainer_state"], checkpoint)
    expected: dict[str, type | tuple[type, ...]] = {
        "format": str, "step": int, "fingerprint": str, "world": int, "examples_seen": int,
        "cpu_threads": (int, type(None)), "optimizer": dict, "scheduler": dict, "rng": list}
    wrong = [key for key, kind in expected.items() if not isinstance(fields, dict)
             or not isinstance(fields.get(key), kind) or isinstance(fields.get(key), bool)]
    if wrong or fields["format"] != STATE_FORMAT or fields["step"] < 1 or not 1 <= fields["world"] == len(fields["rng"]):
        what = f"field {wrong[0]!r} missing or mistyped" if wrong else "its format, step or process count"
        raise VtreproError(f"{path}: not a {STATE_FORMAT} file ({what}); {remove}")
    if steps is not None and fields["step"] > steps:
        raise VtreproError(f"{path}: step {fields['step']}, beyond the recipe's {steps} training steps, so not a "
                           f"checkpoint of this recipe; {remove}")
    if fields["examples_seen"] < 0 or (fields["cpu_threads"] is not None and fields["cpu_threads"] < 1):
        raise VtreproError(f"{path}: examples_seen or cpu_threads out of range; {remove}")
    if not (checkpoint / STATE_TENSORS_NAME).is_file():
        raise VtreproError(f"{checkpoint}: no {STATE_TENSORS_NAME}, so not a complete vtrepro checkpoint; {remove}")
    check_safetensors(checkpoint / STATE_TENSORS_NAME, remove)
    return fields


def read_trainer_state(checkpoint: Path, fields: dict[str, Any], optimizer: torch.optim.Optimizer,
                       scheduler: torch.optim.lr_scheduler.LRScheduler) -> TrainerState:
    """The trainer state of ``checkpoint`` (``fields`` from :func:`read_trainer_fields`), shaped like the
    freshly built ``optimizer`` and ``scheduler`` it will be loaded into: the same parameter groups and
    settings, per-parameter tensors of the parameters' shapes, RNG states of the sizes this process uses.
    Tensors are loaded only once the header says they are of those shapes, so a file cannot make this
    allocate more than the optimizer itself."""
    from safetensors.torch import load_file

    path, groups = checkpoint / STATE_TENSORS_NAME, optimizer.state_dict()["param_groups"]
    where = f"{checkpoint / STATE_NAME}: does not fit the model and recipe being resumed"
    saved_groups = _shaped_like(fields["optimizer"].get("param_groups"), groups, f"{where} (optimizer.param_groups)")
    if [group["params"] for group in saved_groups] != [group["params"] for group in groups]:
        raise VtreproError(f"{where} (optimizer parameters); remove {checkpoint} or start over")
    for number, group in enumerate(saved_groups):
        for key in ("lr", "initial_lr", "weight_decay", "eps"):
            if key in group and not (_is_number(group[key]) and 0 <= group[key] <= MAX_OPTIMIZER_SETTING):
                raise VtreproError(f"{checkpoint / STATE_NAME}: optimizer.param_groups[{number}].{key} is "
                                   f"{group[key]!r}, not a number in [0, {MAX_OPTIMIZER_SETTING:g}]; remove {checkpoint} "
                                   "or start over")
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    _check_tensor_header(path, check_safetensors(path, f"remove {checkpoint} or start over"), parameters, fields["world"])
    tensors = load_file(path)
    state: dict[int, dict[str, Any]] = {}
    for name, tensor in tensors.items():
        kind, index, entry = name.split(".")
        if kind == "optimizer":
            state.setdefault(int(index), {})[entry] = tensor
    if any(set(entries) != set(ADAMW_STATE) for entries in state.values()):
        raise VtreproError(f"{path}: an optimizer entry lacks one of {', '.join(ADAMW_STATE)}; remove {checkpoint}")
    return TrainerState(
        step=fields["step"], fingerprint=fields["fingerprint"], world=fields["world"], cpu_threads=fields["cpu_threads"],
        optimizer={"state": state, "param_groups": saved_groups},
        scheduler=_shaped_like(fields["scheduler"], scheduler.state_dict(), f"{where} (scheduler)"),
        rng=[_rng_state(fields["rng"][rank], tensors, rank, f"{checkpoint / STATE_NAME}: rng[{rank}]")
             for rank in range(fields["world"])])


def _int64(values: Any) -> torch.Tensor:
    """Words of an RNG state (Python ints or a uint32 array, all below 2**32) as an int64 tensor."""
    import numpy as np
    import torch

    return torch.tensor(np.asarray(values, dtype=np.int64))


def _shaped_like(value: Any, template: Any, where: str) -> Any:
    """``value`` read from JSON, checked to have ``template``'s layout (dict keys, list lengths, leaf types)
    and given its tuples back; anything else is a one-line error saying ``where``."""
    if isinstance(template, dict) and isinstance(value, dict) and set(value) == set(template):
        return {key: _shaped_like(value[key], template[key], where) for key in template}
    if isinstance(template, (list, tuple)) and isinstance(value, list) and len(value) == len(template):
        items = [_shaped_like(item, model, where) for item, model in zip(value, template)]
        return tuple(items) if isinstance(template, tuple) else items
    leaf = not isinstance(template, (dict, list, tuple))
    if leaf and (type(value) is type(template) or _is_number(value) and _is_number(template)):
        return value
    raise VtreproError(f"{where}; it was written for another model or recipe: remove it or start over")


def _is_number(value: Any) -> bool:
    """An int or a float, not a bool (JSON writes a learning rate of 1.0 as 1.0, but a recipe may give 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int_in(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _check_tensor_header(path: Path, header: dict[str, Any], parameters: list[torch.Tensor], world: int) -> None:
    """Every tensor of a trainer state must be one the trainer writes, with its exact dtype and shape."""
    import torch

    torch_rng = tuple(torch.get_rng_state().shape)
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        expected = _expected_tensor(name, parameters, world, torch_rng)
        found = (SAFETENSORS_DTYPES.get(entry.get("dtype")), tuple(entry.get("shape", ())))
        if expected is None or found != expected:
            raise VtreproError(f"{path}: tensor {name!r} ({entry.get('dtype')} {entry.get('shape')}) is not one this "
                               "run's trainer state holds; remove the checkpoint or start over")


def _expected_tensor(name: str, parameters: list[torch.Tensor], world: int,
                     torch_rng: tuple[int, ...]) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, shape) a trainer-state tensor of this name must have, or None when no such tensor belongs there."""
    match = re.fullmatch(r"(optimizer|rng)\.(\d{1,9})\.(\w+)", name)
    if match is None:
        return None
    kind, index, entry = match[1], int(match[2]), match[3]
    if kind == "optimizer" and index < len(parameters) and entry in ADAMW_STATE:
        parameter = parameters[index]
        return ("float32", ()) if entry == "step" else (str(parameter.dtype).removeprefix("torch."), tuple(parameter.shape))
    rng_shapes = {"torch": ("uint8", torch_rng), "cuda": ("uint8", (CUDA_RNG_BYTES,)),
                  "python": ("int64", (MT19937_WORDS + 1,)), "numpy": ("int64", (MT19937_WORDS,))}
    return rng_shapes.get(entry) if kind == "rng" and index < world else None


def _rng_state(fields: Any, tensors: dict[str, torch.Tensor], rank: int, where: str) -> dict[str, Any]:
    """One process's RNG states (``distributed.set_rng_state``'s argument) from its JSON fields and tensors,
    every value in the range its generator accepts."""
    import numpy as np

    python = fields.get("python") if isinstance(fields, dict) else None
    numpy = fields.get("numpy") if isinstance(fields, dict) else None
    words = {part: tensors[f"rng.{rank}.{part}"] for part in ("torch", "python", "numpy")
             if f"rng.{rank}.{part}" in tensors}
    valid = (isinstance(python, dict) and isinstance(numpy, dict) and python.get("version") == 3
             and type(python.get("gauss_next")) in (float, type(None)) and numpy.get("kind") == "MT19937"
             and _is_int_in(numpy.get("position"), 0, MT19937_WORDS) and _is_int_in(numpy.get("has_gauss"), 0, 1)
             and type(numpy.get("cached_gaussian")) is float and len(words) == 3
             and all(int(words[part].min()) >= 0 and int(words[part].max()) < 2**32 for part in ("python", "numpy"))
             and int(words["python"][-1]) <= MT19937_WORDS)  # Python keeps its position as the last word
    if not valid or not isinstance(python, dict) or not isinstance(numpy, dict):  # the latter two for the type checker
        raise VtreproError(f"{where}: RNG state missing or out of range; remove the checkpoint or start over")
    state = {"torch": words["torch"],
             "python": (3, tuple(words["python"].tolist()), python["gauss_next"]),
             "numpy": ("MT19937", words["numpy"].numpy().astype(np.uint32), numpy["position"], numpy["has_gauss"],
                       numpy["cached_gaussian"])}
    if f"rng.{rank}.cuda" in tensors:
        state["cuda"] = tensors[f"rng.{rank}.cuda"]
    return state
