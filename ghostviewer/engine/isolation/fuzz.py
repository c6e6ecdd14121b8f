"""Fuzz an isolated module: run it over varied versions of its real inputs and say which ones break it.

Variations, each from the real call: text sequence length 1..N for `encoder_hidden_states` (the real one cut
or padded by repeating its last token), spatial size ×0.5 and ×2 (4-D inputs, nearest resampling), batch 1
and 2, the main input scaled ×0, ×1e-3, ×10, ×1e3, and the dtypes float32, float16 and bfloat16. A case is
broken when the output holds NaN or Inf, or collapses (every value equal, std 0; or a token sequence the same at
every token from more than one unmasked key, as block depth's prompt sentinels judge it; not judged when the input
itself is constant, as ×0 makes it), or when a part inside it collapses that did not in the real call (an
attention zeroed behind its block's residual). A case the module cannot run (a size or dtype it does not take) is
skipped, with the reason.

A ghost-lab fault of the run is re-applied to the rebuilt module (isolation/injected.py). The
short-prompt-attention fault decides by the prompt's word count: a fuzzed context of L tokens is read as an
unpadded tokenization (BOS, L-2 words, EOS), so its collapse shows up at short lengths only.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ghostviewer.engine.isolation.folder import read_folder, rebuild_case
from ghostviewer.engine.isolation.injected import apply_faults
from ghostviewer.engine.isolation.outputs import broken_by, output_stats, stream_adapter
from ghostviewer.engine.module_io import main_tensor
from ghostviewer.engine.tracing.tracer import attends_through_a_mask

MAIN_INPUTS = ("hidden_states", "sample", "input_tensor", "x")
SCALES = (0.0, 1e-3, 10.0, 1e3)
DTYPES = ("float32", "float16", "bfloat16")


@dataclass
class Case:
    vary: str
    value: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    seq_len: int | None = None  # the text length the fault should see (None: the recorded prompt's)
    dtype: str | None = None
    judge_collapse: bool = True


def _map(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _main_key(args: tuple, kwargs: dict) -> str | int | None:
    for key in MAIN_INPUTS:
        if isinstance(kwargs.get(key), torch.Tensor):
            return key
    return 0 if args and isinstance(args[0], torch.Tensor) else None


def _with(args: tuple, kwargs: dict, key: str | int, value: Any) -> tuple[tuple, dict]:
    if isinstance(key, int):
        return (*args[:key], value, *args[key + 1:]), kwargs
    return args, {**kwargs, key: value}


def _resize_seq(t: torch.Tensor, length: int, dim: int = 1) -> torch.Tensor:
    if length <= t.shape[dim]:
        return t.narrow(dim, 0, length)
    last = t.narrow(dim, t.shape[dim] - 1, 1)
    return torch.cat([t, last.expand(*[length - t.shape[dim] if d == dim else -1 for d in range(t.ndim)])], dim)


def seq_lengths(n: int) -> list[int]:
    """Every length up to 32 (or to N), then a few up to N, and 2N (padded)."""
    lengths = set(range(1, min(n, 32) + 1)) | {n, 2 * n}
    lengths |= {length for length in (48, 64, 96, 128, 192, 256) if length < n}
    return sorted(lengths)


def _seq_cases(args: tuple, kwargs: dict) -> Iterator[Case]:
    context = kwargs.get("encoder_hidden_states")
    if not isinstance(context, torch.Tensor) or context.ndim != 3:
        return
    # Every mask over the text's tokens goes with it: a block's `encoder_attention_mask`, and an attention module's
    # `attention_mask` (diffusers' Attention takes the cross-attention mask by that name; PixArt's T5 is masked).
    masks = [key for key, value in kwargs.items() if "mask" in key and isinstance(value, torch.Tensor)
             and value.ndim >= 1 and value.shape[-1] == context.shape[1]]
    text = int(context.shape[1])
    image = kwargs.get("hidden_states")
    joint = text + int(image.shape[1]) if isinstance(image, torch.Tensor) and image.ndim == 3 else None
    for length in seq_lengths(text):
        changed = {**kwargs, "encoder_hidden_states": _resize_seq(context, length)}
        for key in masks:
            changed[key] = _resize_seq(kwargs[key], length, kwargs[key].ndim - 1)
        if joint is not None:  # Flux's rotary embedding runs over [text, image] tokens: its text part goes with it
            for key, value in kwargs.items():
                if key not in ("hidden_states", "encoder_hidden_states", *masks):
                    changed[key] = _map(value, lambda t, n=length: _joint_resized(t, text, joint, n))
        yield Case("seq_len", length, args, changed, seq_len=length)


def _joint_resized(t: torch.Tensor, text: int, joint: int, length: int) -> torch.Tensor:
    """`t` with its text rows resized to `length`, where one of its token axes (first or second to last) runs over
    the text and image tokens together, text first."""
    for dim in dict.fromkeys((0, t.ndim - 2)):
        if t.ndim >= 2 and t.shape[dim] == joint:
            return torch.cat([_resize_seq(t.narrow(dim, 0, text), length, dim), t.narrow(dim, text, joint - text)],
                             dim)
    return t


def _spatial_cases(args: tuple, kwargs: dict, key: str | int) -> Iterator[Case]:
    main = kwargs[key] if isinstance(key, str) else args[key]
    if main.ndim != 4:
        return
    height, width = main.shape[-2:]
    for factor in (0.5, 2.0):
        size = (int(height * factor), int(width * factor))
        if min(size) < 1 or size[0] != height * factor or size[1] != width * factor:
            continue

        def resize(t: torch.Tensor, size: tuple[int, int] = size) -> torch.Tensor:
            if t.ndim == 4 and tuple(t.shape[-2:]) == (height, width) and t.is_floating_point():
                return F.interpolate(t, size=size, mode="nearest")
            return t

        yield Case("spatial", f"x{factor:g}", _map(args, resize), _map(kwargs, resize))


def _batch_cases(args: tuple, kwargs: dict, batch: int) -> Iterator[Case]:
    for size in (1, 2):
        def rebatch(t: torch.Tensor, size: int = size) -> torch.Tensor:
            if t.ndim == 0 or t.shape[0] != batch:
                return t
            return t.repeat(-(-size // batch), *([1] * (t.ndim - 1)))[:size]

        yield Case("batch", size, _map(args, rebatch), _map(kwargs, rebatch))


def cases_for(args: tuple, kwargs: dict) -> Iterator[Case]:
    yield Case("real", "as recorded", args, kwargs)
    yield from _seq_cases(args, kwargs)
    key = _main_key(args, kwargs)
    if key is None:
        return
    main = kwargs[key] if isinstance(key, str) else args[key]
    yield from _spatial_cases(args, kwargs, key)
    yield from _batch_cases(args, kwargs, int(main.shape[0]) if main.ndim else 1)
    if main.is_floating_point():
        for scale in SCALES:
            case_args, case_kwargs = _with(args, kwargs, key, main * scale)
            yield Case("scale", f"x{scale:g}", case_args, case_kwargs, judge_collapse=scale != 0.0)
    for dtype in DTYPES:
        cast = getattr(torch, dtype)
        yield Case("dtype", dtype, _map(args, lambda t, c=cast: t.to(c) if t.is_floating_point() else t),
                   _map(kwargs, lambda t, c=cast: t.to(c) if t.is_floating_point() else t), dtype=dtype)


@contextlib.contextmanager
def _collapses_inside(module: nn.Module) -> Iterator[set[str]]:
    """The parts of `module` whose output collapsed in the call (finite, every value equal): a block's attention
    zeroed hides behind the block's residual, so its own output alone would not tell."""
    found: set[str] = set()

    def watch(name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: tuple, output: Any) -> None:
            tensor = main_tensor(output)
            if tensor is not None and tensor.numel() > 1 and tensor.is_floating_point() \
                    and bool(torch.isfinite(tensor).all()) and bool(tensor.amax() == tensor.amin()):
                found.add(name)
        return hook

    handles = [sub.register_forward_hook(watch(name)) for name, sub in module.named_modules() if name]
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def _same_at_every_token(output: Any, kwargs: Mapping[str, Any]) -> bool:
    """A token sequence out ((B, N, C), N > 1) that is the same at every token although it looked at more than one
    key and no mask: what a block-depth prompt sentinel calls a collapse (tracer._sentinel_hook) — an attention
    whose weights went to zero leaves its output projection's bias at every token, whose std is not 0."""
    if not isinstance(output, torch.Tensor) or output.ndim != 3 or output.shape[1] < 2:
        return False
    if not output.is_floating_point() or attends_through_a_mask(kwargs):
        return False
    context = kwargs.get("encoder_hidden_states")
    if isinstance(context, torch.Tensor) and context.ndim == 3 and context.shape[1] < 2:
        return False  # one key: every token's output is its value, healthy
    return bool(torch.equal(output, output[:, :1].expand_as(output)))


