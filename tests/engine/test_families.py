"""Five pipeline families (SD 1.x, SDXL, SD3, Flux, PixArt-Σ), each a tiny random pipeline saved and reloaded:
blocks, run, steps, previews, x0, bypass, capture, attention, replay, prompt edges, bisection."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from ghostviewer.analysis.compare import compare_runs
from ghostviewer.cli import main
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.interventions.bypass import Bypass, BypassConfig
from ghostviewer.engine.loading.pipelines import LoadedPipeline, load_pipeline
from ghostviewer.engine.loops.bisect_blocks import bisect_run
from ghostviewer.engine.loops.recorded import wrap_pipeline
from ghostviewer.engine.loops.replay import replay_run
from ghostviewer.engine.run.runner import execute_run, prepare_settings
from ghostviewer.engine.tracing.blocks import discover_blocks, pipeline_components, resolve_module
from ghostviewer.engine.tracing.prompt_tokens import prompt_tokens
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec
from tests.engine.tiny_families import FAMILIES, build_tiny, build_tiny_sd3, save_tiny

PROMPT = "a red circle on blue background"
SIZE = 32  # px; every tiny family's VAE downsamples 2× → a 16×16 latent, 8×8 after the first level / patches
GRID = (8, 8)
TRANSFORMERS = ("sd3", "flux", "pixart")
GUIDANCE = {"sd": 7.5, "sdxl": 5.0, "sd3": 7.0, "flux": 3.5, "pixart": 4.5}
# (family, bypassed block, the block whose output is its input): bypassing passes that output through unchanged.
BYPASSES = [
    ("sd", "unet.down_blocks.1.attentions.0", "unet.down_blocks.1.resnets.0"),
    ("sdxl", "unet.down_blocks.1.attentions.0", "unet.down_blocks.1.resnets.0"),
    ("sd3", "transformer.transformer_blocks.1", "transformer.transformer_blocks.0"),
    ("sd3", "transformer.transformer_blocks.2", "transformer.transformer_blocks.1"),  # context_pre_only: (None, h)
    ("flux", "transformer.transformer_blocks.1", "transformer.transformer_blocks.0"),
    ("flux", "transformer.single_transformer_blocks.1", "transformer.single_transformer_blocks.0"),
    ("pixart", "transformer.transformer_blocks.1", "transformer.transformer_blocks.0"),
]
CAPTURED = {
    "sd": "unet.down_blocks.1.attentions.0",
    "sdxl": "unet.down_blocks.1.attentions.0",
    "sd3": "transformer.transformer_blocks.0",
    "flux": "transformer.single_transformer_blocks.0",
    "pixart": "transformer.transformer_blocks.0",
}


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The saved tiny pipeline of a family (built once per session). Read-only."""
    saved: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in saved:
            saved[family] = save_tiny(family, tmp_path_factory.mktemp(f"tiny-{family}") / "pipeline")
        return saved[family]

    return get


@pytest.fixture(scope="session")
def family_loaded(family_dir: Callable[[str], Path]) -> Callable[[str], LoadedPipeline]:
    """The saved tiny pipeline of a family, reloaded through the engine's loader (`from_pretrained`), once."""
    loaded: dict[str, LoadedPipeline] = {}

    def get(family: str) -> LoadedPipeline:
        if family not in loaded:
            loaded[family] = load_pipeline(str(family_dir(family)), device="cpu")
        return loaded[family]

    return get


def assert_no_leftovers(pipe: object) -> None:
    """No hook or patch of ours survives a run (transformers keeps its own output-capturing hooks on CLIP)."""
    for component in pipeline_components(pipe).values():
        for name, module in component.named_modules():
            hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
            assert not [h for h in hooks if getattr(h, "__module__", "").startswith("ghostviewer")], name
            assert "ghostviewer" not in type(getattr(module, "processor", None)).__module__, name
    assert "prepare_latents" not in vars(pipe) and "step" not in vars(pipe.scheduler)


