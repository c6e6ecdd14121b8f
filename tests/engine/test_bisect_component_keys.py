"""Settings bisection flips other components' config keys: a user's pipeline whose VAE config says the wrong
`scaling_factor` (set by the user, as a wrong config file would) decodes latents far too large; against a good run
that also differs in steps, the answer is `vae.scaling_factor` alone — each trial rebuilt the VAE from the config
with the good value and the loaded weights. A key that would change the architecture cannot be flipped: said in one
line."""

from __future__ import annotations

from pathlib import Path

from ghostviewer import api
from ghostviewer.engine.loops.component_flip import flippable, flipped


def test_a_wrong_vae_scaling_factor_is_found_among_the_settings(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    vae = pipe.vae
    right = vae.config.scaling_factor
    good = api.run(pipe, "a red circle", steps=2, runs_dir=runs_dir)
    vae.register_to_config(scaling_factor=right * 1e-4)
    try:
        bad = api.run(pipe, "a red circle", steps=3, runs_dir=runs_dir)
        assert bad["first_anomaly"] is not None and bad["first_anomaly"]["module"].startswith("vae"), bad
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        vae.register_to_config(scaling_factor=right)
    assert pipe.vae is vae  # the user's own VAE is back after the trials
    assert sorted(result["differences"]) == ["steps", "vae.scaling_factor"]
    assert list(result["culprit_settings"]) == ["vae.scaling_factor"], result["trail"]
    assert result["culprit_settings"]["vae.scaling_factor"] == [right, right * 1e-4]
    assert result["not_flipped"] == {}


def test_a_key_that_changes_the_architecture_cannot_be_flipped(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    widths = list(pipe.vae.config.block_out_channels)
    why = flippable(pipe, "vae", "block_out_channels", [w * 2 for w in widths], "AutoencoderKL")
    assert why is not None and "architecture" in why and "\n" not in why
    assert flippable(pipe, "vae", "force_upcast", not pipe.vae.config.force_upcast, "AutoencoderKL") is None
    assert "UNet2DConditionModel" in (flippable(pipe, "vae", "force_upcast", True, "UNet2DConditionModel") or "")


def test_a_rebuilt_component_keeps_the_users_hook_and_weights(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    vae, seen = pipe.vae, []
    handle = vae.decoder.conv_in.register_forward_hook(lambda _m, _i, _o: seen.append(1))
    try:
        with flipped(pipe, {"vae": {"force_upcast": not vae.config.force_upcast}}):
            assert pipe.vae is not vae and pipe.vae.config.force_upcast != vae.config.force_upcast
            new_weight, old_weight = pipe.vae.decoder.conv_in.weight, vae.decoder.conv_in.weight
            assert new_weight.data_ptr() == old_weight.data_ptr()  # the same memory, not a copy
            pipe.vae.decode(vae.post_quant_conv.weight.new_zeros(1, vae.config.latent_channels, 8, 8))
    finally:
        handle.remove()
    assert pipe.vae is vae and seen == [1]
