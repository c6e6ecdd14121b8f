"""Loading every kind of source, and every way a source can be wrong, with a one-line message each."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from diffusers import StableDiffusionPipeline
from safetensors.torch import save_file

from ghostviewer.engine.errors import GhostError, PickleRefused, SourceError
from ghostviewer.engine.loading import devices, weight_files
from ghostviewer.engine.loading import pipelines as loading
from ghostviewer.engine.loading.devices import resolve_device, resolve_dtype
from ghostviewer.engine.loading.pipelines import describe_source, load_pipeline
from tests.engine.tiny_pipelines import save_tiny_sd_single_file, to_ldm_state_dict

SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"
SD15_CONFIG_REPO = "stable-diffusion-v1-5/stable-diffusion-v1-5"
Checkpoint = tuple[Path, StableDiffusionPipeline]


def one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(error.value)
    assert message and "\n" not in message, message
    return message


def copy_pipeline(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def add_to_hub_cache(cache: Path, repo_id: str, pipeline_dir: Path, configs_only: bool = False) -> Path:
    """Lay a pipeline out as huggingface_hub caches it: models--org--name/{refs/main, snapshots/<sha>}."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    ignore = shutil.ignore_patterns("*.safetensors") if configs_only else None
    shutil.copytree(pipeline_dir, repo / "snapshots" / SNAPSHOT, ignore=ignore)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    return repo


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    """A tiny SD pipeline as one original-layout checkpoint, and the pipeline it was made from."""
    return save_tiny_sd_single_file(tmp_path_factory.mktemp("single") / "tiny-sd-v1.safetensors")


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def assert_same_weights(
    loaded: StableDiffusionPipeline,
    reference: StableDiffusionPipeline,
    names: tuple[str, ...] = ("unet", "vae", "text_encoder"),
    dtype: torch.dtype = torch.float32,
) -> None:
    for name in names:
        expected, actual = getattr(reference, name).state_dict(), getattr(loaded, name).state_dict()
        assert expected.keys() == actual.keys(), name
        assert all(torch.equal(expected[key].to(dtype), actual[key]) for key in expected), name


# --- sources that load ------------------------------------------------------------------------------------


def test_folder_loads_on_cpu_in_eval_mode(tiny_sd_dir: Path) -> None:
    start = time.perf_counter()
    loaded = load_pipeline(tiny_sd_dir, device="cpu")
    assert time.perf_counter() - start < 1.0
    assert loaded.source_kind == "folder" and loaded.device == "cpu"
    assert type(loaded.pipe).__name__ == "StableDiffusionPipeline"
    assert loaded.dtypes == {"unet": "float32", "vae": "float32", "text_encoder": "float32"}
    assert not any(m.training for m in (loaded.pipe.unet, loaded.pipe.vae, loaded.pipe.text_encoder))
    assert loaded.pipe._progress_bar_config == {"disable": True}


def test_weight_hashes_are_sha256_prefixes_of_the_files(tiny_sd_dir: Path) -> None:
    loaded = load_pipeline(str(tiny_sd_dir), device="cpu")
    unet_file = tiny_sd_dir / "unet" / "diffusion_pytorch_model.safetensors"
    assert set(loaded.weight_hashes) == {"unet", "vae", "text_encoder"}
    assert loaded.weight_hashes["unet"] == hashlib.sha256(unet_file.read_bytes()).hexdigest()[:16]


def test_large_files_are_fingerprinted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weight_files, "LARGE_FILE_BYTES", 64)  # read where hash_files lives, not via loading
    monkeypatch.setattr(weight_files, "EDGE_BYTES", 16)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    a.write_bytes(b"x" * 16 + b"middle-one" * 10 + b"y" * 16)
    b.write_bytes(b"x" * 16 + b"middle-two" * 10 + b"y" * 16)
    assert loading.hash_files([a]) == loading.hash_files([b])  # only size, head and tail count
    b.write_bytes(b"x" * 16 + b"middle-two" * 10 + b"z" * 16)
    assert loading.hash_files([a]) != loading.hash_files([b])