def _settings(loaded: LoadedPipeline, **kwargs: object) -> RunSpec:
    values: dict = {"prompt": PROMPT, "steps": 3, "width": SIZE, "height": SIZE, "seed": 1, "guidance": None,
                    "source": loaded.source, **kwargs}
    return RunSpec(**values)


def _run(loaded: LoadedPipeline, runs_dir: Path, **kwargs: object) -> RunRecord:
    result = execute_run(loaded, _settings(loaded, **kwargs), runs_dir)
    assert_no_leftovers(loaded.pipe)
    return RunRecord(Path(result["run_dir"]))


@pytest.fixture(scope="module")
def plain_run(family_loaded, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], RunRecord]:
    """A family's run at the default settings (`steps` 3 or 2), made once per module and only read: the plain side
    of the bypass, attention and replay checks and the record of the step checks (each writes its own runs)."""
    made: dict[tuple[str, int], RunRecord] = {}

    def get(family: str, steps: int = 3) -> RunRecord:
        if (family, steps) not in made:
            runs = tmp_path_factory.mktemp(f"plain-{family}-{steps}")
            made[family, steps] = _run(family_loaded(family), runs, steps=steps)
        return made[family, steps]

    return get


def _fingerprints(record: RunRecord, module: str) -> dict[int | None, int | None]:
    return {row.step: row.fingerprint for row in record.stats(module, phase="denoise") if row.call == 0}


# -- blocks, sizes, guidance --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_blocks_are_real_blocks(family: str, family_dir, capsys) -> None:
    assert main(["blocks", "--pipeline", str(family_dir(family)), "--json"]) == 0
    blocks = json.loads(capsys.readouterr().out)["blocks"]
    kinds = {b["kind"] for b in blocks}
    assert not kinds & {"Dropout", "GELU", "GELUActivation", "Identity"}, kinds
    assert not any(".to_out." in b["module"] or ".ff.net." in b["module"] for b in blocks)
    denoiser = "unet" if family in ("sd", "sdxl") else "transformer"
    main_blocks = [b for b in blocks if b["module"].startswith(f"{denoiser}.") and b["bypassable"]]
    assert len(main_blocks) >= 3, blocks
    if family == "sdxl":  # both text encoders list the same parts (text_encoder_2 wraps a text_model)
        one = {b["module"].removeprefix("text_encoder.") for b in blocks if b["module"].startswith("text_encoder.")}
        two = {b["module"].removeprefix("text_encoder_2.text_model.") for b in blocks
               if b["module"].startswith("text_encoder_2.text_model.")}
        assert one == two, (one, two)


@pytest.mark.parametrize("family", FAMILIES)
def test_native_size_and_usual_guidance(family: str, family_loaded) -> None:
    loaded = family_loaded(family)
    settings, _ = prepare_settings(loaded, RunSpec(prompt=PROMPT, guidance=None))  # type: ignore[arg-type]
    pipe = loaded.pipe
    denoiser = pipe.unet if family in ("sd", "sdxl") else pipe.transformer
    sample = 128 if family == "flux" else denoiser.config.sample_size  # Flux: FluxPipeline.default_sample_size
    assert settings.width == settings.height == sample * pipe.vae_scale_factor
    assert settings.guidance == GUIDANCE[family] == adapter_for(pipe).guidance
    assert adapter_for(pipe).name == family


# -- a run: steps, previews, x0 -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_run_records_every_step_with_previews_and_x0(family: str, family_loaded, plain_run) -> None:
    record = plain_run(family)
    assert record.status == "done"
    assert [s.index for s in record.steps()] == [0, 1, 2]
    denoise = record.stats(phase="denoise")
    assert {r.step for r in denoise} == {0, 1, 2}  # PixArt: from scheduler.step, not all labelled 0
    assert [r.step for r in record.stats("scheduler.step")] == [0, 1, 2]
    channels = family_loaded(family).pipe.vae.config.latent_channels
    for step in range(3):
        tensors = record.step_tensors(step)
        assert tensors["latents"].shape == (channels, 16, 16)  # Flux: unpacked from (tokens, 4·C)
        assert tensors["x0"].shape == (channels, 16, 16)
        for key in ("preview", "latents_preview"):
            assert tensors[key].shape == (16, 16, 3) and tensors[key].dtype == np.uint8
    assert record.tensors("initial_noise")["latents"].shape == (channels, 16, 16)
    first = record.step_tensors(0)
    assert not np.allclose(first["x0"], first["latents"])  # a real prediction, not a copy of the latents


