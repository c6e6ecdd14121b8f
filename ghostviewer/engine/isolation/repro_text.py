"""The standalone repro.py and README.md of an isolated folder: torch, diffusers and safetensors only.

repro.py rebuilds the module from its diffusers class (config, recovered constructor arguments, or its parent
component's config), loads the saved weights and inputs, runs it once and prints the output's statistics;
it exits 1 when the output holds NaN or Inf or collapses (every value equal). A ghost-lab fault of the run and
the user's own attention processors and module class (their source, see user_source.py) are written in as marked
sections.
"""

from __future__ import annotations

import inspect
import pprint
from typing import Any

from ghostviewer.engine.isolation.arguments import decode_value
from ghostviewer.engine.isolation.injected import FORMS
from ghostviewer.engine.isolation.rebuild import BuildSpec

# repro.py imports no GhostViewer (torch, diffusers and safetensors only): arguments.decode_value's own source is
# written in, as the fault presets' and the user's processors' are.
_TEMPLATE = '''#!/usr/bin/env python
"""Standalone repro: @@MODULE@@ (@@CLASS_NAME@@) with its real inputs from a recorded run.

Recorded by GhostViewer from run @@RUN@@ (prompt @@PROMPT@@, seed @@SEED@@), @@WHEN@@.
Needs only torch, diffusers and safetensors; the files next to this script hold the inputs (inputs.json,
inputs.safetensors) and the weights (weights.safetensors).

    python repro.py [--device cpu|cuda]@@FAULT_FLAG_USAGE@@@@USER_FLAG_USAGE@@@@HOOKS_FLAG_USAGE@@

Prints the output's statistics; exit status 1 when the output holds NaN or Inf or collapses (every value
equal), else 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

@@IMPORTS@@

HERE = Path(__file__).resolve().parent
MODULE_PATH = @@MODULE_REPR@@  # where the module sits in the pipeline
DTYPE = torch.@@DTYPE@@
PROCESSORS = @@PROCESSORS@@  # attention processors the run used, where not the default
@@VALUES@@


def build_module():
@@BUILD@@


def load_class(path):
    module_name, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


@@DECODE@@


def output_tensors(output):
    """Every tensor the module returns: dual-stream blocks (SD3, Flux) return (text stream, image stream)."""
    if isinstance(output, torch.Tensor):
        return [("output", output)]
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, (tuple, list)):
        found = [(f"output[{i}]", x) for i, x in enumerate(output) if isinstance(x, torch.Tensor)]
        if found:
            return found
    raise TypeError(f"no tensor in the output ({type(output).__name__})")
@@FAULT@@@@USER@@@@HOOKS@@

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
@@FAULT_FLAG@@@@USER_FLAG@@@@HOOKS_FLAG@@    options = parser.parse_args()
    module = build_module()
    first = next(module.parameters(), None)
    if first is not None and first.dtype != DTYPE:
        module = module.to(DTYPE)
    module.load_state_dict(load_file(str(HERE / "weights.safetensors")), strict=True)
    for name, cls in PROCESSORS.items():
        module.get_submodule(name).set_processor(load_class(cls)())
@@ATTRS_CALL@@@@USER_CALL@@@@HOOKS_CALL@@    module = module.to(options.device).eval()
@@FAULT_CALL@@    spec = json.loads((HERE / "inputs.json").read_text())
    tensors = load_file(str(HERE / "inputs.safetensors"), device=options.device)
    args = [decode_value(v, tensors) for v in spec["args"]]
    kwargs = {k: decode_value(v, tensors) for k, v in spec["kwargs"].items()}
    with torch.no_grad():
        outputs = output_tensors(module(*args, **kwargs))
    broken = False
    for name, tensor in outputs:
        out = tensor.float()
        finite = out[torch.isfinite(out)]
        nan, inf = int(torch.isnan(out).sum()), int(torch.isinf(out).sum())
        print(f"{MODULE_PATH} {name}: shape {tuple(out.shape)}, dtype {DTYPE}")
        if finite.numel():
            print(f"  min {finite.min().item():.6g}  max {finite.max().item():.6g}  "
                  f"mean {finite.mean().item():.6g}  std {finite.std().item() if finite.numel() > 1 else 0.0:.6g}")
        print(f"  NaN {nan}  Inf {inf}  of {out.numel()} values")
        collapsed = out.numel() > 1 and finite.numel() == out.numel() and finite.std().item() == 0.0
        if collapsed:
            print(f"  collapsed: every value is {finite[0].item() + 0.0:.6g}")  # + 0.0: never "-0"
        broken = broken or bool(nan or inf) or collapsed
    return 1 if broken else 0

if __name__ == "__main__":
    sys.exit(main())
'''

