"""The names users and plugin authors import keep working across the regrouping into floors:
one table of public names, the console script's entry points, and `accelbackends.plugin.text`,
which names `accelbackends.cli.text` for the command line's printing instead of fetching it."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import accelbackends
from accelbackends.cli import text as cli_text
from accelbackends.plugin import text as plugin_text

ROOT = Path(__file__).resolve().parents[1]


def _type_checking_imports() -> dict[str, tuple[str, ...]]:
    """Module → names, as the ``if TYPE_CHECKING:`` block of ``accelbackends/__init__.py``
    imports them."""
    tree = ast.parse((ROOT / "accelbackends" / "__init__.py").read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    found: dict[str, tuple[str, ...]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.dump(node)
        assert all(alias.asname in (None, alias.name) for alias in node.names)
        found[str(node.module)] = tuple(sorted(alias.name for alias in node.names))
    return found


def test_the_type_checkers_imports_mirror_the_table_of_public_names() -> None:
    table = accelbackends._PUBLIC
    assert _type_checking_imports() == {module: tuple(sorted(n)) for module, n in table.items()}


def test_every_public_name_resolves_to_the_object_its_module_defines() -> None:
    assert accelbackends.__all__ == sorted(accelbackends.__all__)
    for module, names in accelbackends._PUBLIC.items():
        defined = importlib.import_module(f"accelbackends.{module}")
        for name in names:
            assert name in accelbackends.__all__
            assert getattr(accelbackends, name) is getattr(defined, name), name
    with pytest.raises(AttributeError, match="no attribute 'lifecycle_init'"):
        accelbackends.lifecycle_init  # noqa: B018


def test_the_console_script_and_the_pytest_plugin_name_importable_objects() -> None:
    # [project.scripts] and [project.entry-points.pytest11] (tomllib is Python 3.11+).
    declared = re.findall(
        r'^accelbackends = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M
    )
    assert len(declared) == 2, declared
    entry_points = [*declared, "accelbackends.cli:run"]  # the console script before 0.2
    for value in entry_points:
        module, _, attribute = value.partition(":")
        loaded = importlib.import_module(module)
        assert attribute == "" or callable(getattr(loaded, attribute)), value


def test_python_m_accelbackends_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "accelbackends", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "info" in done.stdout and "check" in done.stdout


@pytest.mark.parametrize("name", sorted(plugin_text._MOVED))
def test_a_printing_name_asked_of_plugin_text_is_refused_naming_cli_text(name: str) -> None:
    assert hasattr(cli_text, name)
    with pytest.raises(
        AttributeError,
        match=rf"not part of the plugin SDK; it is accelbackends\.cli\.text\.{name}$",
    ):
        getattr(plugin_text, name)


def test_plugin_text_does_not_import_the_command_line_when_a_printing_name_is_asked() -> None:
    code = (
        "import sys, accelbackends.plugin.text as t\n"
        "try:\n    t.say\nexcept AttributeError as exc:\n    print(exc)\n"
        "print(sorted(m for m in sys.modules if m.startswith('accelbackends.cli')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    refusal, loaded = done.stdout.splitlines()
    assert refusal.endswith("it is accelbackends.cli.text.say") and loaded == "[]"


def test_plural_stays_in_the_plugin_layer_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from accelbackends.plugin.text import plural
    assert plural(2, "rank") == "ranks" and plural(1, "rank") == "rank"
    assert cli_text.plural is plural
    with pytest.raises(AttributeError, match="has no attribute 'shout'"):
        plugin_text.shout  # noqa: B018
