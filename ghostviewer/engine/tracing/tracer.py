"""The tracer: forward hooks that record per-module statistics and feature maps, phase by phase, step by step.

Hooks queue finished statistics (CPU, the C pass) or device-side results; `flush()` gathers a whole step's worth to
the host in a few small transfers, whatever the number of outputs.
`take()` + `harvest()` split it in two: the runner takes a step's queue at the step's end (a list swap) and turns
it into columns of statistics (StatColumns) when the record's next batch is written (record_buffer.py).
Hooks are attached inside a context manager and removed in `finally`, so a failed run never leaves one behind.
"""

from __future__ import annotations

import fnmatch
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.families.base import token_grid
from ghostviewer.engine.module_io import main_tensor
from ghostviewer.engine.tracing.blocks import Depth, iter_modules, phase_of, pipeline_components, prompt_sentinels
from ghostviewer.engine.tracing.stats import IN_ROW, DeviceStats, finish_columns, hook_stats
from ghostviewer.record import StatColumns, StatRow
from ghostviewer.record.types import wrap_fingerprint


@dataclass(frozen=True)
class TraceConfig:
    depth: Depth = "block"
    capture: tuple[str, ...] = ()  # glob patterns of module paths whose outputs are kept as feature maps
    capture_size: int = 32  # spatial side of a captured map, after average pooling
    capture_channels: int = 64
    fingerprints: bool = True  # False (sweeps): statistics only, no bit-pattern fingerprint per output


# One queued output: (path, phase, step, call, seq, shape, dtype, stats, fingerprint), stats finished (a tuple of
# STAT_FIELDS) or raw sums (a list, or a DeviceStats still on the device; stats.hook_stats). A tuple, not a dataclass:
# hooks run hundreds of times per step and this is their only allocation.
_Pending = tuple[str, str, "int | None", int, int, tuple[int, ...], str,
                 "tuple[float, float, float, float, float, int, int] | DeviceStats | list[float]",
                 "torch.Tensor | int | None"]
STAT_FIELDS = ("min", "max", "mean", "std", "absmax", "nan_count", "inf_count")


@dataclass
class StepBatch:
    """What the hooks queued since the last take: raw stats (still on the device) and feature maps."""

    pending: list[_Pending] = field(default_factory=list)
    feature_maps: dict[str, np.ndarray] = field(default_factory=dict)
    # seqs of sentinel rows (Tracer._sentinel_hook) kept only if they show a collapse: known once their statistics
    # come off the device
    conditional: set[int] = field(default_factory=set)


@dataclass
class StepHarvest:
    columns: StatColumns = field(default_factory=StatColumns)
    feature_maps: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def rows(self) -> list[StatRow]:
        return self.columns.rows()


def downsample_feature_map(
    t: torch.Tensor, size: int, channels: int, grid: tuple[int, int] | None = None
) -> np.ndarray | None:
    """A small float16 host copy of a module output: (C, H, W) for images, (tokens, dim) for sequences.
    A token sequence that covers the latent grid (`grid`: (h, w), h·w tokens) becomes a picture (dim, h, w).

    The last batch item is kept: with classifier-free guidance it is the prompt-conditioned half.
    """
    x = t.detach()[-1]
    if x.ndim == 2 and grid is not None and grid[0] * grid[1] == x.shape[0]:
        x = x.T.reshape(x.shape[1], *grid)
    if x.ndim == 3:
        x = x[:channels].float()
        if max(x.shape[-2:]) > size:
            x = F.adaptive_avg_pool2d(x, (min(size, x.shape[-2]), min(size, x.shape[-1])))
    elif x.ndim == 2:
        x = x[:256, :256].float()
    else:
        return None
    return x.to(torch.float16).cpu().numpy()


_DTYPE_NAMES: dict[torch.dtype, str] = {}
_MODULES: weakref.WeakKeyDictionary[Any, dict[str, tuple[int, list[tuple[str, nn.Module]]]]] = (
    weakref.WeakKeyDictionary()
)


def traced_modules(pipe: object, depth: Depth = "block", signature: int | None = None
                   ) -> list[tuple[str, nn.Module]]:
    """`iter_modules(pipe, depth)`, cached per pipeline: walking and classifying the tree costs ~3 ms a run,
    checking that it is still made of the same module objects ~0.3 ms (a LoRA or a swapped component is seen).
    `signature`: the tree's `_tree_signature`, when the caller has just taken it."""
    signature = _tree_signature(pipe) if signature is None else signature
    try:
        cached = _MODULES.setdefault(pipe, {})
    except TypeError:  # not weak-referenceable or not hashable: no cache
        return list(iter_modules(pipe, depth))
    hit = cached.get(depth)
    if hit is None or hit[0] != signature:
        hit = cached[depth] = (signature, list(iter_modules(pipe, depth)))
    return list(hit[1])


