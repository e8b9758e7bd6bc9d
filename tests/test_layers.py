"""The layering rule: floors as folders, no import cycle, the plugin layer is the bottom floor.

Read from the source (AST), so imports under ``TYPE_CHECKING`` and inside functions count as
much as the ones at the top of a module, and so does ``importlib.import_module("accelbackends…")``
with a literal name: a cycle hidden in a function, or a floor climbed by name at run time, is
still one a reader has to untangle. ``python tests/test_layers.py`` prints the same findings
for a human, with the figures of the layout: the longest import chain, the loops between
folders, the reaches into another package's private modules.

- No import cycle among the modules of ``accelbackends/``.
- Every folder of ``accelbackends/`` stands on a floor (`FLOORS`) and imports only from floors
  below its own: plugin < host < built-in plugins and rendezvous < registry < job < the faces
  (integrations, cli, the package's own ``__init__``) < testing. Nothing imports up or sideways.
- No module imports another folder's ``_private`` module.
- ``accelbackends/plugin/`` imports nothing else from accelbackends, and holds only what
  ``accelbackends.plugin`` promises plugin authors (`NOT_PROMISED` names the one exception); the
  runtime the host uses and plugins must not is one floor up, in ``accelbackends/host/``.
- The built-in plugins (``accelerators/``, ``environments/``) and every package under
  ``plugins/`` reach accelbackends only through ``accelbackends.plugin``: they are written
  exactly like a third-party plugin.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "accelbackends"
PLUGIN_LAYER = f"{PACKAGE}.plugin"
#: Packages of the core whose modules must be written like a third-party plugin.
PLUGIN_LIKE = (f"{PACKAGE}.accelerators", f"{PACKAGE}.environments")
#: Each folder (or top-level module) of the package and its floor: a module imports only from
#: its own folder and from lower floors. ``""`` is the package's ``__init__``, the Python API's
#: face (lazy re-exports of the job and the registry). docs/architecture.md describes each floor.
FLOORS: dict[str, int] = {
    "plugin": 0,
    "_version": 0,
    "host": 1,
    "accelerators": 2,
    "environments": 2,
    "rendezvous": 2,
    "registry": 3,
    "job": 4,
    "": 5,
    "integrations": 5,
    "cli": 5,
    "__main__": 6,
    "testing": 6,
}

#: Modules of ``accelbackends/plugin/`` outside its promise, each with why it stays on that floor.
NOT_PROMISED = {
    "installed": "packages, which plugins import, reads installed distributions through it",
}
#: Modules of the plugin layer that its ``__init__`` imports names from rather than the module.
PROMISED_BY_NAMES = {"errors", "hookspecs", "types"}


def _modules(source_root: Path, top: str) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` under ``source_root / top``."""
    found = {}
    for path in sorted((source_root / top).rglob("*.py")):
        parts = path.relative_to(source_root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _absolute(package: str, level: int, name: str) -> str:
    """The absolute module a relative import of ``name`` at ``level`` dots reaches from
    ``package``."""
    base = package.split(".")
    base = base[: len(base) - level + 1]
    return ".".join(base + ([name] if name else []))


def _import_module_string(node: ast.AST) -> str | None:
    """The module named by ``importlib.import_module("…")`` (or ``import_module("…")``) when
    its first argument is a string literal; None for any other node."""
    if not (isinstance(node, ast.Call) and node.args):
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if called != "import_module" or not isinstance(first, ast.Constant):
        return None
    return first.value if isinstance(first.value, str) else None


def _imported(path: Path, module: str) -> Iterator[tuple[str, list[str], int]]:
    """(absolute module, names imported from it, line) for every import statement in ``path``,
    and for every ``importlib.import_module`` of a string literal: an import made by name at
    run time reaches the module as much as an import statement does."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            relative = node.level and _absolute(package, node.level, node.module or "")
            yield relative or node.module or "", [a.name for a in node.names], node.lineno
        elif (named := _import_module_string(node)) is not None:
            dots = len(named) - len(named.lstrip("."))
            target = _absolute(package, dots, named[dots:]) if dots else named
            yield target, [], node.lineno


def _resolve(target: str, names: list[str], known: Iterable[str]) -> set[str]:
    """The known modules an import reaches: ``from p import m`` reaches submodule ``p.m``."""
    known = set(known)
    reached = {f"{target}.{name}" for name in names if f"{target}.{name}" in known}
    if len(reached) < len(names) or not names:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            reached.add(target)
    return reached


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of the package it imports (anywhere in the file)."""
    modules = _modules(ROOT, PACKAGE)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges: set[str] = set()
        for target, names, _ in _imported(path, module):
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                edges |= _resolve(target, names, modules)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
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

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _example_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the first module of ``component`` (for the message)."""
    start = component[0]
    members = set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(graph[node] & members):
            if successor == start:
                return [*paths[node], start]
            if successor not in paths:
                paths[successor] = [*paths[node], successor]
                queue.append(successor)
    return component  # pragma: no cover - a component always has a cycle


def cycle_report() -> list[str]:
    graph = import_graph()
    return [" -> ".join(_example_cycle(graph, c)) for c in cycles(graph)]


def upward_imports() -> list[str]:
    """Imports that break the floor rule, as ``file:line: module imports target``."""
    found = []
    sources: list[tuple[str, Path, str]] = [
        (module, path, "core") for module, path in _modules(ROOT, PACKAGE).items()
    ]
    for src in sorted(ROOT.glob("plugins/*/src")):
        for top in sorted(p.name for p in src.iterdir() if (p / "__init__.py").exists()):
            sources += [(module, path, "plugin") for module, path in _modules(src, top).items()]
    for module, path, kind in sources:
        in_layer = module == PLUGIN_LAYER or module.startswith(PLUGIN_LAYER + ".")
        plugin_like = kind == "plugin" or any(
            module == p or module.startswith(p + ".") for p in PLUGIN_LIKE
        )
        if not (in_layer or plugin_like):
            continue
        for target, names, line in _imported(path, module):
            if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
                continue
            through_layer = target == PLUGIN_LAYER or target.startswith(PLUGIN_LAYER + ".")
            if target == PACKAGE and names == ["plugin"]:
                through_layer = True
            same_package = kind == "core" and any(
                module.startswith(p) and target.startswith(p) for p in PLUGIN_LIKE
            )
            if through_layer or same_package:
                continue
            where = path.relative_to(ROOT)
            shown = f"{target} ({', '.join(names)})" if names else target
            rule = "the plugin layer" if in_layer else "a plugin"
            found.append(f"{where}:{line}: {rule} imports {shown}")
    return found


def folder(module: str) -> str:
    """The folder (or top-level module) of the package that ``module`` is in; ``""`` for the
    package's own ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private(module: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in module.split(".")[2:])


def floor_breaks(graph: dict[str, set[str]]) -> list[str]:
    """Imports between folders that do not go down a floor, as ``module imports target``."""
    found = []
    for module in sorted(graph):
        home = folder(module)
        if home not in FLOORS:
            found.append(f"{module} is in {home!r}, which stands on no floor (add it to FLOORS)")
            continue
        for target in sorted(graph[module]):
            there = folder(target)
            if there == home:
                continue
            if there not in FLOORS:
                found.append(f"{module} imports {target}, which stands on no floor")
            elif FLOORS[there] >= FLOORS[home]:
                way = "up" if FLOORS[there] > FLOORS[home] else "sideways"
                found.append(
                    f"{module} (floor {FLOORS[home]}) imports {target} (floor {FLOORS[there]}): "
                    f"{way} a floor"
                )
    return found


def private_reaches(graph: dict[str, set[str]]) -> list[str]:
    """Imports of another folder's ``_private`` module, as ``module imports target``."""
    return [
        f"{module} imports {target}"
        for module in sorted(graph)
        for target in sorted(graph[module])
        if _private(target) and folder(target) != folder(module)
    ]


def _longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports, a loop counted as one step (its first member stands in)."""
    component_of: dict[str, str] = {}
    for component in cycles(graph):
        for member in component:
            component_of[member] = component[0]
    condensed: dict[str, set[str]] = {}
    for node, targets in graph.items():
        here = component_of.get(node, node)
        condensed.setdefault(here, set()).update(
            component_of.get(t, t) for t in targets if component_of.get(t, t) != here
        )
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            below = [chain(t) for t in sorted(condensed.get(node, ()))]
            best[node] = [node, *max(below, key=len, default=[])]
        return best[node]

    return max((chain(node) for node in sorted(condensed)), key=len, default=[])


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder → the folders its modules import."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folders.setdefault(folder(module) or PACKAGE, set()).update(
            folder(t) or PACKAGE for t in targets if folder(t) != folder(module)
        )
    return folders


def figures() -> dict[str, object]:
    """The layout's figures: the longest import chain (modules and folders), the loops between
    folders, the reaches into private modules, the imports that break the floor rule."""
    graph = import_graph()
    folders = folder_graph(graph)
    return {
        "modules": len(graph),
        "top-level modules and folders": len(folders),
        "longest import chain (modules)": _longest_chain(graph),
        "longest import chain (folders)": _longest_chain(folders),
        "folder-level loops": [
            f"{', '.join(c)} (e.g. {' -> '.join(_example_cycle(folders, c))})"
            for c in cycles(folders)
        ],
        "private reaches": private_reaches(graph),
        "floor breaks": floor_breaks(graph),
    }


def test_every_import_between_folders_goes_down_a_floor() -> None:
    assert floor_breaks(import_graph()) == []


def test_no_module_imports_another_folders_private_module() -> None:
    assert private_reaches(import_graph()) == []


def test_no_loop_between_folders() -> None:
    assert cycles(folder_graph(import_graph())) == []


def test_floor_checker_finds_an_import_up_and_a_private_reach() -> None:
    graph = {
        f"{PACKAGE}.job.lifecycle": {f"{PACKAGE}.cli.text", f"{PACKAGE}.environments._common"},
        f"{PACKAGE}.cli.text": set(),
        f"{PACKAGE}.environments._common": set(),
        f"{PACKAGE}.stray": set(),
    }
    assert floor_breaks(graph) == [
        f"{PACKAGE}.job.lifecycle (floor 4) imports {PACKAGE}.cli.text (floor 5): up a floor",
        f"{PACKAGE}.stray is in 'stray', which stands on no floor (add it to FLOORS)",
    ]
    assert private_reaches(graph) == [
        f"{PACKAGE}.job.lifecycle imports {PACKAGE}.environments._common"
    ]
    assert _longest_chain(graph) == [f"{PACKAGE}.job.lifecycle", f"{PACKAGE}.cli.text"]


def test_no_module_of_the_package_is_part_of_an_import_cycle() -> None:
    assert cycle_report() == []


def test_plugin_layer_and_plugins_import_accelbackends_only_through_the_plugin_layer() -> None:
    assert upward_imports() == []


def test_the_plugin_layer_imports_neither_torch_nor_the_rest_of_accelbackends() -> None:
    code = (
        "import sys, accelbackends.plugin as p\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy') or "
        "(m.startswith('accelbackends.') and m.split('.')[1] not in ('plugin', '_version')))\n"
        "print(loaded, sorted(set(p.__all__) - set(dir(p))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[] []"


def test_the_plugin_folder_holds_only_what_the_plugin_layer_promises() -> None:
    from accelbackends import plugin

    held = {
        m.rpartition(".")[2] for m in _modules(ROOT, PACKAGE) if m.startswith(PLUGIN_LAYER + ".")
    }
    promised = {name for name in plugin.__all__ if name.islower() and name in held}
    assert held - promised - PROMISED_BY_NAMES == set(NOT_PROMISED)


def test_the_package_re_exports_the_plugin_layers_objects() -> None:
    import accelbackends
    from accelbackends import plugin

    shared = set(accelbackends.__all__) & set(plugin.__all__)
    assert {"hookimpl", "AcceleratorSpec", "Context", "Selection", "ConfigError"} <= shared
    assert all(getattr(accelbackends, name) is getattr(plugin, name) for name in shared)


def test_checker_finds_a_cycle_and_reports_it_in_order() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert _example_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_checker_resolves_relative_and_function_level_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from . import high\n")
    (package / "high.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .low import f\n"
    )
    modules = _modules(tmp_path, "pkg")
    edges = {
        module: set().union(
            *(_resolve(t, n, modules) for t, n, _ in _imported(path, module) if t.startswith("pkg"))
        )
        for module, path in modules.items()
    }
    assert edges["pkg.low"] == {"pkg.high"}
    assert edges["pkg.high"] == {"pkg.low"}
    assert cycles(edges) == [["pkg.high", "pkg.low"]]


def test_checker_reads_import_module_of_a_literal_name(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("")
    (package / "side.py").write_text("")
    (package / "low.py").write_text(
        "import importlib\n"
        "from importlib import import_module\n"
        "def f(name):\n"
        "    importlib.import_module('pkg.high')\n"
        "    import_module('.side', __package__)\n"
        "    importlib.import_module(name)\n"
    )
    found = list(_imported(package / "low.py", "pkg.low"))
    assert ("pkg.high", [], 4) in found and ("pkg.side", [], 5) in found
    assert [t for t, _, _ in found if t.startswith("pkg")] == ["pkg.high", "pkg.side"]


if __name__ == "__main__":
    cycle_lines = cycle_report()
    upward = upward_imports()
    print(f"import cycles in {PACKAGE}/: {len(cycle_lines)}")
    for line in cycle_lines:
        print("  " + line)
    print(f"imports that bypass {PLUGIN_LAYER}: {len(upward)}")
    for line in upward:
        print("  " + line)
    found = figures()
    for name, value in found.items():
        if isinstance(value, list):
            print(f"{name}: {len(value)}")
            for line in value:
                print(f"  {line}")
        else:
            print(f"{name}: {value}")
    broken = found["folder-level loops"] or found["private reaches"] or found["floor breaks"]
    sys.exit(1 if cycle_lines or upward or broken else 0)


def hook_calls_outside_pluggy(root: Path = ROOT) -> list[str]:
    """Calls of a hook implementation by its name (``module.accelbackends_x(...)`` or
    ``accelbackends_x(...)``) in the modules of the package that are not plugins: the core asks
    plugins through pluggy's ``hook``, and asks launcher knowledge of `environments` through its
    plain functions (`environments.lightning.lightning_rank`), never a hook function."""
    from accelbackends.plugin import hookspecs

    hooks = {name for name in dir(hookspecs) if name.startswith("accelbackends_")}
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        if module.startswith(PLUGIN_LIKE) or module.startswith(f"{PACKAGE}.plugin"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            through_pluggy = (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "hook"
            )
            if name in hooks and not through_pluggy:
                found.append(f"{module}:{node.lineno} calls {name}")
    return found


def test_the_core_calls_no_hook_implementation_by_name() -> None:
    assert hook_calls_outside_pluggy() == []


def test_hook_call_finder_tells_a_direct_call_from_pluggys(tmp_path: Path) -> None:
    job = tmp_path / PACKAGE / "job"
    job.mkdir(parents=True)
    (job / "x.py").write_text(
        "from ..environments import lightning\n"
        "lightning.accelbackends_cluster_environment(env={})\n"
        "pm.hook.accelbackends_cluster_environment(env={})\n"
    )
    assert hook_calls_outside_pluggy(tmp_path) == [
        "accelbackends.job.x:2 calls accelbackends_cluster_environment"
    ]