_FAULT_HEADER = '''

# =================================================================================================
# Injected fault (GhostViewer ghost lab): @@NAME@@
# NOT diffusers code. GhostViewer injected this fault into the recorded run on purpose (a preset that
# reproduces a known class of bug); diffusers alone does not have it. It is written here, as the fault's
# own code, so that this repro reproduces what the run did. Run with --without-fault to see the module
# without it.
# =================================================================================================
'''

_USER_HEADER = '''

# =================================================================================================
# The user's own attention processor(s): @@NAMES@@
# NOT diffusers code. The recorded run had these processors on the module (set with set_attn_processor or
# set_processor); their source is copied here from the user's code so that this repro runs the module as it
# ran. Run with --default-processor to see the module with diffusers' default processor instead.
# =================================================================================================
'''

_USER_SETTER = '''

USER_PROCESSORS = @@ON@@  # submodule ("" = the module) -> (class above, instance)
USER_PROCESSOR_STATES = @@STATES@@  # each instance's attributes as the run had them


def set_user_processors(module):
    made = {}
    for name, (cls, index) in USER_PROCESSORS.items():
        if index not in made:
            made[index] = globals()[cls].__new__(globals()[cls])
            made[index].__dict__.update(USER_PROCESSOR_STATES[index])
        module.get_submodule(name).set_processor(made[index])
'''

_HOOKS_HEADER = '''

# =================================================================================================
# The user's own forward hooks: @@NAMES@@
# NOT diffusers code. The recorded run had these hooks on the module (register_forward_hook); their source
# is copied here from the user's code, and what they closed over is set to the values it had when the
# module was isolated. Run with --without-hooks to see the module without them.
# =================================================================================================
'''

_HOOKS_SETTER = '''

USER_HOOKS = @@ON@@  # (submodule, hook, with_kwargs)


def register_user_hooks(module):
    for name, hook, with_kwargs in USER_HOOKS:
        target = module.get_submodule(name) if name else module
        target.register_forward_hook(globals()[hook], with_kwargs=with_kwargs)
'''


def _hook_parts(meta: dict[str, Any]) -> str:
    code = meta.get("user_hook_code") or {}
    if not code.get("source"):
        return ""
    names = ", ".join(i["name"] for i in meta.get("user_code_in_repro") or []
                      if i.get("kind") == "forward hook" and i["in_repro"])
    on = pprint.pformat([tuple(item) for item in code["on"]], width=110)
    return _HOOKS_HEADER.replace("@@NAMES@@", names) + code["source"] + _HOOKS_SETTER.replace("@@ON@@", on)


_USER_NOTE = '''

# NOTE: the recorded run had the user's processor @@CLASS@@ on @@ON@@; it is @@WHY@@.
# This repro may therefore not reproduce what the run did there.
'''


def _user_parts(meta: dict[str, Any]) -> tuple[str, bool]:
    """(the user's processor section, whether repro.py sets processors from it)."""
    code = meta.get("user_processor_code") or {}
    text = ""
    for item in meta.get("user_code_in_repro") or []:
        if item.get("kind") == "processor" and not item["in_repro"]:
            text += (_USER_NOTE.replace("@@CLASS@@", item["name"]).replace("@@ON@@", ", ".join(item["on"]))
                     .replace("@@WHY@@", str(item["why"])))
    if not code.get("source"):
        return text, False
    names = ", ".join(i["name"] for i in meta["user_code_in_repro"] if i.get("kind") == "processor" and i["in_repro"])
    on = {name: tuple(v) for name, v in code["on"].items()}
    setter = (_USER_SETTER.replace("@@ON@@", pprint.pformat(on, width=110, sort_dicts=False))
              .replace("@@STATES@@", pprint.pformat(code["states"], width=110, sort_dicts=False)))
    return text + _USER_HEADER.replace("@@NAMES@@", names) + code["source"] + setter, True


def _import(class_path: str) -> tuple[str, str]:
    module_name, _, name = class_path.rpartition(".")
    code = (f"try:\n    from {module_name} import {name}\n"
            f"except ImportError:  # moved in another diffusers version\n    from diffusers import {name}")
    return name, code