def _tree_signature(pipe: object) -> int:
    """The identity of every module object in the pipeline, walked through `_modules` directly (a third of the
    cost of `modules()`, whose generators dominate on a tree of hundreds of small modules)."""
    ids: list[int] = []
    stack = list(pipeline_components(pipe).values())
    while stack:
        module = stack.pop()
        ids.append(id(module))
        stack.extend(child for child in module._modules.values() if child is not None)
    return hash(tuple(ids))


def _without_unfounded_sentinels(columns: StatColumns, conditional: set[int]) -> StatColumns:
    """The columns less the sentinel rows (seqs in `conditional`) whose output was not the same at every token:
    the spread's absmax is zero (and finite) only for a collapse."""
    keep = [i for i, seq in enumerate(columns.seq)
            if seq not in conditional or (columns.absmax[i] == 0.0 and not columns.nan_count[i])]
    if len(keep) == len(columns.seq):
        return columns
    kept = StatColumns()
    for name, values in vars(columns).items():
        setattr(kept, name, [values[i] for i in keep])
    return kept


def _not_finite(stats: object) -> bool:
    """Whether queued stats count a NaN or an Inf: finished (a tuple) or raw CPU sums (a list). Statistics still on
    an accelerator are not known until the step's harvest: those samples are named from the images instead."""
    if type(stats) is tuple:
        return bool(stats[5] or stats[6])  # type: ignore[index]
    if type(stats) is list:
        return bool(stats[4] or stats[5])
    return False


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def attends_through_a_mask(kwargs: dict[str, Any]) -> bool:
    """Whether an attention module was handed a mask (diffusers' `attention_mask`, T5's `mask`, …): a mask that
    leaves one key makes every token's output that key's value, so such a call is not judged by its tokens."""
    return any(value is not None and "mask" in key for key, value in kwargs.items())


SAMPLE_ROWS = 20_000  # per-sample NaN/Inf rows kept for one call (a batch gone NaN early fills one per output)


