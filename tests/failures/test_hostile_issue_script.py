"""`export --issue` writes reproduce.py from a run's record, and a record can be someone else's (a colleague's run
opened from their bundle, then reported upstream). Names the script writes as code — a keyword of a watched call, a
component — and text it writes in comments come from that record: a record edited to hold code there must not put
a line of code in the script a user runs."""

from __future__ import annotations

import ast

from ghostviewer.record.bundle_issue import reproduction

PAYLOAD = "__import__('os').system('touch /tmp/pwned')"


def _calls_of(script: str) -> set[str]:
    """The names of everything the script calls (an injected payload is a call of __import__)."""
    names = set()
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "")
    return names


def test_code_in_a_records_names_never_becomes_code_in_reproduce_py() -> None:
    entry = {
        "run_id": "r1", "folder": "runs/r1", "watched": True,
        "settings": {"prompt": "x", "seed": 1, "steps": 2, "adapters": [f"lora.safetensors:1.0\n{PAYLOAD}"]},
        "pipeline": {"class": "StableDiffusionPipeline", "source": "demo", "components": {
            "unet": {"class": "UNet2DConditionModel", "dtype": "float32"},
            "vae": {"class": "AutoencoderKL", "dtype": "float32"},
            f"unet.to(0); {PAYLOAD}; pipe.vae": {"class": "X", "dtype": "float16"}}},
        "call": {"pipeline_class": "StableDiffusionPipeline", "generators": [{"seed": 1, "device": "cpu"}],
                 "unrecorded": [f"callback\n{PAYLOAD}"],
                 "kwargs": {"prompt": "x", f"x=1, y={PAYLOAD}, z": 5, "num_inference_steps": 2}},
        "verdict": {"label": "nan"},
    }
    script = reproduction(entry)
    assert "__import__" not in _calls_of(script) and "system" not in _calls_of(script), script
    assert "num_inference_steps=2" in script  # the call's own keywords are still written
    entry["watched"] = False  # GhostViewer's own call: the LoRA's scale goes into a comment
    script = reproduction(entry)
    assert "__import__" not in _calls_of(script) and "load_lora_weights" in _calls_of(script), script
