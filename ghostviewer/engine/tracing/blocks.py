"""Block discovery: a pipeline's components as a tree of module paths, each with a kind and bypassability.

Paths are component-prefixed `named_modules()` names (`unet.mid_block.resnets.0`), the key used everywhere.
"Block depth" keeps the units a person reasons about — a component's direct children and the members of its
module lists down to five levels (`vae.decoder.up_blocks.2.resnets.1`) — and drops containers and the layers
inside a block: nothing inside an attention or feed-forward module (`attn.to_out.1` Dropout, `ff.net.0` GELU).
A wrapped text model (`text_encoder_2.text_model` of CLIPTextModelWithProjection) is looked through, so both SDXL
text encoders list the same parts. Block depth also traces the attention modules that read the prompt (sentinels):
a text encoder's attention (T5's inside its T5LayerSelfAttention block), a denoiser's cross-attention (`attn2`) and
joint text-image attention (SD3, Flux).
Inside a block they are the classic place of a silent ghost — a cross-attention that goes to zero on a very short
prompt leaves its transformer block's output plausible (the residual alone), so only the attention's own output
shows the collapse. The blocks tree (discover_blocks: what can be bypassed) keeps to the blocks.
"Leaf depth" adds every other module but bare containers: every layer, and
the modules that hold layers too (an attention module, its processor's own arithmetic included), so a fault in a
module's own forward is named there, not at the next layer that runs after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from torch import nn

from ghostviewer.record.types import PHASE_ORDER

Depth = Literal["block", "leaf"]

# Phase of the run in which each component's modules execute.
PHASE_OF_COMPONENT = {
    "text_encoder": "encode",
    "text_encoder_2": "encode",
    "text_encoder_3": "encode",
    "unet": "denoise",
    "transformer": "denoise",
    "prior": "denoise",
    "vae": "decode",
}
DENOISERS = ("unet", "transformer", "prior", "controlnet")  # a ControlNet runs in each step, before the denoiser
MAX_BLOCK_DEPTH = 5
# Direct children that only wrap a model (CLIPTextModelWithProjection.text_model): their children count as direct.
_WRAPPERS = ("text_model",)

# Kinds whose output has the shape of their main input, so bypassing them means passing that input through.
_RESIDUAL_KINDS = {
    "Transformer2DModel",
    "BasicTransformerBlock",
    "UNetMidBlock2DCrossAttn",
    "UNetMidBlock2D",
    "CLIPEncoderLayer",
    "T5Block",
    "JointTransformerBlock",
    "FluxTransformerBlock",
    "FluxSingleTransformerBlock",
    "PixArtTransformerBlock",
}


@dataclass(frozen=True)
class Block:
    module: str
    kind: str
    bypassable: bool
    component: str
    phase: str

    bypass: str | None = None  # 'identity' or 'zero_residual' (see bypass_mode)

    def to_json(self) -> dict[str, object]:
        return {"module": self.module, "kind": self.kind, "bypassable": self.bypassable, "bypass": self.bypass}


def pipeline_components(pipe: object) -> dict[str, nn.Module]:
    """The torch modules of a pipeline, by component name, in the order they run (encode, denoise, decode)."""
    components = getattr(pipe, "components", {}) or {}
    modules = {name: m for name, m in components.items() if isinstance(m, nn.Module)}
    return dict(sorted(modules.items(), key=lambda kv: PHASE_ORDER.get(phase_of(kv[0]), 3)))


def tree_signature(pipe: object) -> int:
    """tracer._tree_signature, the same value (the identity of every module object, in the same walk order), made
    without a generator per module: most modules are leaves (~40 % less on the demo's 513)."""
    return tree_walk(pipe)[0]


def tree_walk(pipe: object) -> tuple[int, bool]:
    """(tree_signature, whether any module has a forward hook, a pre-hook or a forward set on the instance) in one
    walk: a watched call names the user's hooks (watch/user_hooks.py) only when there are any."""
    ids: list[int] = []
    hooked = False
    stack = list(pipeline_components(pipe).values())
    append, pop, extend = ids.append, stack.pop, stack.extend
    while stack:
        module = pop()
        append(id(module))
        if not hooked and (module._forward_hooks or module._forward_pre_hooks or "forward" in module.__dict__):
            hooked = True
        children = module._modules
        if children:
            extend([child for child in children.values() if child is not None])
    return hash(tuple(ids)), hooked


def phase_of(path: str) -> str:
    component, _, inner = path.partition(".")
    if component == "vae" and inner.startswith(_VAE_ENCODING):
        return "encode"  # img2img/inpaint encode their images before the first step: not part of the decode
    return PHASE_OF_COMPONENT.get(component, "denoise" if component.startswith(DENOISERS) else "encode")


_VAE_ENCODING = ("encoder", "quant_conv")  # AutoencoderKL.encode's modules (post_quant_conv is the decoder's)


def _known_kind(module: nn.Module, kinds: set[str] | frozenset[str]) -> str | None:
    """The nearest class of `module` (its own, else a base: a user's subclass of a diffusers block) in `kinds`."""
    return next((cls.__name__ for cls in type(module).__mro__ if cls.__name__ in kinds), None)


def bypass_mode(module: nn.Module) -> str | None:
    """How a block is bypassed: 'identity' (output = input), 'zero_residual' (a resnet whose shortcut changes
    the channels keeps only that shortcut: output = conv_shortcut(input) / output_scale_factor), or None."""
    kind = _known_kind(module, _RESIDUAL_KINDS | {"ResnetBlock2D"})
    if kind in _RESIDUAL_KINDS:
        return "identity"
    if kind == "ResnetBlock2D" and not getattr(module, "up", False) and not getattr(module, "down", False):
        if getattr(module, "conv_shortcut", None) is not None:
            return "zero_residual"
        if getattr(module, "in_channels", None) == getattr(module, "out_channels", None):
            return "identity"
    return None


def is_bypassable(module: nn.Module) -> bool:
    return bypass_mode(module) is not None


def _is_container(module: nn.Module) -> bool:
    return isinstance(module, (nn.ModuleList, nn.ModuleDict, nn.Sequential)) and not list(
        module.parameters(recurse=False)
    )


def _is_layer_internal(module: nn.Module) -> bool:
    """Attention and feed-forward modules: what lies inside them are layers, not blocks."""
    kind = type(module).__name__
    return kind.endswith("Attention") or kind == "FeedForward"


def _is_block(relative: str, module: nn.Module) -> bool:
    if _is_container(module):
        return False
    head, _, rest = relative.partition(".")
    if head in _WRAPPERS:
        if not rest:
            return False  # the wrapper itself: its parts are listed instead
        relative = rest
    parts = relative.split(".")
    if len(parts) == 1:
        # Direct children, except parameter-free leaves such as activations and timestep projections.
        return bool(list(module.parameters(recurse=False))) or bool(list(module.children()))
    if parts[-1] == "mid_block":
        return True
    indices = sum(part.isdigit() for part in parts)
    return parts[-1].isdigit() and len(parts) <= MAX_BLOCK_DEPTH and indices <= 2


def reads_the_prompt(component: str, module: nn.Module) -> bool:
    """An attention module that attends to the prompt: any attention of a text encoder (it runs once a call), a
    denoiser's cross-attention, a joint text-image attention (diffusers marks them is_cross_attention /
    added_kv_proj_dim). Self-attention over the image is left to leaf depth: a denoiser has many."""
    if not type(module).__name__.endswith("Attention"):
        return False
    if phase_of(component) == "encode":
        return True
    return bool(getattr(module, "is_cross_attention", False)) or getattr(module, "added_kv_proj_dim", None) is not None


def prompt_sentinels(modules: list[tuple[str, nn.Module]]) -> frozenset[str]:
    """The paths among block depth's traced modules that are there as sentinels, not as blocks."""
    found = set()
    for path, module in modules:
        component, _, relative = path.partition(".")
        if reads_the_prompt(component, module) and not _is_block(relative, module):
            found.add(path)
    return frozenset(found)


def iter_modules(pipe: object, depth: Depth = "block", sentinels: bool = True) -> Iterator[tuple[str, nn.Module]]:
    """(path, module) for every traced module at the given depth, component by component; `sentinels`: at block
    depth, the attention modules that read the prompt too (module docstring)."""
    for component, root in pipeline_components(pipe).items():
        internal: list[str] = []  # prefixes of attention / feed-forward modules seen so far (parents come first)
        # a block that is itself a wrapper of attention (T5LayerSelfAttention: a norm, T5Attention, the residual)
        wrappers: list[str] = []
        found: list[tuple[str, nn.Module, bool, bool]] = []
        for relative, module in root.named_modules():
            if not relative:
                continue
            owner = next((prefix for prefix in internal if relative.startswith(prefix)), None)
            inside = owner is not None
            if _is_layer_internal(module):
                internal.append(relative + ".")
            block = not inside and _is_block(relative, module)
            if block and _is_layer_internal(module):
                wrappers.append(relative + ".")
            wrapped = owner in wrappers and "." not in relative[len(owner or ""):]  # the wrapper's own child
            sentinel = sentinels and (not inside or wrapped) and not block and reads_the_prompt(component, module)
            found.append((relative, module, block, sentinel))
        gaps = _gaps(root, {relative for relative, _, block, _ in found if block})
        for relative, module, block, sentinel in found:
            if block or sentinel or relative in gaps or (depth == "leaf" and not _is_container(module)):
                yield f"{component}.{relative}", module


def _is_no_op(module: nn.Module) -> bool:
    """Modules that hand their input on unchanged at inference: nothing to trace."""
    return isinstance(module, (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d))


def _gaps(root: nn.Module, blocks: set[str]) -> set[str]:
    """The modules that run between blocks at the top of a component: the other children of the component and
    of the direct children that hold blocks (`unet.conv_act`, `vae.decoder.conv_in`, a T5 stack's
    `encoder.embed_tokens`). Untraced, a fault in one would first show in the next block that runs — a healthy
    one, named as the culprit."""
    parents: list[tuple[str, nn.Module]] = [("", root)]
    for name, child in root.named_children():
        parents.append((name + ".", child))
        if name in _WRAPPERS:  # its children count as direct children (text_encoder_2.text_model.encoder)
            parents.extend((f"{name}.{inner}.", grandchild) for inner, grandchild in child.named_children())
    gaps: set[str] = set()
    for prefix, parent in parents:
        # the component itself, and the direct children that are blocks holding blocks (vae.decoder, a T5 stack)
        is_block_parent = prefix.rstrip(".") in blocks and any(b.startswith(prefix) for b in blocks)
        if prefix and not is_block_parent and prefix.rstrip(".") not in _WRAPPERS:
            continue
        for name, child in parent.named_children():
            relative = prefix + name
            if relative not in blocks and not _is_container(child) and name not in _WRAPPERS and not _is_no_op(child):
                gaps.add(relative)
    return gaps


def discover_blocks(pipe: object) -> list[Block]:
    return [
        Block(
            path,
            type(module).__name__,
            is_bypassable(module),
            path.split(".", 1)[0],
            phase_of(path),
            bypass_mode(module),
        )
        for path, module in iter_modules(pipe, "block", sentinels=False)
    ]


def resolve_module(pipe: object, path: str) -> nn.Module:
    """The module at a component-prefixed path; KeyError with the nearest names when it does not exist."""
    component, _, relative = path.partition(".")
    roots = pipeline_components(pipe)
    if component not in roots:
        raise KeyError(f"no component {component!r} (have: {', '.join(roots)})")
    try:
        return roots[component].get_submodule(relative) if relative else roots[component]
    except AttributeError as exc:
        raise KeyError(f"no module {path!r} in this pipeline") from exc
