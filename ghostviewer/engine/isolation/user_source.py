"""The user's own attention processors (and a module's own class, when the user's) as repro.py code: the class's
source (inspect.getsource) with the imports, constants and helpers of its own module that the source names, so the
repro runs the module as it ran.

A processor whose source cannot be read (defined in a REPL or by exec, a C extension) or that needs a name that
cannot be written out is not copied: repro.py says so by its qualified name and runs diffusers' default there.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import symtable
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ghostviewer.engine.isolation.rebuild import class_path

_LITERALS = (type(None), bool, int, float, str)


@dataclass
class UserProcessors:
    """What repro.py carries of the user's processors, and what it cannot."""

    source: str = ""  # code defining the classes (imports, helpers, classes), "" when none
    on: dict[str, tuple[str, int]] = field(default_factory=dict)  # submodule -> (class name, instance index)
    states: list[dict[str, Any]] = field(default_factory=list)  # per instance: attributes to set (literals)
    report: list[dict[str, Any]] = field(default_factory=list)  # per class: {"kind", "name", "on", "in_repro", "why"}


def _plain(value: Any) -> bool:
    if isinstance(value, _LITERALS):
        return True
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _names(tree: ast.Module) -> set[str]:
    """Names the code reads that it does not define itself (the module globals it needs). Annotations are left
    out: repro.py has `from __future__ import annotations`, so they are never evaluated there."""
    for node in list(ast.walk(tree)):
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    used: set[str] = set()
    tables = [symtable.symtable(ast.unparse(tree), "<user code>", "exec")]
    while tables:
        table = tables.pop()
        top = table.get_type() == "module"
        used |= {sym.get_name() for sym in table.get_symbols() if sym.is_referenced()
                 and (sym.is_global() or (top and not sym.is_assigned() and not sym.is_imported()))}
        tables.extend(table.get_children())
    return used - set(dir(builtins))


def _importable(obj: Any) -> str | None:
    """'from M import Q as N'-able: M.Q is obj, M is not __main__ and not the user's defining module."""
    module_name, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module_name or not qualname or module_name == "__main__" or "<" in qualname or "." in qualname:
        return None
    try:
        found = getattr(importlib.import_module(module_name), qualname)
    except (ImportError, AttributeError):
        return None
    return module_name if found is obj else None


class _Writer:
    """Collects the code a set of user classes needs, each piece once, in dependency order."""

    def __init__(self) -> None:
        self.imports: list[str] = []
        self.blocks: list[str] = []
        self.done: set[int] = set()

    def add(self, obj: Any, home: str) -> str | None:
        """Write obj (a class or function of the user's module `home`) and what it needs; why not, or None."""
        if id(obj) in self.done:
            return None
        self.done.add(id(obj))
        try:
            text = textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError) as exc:
            return f"its source cannot be read ({type(exc).__name__}: {exc})"
        namespace = vars(sys.modules[home]) if home in sys.modules else {}
        for name in sorted(_names(ast.parse(text)) - {obj.__name__}):
            why = self._need(name, namespace, home)
            if why:
                return why
        self.blocks.append(text.rstrip())
        return None

    def _need(self, name: str, namespace: dict[str, Any], home: str) -> str | None:
        if name not in namespace:
            return f"it names {name!r}, which is not a global of {home}"
        value = namespace[name]
        if inspect.ismodule(value):
            line = f"import {value.__name__}" if value.__name__ == name else f"import {value.__name__} as {name}"
        elif (where := _importable(value)) is not None and where != home:
            line = f"from {where} import {value.__qualname__}" + ("" if value.__qualname__ == name else f" as {name}")
        elif (inspect.isclass(value) or inspect.isfunction(value)) and getattr(value, "__module__", None) == home:
            return self.add(value, home)  # a helper of the user's own module: its source too
        elif _plain(value):
            line = f"{name} = {value!r}"
        else:
            return f"it needs {name!r} ({type(value).__name__}), which cannot be written as code"
        if line not in self.imports:
            self.imports.append(line)
        return None


