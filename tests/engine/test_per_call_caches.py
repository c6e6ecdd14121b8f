"""What every traced call asks again is answered from a cache that still sees every change: the scheduler's latent
scale (a fresh scheduler per class + config, not per call) and the weight audit's identity of a component, checked
without a walk when the tree signature was just taken."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from diffusers import DDIMScheduler, EulerDiscreteScheduler
from torch import nn

from ghostviewer.engine.judge_model.audit_cite import bad_weights, weights_identity
from ghostviewer.engine.run.latent_sigma import _latent_sigma, latent_sigma
from ghostviewer.engine.tracing.blocks import tree_signature
from ghostviewer.engine.tracing.tracer import _tree_signature


def test_latent_sigma_follows_class_config_and_steps_not_the_schedulers_last_call() -> None:
    euler = EulerDiscreteScheduler()
    assert latent_sigma(SimpleNamespace(scheduler=euler), 8) == _latent_sigma(EulerDiscreteScheduler(), 8)[0]
    euler.set_timesteps(2)  # the scheduler's own init_noise_sigma now follows a 2-step schedule
    assert latent_sigma(SimpleNamespace(scheduler=euler), 8) == _latent_sigma(EulerDiscreteScheduler(), 8)[0]
    leading = EulerDiscreteScheduler(timestep_spacing="leading")
    assert latent_sigma(SimpleNamespace(scheduler=leading), 4) == _latent_sigma(leading, 4)[0]
    assert latent_sigma(SimpleNamespace(scheduler=leading), 4) != latent_sigma(SimpleNamespace(scheduler=euler), 4)
    assert latent_sigma(SimpleNamespace(scheduler=leading), 4) != latent_sigma(SimpleNamespace(scheduler=leading), 30)
    assert latent_sigma(SimpleNamespace(scheduler=DDIMScheduler()), 4) == 1.0
    assert latent_sigma(SimpleNamespace(scheduler=None)) is None


def test_weights_identity_changes_with_every_kind_of_weight_edit() -> None:
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.GroupNorm(1, 3), nn.Sequential(nn.Linear(3, 3)))
    model.register_buffer("scale", torch.ones(3))
    before = weights_identity(model)
    assert weights_identity(model) == before and len(before) == 7  # 3 weights, 3 biases, 1 buffer
    with torch.no_grad():
        model[0].weight[0, 0, 0, 0] = float("nan")  # in place
    edited = weights_identity(model)
    assert edited != before
    model[2][0].weight = nn.Parameter(torch.zeros(3, 3))  # a new tensor
    replaced = weights_identity(model)
    assert replaced != edited
    model[2][0] = nn.Linear(3, 3)  # a new module (what an adapter's injection does)
    injected = weights_identity(model)
    assert injected != replaced
    model.scale = torch.zeros(3)  # a buffer swapped
    assert weights_identity(model) != injected


def test_the_audits_check_without_a_walk_sees_every_change_the_walk_sees() -> None:
    """bad_weights with the tree signature just taken checks the kept tensor dicts instead of walking the tree: it
    still audits again after an in-place edit, a tensor replaced, added, removed or renamed, and a module swapped."""
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.GroupNorm(1, 3), nn.Sequential(nn.Linear(3, 3)))
    pipe = SimpleNamespace(components={"unet": model, "scheduler": object()})

    def audit() -> tuple[list[str], list[str]]:
        findings, cost = bad_weights(pipe, _tree_signature(pipe))
        return sorted({f["kind"] for f in findings}), cost["audited"]

    assert audit() == ([], ["unet"])
    assert audit() == ([], [])  # unchanged: from the cache
    with torch.no_grad():
        model[0].weight[0, 0, 0, 0] = float("nan")  # in place
    assert audit() == (["nan"], ["unet"])
    assert audit() == (["nan"], [])
    model[0].weight = nn.Parameter(torch.ones(3, 2, 1, 1))  # replaced
    assert audit() == ([], ["unet"])
    model[1].register_buffer("dead", torch.zeros(3, 3))  # added where the module had no buffer
    kinds, audited = audit()
    assert audited == ["unet"]
    del model[1].dead  # removed
    assert audit()[1] == ["unet"]
    model[1]._parameters["renamed"] = model[1]._parameters.pop("weight")  # renamed
    assert audit()[1] == ["unet"]
    model[2][0] = nn.Linear(3, 3)  # a new module: another tree signature
    assert audit()[1] == ["unet"]
    assert audit()[1] == []
    with torch.no_grad():
        model[2][0].bias.copy_(torch.full((3,), float("inf")))
    assert audit() == (["inf"], ["unet"])


def test_tree_signature_is_the_tracers_and_changes_with_a_module() -> None:
    """blocks.tree_signature (the watcher's, once a call) is the value tracer._tree_signature gives: the caches both
    fill compare the same numbers."""
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.Sequential(nn.Linear(3, 3), nn.ReLU()), nn.Identity())
    model.add_module("gone", None)
    pipe = SimpleNamespace(components={"text_encoder": nn.Linear(2, 2), "unet": model, "scheduler": object()})
    before = tree_signature(pipe)
    assert before == _tree_signature(pipe) == tree_signature(pipe)
    model[1][0] = nn.Linear(3, 3)
    assert tree_signature(pipe) == _tree_signature(pipe) != before