class Tracer:
    def __init__(self, pipe: object, config: TraceConfig | None = None, signature: int | None = None) -> None:
        self.config = config or TraceConfig()
        self._fingerprints = self.config.fingerprints
        self.modules: list[tuple[str, nn.Module]] = traced_modules(pipe, self.config.depth, signature)
        # block depth: the attention modules that read the prompt, watched for a collapse only (blocks.py)
        self.sentinels = prompt_sentinels(self.modules) if self.config.depth == "block" else frozenset()
        self._conditional: set[int] = set()
        self.step: int | None = None
        self._pending: list[_Pending] = []
        self._maps: dict[str, np.ndarray] = {}
        self._calls: dict[tuple[str, int | None], int] = {}
        self._seq = 0
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._phases: dict[str, str] = {}
        self._capture_cache: dict[str, bool] = {}
        self.muted: list[Any] = []  # bypass specs (module, active_at): outputs inside them are not recorded
        self.adapter = adapter_for(pipe)
        self.latent_hw: tuple[int, int] | None = None  # the run's latent grid: token sequences are laid over it
        # Checked at every traced output: the runner writes its record's pending batch when one is due even in the
        # middle of long work (a slow step, the VAE decode), so a crash there loses only the last 0.1 s of steps.
        self.deadline: float | None = None  # time.perf_counter() value
        self.on_deadline: Callable[[], None] = lambda: None
        # A watched pipeline may be called from several threads at once: `thread` set, the hooks record only that
        # thread's work. Set before hooks() is entered.
        self.thread: int | None = None
        # Images the call makes, when more than one: an output with NaN/Inf in it is then counted per sample (only
        # then, so a healthy batch pays nothing), naming where each sample first went bad.
        self.samples: int | None = None
        self.sample_firsts: dict[int, dict[str, Any]] = {}
        self.first_nonfinite: tuple[tuple[str, int | None], list[int]] | None = None  # ((module, step), counts)
        # Every output with NaN/Inf in it, per sample: (seq, module, phase, step, call, nan per sample, inf per
        # sample); `seq` is the output's statistics row's. At most SAMPLE_ROWS.
        self.sample_rows: list[tuple[int, str, str, int | None, int, list[int], list[int]]] = []

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def wants_capture(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.config.capture)

    # Per-path answers are cached: hooks run hundreds of times per step.
    def _phase_of(self, path: str) -> str:
        if path not in self._phases:
            self._phases[path] = phase_of(path)
        return self._phases[path]

    def _captured(self, path: str) -> bool:
        if path not in self._capture_cache:
            self._capture_cache[path] = self.wants_capture(path)
        return self._capture_cache[path]

    def record(self, path: str, tensor: torch.Tensor, phase: str | None = None, capture: bool = True) -> None:
        """Queue the stats of one tensor: a module output, or a pipeline-level tensor such as the initial latents."""
        self._record(path, phase or self._phase_of(path), tensor, capture and self._captured(path))

    def _record(self, path: str, phase: str, tensor: torch.Tensor, captured: bool, count_samples: bool = True
                ) -> None:
        """record() with the path's phase and capture decided (the hooks decide them once, when made)."""
        step = (self.step or 0) if phase == "denoise" else None
        if self.muted and self._inside_bypass(path, step):
            return
        key = (path, step)
        call = self._calls.get(key, 0)
        self._calls[key] = call + 1
        entry = (path, phase, step, call, self._seq, tuple(tensor.shape), _dtype_name(tensor.dtype),
                 *hook_stats(tensor, self._fingerprints))
        self._pending.append(entry)
        self._seq += 1
        if count_samples and self.samples is not None and _not_finite(entry[7]):
            self._count_samples(path, phase, step, call, tensor)
        if captured:
            grid = token_grid(tensor.shape[1], self.latent_hw) if tensor.ndim == 3 and phase == "denoise" else None
            fmap = downsample_feature_map(tensor, self.config.capture_size, self.config.capture_channels, grid)
            if fmap is not None:
                key = path if call == 0 else f"{path}#{call}"
                self._maps[key] = fmap
        if self.deadline is not None and self.deadline <= time.perf_counter():
            self.deadline = None
            self.on_deadline()

    def _count_samples(self, path: str, phase: str, step: int | None, call: int, tensor: torch.Tensor) -> None:
        """NaN/Inf counts of one output per sample. With classifier-free guidance the batch holds each sample twice
        ([unconditional…, conditional…]): batch index j is sample j mod N. A batch that is not a multiple of N (the
        text encoder's, one per prompt) names no sample. Only outputs with a NaN or an Inf in them come here: a
        healthy batch pays nothing."""
        n = int(self.samples or 0)
        batch = int(tensor.shape[0]) if tensor.ndim else 0
        counts: list[int] | None = None
        nans: list[int] = []
        if n > 0 and batch and batch % n == 0:
            flat = tensor.detach().reshape(batch, -1)
            nans = torch.isnan(flat).sum(1).reshape(batch // n, n).sum(0).tolist()
            infs = torch.isinf(flat).sum(1).reshape(batch // n, n).sum(0).tolist()
            counts = [a + b for a, b in zip(nans, infs, strict=True)]
            self.sample_rows.append((self._seq - 1, path, phase, step, call, nans, infs))
            if len(self.sample_rows) >= SAMPLE_ROWS:
                self.samples = None  # the table is full: the rest of the call pays nothing more
        if self.first_nonfinite is None:
            self.first_nonfinite = ((path, step), counts or [])
        for sample, count in enumerate(counts or []):
            if count and sample not in self.sample_firsts:
                self.sample_firsts[sample] = {"phase": phase, "step": step, "module": path,
                                              "kind": "nan" if nans[sample] else "inf"}

    def sample_report(self, images: int) -> list[dict[str, Any] | None]:
        """Where each sample first showed NaN/Inf (None: never), for a call of `images` images."""
        return [self.sample_firsts.get(i) for i in range(images)]

    def _inside_bypass(self, path: str, step: int | None) -> bool:
        return any(path.startswith(spec.module + ".") and spec.active_at(step) for spec in self.muted)

    def _sentinel_hook(self, path: str):
        """A prompt sentinel's hook: no row while its output varies from token to token. An output that is the same
        at every token (an attention whose weights all went to zero gives its output projection's bias everywhere)
        gets a row holding the statistics of the output less its first token — all zero, a collapse — named at
        the attention itself, which its block's output (the residual still flowing) would never show. NaN is left
        to the block: it flows on into the block's output and is named there, as before. A masked attention is not
        judged: a mask that leaves one key (an empty prompt's T5 encoding, its masked cross-attention) makes every
        token's output that key's value, healthy."""
        phase, owner = self._phase_of(path), self.thread
        get_ident = threading.get_ident

        def hook(_module: nn.Module, _args: tuple, kwargs: dict[str, Any], output: object) -> None:
            if owner is not None and get_ident() != owner:
                return
            if kwargs and attends_through_a_mask(kwargs):
                return
            tensor = main_tensor(output)
            if tensor is None or tensor.ndim < 3 or tensor.shape[1] < 2:
                return
            step = (self.step or 0) if phase == "denoise" else None
            if self.muted and self._inside_bypass(path, step):
                return
            first = tensor[:, :1]
            if tensor.is_cpu:  # known at once: two token rows compared, the whole output only when they agree
                if not (torch.equal(tensor[:, 0], tensor[:, -1]) and torch.equal(tensor, first.expand_as(tensor))):
                    key = (path, step)
                    self._calls[key] = self._calls.get(key, 0) + 1  # the call count stays that of the module
                    return
                self._record(path, phase, tensor - first, False)
            else:  # on an accelerator: queued like any row, kept only if it shows the collapse (harvest)
                self._conditional.add(self._seq)
                self._record(path, phase, tensor - first, False, count_samples=False)

        return hook

    def _hook_for(self, path: str, module: nn.Module):
        if path in self.sentinels:
            return self._sentinel_hook(path)
        if self.adapter.is_dual_stream(module):
            return self._dual_stream_hook(path)

        phase, captured, record = self._phase_of(path), self._captured(path), self._record
        owner = self.thread
        if owner is not None:
            get_ident = threading.get_ident

            def owned_hook(_module: nn.Module, _args: tuple, output: object) -> None:
                if get_ident() == owner:
                    tensor = main_tensor(output)
                    if tensor is not None:
                        record(path, phase, tensor, captured)

            return owned_hook

        def hook(_module: nn.Module, _args: tuple, output: object) -> None:
            tensor = main_tensor(output)
            if tensor is not None:
                record(path, phase, tensor, captured)

        return hook

    def _dual_stream_hook(self, path: str):
        """SD3/Flux blocks return (text, image): the image stream is the block's row, the text stream `path#text`."""
        text_path = f"{path}#text"

        def hook(module: nn.Module, _args: tuple, output: object) -> None:
            if self.thread is not None and threading.get_ident() != self.thread:
                return
            image, text = self.adapter.streams(module, output)
            if image is not None:
                self.record(path, image)
            if text is not None:
                self.record(text_path, text, capture=False)

        return hook

    @contextmanager
    def hooks(self) -> Iterator[Tracer]:
        try:
            for path, module in self.modules:
                hook = self._hook_for(path, module)
                self._handles.append(module.register_forward_hook(hook, with_kwargs=path in self.sentinels))
            yield self
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

    def take(self) -> StepBatch:
        """What was queued since the last take (the queue starts afresh): cheap, on the pipeline's thread."""
        batch = StepBatch(self._pending, self._maps, self._conditional)
        self._pending, self._maps, self._conditional = [], {}, set()
        return batch

    @staticmethod
    def harvest(batch: StepBatch) -> StepHarvest:
        """A batch as host-side columns: a few small device-to-host transfers for the whole batch (any thread)."""
        pending = batch.pending
        columns = StatColumns()
        if not pending:
            return StepHarvest(columns, batch.feature_maps)
        (columns.module, columns.phase, columns.step, columns.call, columns.seq, columns.shape, columns.dtype,
         stats, fingerprints) = (list(c) for c in zip(*pending, strict=True))
        unfinished = [i for i, s in enumerate(stats) if type(s) is not tuple]
        if unfinished:  # raw sums: finished together, those on a device gathered at once
            moved = iter(DeviceStats.gather([stats[i] for i in unfinished if isinstance(stats[i], DeviceStats)]))
            raw = []
            for i in unfinished:
                if isinstance(stats[i], DeviceStats):
                    values, fp = next(moved)
                    if fingerprints[i] is IN_ROW:  # the fused kernel's row held it
                        fingerprints[i] = wrap_fingerprint(fp)
                    raw.append(values)
                else:
                    raw.append(stats[i])
            done = finish_columns(raw, [math.prod(columns.shape[i]) for i in unfinished])
            for k, i in enumerate(unfinished):
                stats[i] = tuple(done[name][k] for name in STAT_FIELDS)
        (columns.min, columns.max, columns.mean, columns.std, columns.absmax, columns.nan_count,
         columns.inf_count) = (list(c) for c in zip(*stats, strict=True))
        fp_on_device = [fp for fp in fingerprints if isinstance(fp, torch.Tensor)]
        if fp_on_device:
            fps = iter(torch.stack([t.to(fp_on_device[0].device) for t in fp_on_device]).cpu().tolist())
            fingerprints = [wrap_fingerprint(next(fps)) if isinstance(fp, torch.Tensor) else fp
                            for fp in fingerprints]
        columns.fingerprint = fingerprints
        if batch.conditional:
            columns = _without_unfounded_sentinels(columns, batch.conditional)
        return StepHarvest(columns, batch.feature_maps)

    def flush(self) -> StepHarvest:
        """Everything queued since the last flush, as host-side rows (see harvest)."""
        return self.harvest(self.take())
