"""The torch-free settings checks: one line naming the setting and the value, and the memory estimate's arithmetic."""

from __future__ import annotations

import math

import pytest

from ghostviewer.spec import UserError
from ghostviewer.spec.checks import (
    DEMO_BYTES_PER_ELEMENT,
    MAX_GUIDANCE,
    MAX_PROMPT_CHARS,
    MAX_SIZE,
    MAX_STEPS,
    MEMORY_MARGIN,
    DenoiserShape,
    SettingsError,
    check_bypass,
    check_capture,
    check_guidance,
    check_memory,
    check_seed,
    check_size,
    check_steps,
    check_text,
    check_values,
    estimate_run_bytes,
    format_bytes,
)
from ghostviewer.spec.seeds import MAX_SEED


def _refused(message: str, check, *args: object) -> SettingsError:  # type: ignore[no-untyped-def]
    with pytest.raises(SettingsError, match=message) as caught:
        check(*args)
    assert isinstance(caught.value, UserError) and "\n" not in str(caught.value)
    return caught.value


def test_steps() -> None:
    for ok in (1, 20, MAX_STEPS):
        check_steps(ok)
    _refused("steps must be a whole number, not 2.0", check_steps, 2.0)
    _refused("steps must be a whole number, not True", check_steps, True)
    _refused("steps must be a whole number, not '4'", check_steps, "4")
    _refused("steps must be at least 1, not 0", check_steps, 0)
    _refused(f"steps must be at most {MAX_STEPS}, not {MAX_STEPS + 1}", check_steps, MAX_STEPS + 1)


def test_guidance() -> None:
    for ok in (0, 0.0, 7.5, 1, MAX_GUIDANCE):
        check_guidance(ok)
    for bad in (-0.1, MAX_GUIDANCE + 1, math.nan, math.inf, "7.5", True, None):
        _refused(f"guidance must be a number from 0 to {MAX_GUIDANCE:g}, not", check_guidance, bad)


def test_seed() -> None:
    for ok in (None, -1, 0, 42, MAX_SEED):
        check_seed(ok)
    _refused("seed must be a whole number, not 1.5", check_seed, 1.5)
    _refused("seed must be a whole number, not False", check_seed, False)
    _refused(r"seed must be between 0 and \d+ \(or -1 for a random one\), not -2", check_seed, -2)
    _refused(f"not {MAX_SEED + 1}", check_seed, MAX_SEED + 1)


def test_size() -> None:
    for ok in (None, 8, 64, 512, MAX_SIZE):
        check_size("width", ok)
    for bad in (0, 4, 60, -64, 64.0, "64", True):
        _refused("width must be a positive multiple of 8, not", check_size, "width", bad)
    _refused(f"height must be at most {MAX_SIZE}, not {MAX_SIZE + 8}", check_size, "height", MAX_SIZE + 8)


def test_text() -> None:
    for ok in ("", "a red circle", "tab\tand\x00nul", "ünïcödé 幽霊"):
        check_text("prompt", ok)
    _refused("the prompt must be text, not int", check_text, "prompt", 3)
    _refused("the negative prompt must be text, not NoneType", check_text, "negative prompt", None)
    error = _refused(f"the prompt is {MAX_PROMPT_CHARS + 1:,} characters long; at most {MAX_PROMPT_CHARS:,}",
                     check_text, "prompt", "x" * (MAX_PROMPT_CHARS + 1))
    assert "first few hundred tokens" in str(error)
    check_text("prompt", "x" * MAX_PROMPT_CHARS)
    # A lone surrogate, as os.fsdecode makes of a byte that is not UTF-8: its position and the byte are named.
    _refused(r"the prompt is not valid text: character 3 is a byte that is not UTF-8 \(b'\\xff'\)", check_text,
             "prompt", "ab\udcffcd")


def test_bypass_specs_and_their_step_ranges() -> None:
    check_bypass(["unet.mid_block", "unet.up_blocks.0@0:2", "vae@3:"], steps=4)
    _refused("a bypass is MODULE or MODULE@START:END, not 3", check_bypass, [3], 4)
    _refused("bad --bypass 'unet@5'", check_bypass, ["unet@5"], 4)
    _refused(r"--bypass unet@4:8: the run has 4 steps \(0 to 3\), so this range bypasses nothing", check_bypass,
             ["unet@4:8"], 4)
    check_bypass(["unet@:8"], 4)  # an end past the last step still bypasses steps 0-3


