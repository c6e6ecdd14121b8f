"""What every traced call asks again is answered from a cache that still sees every change: the scheduler's latent
scale (a fresh scheduler per class + config, not per call) and the weight audit's identity of a component."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from diffusers import DDIMScheduler, EulerDiscreteScheduler
from torch import nn

from ghostviewer.engine.judge_model.audit_cite import weights_identity
from ghostviewer.engine.run.latent_sigma import _latent_sigma, latent_sigma


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