def _literal(name: str, value: Any) -> str:
    return f"{name} = {pprint.pformat(value, width=110, sort_dicts=False)}"


def _build_parts(spec: BuildSpec) -> tuple[str, str, str]:
    """(imports, module-level values, build_module body)."""
    if spec.kind == "parent" and spec.parent_class and spec.path:
        name, code = _import(spec.parent_class)
        made = f"{name}.from_config(PARENT_CONFIG)"
        if not spec.parent_class.startswith("diffusers."):  # a transformers text encoder: its config class
            code = f"from {spec.parent_class.rpartition('.')[0]} import {name}"
            made = f"{name}({name}.config_class.from_dict(PARENT_CONFIG))"
        body = (f"    # rebuilt through its component: {name} from its config, then the submodule\n"
                f"    return {made}.get_submodule({spec.path!r})")
        return code, _literal("PARENT_CONFIG", spec.values), body
    name, code = _import(spec.class_path)
    if spec.kind == "config":
        return code, _literal("CONFIG", spec.values), f"    return {name}.from_config(CONFIG)"
    return code, _literal("KWARGS", spec.values), f"    return {name}(**KWARGS)  # recovered constructor arguments"


def repro_script(meta: dict[str, Any], processors: dict[str, str]) -> str:
    spec = BuildSpec.from_json(meta["build"])
    imports, values, body = _build_parts(spec)
    if meta.get("user_class_code"):  # the user's own class: its source, not an import of the user's module
        imports = "# The user's own module class, as the run had it:\n" + meta["user_class_code"].rstrip()
    faults = meta.get("faults") or []
    fault_code = "".join(
        _FAULT_HEADER.replace("@@NAME@@", f["name"]) + FORMS[f["name"]].source(f["params"]) for f in faults
    )
    flag = '    parser.add_argument("--without-fault", action="store_true", help="skip the injected fault")\n'
    call = "    if not options.without_fault:\n        inject_fault(module)\n"
    user_code, sets_user = _user_parts(meta)
    user_flag = ('    parser.add_argument("--default-processor", action="store_true",\n'
                 '                        help="diffusers\' default processor instead of the run\'s own")\n')
    user_call = "    if not options.default_processor:\n        set_user_processors(module)\n"
    edits = meta.get("attributes") or {}
    if edits:  # the user's edits of plain attributes (norm.eps = 0): a rebuild has its config's values
        values += "\n" + _literal("ATTRIBUTES", edits) + "  # the run's own values, where a rebuild's differ"
    attrs_call = ("    for name, values in ATTRIBUTES.items():\n"
                  "        for key, value in values.items():\n"
                  "            setattr(module.get_submodule(name) if name else module, key, value)\n") if edits else ""
    hooks = _hook_parts(meta)
    replacements = {
        "@@HOOKS@@": hooks,
        "@@HOOKS_FLAG_USAGE@@": " [--without-hooks]" if hooks else "",
        "@@HOOKS_FLAG@@": ('    parser.add_argument("--without-hooks", action="store_true",\n'
                           '                        help="without the run\'s own forward hooks")\n') if hooks else "",
        "@@HOOKS_CALL@@": "    if not options.without_hooks:\n        register_user_hooks(module)\n" if hooks else "",
        "@@ATTRS_CALL@@": attrs_call,
        "@@MODULE@@": meta["module"],
        "@@CLASS_NAME@@": spec.class_path.rpartition(".")[2],
        "@@RUN@@": str(meta.get("run_id") or meta.get("run_dir")),
        "@@PROMPT@@": repr(meta.get("prompt")),
        "@@SEED@@": str(meta.get("seed")),
        "@@WHEN@@": f"denoising step {meta['step']}, call {meta['call']}" if meta.get("step") is not None
        else f"call {meta['call']}",
        "@@FAULT_FLAG_USAGE@@": " [--without-fault]" if faults else "",
        "@@IMPORTS@@": imports,
        "@@MODULE_REPR@@": repr(meta["module"]),
        "@@DTYPE@@": str(meta["dtype"]),
        "@@PROCESSORS@@": pprint.pformat(processors, width=110),
        "@@VALUES@@": values,
        "@@BUILD@@": body,
        "@@DECODE@@": inspect.getsource(decode_value).rstrip(),
        "@@FAULT@@": fault_code,
        "@@FAULT_FLAG@@": flag if faults else "",
        "@@FAULT_CALL@@": call if faults else "",
        "@@USER_FLAG_USAGE@@": " [--default-processor]" if sets_user else "",
        "@@USER@@": user_code,
        "@@USER_FLAG@@": user_flag if sets_user else "",
        "@@USER_CALL@@": user_call if sets_user else "",
    }
    text = _TEMPLATE
    for key, value in replacements.items():
        text = text.replace(key, value)
    return text