def _sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def test_a_weight_file_written_again_is_hashed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Digests are kept per file between loads, but never one of a file just written: rewritten in the same clock
    tick, its size and mtime (set back here) could not tell the two apart."""
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"one" * 100)
    stamp = weights.stat()
    assert loading.hash_files([weights]) == _sha16(b"one" * 100)
    weights.write_bytes(b"two" * 100)
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert loading.hash_files([weights]) == _sha16(b"two" * 100)
    monkeypatch.setattr(weight_files, "SETTLED_NS", 0)  # every file settled: the digest is kept at once
    assert loading.hash_files([weights]) == loading.hash_files([weights]) == _sha16(b"two" * 100)
    weights.write_bytes(b"three" * 100)
    assert loading.hash_files([weights]) == _sha16(b"three" * 100)


def test_per_component_dtype(tiny_sd_dir: Path) -> None:
    loaded = load_pipeline(tiny_sd_dir, device="cpu", dtype="float32,vae=bfloat16")
    assert loaded.dtypes == {"unet": "float32", "vae": "bfloat16", "text_encoder": "float32"}


def test_dtype_for_a_component_the_pipeline_lacks(tiny_sd_dir: Path) -> None:
    with pytest.raises(GhostError) as error:
        load_pipeline(tiny_sd_dir, device="cpu", dtype="float32,vea=float16")
    assert one_line(error).startswith("--dtype names vea, but the pipeline has no such component")


def test_demo_loads_from_resources(tiny_sd_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "DEMO_PIPELINE_DIR", tiny_sd_dir)
    loaded = load_pipeline("demo", device="cpu")
    assert loaded.source == "demo" and loaded.source_kind == "demo"


def test_demo_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "DEMO_PIPELINE_DIR", tmp_path / "resources" / "demo-pipeline")
    with pytest.raises(SourceError) as error:
        load_pipeline("demo", device="cpu")
    assert one_line(error) == (
        "the demo pipeline is missing from resources/demo-pipeline — run scripts/train_demo.py"
    )


def test_demo_dir_is_in_the_repo() -> None:
    assert loading.DEMO_PIPELINE_DIR == Path(__file__).resolve().parents[2] / "resources" / "demo-pipeline"


def test_hub_id_loads_from_the_local_cache(tiny_sd_dir: Path, empty_cache: Path) -> None:
    add_to_hub_cache(empty_cache, "ghost/tiny-sd", tiny_sd_dir)
    loaded = load_pipeline("ghost/tiny-sd", device="cpu")
    assert loaded.source == "ghost/tiny-sd" and loaded.source_kind == "hub_cache"
    assert loaded.weight_hashes == load_pipeline(tiny_sd_dir, device="cpu").weight_hashes


def test_hub_id_with_explicit_cache_dir(tiny_sd_dir: Path, tmp_path: Path) -> None:
    add_to_hub_cache(tmp_path, "ghost/tiny-sd", tiny_sd_dir)
    assert load_pipeline("ghost/tiny-sd", device="cpu", cache_dir=tmp_path).source_kind == "hub_cache"


def test_hub_id_not_cached(empty_cache: Path) -> None:
    with pytest.raises(SourceError) as error:
        load_pipeline("ghost/not-here", device="cpu")
    message = one_line(error)
    assert message.startswith("ghost/not-here is not in the local Hugging Face cache")
    assert message.endswith("GhostViewer does not download models unless you ask")


def test_single_file_with_config_folder(checkpoint: Checkpoint, tiny_sd_dir: Path) -> None:
    path, reference = checkpoint
    start = time.perf_counter()
    loaded = load_pipeline(path, device="cpu", config=tiny_sd_dir)
    assert time.perf_counter() - start < 1.0
    assert loaded.source_kind == "single_file"
    assert loaded.weight_hashes == {"checkpoint": hashlib.sha256(path.read_bytes()).hexdigest()[:16]}
    assert_same_weights(loaded.pipe, reference)


def test_single_file_takes_its_config_from_the_cache(
    checkpoint: Checkpoint, tiny_sd_dir: Path, empty_cache: Path
) -> None:
    path, reference = checkpoint
    # A tiny checkpoint is detected as SD 1.x, whose configs diffusers takes from this repo (configs only).
    add_to_hub_cache(empty_cache, SD15_CONFIG_REPO, tiny_sd_dir, configs_only=True)
    loaded = load_pipeline(path, device="cpu", dtype="float32,unet=bfloat16")
    assert loaded.dtypes["unet"] == "bfloat16" and loaded.dtypes["vae"] == "float32"
    assert_same_weights(loaded.pipe, reference, names=("vae", "text_encoder"))
    assert_same_weights(loaded.pipe, reference, names=("unet",), dtype=torch.bfloat16)


def test_single_file_without_config_offline(checkpoint: Checkpoint, empty_cache: Path) -> None:
    with pytest.raises(SourceError) as error:
        load_pipeline(checkpoint[0], device="cpu")
    message = one_line(error)
    assert "looks like a v1 checkpoint" in message
    assert f"needs the diffusers configs of {SD15_CONFIG_REPO}" in message
    assert "config=FOLDER" in message


def test_pickle_checkpoint_needs_allow_pickle(
    checkpoint: Checkpoint, tiny_sd_dir: Path, tmp_path: Path
) -> None:
    path, reference = checkpoint
    ckpt = tmp_path / "tiny.ckpt"
    torch.save({"state_dict": to_ldm_state_dict(reference)}, ckpt)
    with pytest.raises(PickleRefused) as error:
        load_pipeline(ckpt, device="cpu", config=tiny_sd_dir)
    assert one_line(error) == "tiny.ckpt is a pickle checkpoint; pass --allow-pickle to load it"
    loaded = load_pipeline(ckpt, device="cpu", config=tiny_sd_dir, allow_pickle=True)
    assert_same_weights(loaded.pipe, reference)


def test_folder_with_pickle_weights_and_allow_pickle(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = copy_pipeline(tiny_sd_dir, tmp_path / "pipe")
    weights = folder / "text_encoder" / "model.safetensors"
    state = load_pipeline(tiny_sd_dir, device="cpu").pipe.text_encoder.state_dict()
    torch.save(state, folder / "text_encoder" / "pytorch_model.bin")
    weights.unlink()
    with pytest.raises(PickleRefused) as error:
        load_pipeline(folder, device="cpu")
    assert one_line(error) == (
        "text_encoder has only pickle weights (pytorch_model.bin); pass --allow-pickle to load them"
    )
    loaded = load_pipeline(folder, device="cpu", allow_pickle=True)
    reloaded = loaded.pipe.text_encoder.state_dict()
    assert all(torch.equal(reloaded[key], value) for key, value in state.items())


# --- sources that are wrong ---------------------------------------------------------------------------------


def test_no_such_path() -> None:
    with pytest.raises(SourceError) as error:
        load_pipeline("/nowhere/at/all", device="cpu")
    assert one_line(error).startswith("no such pipeline: /nowhere/at/all")


def test_folder_without_model_index(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as error:
        load_pipeline(tmp_path, device="cpu")
    assert one_line(error) == f"{tmp_path} is not a diffusers pipeline folder (no model_index.json)"


def test_run_folder_points_to_gui_and_replay(tmp_path: Path) -> None:
    (tmp_path / "run.sqlite").write_bytes(b"")
    with pytest.raises(SourceError) as error:
        load_pipeline(tmp_path, device="cpu")
    message = one_line(error)
    assert "is a GhostViewer run" in message
    assert f"ghostviewer gui {tmp_path}" in message and f"ghostviewer replay {tmp_path}" in message


def test_missing_component_folder(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = copy_pipeline(tiny_sd_dir, tmp_path / "pipe")
    shutil.rmtree(folder / "vae")
    with pytest.raises(SourceError) as error:
        load_pipeline(folder, device="cpu")
    assert one_line(error).startswith("component 'vae' listed in model_index.json is missing")


def test_component_without_weights(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = copy_pipeline(tiny_sd_dir, tmp_path / "pipe")
    (folder / "unet" / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(SourceError) as error:
        load_pipeline(folder, device="cpu")
    assert one_line(error).startswith("unet has no weight files")


def test_truncated_safetensors_in_folder(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = copy_pipeline(tiny_sd_dir, tmp_path / "pipe")
    weights = folder / "unet" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    with pytest.raises(SourceError) as error:
        load_pipeline(folder, device="cpu")
    assert one_line(error).startswith(f"{weights} is not a valid safetensors file (truncated or corrupt?)")


def test_broken_model_index(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = copy_pipeline(tiny_sd_dir, tmp_path / "pipe")
    (folder / "model_index.json").write_text("{not json")
    with pytest.raises(SourceError) as error:
        load_pipeline(folder, device="cpu")
    assert "model_index.json is not valid JSON" in one_line(error)


def test_diffusers_failure_becomes_one_line(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = copy_pipeline(tiny_sd_dir, tmp_path / "pipe")
    config_path = folder / "unet" / "config.json"
    config = json.loads(config_path.read_text())
    config["block_out_channels"] = [16, 32]  # weights no longer fit the architecture
    config_path.write_text(json.dumps(config))
    with pytest.raises(SourceError) as error:
        load_pipeline(folder, device="cpu")
    assert one_line(error).startswith(f"could not load {folder}: Error(s) in loading state_dict")
    assert "size mismatch" in str(error.value)


def test_truncated_single_file(checkpoint: Checkpoint, tmp_path: Path) -> None:
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(checkpoint[0].read_bytes()[:50_000])
    with pytest.raises(SourceError) as error:
        load_pipeline(broken, device="cpu")
    assert one_line(error).startswith(f"{broken} is not a valid safetensors file")


def test_safetensors_that_is_not_a_pipeline_checkpoint(tmp_path: Path) -> None:
    lora = tmp_path / "lora.safetensors"
    save_file({"lora_unet_down.alpha": torch.ones(1)}, str(lora))
    with pytest.raises(SourceError) as error:
        load_pipeline(lora, device="cpu")
    assert one_line(error).startswith(f"{lora} is not a whole-pipeline checkpoint")


def test_unreadable_pickle_with_allow_pickle(tmp_path: Path) -> None:
    garbage = tmp_path / "model.ckpt"
    garbage.write_bytes(b"not a pickle at all")
    with pytest.raises(SourceError) as error:
        load_pipeline(garbage, device="cpu", allow_pickle=True)
    assert one_line(error).startswith(f"{garbage} is not a readable PyTorch checkpoint")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("notes.txt", "is not a pipeline checkpoint"), ("bug.zip", "is a bundle, not a pipeline")],
)
def test_other_files(tmp_path: Path, name: str, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"hello")
    with pytest.raises(SourceError) as error:
        load_pipeline(path, device="cpu")
    assert expected in one_line(error)


def test_describe_source(tiny_sd_dir: Path) -> None:
    loaded = load_pipeline(tiny_sd_dir, device="cpu")
    described = describe_source(loaded)
    assert described["source"] == str(tiny_sd_dir) and described["kind"] == "folder"
    assert described["class"] == "StableDiffusionPipeline" and described["device"] == "cpu"
    assert described["components"]["unet"] == {"class": "UNet2DConditionModel", "dtype": "float32"}
    assert described["components"]["scheduler"] == {"class": "DDIMScheduler", "dtype": None}
    assert described["weight_hashes"] == loaded.weight_hashes
    json.dumps(described)  # goes into the run record as JSON


# --- devices and dtypes -------------------------------------------------------------------------------------


def test_auto_device_prefers_cuda_then_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "_cuda_available", lambda: False)
    monkeypatch.setattr(devices, "_mps_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(devices, "_mps_available", lambda: True)
    assert resolve_device("auto") == "mps"
    monkeypatch.setattr(devices, "_cuda_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("CPU") == "cpu"


def test_unavailable_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "_cuda_available", lambda: False)
    with pytest.raises(GhostError) as error:
        resolve_device("cuda")
    assert one_line(error) == "CUDA was requested but is not available on this machine"
    with pytest.raises(GhostError) as error:
        resolve_device("tpu")
    assert one_line(error) == "unknown device 'tpu'; choose one of: auto, cpu, cuda, mps"


def test_dtype_specs() -> None:
    assert resolve_dtype(None, "cpu") == {"default": torch.float32}
    assert resolve_dtype("float16", "cpu") == {"default": torch.float16}
    assert resolve_dtype("bf16,vae=float32", "cpu") == {"default": torch.bfloat16, "vae": torch.float32}
    assert resolve_dtype("vae=float16", "cpu") == {"default": torch.float32, "vae": torch.float16}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("float8", "unknown dtype 'float8' in --dtype 'float8'; choose float32, float16 or bfloat16"),
        ("float32,float16", "--dtype 'float32,float16' names two defaults; use DTYPE,COMPONENT=DTYPE"),
        ("float32,,vae=float16", "empty entry in --dtype 'float32,,vae=float16'"),
        ("my vae=float16", "bad component name 'my vae' in --dtype 'my vae=float16'"),
    ],
)
def test_bad_dtype_specs(spec: str, expected: str) -> None:
    with pytest.raises(GhostError) as error:
        resolve_dtype(spec, "cpu")
    assert one_line(error) == expected


def test_errors_are_one_line_whatever_the_caller_passes() -> None:
    assert str(SourceError("first\n  second")) == "first second"
    assert issubclass(PickleRefused, SourceError) and issubclass(SourceError, GhostError)


def test_a_single_file_run_records_its_configs_folder_so_it_replays(checkpoint: Checkpoint, tiny_sd_dir: Path,
                                                                     empty_cache: Path, tmp_path: Path) -> None:
    """Without the recorded --config, replay, bisect and a bundle's reproduce line could not load the checkpoint
    again (offline, no configs in the cache)."""
    import shlex

    from ghostviewer import api
    from ghostviewer.cli import build_parser
    from ghostviewer.record import RunRecord
    from ghostviewer.record.bundle_texts import command_line

    path, _ = checkpoint
    run = api.run(str(path), "a red circle", seed=1, steps=2, device="cpu", config=tiny_sd_dir,
                  runs_dir=tmp_path / "runs")
    settings = RunRecord(run["run_dir"]).settings
    assert settings["extra"]["config"] == str(tiny_sd_dir.resolve())
    replay = api.replay(run["run_dir"], times=1, runs_dir=tmp_path / "runs")
    assert replay["reproduced"]
    args = build_parser().parse_args(shlex.split(command_line(settings))[1:])
    assert Path(args.config) == tiny_sd_dir.resolve()
