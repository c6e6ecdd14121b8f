"""A user's batch call whose one image turns NaN: the demo pipeline called for three images, the caller's own step
callback making image `bad_sample`'s latents NaN at the end of step `poisoned_at` (for watched-batch tests)."""

from __future__ import annotations

from typing import Any


def nan_batch_call(pipe: Any, prompt: str, steps: int, bad_sample: int, poisoned_at: int, images: int = 3) -> None:
    import torch

    def poison(_pipe: Any, index: int, _timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        if index != poisoned_at:
            return {}
        latents = tensors["latents"].clone()
        latents[bad_sample] = float("nan")
        return {"latents": latents}

    pipe(prompt, num_inference_steps=steps, num_images_per_prompt=images, output_type="np",
         generator=torch.Generator().manual_seed(5), callback_on_step_end=poison)