def run_case(module: nn.Module, module_path: str, faults: list[dict[str, Any]], case: Case) -> dict[str, Any]:
    row: dict[str, Any] = {"vary": case.vary, "value": case.value}
    target = module
    if case.dtype:  # nn.Module.to: diffusers' ModelMixin.to warns about casting, which is the point here
        target = nn.Module.to(copy.deepcopy(module), getattr(torch, case.dtype))
    restore = apply_faults(target, module_path, faults, case.seq_len)
    try:
        with torch.inference_mode(), _collapses_inside(target) as inside:
            output = main_tensor(target(*case.args, **case.kwargs), target, stream_adapter(target))
    except Exception as exc:  # noqa: BLE001 - a size or dtype the module does not take: skipped, with why
        return {**row, "skipped": " ".join(f"{type(exc).__name__}: {exc}".split())[:160], "broken": False}
    finally:
        restore()
    stats = output_stats(output)
    why = broken_by(stats, case.judge_collapse)
    if why is None and case.judge_collapse and _same_at_every_token(output, case.kwargs):
        why = "collapse"
    keep = ("nan", "inf", "std", "min", "max", "mean", "shape")
    return {**row, "output": {k: stats[k] for k in keep}, "broken": why is not None, "why": why,
            "collapsed_inside": sorted(inside) if case.judge_collapse else []}


