"""Constructor arguments recovered from a built module, for common diffusers blocks that keep no config.

Each recoverer reads the attributes and layer shapes the constructor leaves behind and raises `Unrecoverable`
for variants it does not cover; whatever it returns is checked by rebuilding the block, loading its weights
strictly and comparing outputs (`rebuild.py`), so a wrong guess is never passed off as a repro.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

ACTIVATIONS = {"SiLU": "silu", "Mish": "mish", "GELU": "gelu", "ReLU": "relu"}


class Unrecoverable(Exception):
    """The block's constructor arguments cannot be read back from it."""


def _activation(module: nn.Module) -> str:
    name = type(module).__name__
    if name not in ACTIVATIONS:
        raise Unrecoverable(f"activation {name}")
    return ACTIVATIONS[name]


def resnet_block_2d(m: nn.Module) -> dict[str, Any]:
    if getattr(m, "upsample", None) is not None or getattr(m, "downsample", None) is not None:
        if not isinstance(m.upsample or m.downsample, nn.Module):
            raise Unrecoverable("FIR / sde_vp resampling kernel")
    proj = m.time_emb_proj
    return {
        "in_channels": m.in_channels,
        "out_channels": m.out_channels,
        "conv_shortcut": m.use_conv_shortcut,
        "dropout": m.dropout.p,
        "temb_channels": proj.in_features if proj is not None else None,
        "groups": m.norm1.num_groups,
        "groups_out": m.norm2.num_groups,
        "eps": m.norm1.eps,
        "non_linearity": _activation(m.nonlinearity),
        "skip_time_act": m.skip_time_act,
        "time_embedding_norm": m.time_embedding_norm,
        "output_scale_factor": m.output_scale_factor,
        "use_in_shortcut": m.use_in_shortcut,
        "up": m.up,
        "down": m.down,
        "conv_shortcut_bias": m.conv_shortcut is None or m.conv_shortcut.bias is not None,
        "conv_2d_out_channels": m.conv2.out_channels,
    }


def attention(m: nn.Module) -> dict[str, Any]:
    for name in ("norm_q", "spatial_norm", "add_k_proj", "to_add_out"):
        if getattr(m, name, None) is not None:
            raise Unrecoverable(f"Attention with {name}")
    if m.inner_kv_dim != m.inner_dim or getattr(m, "pre_only", False) or m.context_pre_only is not None:
        raise Unrecoverable("Attention variant (kv heads, pre_only or joint)")
    norm_cross = m.norm_cross
    if norm_cross is not None and not isinstance(norm_cross, nn.LayerNorm):
        raise Unrecoverable("Attention with a group-norm cross norm")
    return {
        "query_dim": m.query_dim,
        "cross_attention_dim": m.cross_attention_dim if m.is_cross_attention else None,
        "heads": m.heads,
        "dim_head": m.inner_dim // m.heads,
        "dropout": m.dropout,
        "bias": m.use_bias,
        "upcast_attention": m.upcast_attention,
        "upcast_softmax": m.upcast_softmax,
        "cross_attention_norm": "layer_norm" if norm_cross is not None else None,
        "norm_num_groups": m.group_norm.num_groups if m.group_norm is not None else None,
        "out_bias": m.to_out[0].bias is not None,
        "scale_qk": m.scale_qk,
        "only_cross_attention": m.only_cross_attention,
        "eps": m.group_norm.eps if m.group_norm is not None else 1e-5,
        "rescale_output_factor": m.rescale_output_factor,
        "residual_connection": m.residual_connection,
        "_from_deprecated_attn_block": m._from_deprecated_attn_block,
        "out_dim": m.out_dim if m.out_dim != m.query_dim else None,
        "is_causal": getattr(m, "is_causal", False),
    }


