"""The shape of the code base: no import cycle among its modules (a function-level import counts), no
module longer than one reading, no private name taken from another module, module docstrings that say
what a module is for (design lives in docs/)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_architecture import APPS, ROOT, module_name

MAX_DOCSTRING_LINES = 10
# The client libraries are distributions of their own, held to the same shape.
CLIENT_PACKAGES = (ROOT / "clients" / "python" / "agentcal_client", ROOT / "clients" / "mcp" / "agentcal_mcp")
MAX_MODULE_LINES = 600


def shaped_modules() -> dict[str, Path]:
    """Every module of the product, its tools and its clients (migrations aside), by dotted name."""
    named = {
        module_name(path): path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    }
    for package in CLIENT_PACKAGES:
        for path in package.rglob("*.py"):
            dotted = ".".join(path.relative_to(package.parent).with_suffix("").parts)
            named[dotted.removesuffix(".__init__")] = path
    return named


def _runtime_imports(path: Path, module: str, known: set[str]) -> tuple[set[str], list[str]]:
    """The known modules this one imports at run time (any depth, relative imports resolved, `if
    TYPE_CHECKING:` blocks skipped), and the private names it takes from other modules."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    imported: set[str] = set()
    private: list[str] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported.add(alias.name)
                if alias.asname and alias.name in known:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                name = f"{base}.{alias.name}"
                if name in known:
                    imported.add(name)
                    aliases[alias.asname or alias.name] = name
                else:
                    imported.add(base)
                    if _is_private(alias.name) and base != module:
                        private.append(f"from {base} import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _is_private(node.attr)
        ):
            private.append(f"{aliases[node.value.id]}.{node.attr} (line {node.lineno})")
    resolved = set()
    for name in imported:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            resolved.add(name)
    return resolved, private


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_there_is_no_import_cycle() -> None:
    modules = shaped_modules()
    graph = {name: _runtime_imports(path, name, set(modules))[0] for name, path in modules.items()}
    assert len(graph) > 200  # the walk found the code base
    assert [" ↔ ".join(cycle) for cycle in import_cycles(graph)] == []


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import() -> None:
    graph = {"a.services": {"a.tasks"}, "a.tasks": {"a.notifications"}, "a.notifications": {"a.services"}}
    assert import_cycles({**graph, "b": {"a.services"}}) == [["a.notifications", "a.services", "a.tasks"]]


def test_no_module_is_longer_than_a_reading() -> None:
    long = {
        name: lines
        for name, path in shaped_modules().items()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_module_takes_another_modules_private_names() -> None:
    modules = shaped_modules()
    taken = {
        name: private
        for name, path in modules.items()
        if (private := _runtime_imports(path, name, set(modules))[1])
    }
    assert taken == {}


def test_module_docstrings_say_what_a_module_is_for_in_a_few_lines() -> None:
    long = {}
    for name, path in shaped_modules().items():
        docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        if docstring and len(docstring.splitlines()) > MAX_DOCSTRING_LINES:
            long[name] = len(docstring.splitlines())
    assert long == {}