def _judge_inside(rows: list[dict[str, Any]]) -> None:
    """A case whose output is fine but inside which a part collapsed that did not as recorded is broken too."""
    real = set(rows[0].get("collapsed_inside") or []) if rows and rows[0]["vary"] == "real" else set()
    for row in rows:
        new = sorted(set(row.pop("collapsed_inside", None) or []) - real)
        if new and not row["broken"] and "skipped" not in row:
            row.update(broken=True, why="collapse inside", inside=new[:5])


def fuzz_module(source: str | Path | tuple[nn.Module, Mapping[str, Any]], *,
                faults: list[dict[str, Any]] | None = None, module_path: str = "",
                args: tuple[Any, ...] = ()) -> dict[str, Any]:
    """Fuzz an isolated folder, or (module, keyword inputs) already in memory (`args`: positional inputs that
    have no name); the table of cases. A module in memory runs as it is: a live pipeline's module keeps the
    user's processors and hooks, and is only ever copied (never changed) for the dtype cases."""
    if isinstance(source, (str, Path)):
        case = read_folder(source)
        module, args, kwargs = rebuild_case(case), case.args, case.kwargs
        faults, module_path = case.faults, case.module_path
    else:
        module, inputs = source
        kwargs = dict(inputs)
    module.eval()
    rows = [run_case(module, module_path, faults or [], c) for c in cases_for(tuple(args), dict(kwargs))]
    _judge_inside(rows)
    ran = [row for row in rows if "skipped" not in row]
    broken: dict[str, list[Any]] = {}
    for row in ran:
        if row["broken"]:
            broken.setdefault(row["vary"], []).append(row["value"])
    return {"module": module_path or type(module).__name__, "cases": rows, "broken": sum(r["broken"] for r in ran),
            "total": len(ran), "skipped": len(rows) - len(ran), "broken_values": broken}
