"""A user's copy of a model whose text encoder config was edited: the demo's folder with text_encoder/config.json
saying `hidden_act: relu` where the weights were trained with `quick_gelu`. It loads and runs without error, its
text encoder drifts; the run records the transformers config, compare names `text_encoder.hidden_act`, settings
bisection names exactly that key (the trial that rebuilt the text encoder with the good value, same weights, is
healthy), and a key that changes the architecture is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ghostviewer import api
from ghostviewer.analysis.compare import component_settings_pair
from ghostviewer.cli import main
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR
from ghostviewer.engine.loops.component_flip import flippable, flipped
from ghostviewer.engine.run.applied_settings import component_configs
from ghostviewer.record import RunRecord
from tests.engine.tiny_families import FAMILIES, build_tiny

PROMPT = "a red circle"


def edited_text_encoder(folder: Path, **changes: Any) -> Path:
    """The demo's folder copied to `folder`, its text encoder's config.json with `changes`."""
    shutil.copytree(DEMO_PIPELINE_DIR, folder)
    path = folder / "text_encoder" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}, indent=2))
    return folder


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A good run of the demo (2 steps) and a bad run of the edited copy (3 steps): two settings differ."""
    root = tmp_path_factory.mktemp("text-encoder-config")
    copy = edited_text_encoder(root / "relu-copy", hidden_act="relu")
    runs = root / "runs"
    good = api.run("demo", PROMPT, seed=1, steps=2, runs_dir=runs)
    bad = api.run(str(copy), PROMPT, seed=1, steps=3, runs_dir=runs)
    return {"good": good, "bad": bad, "runs": runs}


def test_the_text_encoders_config_is_recorded(pair: dict[str, Any]) -> None:
    good, bad = (RunRecord(pair[k]["run_dir"]).environment["component_configs"]["text_encoder"]
                 for k in ("good", "bad"))
    assert good["_class"] == bad["_class"] == "CLIPTextModel"
    assert (good["hidden_act"], bad["hidden_act"]) == ("quick_gelu", "relu")
    assert good["hidden_size"] == 64 and good["layer_norm_eps"] == 1e-05
    assert not {"transformers_version", "architectures", "dtype", "torch_dtype", "_name_or_path"} & set(good)
    assert {k: v for k, v in good.items() if k != "hidden_act"} == {k: v for k, v in bad.items() if k != "hidden_act"}


def test_compare_names_the_key(pair: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    result = api.compare(pair["good"]["run_dir"], pair["bad"]["run_dir"])
    assert result["settings_diff"] == {"steps": [2, 3], "text_encoder.hidden_act": ["quick_gelu", "relu"]}
    assert main(["compare", pair["good"]["run_dir"], pair["bad"]["run_dir"]]) == 1
    assert "setting text_encoder.hidden_act: 'quick_gelu' vs 'relu'" in capsys.readouterr().out


def test_settings_bisection_names_the_key_and_the_good_value_is_healthy(pair: dict[str, Any]) -> None:
    bad = pair["bad"]
    assert bad["first_anomaly"]["module"].startswith("text_encoder"), bad  # the edited copy drifts
    result = api.bisect(bad["run_dir"], settings=pair["good"]["run_dir"], runs_dir=pair["runs"])
    assert sorted(result["differences"]) == ["steps", "text_encoder.hidden_act"]
    assert result["culprit_settings"] == {"text_encoder.hidden_act": ["quick_gelu", "relu"]}, result["trail"]
    assert result["not_flipped"] == {}
    flipped_trials = [t for t in result["trail"] if "text_encoder.hidden_act" not in t["kept_bad"]]
    assert flipped_trials and all(t["symptom"] is False for t in flipped_trials), result["trail"]
    assert all(t["component_configs"] == {"text_encoder": {"hidden_act": "quick_gelu"}} for t in flipped_trials)


def test_an_architecture_key_is_refused_in_one_line(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    for key, value in (("hidden_size", 128), ("num_hidden_layers", 3), ("vocab_size", 300)):
        why = flippable(pipe, "text_encoder", key, value, "CLIPTextModel")
        assert why is not None and "architecture" in why and "\n" not in why, why
    assert flippable(pipe, "text_encoder", "layer_norm_eps", 1e-3, "CLIPTextModel") is None
    why = flippable(pipe, "text_encoder", "hidden_act", "no-such-activation", "CLIPTextModel")
    assert why is not None and why.startswith("CLIPTextModel cannot be built with hidden_act=") and "\n" not in why


def test_a_rebuilt_text_encoder_holds_the_same_weights_and_is_put_back(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    encoder = pipe.text_encoder
    with flipped(pipe, {"text_encoder": {"hidden_act": "gelu"}}):
        rebuilt = pipe.text_encoder
        assert rebuilt is not encoder and rebuilt.config.hidden_act == "gelu"
        assert type(rebuilt.encoder.layers[0].mlp.activation_fn).__name__ == "GELUActivation"
        weight = rebuilt.encoder.layers[0].mlp.fc1.weight
        assert weight.data_ptr() == encoder.encoder.layers[0].mlp.fc1.weight.data_ptr()  # assigned, not copied
        assert weight.dtype == encoder.dtype and weight.device == encoder.device
        assert not any(b.is_meta for b in rebuilt.buffers())
        rebuilt(pipe.tokenizer(PROMPT, return_tensors="pt").input_ids)
    assert pipe.text_encoder is encoder and encoder.config.hidden_act == "quick_gelu"


def test_a_record_made_before_text_encoder_configs_compares_by_class_only() -> None:
    old = {"component_configs": {"text_encoder": {"_class": "CLIPTextModel"}, "vae": {"_class": "V", "s": 1}}}
    new = {"component_configs": {"text_encoder": {"_class": "CLIPTextModel", "hidden_act": "gelu"},
                                 "vae": {"_class": "V", "s": 2}}}
    a, b = component_settings_pair(old, new)
    assert a == {"text_encoder.class": "CLIPTextModel", "vae.class": "V", "vae.s": 1}
    assert b == {"text_encoder.class": "CLIPTextModel", "vae.class": "V", "vae.s": 2}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_familys_text_encoders_are_recorded_as_plain_json(family: str) -> None:
    pipe = build_tiny(family)
    configs = component_configs(pipe)
    encoders = [n for n in pipe.components if n.startswith("text_encoder") and pipe.components[n] is not None]
    assert encoders and all(configs[n]["_class"] == type(pipe.components[n]).__name__ for n in encoders)
    assert json.loads(json.dumps(configs)) == configs
