"""The model-agnostic probes: what each asks of the pipeline, the finding it reports when the answer is wrong, and
the class of bug that finding stands for. They need no baseline: each compares the pipeline with itself under
two settings. The runs and the verdicts are made by the probe study (engine/loops/probe.py); the tolerances are
analysis/probe_rules.py's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    name: str
    question: str  # what is compared
    finding: str  # the CONTRACT `finding` when the probe fails
    bug_class: str


PROBES: tuple[Probe, ...] = (
    Probe("prompt_effect", "two different prompts, same seed", "prompt has no effect",
          "text conditioning lost: the text encoder's output is constant (dead or zeroed weights), the embeddings "
          "never reach cross-attention, or a cached prompt_embeds is reused"),
    Probe("negative_effect", "no negative prompt vs one, same seed", "negative prompt has no effect",
          "the negative prompt is dropped or encoded as the positive one: classifier-free guidance's unconditional "
          "branch ignores its embeddings"),
    Probe("guidance_effect", "two guidance scales, same seed", "guidance has no effect",
          "guidance_scale is ignored: the classifier-free guidance combination is bypassed or hard-coded (or a "
          "guidance-distilled model is given a scale it does not use)"),
    Probe("seed_effect", "two seeds, same prompt", "seed has no effect",
          "the generator is not used: initial noise from a fixed or global RNG, cached latents, or latents passed "
          "in and reused"),
    Probe("determinism", "the same seed twice", "not deterministic",
          "unseeded randomness (the global RNG, dropout left in train mode), non-deterministic kernels, or state "
          "carried from one call to the next"),
    Probe("fp16_agreement", "float16 against float32, same seed", "float16 disagrees with float32",
          "float16 overflow or underflow: activations beyond 65504 (VAE decoders, attention scores, a scaled "
          "layer), a weight beyond float16's range, or a normalisation computed in half precision"),
    Probe("attention_backend", "SDPA's math kernel against the default one, same seed",
          "attention backends disagree",
          "an attention kernel bug: a fused or flash kernel that disagrees with the math reference (masks, scale, "
          "head dimension, strides)"),
    Probe("batch_variance", "each image of a batch of two against the same noise made alone", "batch variance",
          "a result that depends on the batch: kernels that are not batch-invariant, code that mixes the samples "
          "of a batch (a norm or a cache over the batch axis), a NaN in one sample spreading to the others"),
    Probe("short_prompt", "a one-word prompt traced to every leaf module, against the base prompt",
          "a short prompt breaks the model",
          "code that breaks on very short token sequences: an attention layer that goes to zero (or NaN) when the "
          "prompt has few tokens — a length-dependent path, a padding mask over almost nothing, a softmax over "
          "very few tokens"),
    Probe("convergence", "S, 2S and 4S steps, same seed", "does not converge with more steps",
          "a scheduler that does not fit the model (timesteps, sigmas or prediction type), or noise injected at "
          "every step"),
)
PROBE_NAMES = tuple(p.name for p in PROBES)
BY_NAME = {p.name: p for p in PROBES}

# The second prompt of prompt_effect (the demo's vocabulary, and plain English for any other model); the negative
# prompt of negative_effect is the same text.
OTHER_PROMPT = "a green square on a yellow background"
FALLBACK_PROMPT = "a blue star on a red background"
DEFAULT_PROMPT = "a red circle on a blue background"


def short_prompt(prompt: str) -> str:
    """short_prompt's one word: the longest of the prompt's (a word the model surely knows), else the default's."""
    words = [w.strip(",.;:!?") for w in prompt.split()]
    return max((w for w in words if w), key=len, default="") or max(DEFAULT_PROMPT.split(), key=len)