@pytest.mark.parametrize("family", ["sd3", "flux"])
def test_flow_matching_x0_is_x_t_minus_sigma_v(family: str, plain_run) -> None:
    record = plain_run(family)
    sigmas = [s.sigma for s in record.steps()]
    x_t, prev = record.step_tensors(0)["latents"], record.step_tensors(1)["latents"]
    velocity = (prev - x_t) / (sigmas[2] - sigmas[1])  # Euler: x_next = x_t + (σ_next − σ)·v
    expected = x_t - sigmas[1] * velocity
    np.testing.assert_allclose(record.step_tensors(1)["x0"], expected, rtol=1e-3, atol=1e-3)


# -- bypass -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("family", "block", "upstream"), BYPASSES, ids=[f"{f}-{b}" for f, b, _ in BYPASSES])
def test_bypass_passes_every_stream_through(family: str, block: str, upstream: str, family_loaded, plain_run,
                                            runs_dir: Path) -> None:
    loaded = family_loaded(family)
    plain = plain_run(family)
    bypassed = _run(loaded, runs_dir, bypass=(block,))
    assert compare_runs(plain.path, bypassed.path)["first_divergence"] is not None
    assert not np.array_equal(plain.step_tensors(2)["latents"], bypassed.step_tensors(2)["latents"])
    # The bypassed block outputs exactly its input: the upstream block's output, image stream and text stream.
    assert _fingerprints(bypassed, block) == _fingerprints(bypassed, upstream)
    assert _fingerprints(plain, block) != _fingerprints(plain, upstream)
    if adapter_for(loaded.pipe).is_dual_stream(resolve_module(loaded.pipe, block)):
        text = _fingerprints(bypassed, f"{block}#text")
        if text:  # SD3's last block returns no text stream
            assert text == _fingerprints(bypassed, f"{upstream}#text")
        assert _fingerprints(plain, f"{upstream}#text")


@pytest.mark.parametrize("family", ["sd3", "flux"])
def test_bypass_tells_the_streams_apart_when_they_have_the_same_shape(family: str) -> None:
    pipe = build_tiny(family)
    path = "transformer.transformer_blocks.0"
    block = resolve_module(pipe, path)
    bypass = Bypass(BypassConfig.parse(path))
    bypass.apply(RunContext(pipe=pipe, prompt="", negative_prompt="", seed=0, current_step=lambda: 0))
    try:
        hidden, encoder, temb = torch.randn(1, 16, 32), torch.randn(1, 16, 32), torch.randn(1, 32)
        with torch.no_grad():
            text, image = block(hidden_states=hidden, encoder_hidden_states=encoder, temb=temb)
    finally:
        bypass.remove()
    assert torch.equal(image, hidden) and torch.equal(text, encoder)