def basic_transformer_block(m: nn.Module) -> dict[str, Any]:
    if m.norm_type != "layer_norm" or m.pos_embed is not None or hasattr(m, "fuser"):
        raise Unrecoverable(f"BasicTransformerBlock with norm_type {m.norm_type!r} or extras")
    linears = [layer for layer in m.ff.modules() if isinstance(layer, nn.Linear)]
    return {
        "dim": m.dim,
        "num_attention_heads": m.num_attention_heads,
        "attention_head_dim": m.attention_head_dim,
        "dropout": m.dropout,
        "cross_attention_dim": m.cross_attention_dim,
        "activation_fn": m.activation_fn,
        "attention_bias": m.attention_bias,
        "only_cross_attention": m.only_cross_attention,
        "double_self_attention": m.double_self_attention,
        "upcast_attention": m.attn1.upcast_attention,
        "norm_elementwise_affine": m.norm_elementwise_affine,
        "norm_type": m.norm_type,
        "norm_eps": m.norm1.eps,
        "final_dropout": isinstance(m.ff.net[-1], nn.Dropout),
        "ff_inner_dim": linears[-1].in_features,
        "ff_bias": linears[-1].bias is not None,
        "attention_out_bias": m.attn1.to_out[0].bias is not None,
    }


def _unet_block(m: nn.Module) -> dict[str, Any]:
    """CrossAttnDownBlock2D, DownBlock2D, UNetMidBlock2DCrossAttn: from their first resnet and transformer."""
    first = resnet_block_2d(m.resnets[0])
    values: dict[str, Any] = {
        "in_channels": first["in_channels"],
        "out_channels": m.resnets[-1].out_channels,
        "temb_channels": first["temb_channels"],
        "dropout": first["dropout"],
        "num_layers": len(m.resnets) - (1 if type(m).__name__.startswith("UNetMid") else 0),
        "resnet_eps": first["eps"],
        "resnet_time_scale_shift": first["time_embedding_norm"],
        "resnet_act_fn": first["non_linearity"],
        "resnet_groups": first["groups"],
        "resnet_groups_out": first["groups_out"],
        "output_scale_factor": first["output_scale_factor"],
        "resnet_pre_norm": True,
    }
    samplers = getattr(m, "downsamplers", None)
    values["add_downsample"] = samplers is not None
    if samplers is not None:
        values["downsample_padding"] = samplers[0].padding
    attentions = getattr(m, "attentions", None)
    if attentions is not None and len(attentions):
        config = attentions[0].config
        values.update(
            num_attention_heads=config["num_attention_heads"],
            cross_attention_dim=config["cross_attention_dim"],
            transformer_layers_per_block=config["num_layers"],
            use_linear_projection=config["use_linear_projection"],
            only_cross_attention=config["only_cross_attention"],
            upcast_attention=config["upcast_attention"],
            attention_type=config["attention_type"],
        )
        if getattr(m, "has_cross_attention", True) is False:
            raise Unrecoverable("block without cross attention")
    accepted = inspect.signature(type(m).__init__).parameters
    return {k: v for k, v in values.items() if k in accepted}


RECOVERERS: dict[str, Callable[[nn.Module], dict[str, Any]]] = {
    "ResnetBlock2D": resnet_block_2d,
    "Attention": attention,
    "BasicTransformerBlock": basic_transformer_block,
    "UNetMidBlock2DCrossAttn": _unet_block,
    "CrossAttnDownBlock2D": _unet_block,
    "DownBlock2D": _unet_block,
}


def recover_kwargs(module: nn.Module) -> dict[str, Any]:
    """The constructor keywords of a known diffusers block (or of a subclass of one); Unrecoverable when it is not
    one or a variant."""
    # A user's subclass of a known block (its forward edited) is made with its diffusers base's keywords.
    base = next((cls for cls in type(module).__mro__
                 if cls.__name__ in RECOVERERS and cls.__module__.startswith("diffusers.")), None)
    if base is None:
        raise Unrecoverable(f"no constructor recovery for {type(module).__name__}")
    recoverer = RECOVERERS[base.__name__]
    try:
        return recoverer(module)
    except (AttributeError, IndexError, KeyError, TypeError) as exc:
        raise Unrecoverable(f"{type(module).__name__}: {exc}") from None
