"""The user's own code on a watched pipeline's modules — forward hooks, pre-hooks, a `forward` set on an instance —
which a pipeline loaded again from its folder does not have: named in the call's record, so a replay or bisection
from the folder that does not reproduce says why ("replay it with pipeline=")."""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.interventions.base import users_code

MAX_NAMED = 20  # a record names this many; a pipeline hooked everywhere (a profiler) is summed up


def _label(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def _ours(fn: Any) -> bool:
    """A library's hook (GhostViewer's tracer, transformers' output capture, accelerate's), not the user's."""
    return not users_code(fn)


def _any_hooked(root: Any) -> bool:
    """Whether any module under `root` has a hook or an instance forward, walked through `_modules` directly
    (modules()' generators cost several times more on a tree of hundreds of small modules)."""
    stack = [root]
    while stack:
        module = stack.pop()
        if module._forward_hooks or module._forward_pre_hooks or "forward" in module.__dict__:
            return True
        stack.extend(child for child in module._modules.values() if child is not None)
    return False


def user_hooks(components: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"module", "kind", "name"}] for each hook of the user's on the components' modules (at most MAX_NAMED, then
    one entry counting the rest)."""
    found: list[dict[str, Any]] = []
    for component, root in components.items():
        if not _any_hooked(root):
            continue  # the common case, checked without naming every module
        for path, module in root.named_modules():
            where = f"{component}.{path}" if path else component
            for kind, hooks in (("forward hook", module._forward_hooks),
                                ("forward pre-hook", module._forward_pre_hooks)):
                found += [{"module": where, "kind": kind, "name": _label(fn)} for fn in hooks.values() if not _ours(fn)]
            forward = vars(module).get("forward")
            if forward is not None and not hasattr(module, "_hf_hook") and not _ours(forward):  # offloading wraps it
                found.append({"module": where, "kind": "patched forward", "name": _label(forward)})
    if len(found) > MAX_NAMED:
        found = found[:MAX_NAMED] + [{"module": "…", "kind": "more", "name": f"{len(found) - MAX_NAMED} more"}]
    return found


def hooks_hint(call: dict[str, Any] | None) -> str:
    """One clause for a re-run from the folder that did not come back the same; "" when the call had no hooks."""
    hooks = [h for h in (call or {}).get("user_hooks") or [] if h.get("kind") != "more"]
    if not hooks:
        return ""
    named = ", ".join(f"{h['name']} on {h['module']}" for h in hooks[:3]) + (" …" if len(hooks) > 3 else "")
    return (f"the watched pipeline had code of your own on its modules ({named}), which a pipeline loaded from its "
            "folder lacks: re-run it with pipeline= (the object they are on)")