# -- capture, attention, replay -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_captured_feature_maps_are_pictures(family: str, family_loaded, runs_dir: Path) -> None:
    record = _run(family_loaded(family), runs_dir, steps=2, capture=(CAPTURED[family],))
    fmap = record.step_tensors(1)[f"fm/{CAPTURED[family]}"]
    assert fmap.ndim == 3 and fmap.shape[1:] == GRID, fmap.shape  # token sequences laid over the latent grid
    assert not any(key.startswith("fm/") and key.endswith("#text") for key in record.step_tensors(1))


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_capture_gives_a_map_per_token_and_changes_nothing(family: str, family_loaded, plain_run,
                                                                     runs_dir: Path) -> None:
    loaded = family_loaded(family)
    plain = plain_run(family, steps=2)
    captured = _run(loaded, runs_dir, steps=2, capture_attention=True)
    if family in ("sd3", "flux"):  # joint attention is observed beside the original processor: bit-identical
        assert compare_runs(plain.path, captured.path)["first_divergence"] is None
    else:  # plain attention is recomputed with explicit probabilities: the same up to rounding
        np.testing.assert_allclose(plain.step_tensors(1)["latents"], captured.step_tensors(1)["latents"], atol=1e-4)
    assert not captured.events("custom processors")
    tensors = captured.step_tensors(1)
    maps = {key: value for key, value in tensors.items() if key.startswith("attn/")}
    assert maps and any(key.startswith("attn_entropy/") for key in tensors)
    tokens = len(prompt_tokens(loaded.pipe, PROMPT)["ids"])
    for key, value in maps.items():
        assert value.ndim == 3 and value.shape[1:] == GRID and value.shape[0] >= tokens, (key, value.shape)
        assert np.isfinite(value).all() and 0 <= value.min() and value.max() <= 1
    if family in ("sd3", "flux"):
        assert {key.rsplit(".", 1)[0] for key in maps} >= {"attn/transformer.transformer_blocks.0"}