def user_processors(module: nn.Module) -> list[tuple[str, Any]]:
    """(submodule name, processor) for every processor in `module` that is not diffusers' own."""
    found = []
    for name, sub in module.named_modules():
        processor = getattr(sub, "processor", None)
        if processor is not None and not class_path(processor).startswith("diffusers."):
            found.append((name, processor))
    return found


def processor_code(module: nn.Module) -> UserProcessors:
    result = UserProcessors()
    writer = _Writer()
    by_class: dict[type, list[tuple[str, Any]]] = {}
    for name, processor in user_processors(module):
        by_class.setdefault(type(processor), []).append((name, processor))
    instances: dict[int, int] = {}
    for cls, uses in by_class.items():
        kept = (len(writer.imports), len(writer.blocks), set(writer.done))
        why = writer.add(cls, cls.__module__)
        state_why = next((f"its attribute {k!r} is not a plain value" for _, p in uses
                          for k, v in vars(p).items() if not _plain(v)), None) if why is None else None
        why = why or state_why
        on = [name or "the module" for name, _ in uses]
        result.report.append({"kind": "processor", "name": class_path(cls), "on": on, "in_repro": why is None,
                              "why": None if why is None else f"not copied: {why}; repro.py runs diffusers' "
                                                                 "default processor there"})
        if why is not None:  # drop what this class had added
            writer.imports, writer.blocks = writer.imports[:kept[0]], writer.blocks[:kept[1]]
            writer.done = kept[2]
            continue
        for name, processor in uses:
            index = instances.setdefault(id(processor), len(result.states))
            if index == len(result.states):
                result.states.append(dict(vars(processor)))
            result.on[name] = (cls.__name__, index)
    if writer.blocks:
        result.source = "\n".join(writer.imports) + "\n\n\n" + "\n\n\n".join(writer.blocks) + "\n"
    return result


def class_code(module: nn.Module) -> tuple[str, list[dict[str, Any]]]:
    """The module's own class as repro.py code when it is the user's (a subclass of a diffusers block with its
    forward edited): (code defining it, "" when diffusers' own or not copyable; the report line)."""
    cls = type(module)
    if cls.__module__.startswith(("diffusers.", "torch.", "transformers.")):
        return "", []
    writer = _Writer()
    why = writer.add(cls, cls.__module__)
    item = {"kind": "module class", "name": class_path(cls), "on": ["the module"], "in_repro": why is None,
            "why": None if why is None else f"not copied: {why}; repro.py imports it by name and needs it on the "
                                            "Python path"}
    if why is not None:
        return "", [item]
    return "\n".join(writer.imports) + "\n\n\n" + "\n\n\n".join(writer.blocks) + "\n", [item]


@dataclass
class UserHooks:
    """The user's forward hooks as repro.py code: their source, and where each is registered."""

    source: str = ""
    on: list[tuple[str, str, bool]] = field(default_factory=list)  # (submodule, function name, with_kwargs)
    report: list[dict[str, Any]] = field(default_factory=list)


def _lambda_source(fn: Any) -> str | None:
    """A lambda's own expression, when its source line holds exactly one lambda of its argument count."""
    try:
        text = textwrap.dedent(inspect.getsource(fn)).strip()
    except (OSError, TypeError):
        return None
    for candidate in (text, f"({text})", text.rstrip(",)]") + ")"):
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
                 and len(n.args.args) == fn.__code__.co_argcount]
        return ast.unparse(found[0]) if len(found) == 1 else None
    return None


_LIBRARIES = ("ghostviewer", "transformers", "diffusers", "torch", "accelerate", "peft")
# repro.py's own globals: a hook's name or closure variable must not take one of them
_REPRO_NAMES = frozenset({
    "HERE", "MODULE_PATH", "DTYPE", "PROCESSORS", "CONFIG", "KWARGS", "PARENT_CONFIG", "ATTRIBUTES", "USER_HOOKS",
    "argparse", "importlib", "json", "sys", "torch", "Path", "Any", "load_file", "main", "build_module",
    "load_class", "decode_value", "output_tensors", "register_user_hooks", "inject_fault", "set_user_processors",
})