def test_capture_patterns_must_match_a_traced_module() -> None:
    modules = ["unet.mid_block", "unet.up_blocks.0.resnets.0", "vae.decoder"]
    check_capture(["unet.*", "vae.decoder", "unet.up_blocks.?.resnets.0"], modules)
    _refused(r"--capture 'text_encoder\*' matches no traced module \(see 'ghostviewer blocks'", check_capture,
             ["text_encoder*"], modules)
    _refused("matches no traced module", check_capture, ["UNET.*"], modules)  # globs are case-sensitive
    _refused("a capture pattern is a glob of module paths, not ' '", check_capture, [" "], modules)
    _refused("a capture pattern is a glob of module paths, not None", check_capture, [None], modules)


def test_check_values_reads_a_run_spec_dict_with_its_defaults() -> None:
    check_values({"prompt": "x"})  # seed 0, steps 20, no guidance, native size
    check_values({"prompt": "x", "negative_prompt": "y", "seed": -1, "steps": 2, "guidance": None, "width": 64,
                  "height": 64, "bypass": ["unet@0:1"], "capture": [], "faults": ()})
    cases = [
        ({}, "the prompt must be text, not NoneType"),
        ({"prompt": "x", "negative_prompt": 1}, "the negative prompt must be text, not int"),
        ({"prompt": "x", "seed": "7"}, "seed must be a whole number, not '7'"),
        ({"prompt": "x", "steps": 0}, "steps must be at least 1"),
        ({"prompt": "x", "guidance": -1}, "guidance must be a number"),
        ({"prompt": "x", "width": 65}, "width must be a positive multiple of 8, not 65"),
        ({"prompt": "x", "height": 0}, "height must be a positive multiple of 8, not 0"),
        ({"prompt": "x", "bypass": "unet"}, "bypass must be a list, not 'unet'"),
        ({"prompt": "x", "capture": None}, "capture must be a list, not None"),
        ({"prompt": "x", "faults": {"nan": 1}}, "faults must be a list"),
        ({"prompt": "x", "bypass": ["unet@20:"]}, "the run has 20 steps"),  # the default step count
        ({"prompt": "x", "steps": 3, "bypass": ["unet@3:"]}, "the run has 3 steps"),
    ]
    for settings, message in cases:
        _refused(message, check_values, settings)


def test_the_memory_estimate_of_the_demo_at_64_px() -> None:
    demo = DenoiserShape()
    assert demo.activation_factor() == pytest.approx(DEMO_BYTES_PER_ELEMENT)
    latent = 16 * 16 * 4  # 64 px / VAE scale 4, 4 latent channels
    assert estimate_run_bytes(64, 64, 7.5, demo) == int(latent * 2 * DEMO_BYTES_PER_ELEMENT)  # CFG doubles it
    assert estimate_run_bytes(64, 64, 1.0, demo) == int(latent * DEMO_BYTES_PER_ELEMENT)  # guidance 1: no CFG batch
    assert estimate_run_bytes(66, 64, 1.0, demo) == int(17 * 16 * 4 * DEMO_BYTES_PER_ELEMENT)  # ceil of the latent


def test_a_wider_or_half_precision_pipeline_scales_the_factor() -> None:
    base = DenoiserShape().activation_factor()
    assert DenoiserShape(denoiser_width=512).activation_factor() == pytest.approx(4 * base)
    assert DenoiserShape(denoiser_width=512, denoiser_bytes=2).activation_factor() == pytest.approx(2 * base)
    assert DenoiserShape(latent_channels=16).activation_factor() == pytest.approx(base / 4)
    assert DenoiserShape(vae_scale=8).activation_factor() == pytest.approx(4 * base)  # decoder-bound
    tiny = DenoiserShape(denoiser_width=1, decoder_width=1)
    assert tiny.activation_factor() == pytest.approx(0.1 * base)  # floored


def test_check_memory_refuses_what_does_not_fit_with_its_margin() -> None:
    shape = DenoiserShape()
    needed = int(estimate_run_bytes(512, 512, 7.5, shape) * MEMORY_MARGIN)
    check_memory(512, 512, 7.5, shape, needed, "cpu")
    error = _refused(r"512x512 needs about .* on cuda:0 but 1\.0 MiB is free; choose a smaller size", check_memory,
                     512, 512, 7.5, shape, 1024**2, "cuda:0")
    assert "--no-memory-check" in str(error) and "memory_check=False" in str(error)
    _refused("needs about", check_memory, 512, 512, 7.5, shape, needed - 1, "cpu")


@pytest.mark.parametrize(("count", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**2, "5.0 MiB"),
    (int(1.25 * 1024**3), "1.2 GiB"), (3 * 1024**4, "3.0 TiB"), (2048 * 1024**4, "2048.0 TiB"),
])
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text