@pytest.mark.parametrize("family", FAMILIES)
def test_replay_is_bit_identical(family: str, family_loaded, plain_run, runs_dir: Path) -> None:
    loaded = family_loaded(family)
    record = plain_run(family, steps=2)
    report = replay_run(record.path, 1, pipeline=loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True, report["first_divergence"]


@pytest.mark.parametrize(("family", "layer"), [("sdxl", "text_encoder_2.text_model.encoder.layers.0"),
                                              ("sd3", "text_encoder.text_model.encoder.layers.0")])
def test_a_bypassed_text_encoder_layer_replays(family: str, layer: str, family_dir, runs_dir: Path) -> None:
    """SDXL and SD3 condition on hidden states transformers collects with hooks it adds at a model's first call:
    a bypass must come before them on every call, not only the first, or the replay conditions differently."""
    loaded = load_pipeline(str(family_dir(family)), device="cpu")  # fresh: its first call is the bypassed run
    record = _run(loaded, runs_dir, steps=2, bypass=(layer,))
    report = replay_run(record.path, 2, pipeline=loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True, report["first_divergence"]


# -- prompts, loading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_long_and_odd_prompts_are_no_usage_error(family: str, family_dir, tmp_path: Path) -> None:
    prompt = " ".join(["zebra", "quokka", "a", "red", "ünïcödé", "🙂"] * 60)  # past every tokenizer's limit
    code = main(["run", "--pipeline", str(family_dir(family)), "--prompt", prompt, "--steps", "1",
                 "--width", str(SIZE), "--height", str(SIZE), "--runs-dir", str(tmp_path), "--json"])
    assert code in (0, 1)  # healthy or a problem in the (random) pipeline; never 2, "bad input"


def test_a_t5_tokenizer_without_model_max_length_pads_as_the_pipeline_does(family_loaded) -> None:
    pipe = family_loaded("pixart").pipe
    assert pipe.tokenizer.model_max_length > 10**20  # transformers' "not set"
    tokens = prompt_tokens(pipe, "a red circle")
    assert tokens["padded_length"] == 300  # PixArt's max_sequence_length
    assert tokens["words"] == 3 and tokens["tokens"][-1] == "</s>"


def test_sd3_without_t5_loads_and_runs(tmp_path: Path, runs_dir: Path) -> None:
    torch.manual_seed(0)
    build_tiny_sd3(with_t5=False).save_pretrained(tmp_path / "sd3-no-t5")
    assert json.loads((tmp_path / "sd3-no-t5" / "model_index.json").read_text())["text_encoder_3"] == [None, None]
    loaded = load_pipeline(str(tmp_path / "sd3-no-t5"), device="cpu")
    assert loaded.pipe.text_encoder_3 is None
    assert _run(loaded, runs_dir, steps=1).status == "done"


# -- bisection on a transformer family ----------------------------------------------------------------------


def test_bisection_names_the_transformer_block_that_breaks(runs_dir: Path) -> None:
    pipe = build_tiny("flux")
    culprit = "transformer.transformer_blocks.1"
    handle = resolve_module(pipe, f"{culprit}.ff").register_forward_hook(lambda _m, _a, out: out + float("nan"))
    try:
        bad = execute_run(wrap_pipeline(pipe), RunSpec(prompt=PROMPT, steps=2, width=SIZE, height=SIZE,
                                                           source="<in-memory FluxPipeline>"), runs_dir)
        assert bad["first_anomaly"]["module"] == culprit, bad["first_anomaly"]
        result = bisect_run(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["culprit"] == culprit, result["trail"]
    assert 1 <= result["reruns"] <= result["budget"]
    assert_no_leftovers(pipe)
    assert any(b.module == culprit and b.bypassable for b in discover_blocks(pipe))


def test_bisection_is_not_fooled_by_a_label_every_run_shares(runs_dir: Path) -> None:
    """Tiny pipelines label every run noise: a re-run that bypasses the overflowing block has lost the symptom,
    whatever its label."""
    pipe = build_tiny("flux")
    culprit = "transformer.single_transformer_blocks.0"
    handle = resolve_module(pipe, f"{culprit}.proj_out").register_forward_hook(lambda _m, _a, out: out * 1e6)
    try:
        bad = execute_run(wrap_pipeline(pipe), RunSpec(prompt=PROMPT, steps=2, width=SIZE, height=SIZE,
                                                           source="<in-memory FluxPipeline>"), runs_dir)
        assert bad["first_anomaly"]["kind"] == "overflow" and bad["verdict"]["label"] != "ok", bad
        result = bisect_run(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["culprit"] == culprit, result["trail"]
    assert 1 <= result["reruns"] <= result["budget"]


# -- isolating a dual-stream block; counting a prompt's tokens ----------------------------------------------


@pytest.fixture(scope="module")
def flux_double_block_isolated(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, dict]:
    """An in-memory tiny Flux run, and its first double block isolated at step 0."""
    from ghostviewer.engine.isolation.isolate import isolate_module

    pipe, root = build_tiny("flux"), tmp_path_factory.mktemp("isolate-flux")
    result = execute_run(wrap_pipeline(pipe), RunSpec(prompt=PROMPT, steps=2, width=SIZE, height=SIZE,
                                                          source="<in-memory FluxPipeline>"), root / "runs")
    record = RunRecord(Path(result["run_dir"]))
    isolated = isolate_module(record.path, module="transformer.transformer_blocks.0", out_dir=root / "iso",
                              pipeline=pipe)
    assert_no_leftovers(pipe)
    return record, isolated


def test_isolating_a_flux_double_block_records_its_image_stream(flux_double_block_isolated) -> None:
    record, isolated = flux_double_block_isolated
    block = "transformer.transformer_blocks.0"
    image = next(r for r in record.stats(block, phase="denoise") if r.step == 0 and r.call == 0)
    text = next(r for r in record.stats(f"{block}#text", phase="denoise") if r.step == 0 and r.call == 0)
    out = isolated["output"]
    assert tuple(out["shape"]) == image.shape == (1, 64, 32) != text.shape  # 8×8 image tokens, not the prompt's
    for stat in ("min", "max", "mean", "std"):
        assert out[stat] == pytest.approx(getattr(image, stat), rel=1e-4, abs=1e-6), stat
    meta = json.loads((Path(isolated["out_dir"]) / "module.json").read_text(encoding="utf-8"))
    assert meta["output"] == out


def test_an_isolated_flux_double_block_is_rebuilt(flux_double_block_isolated) -> None:
    assert flux_double_block_isolated[1]["rebuildable"] is True


def test_main_tensor_of_a_dual_stream_block_is_its_image_stream() -> None:
    from ghostviewer.engine.isolation.outputs import stream_adapter
    from ghostviewer.engine.module_io import main_tensor

    pipe = build_tiny("sd3")
    text, image = torch.randn(1, 5, 32), torch.randn(1, 16, 32)
    block, last = pipe.transformer.transformer_blocks[0], pipe.transformer.transformer_blocks[2]
    assert main_tensor((text, image), block, stream_adapter(block)) is image  # the kind tells the family
    assert main_tensor((text, image), block, adapter_for(pipe)) is image
    assert main_tensor((None, image), last, stream_adapter(last)) is image  # context_pre_only
    assert main_tensor((text, image)) is text  # no module: the first tensor, as before
    embed = pipe.transformer.pos_embed
    assert main_tensor((text, image), embed, stream_adapter(embed)) is text  # not a dual-stream block


@pytest.mark.parametrize("family", ["sd", "pixart"])  # CLIP adds BOS and EOS; T5 adds only EOS
def test_prompt_word_count_leaves_out_only_the_added_special_tokens(family: str) -> None:
    pipe = build_tiny(family)

    def count(text: str) -> int:
        return RunContext(pipe=pipe, prompt=text, negative_prompt="", seed=0,
                          current_step=lambda: None).prompt_word_count()

    assert count("a red circle") == 3
    assert count("red") == 1
    assert count("") == 0
    if family == "pixart":  # T5's unknown token is not one it adds: an unknown character still counts
        assert count("a red 🙂") == len(pipe.tokenizer("a red 🙂").input_ids) - 1


def test_a_preset_made_for_another_family_is_refused_before_anything_is_recorded(family_dir, runs_dir: Path,
                                                                                 capsys) -> None:
    """scaled-block hooks a U-Net resnet: on SD3 (no U-Net) it is a usage error (exit 2, one line), no run folder."""
    code = main(["run", "--pipeline", str(family_dir("sd3")), "--prompt", PROMPT, "--steps", "2", "--width",
                 str(SIZE), "--height", str(SIZE), "--fault", "scaled-block", "--runs-dir", str(runs_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "the fault 'scaled-block' does not fit this pipeline" in err and "no component 'unet'" in err
    assert "Traceback" not in err and not any(runs_dir.iterdir())


def test_a_sweep_refused_for_a_fault_that_does_not_fit_leaves_no_study(family_dir, runs_dir: Path) -> None:
    from ghostviewer.engine.errors import GhostError
    from ghostviewer.engine.loops.sweep import run_sweep

    with pytest.raises(GhostError, match="does not fit this pipeline"):
        run_sweep(["a red circle"], "0", source=str(family_dir("sd3")), faults=["scaled-block"], steps=2,
                  device="cpu", runs_dir=runs_dir)
    assert list(runs_dir.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("family", ["sdxl", "flux"])
def test_a_sweep_uses_the_familys_usual_guidance_like_a_run(family: str, family_loaded, runs_dir: Path) -> None:
    """A sweep's runs are the runs `run` makes (it used 7.5 whatever the family: Flux at 3.5 drew other images)."""
    from ghostviewer.engine.loops.sweep import run_sweep

    loaded = family_loaded(family)
    # at SIZE, not the native size (Flux's 256 px costs ~1 s a run here); a list entry carries the size
    result = run_sweep([{"prompt": PROMPT, "width": SIZE, "height": SIZE}], "0", pipeline=loaded, steps=2,
                       runs_dir=runs_dir)
    swept = RunRecord(result["runs"][0]["run_dir"])
    assert swept.settings["guidance"] == GUIDANCE[family] and swept.settings["width"] == SIZE
    single = execute_run(loaded, RunSpec(prompt=PROMPT, seed=0, steps=2, width=SIZE, height=SIZE,
                                         source=loaded.source), runs_dir)
    assert compare_runs(single["run_dir"], swept.path)["reproduced"]
