"""Steps read as steps: no function of ``accelbackends/`` is longer than `LIMIT` lines, except
the ones `LONG` still lists, and that list only shrinks.

A function's length is its lines from ``def`` to its last line, less its docstring: a public
function's docstring is its reference page (rendered by mkdocstrings), not part of the step it
tells. Decorators do not count; a nested function counts inside the one that holds it and on its
own. ``python tests/test_function_length.py`` prints every function over the limit.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "accelbackends"
LIMIT = 60

#: The functions still over `LIMIT`, each with its length when it was listed: one that grows
#: fails, one split to `LIMIT` or below must leave the list. Nothing is added here: split it.
LONG: dict[str, int] = {
    "accelerators/cuda.py::verdict": 64,
    "cli/check/options.py::add_arguments": 116,
    "environments/_common.py::read_mpi_style": 69,
    "plugin/types.py::AcceleratorSpec.__post_init__": 64,
}


def length(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's last line, less its docstring's."""
    assert function.end_lineno is not None
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        assert first.end_lineno is not None
        lines -= first.end_lineno - first.lineno + 1
    return lines


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, length(child)
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def long_functions(package: Path = PACKAGE) -> dict[str, int]:
    """``folder/module.py::qualified.name`` → length, for every function over `LIMIT`."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        for name, lines in _functions(ast.parse(path.read_text(), str(path)), ""):
            if lines > LIMIT:
                found[f"{where}::{name}"] = lines
    return found


def test_no_function_is_over_the_limit_unless_listed() -> None:
    unlisted = {name: n for name, n in long_functions().items() if name not in LONG}
    assert unlisted == {}, f"split these into named steps of at most {LIMIT} lines"


def test_no_listed_function_grows() -> None:
    found = long_functions()
    grown = {name: f"{LONG[name]} -> {n}" for name, n in found.items() if n > LONG.get(name, n)}
    assert grown == {}, "a listed function may only shrink"


def test_a_function_split_to_the_limit_leaves_the_list() -> None:
    stale = sorted(set(LONG) - set(long_functions()))
    assert stale == [], f"at most {LIMIT} lines now (or gone): remove them from LONG"


def test_the_count_leaves_the_docstring_out_and_finds_nested_and_methods(tmp_path: Path) -> None:
    def statements(count: int, indent: int) -> str:
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(count))

    (tmp_path / "m.py").write_text(
        f'def short():\n    """Told\n\n    at length."""\n{statements(LIMIT - 1, 4)}'
        f"class C:\n    def long(self):\n{statements(LIMIT, 8)}"
        f"def outer():\n    def inner():\n{statements(LIMIT, 8)}"
    )
    assert long_functions(tmp_path) == {
        "m.py::C.long": LIMIT + 1,
        "m.py::outer": LIMIT + 2,
        "m.py::outer.inner": LIMIT + 1,
    }


if __name__ == "__main__":
    for name, lines in sorted(long_functions().items(), key=lambda item: -item[1]):
        print(f"{lines:4d}  {name}{'' if name in LONG else '  (not listed)'}")
    sys.exit(0)