def _hook_code(fn: Any, index: int, writer: _Writer) -> tuple[str, str | None]:
    """(the name repro.py registers, why it cannot be copied or None); the code goes into `writer`."""
    if not inspect.isfunction(fn):
        return "", f"it is a {type(fn).__name__}, not a function"
    taken = _REPRO_NAMES & {fn.__name__, *fn.__code__.co_freevars}
    if taken:
        return "", f"its name or a variable it closes over ({sorted(taken)[0]!r}) is one of repro.py's own"
    home = fn.__module__
    if fn.__name__ == "<lambda>":
        expression = _lambda_source(fn)
        if expression is None:
            return "", "its source cannot be read (a lambda that cannot be told from its line)"
        name, text = f"user_hook_{index}", f"user_hook_{index} = {expression}"
    else:
        try:
            name, text = fn.__name__, textwrap.dedent(inspect.getsource(fn)).rstrip()
        except (OSError, TypeError) as exc:
            return "", f"its source cannot be read ({type(exc).__name__})"
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    for free, cell in cells.items():  # what it closes over becomes a module value: the state it had
        try:
            value = cell.cell_contents
        except ValueError:
            return "", f"its closure variable {free!r} is not set"
        if not _plain(value):
            return "", f"it closes over {free!r} ({type(value).__name__}), which cannot be written as code"
        writer.imports.append(f"{free} = {value!r}")
    namespace = vars(sys.modules[home]) if home in sys.modules else {}
    for needed in sorted(_names(ast.parse(text)) - {name} - set(cells)):
        why = writer._need(needed, namespace, home)
        if why:
            return "", why
    writer.blocks.append(text)
    return name, None


def hooks_code(module: nn.Module) -> UserHooks:
    """The forward hooks on `module` and its submodules (the user's: GhostViewer's are all removed by now) as
    repro.py code; a hook that cannot be copied is named, and repro.py runs without it."""
    result, writer = UserHooks(), _Writer()
    for name, sub in module.named_modules():
        for key, hook in sub._forward_hooks.items():
            if str(getattr(hook, "__module__", None) or "").startswith(_LIBRARIES):
                continue  # a library's own (transformers' output capturing on CLIP layers): not the user's code
            kept = (len(writer.imports), len(writer.blocks))
            fn_name, why = _hook_code(hook, len(result.on), writer)
            label = getattr(hook, "__qualname__", type(hook).__name__)
            result.report.append({"kind": "forward hook", "name": label, "on": [name or "the module"],
                                  "in_repro": why is None,
                                  "why": None if why is None else f"not copied: {why}; carried in memory only "
                                                                  "(isolate, fuzz), repro.py runs without it"})
            if why is not None:
                writer.imports, writer.blocks = writer.imports[:kept[0]], writer.blocks[:kept[1]]
                continue
            result.on.append((name, fn_name, key in sub._forward_hooks_with_kwargs))
    if writer.blocks:
        imports = list(dict.fromkeys(writer.imports))
        result.source = "\n".join(imports) + "\n\n\n" + "\n\n\n".join(writer.blocks) + "\n"
    return result


def hooks_report(module: nn.Module) -> list[dict[str, Any]]:
    """The user's forward hooks on `module` (hooks_code) and a `forward` the user set on an instance
    (module.forward = …), which neither a rebuild nor repro.py has."""
    hooks = hooks_code(module).report
    patched = [{"kind": "patched forward", "name": getattr(sub.forward, "__qualname__", "forward"),
                "on": [name or "the module"], "in_repro": False,
                "why": "set on the instance (module.forward = ...): a rebuilt module runs its class's forward"}
               for name, sub in module.named_modules()
               if "forward" in vars(sub) and not hasattr(sub, "_hf_hook")]  # accelerate's offload wraps it too
    return hooks + patched