def readme(meta: dict[str, Any]) -> str:
    spec = BuildSpec.from_json(meta["build"])
    output = meta.get("output") or {}
    when = f"denoising step {meta['step']}, call {meta['call']}" if meta.get("step") is not None else "its first call"
    lines = [
        f"# Isolated module: {meta['module']}",
        "",
        f"`{spec.class_path}`, from run `{meta.get('run_id')}` (prompt {meta.get('prompt')!r}, seed "
        f"{meta.get('seed')}), at {when}, in {meta['dtype']}.",
        f"Its real output there: NaN {output.get('nan')}, Inf {output.get('inf')} of {output.get('numel')} values; "
        + (f"finite values from {output['min']:.4g} to {output['max']:.4g}, std {output['std']:.4g}."
           if output.get("min") is not None else "no finite value."),
        "",
        "Files: `inputs.safetensors` + `inputs.json` (the call's arguments), `weights.safetensors` (its state_dict),",
        "`module.json` (class, config, dtype, processors)"
        + (", `repro.py` (torch, diffusers and safetensors only)." if spec.kind != "none" else "."),
        "",
    ]
    if spec.kind == "none":
        lines += ["**This module cannot be rebuilt from a config**, so there is no repro.py: " + spec.reason,
                  "Its inputs and weights are saved all the same.", ""]
    else:
        how = {"config": "from its diffusers config", "kwargs": "from constructor arguments recovered from it",
               "parent": "through its component, rebuilt from that component's config"}[spec.kind]
        lines += [f"`python repro.py` rebuilds it {how}, loads weights and inputs, runs it and prints the output's",
                  "statistics; it exits 1 when the output holds NaN or Inf or collapses (every value equal).", ""]
    for item in meta.get("user_code_in_repro") or []:
        where = ", ".join(item["on"])
        if item["kind"] == "forward hook" and item["in_repro"]:
            lines += [f"**The user's own forward hook.** The run had `{item['name']}` on {where}; repro.py carries its",
                      "source (\"The user's own forward hooks\"); `python repro.py --without-hooks` runs without it.",
                      ""]
        elif item["kind"] == "attributes":
            lines += [f"**The user's own attribute values.** The run's module had {item['name']}, which a rebuild "
                      "does not give; repro.py sets them (ATTRIBUTES).", ""]
        elif item["in_repro"] and item["kind"] == "module class":
            lines += [f"**The user's own module class.** The run had `{item['name']}` at {where}; repro.py carries "
                      "its source.", ""]
        elif item["in_repro"]:
            lines += [f"**The user's own {item['kind']}.** The run had `{item['name']}` on {where}; repro.py carries",
                      "its source in a section marked \"The user's own attention processor(s)\"; "
                      "`python repro.py --default-processor` runs diffusers' default instead.", ""]
        else:
            lines += [f"**The user's own {item['kind']} is not in repro.py.** The run had `{item['name']}` on "
                      f"{where}; {item['why']}.", ""]
    for fault in meta.get("faults") or []:
        lines += [
            f"**Injected fault.** The run had the GhostViewer ghost-lab fault `{fault['name']}`, a hook GhostViewer",
            "adds on purpose; diffusers alone does not have it, so a repro without it would not reproduce.",
            "repro.py carries the fault's own code in a section marked \"Injected fault (GhostViewer ghost lab)\";",
            "`python repro.py --without-fault` runs the module without it. Do not report it upstream as a diffusers",
            "bug: it stands for the kind of bug it imitates.",
            "",
        ]
    for note in meta.get("fault_notes") or []:
        lines.append(f"- Fault {note}.")
    if meta.get("unsupported"):
        lines.append(f"- Arguments that could not be saved (passed as None): {', '.join(meta['unsupported'])}.")
    return "\n".join(lines).rstrip() + "\n"
