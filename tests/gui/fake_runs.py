"""Synthetic runs written through the real RunWriter (no torch): for GUI tests that need no engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ghostviewer.record import RunWriter, StatRow, StepInfo

MODULES = ["unet.conv_in", "unet.down_blocks.0", "unet.mid_block", "unet.up_blocks.0", "unet.conv_out"]


def write_prompt(writer: RunWriter, prompt: str, dim: int, rng: np.random.Generator) -> None:
    labels = ["<|startoftext|>", *prompt.split(), "<|endoftext|>"]
    ids = list(range(49406, 49406 + len(labels)))
    embeddings = rng.standard_normal((len(labels), dim)).astype(np.float32)
    hidden = np.tanh(embeddings[::-1] * 2.0).astype(np.float32)  # a different layout than the inputs
    writer.save_tensors("prompt", {"ids": np.asarray(ids, np.int64), "input_embeddings": embeddings,
                                   "last_hidden_state": hidden})
    writer.event("prompt", f"{len(ids)} tokens: {' '.join(labels)}", ids=ids, tokens=labels, labels=labels)


def write_fake_run(runs_dir: Path, steps: int = 5, seed: int = 7, finish: str | None = "done",
                   run_id: str | None = None, nan_at: int | None = None, settings: dict | None = None,
                   on_step: Callable[[Path, int], None] | None = None,
                   should_stop: Callable[[], bool] | None = None, capture: tuple[str, ...] = (),
                   events: Sequence[tuple[str, str, str]] = (), prompt_dim: int = 0) -> Path:
    """A run of `steps` steps with latents, x0, previews and stats; finish=None leaves it 'running' (killed).

    nan_at: NaN in the latents (and a NaN count in unet.mid_block's stats, its first anomaly) from that step;
    capture: modules whose (8, 4, 4) float16 feature maps are saved as `fm/<module>` every step.
    events: (kind, level, message) logged before the first step; prompt_dim > 0: a "prompt" event and tensors
    (ids, input_embeddings, last_hidden_state of that width) for the prompt's words, as the engine writes them.
    on_step(run_dir, step) is called after each committed step; should_stop() → the run ends 'cancelled'.
    """
    settings = settings or {"prompt": f"a red circle on a blue background #{seed}", "seed": seed, "steps": steps,
                            "guidance": 7.5, "source": "demo", "device": "cpu"}
    writer = RunWriter.create(runs_dir, settings, {"device": "cpu"}, run_id=run_id)
    rng = np.random.default_rng(seed)
    for kind, level, message in events:
        writer.event(kind, message, level=level)
    if prompt_dim:
        write_prompt(writer, str(settings.get("prompt") or ""), prompt_dim, rng)
    latents = rng.standard_normal((4, 16, 16)).astype(np.float32)
    seq = 0
    for step in range(steps):
        latents = latents * 0.8
        if nan_at is not None and step >= nan_at:
            latents[0, :4, :4] = np.nan
        rows = []
        for i, module in enumerate(MODULES):
            value = float(np.nanmax(np.abs(latents))) * (i + 1)
            nan = 16 if nan_at is not None and step >= nan_at and module == "unet.mid_block" else 0
            rows.append(StatRow("denoise", step, module, 0, seq, (1, 4, 16, 16), "float32", -value, value,
                                0.0, value / 3, value, nan, 0))
            seq += 1
        writer.add_stats(rows)
        preview = (np.clip(np.nan_to_num(latents[:3]).transpose(1, 2, 0) / 4 + 0.5, 0, 1) * 255).astype(np.uint8)
        info = StepInfo(step, 999.0 - step * 50, None, 0.01, 1, 1, None, "rss")
        maps = {f"fm/{m}": (rng.standard_normal((8, 4, 4)) * (k + 1)).astype(np.float16)
                for k, m in enumerate(capture)}
        writer.add_step(info, {"latents": latents, "x0": latents * 0.5, **maps}, {"preview": preview})
        if on_step is not None:
            on_step(writer.path, step)
        if should_stop is not None and should_stop():
            finish = "cancelled"
            break
    if finish is None:
        writer.conn.close()  # as if the process died: status stays 'running'
        return writer.path
    if finish == "done":
        image = np.zeros((64, 64, 3), np.float32)
        image[..., 2] = 1.0
        image[16:48, 16:48, 0] = 1.0
        writer.save_image("final", image)
        anomaly = None if nan_at is None else {"phase": "denoise", "step": nan_at, "module": "unet.mid_block",
                                               "kind": "nan"}
        writer.set_verdict({"label": "ok" if anomaly is None else "nan", "scores": {"std": 0.3}}, anomaly)
    writer.finish(finish, 0.5)
    return writer.path


def write_listed_run(folder: Path, k: int, prompt: str, seed: int, colour: tuple[int, int, int] = (0, 0, 255),
         nan: bool = False) -> Path:
    """Run k of a scripted folder: a 16 px final image of `colour`, verdict ok (nan when `nan`)."""
    writer = RunWriter.create(folder, {"prompt": prompt, "seed": seed, "steps": 1}, {"device": "cpu"},
                              run_id=f"20261201-{k // 3600:02d}{k // 60 % 60:02d}{k % 60:02d}-{k:06x}")
    image = np.empty((16, 16, 3), np.float32)
    image[...] = np.array(colour, np.float32) / 255
    writer.save_image("final", image)
    writer.set_verdict({"label": "nan" if nan else "ok", "scores": {}}, None)
    writer.finish("done", 0.1)
    return writer.path


def write_listed_runs(folder: Path, count: int, nan_every: int = 9) -> None:
    """`count` runs of write_listed_run ("a red circle #k", seed k), every `nan_every`-th judged nan."""
    for k in range(count):
        write_listed_run(folder, k, f"a red circle #{k}", k, nan=k % nan_every == 0)
