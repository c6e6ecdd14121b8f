"""The layering rule as import-linter contracts (pyproject.toml), what they cannot say (the spec's imports are the
standard library's), and no import cycle among ghostviewer's modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ghostviewer"


def test_the_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), f"{lint} is missing: pip install -e '.[test]' installs import-linter"
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout + done.stderr


# Pure-Python libraries the spec may import inside the one function that needs them, never at module level.
SPEC_LAZY = {"dynamicprompts": "spec/templates.py expands prompt templates through it when a list has one"}


def test_the_spec_imports_the_standard_library_only() -> None:
    import grimp

    graph = grimp.build_graph("ghostviewer", include_external_packages=True)
    spec = {m for m in graph.modules if m == "ghostviewer.spec" or m.startswith("ghostviewer.spec.")}
    allowed = spec | set(sys.stdlib_module_names) | {"ghostviewer"}
    found = {(m, i) for m in spec for i in graph.find_modules_directly_imported_by(m) if i not in allowed}
    assert {(m, i) for m, i in found if i not in SPEC_LAZY} == set()
    eager = {(m, i) for m, i in found if i in _top_level_imports(m)}
    assert eager == set(), f"imported at module level (import them where they are used): {sorted(eager)}"


def _top_level_imports(module: str) -> set[str]:
    path = ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    nodes = _module_level_imports(ast.parse(path.read_text(encoding="utf-8")).body)
    names = [a.name for n in nodes if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in nodes if isinstance(n, ast.ImportFrom) and n.module and not n.level]
    return {name.split(".")[0] for name in names}


# --- cycles among module-level imports (what runs at import time; imports inside functions break cycles) -------


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            found += [] if _is_type_checking(node) else _module_level_imports(node.body)
            found += _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _module_level_imports(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):  # a class body runs at import time
            found += _module_level_imports(node.body)
    return found


def import_graph() -> dict[str, set[str]]:
    """ghostviewer's modules and the ghostviewer modules each imports at module level."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _module_level_imports(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_ghostviewers_modules() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles (module-level imports):\n" + "\n".join(" <-> ".join(c) for c in found)
