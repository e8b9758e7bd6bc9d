"""Meta-tests that keep the reference honest: variables, hooks and CLI options all documented."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import accelbackends
from accelbackends import plugin, testing
from accelbackends.cli.main import _parser
from accelbackends.plugin import config, hookspecs
from accelbackends.testing import pytest_plugin

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "accelbackends"


def _variables_in_code() -> set[str]:
    found = set(config.KNOWN_VARIABLES)
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r"\bACCELBACKENDS_[A-Z][A-Z_]*[A-Z]\b", text))
        found |= {config.PREFIX + name for name in re.findall(r"PREFIX \+ \"(\w+)\"", text)}
    return found


def _variables_in_reference() -> set[str]:
    text = (DOCS / "reference" / "environment.md").read_text()
    return set(re.findall(r"^\| `(ACCELBACKENDS_[A-Z_]+)` \|", text, flags=re.MULTILINE))


def test_every_variable_the_code_reads_is_in_the_reference_and_the_reverse() -> None:
    assert _variables_in_code() == _variables_in_reference()


def test_every_known_variable_is_in_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in config.KNOWN_VARIABLES if f"`{name}`" not in readme]
    assert missing == []


def _hooks() -> dict[str, object]:
    return {
        name: fn
        for name, fn in vars(hookspecs).items()
        if name.startswith("accelbackends_") and callable(fn)
    }


def test_every_hook_is_documented_with_when_it_is_called_and_what_it_returns() -> None:
    for name, fn in _hooks().items():
        doc = inspect.getdoc(fn) or ""
        assert "Called" in doc, f"{name}: the docstring must say when it is called"
        spec_opts = getattr(fn, "accelbackends_spec", {})
        if spec_opts.get("firstresult"):
            assert "Stops at first non-None result." in doc, name


def test_every_hook_is_rendered_in_the_hook_reference() -> None:
    reference = (DOCS / "reference" / "hooks.md").read_text()
    listed = set(re.findall(r"^\s+- (accelbackends_\w+)$", reference, flags=re.MULTILINE))
    assert listed == set(_hooks())


def test_every_hook_has_at_least_one_test() -> None:
    tests = "\n".join(
        p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.name != "test_docs.py"
    )
    untested = [name for name in _hooks() if f"def {name}(" not in tests]
    assert untested == []


def test_every_hook_signature_matches_its_documented_parameters() -> None:
    for name, fn in _hooks().items():
        doc = inspect.getdoc(fn) or ""
        documented = _documented_arguments(doc)
        actual = set(inspect.signature(fn).parameters)  # type: ignore[arg-type]
        assert documented == actual, f"{name}: documented {documented}, takes {actual}"


def _section_names(doc: str, title: str) -> set[str]:
    """The names listed in a Google-style docstring's section (`Args:`, `Attributes:`)."""
    section = re.search(rf"^{title}:\n((?:(?: {{4}}.*)?\n)+)", doc + "\n", flags=re.MULTILINE)
    if section is None:
        return set()
    return set(re.findall(r"^ {4}\*{0,2}(\w+)(?: \(.*\))?:", section.group(1), re.MULTILINE))


def _documented_arguments(doc: str) -> set[str]:
    return _section_names(doc, "Args")


def _options(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                found |= {f"{command} {option}" for option in _options(sub)}
        else:
            found |= {opt for opt in action.option_strings if opt.startswith("--")}
    return {f"{prefix}{option}" for option in found} - {"--help"}


def test_every_command_line_option_is_in_the_cli_reference() -> None:
    reference = (DOCS / "reference" / "cli.md").read_text()
    sections = re.split(r"^## ", reference, flags=re.MULTILINE)
    by_command = {
        s.split("\n", 1)[0].strip("` ").removeprefix("accelbackends "): s for s in sections
    }
    missing = []
    for option in sorted(_options(_parser())):
        command, _, flag = option.rpartition(" ")
        section = by_command.get(command) if command else by_command.get("Global options")
        if section is None or f"`{flag}" not in section:
            missing.append(option)
    assert missing == []


def test_public_names_have_docstrings() -> None:
    undocumented = [
        name
        for name in accelbackends.__all__
        if name != "__version__" and not inspect.getdoc(getattr(accelbackends, name))
    ]
    assert undocumented == []


# A reST role (`:class:`…``), field (`:param x:`) or literal block (a line ending in `::`) is
# printed raw by the reference, which renders Google-style docstrings written in Markdown.
_REST_MARKUP = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref|doc|term|envvar):`"
    r"|^\s*:(?:param|type|returns?|rtype|raises?|ivar|cvar|var)\b"
    r"|\S::$",
    flags=re.MULTILINE,
)


def _public_docstrings() -> Iterator[tuple[str, str]]:
    """(where, docstring) for every public module, class, function and method of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if any(p.startswith("_") and p not in ("__init__", "__main__") for p in parts):
            continue
        module = ".".join(p for p in parts if p != "__init__")
        tree = ast.parse(path.read_text())
        yield from _docstrings_of(tree, module)


def _docstrings_of(node: ast.AST, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        doc = ast.get_docstring(node, clean=False)
        if doc:
            yield where, doc
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and (
            not child.name.startswith("_") or child.name == "__init__"
        ):
            yield from _docstrings_of(child, f"{where}.{child.name}")


def test_no_public_docstring_uses_rest_markup_which_the_reference_would_print_raw() -> None:
    offending = [
        f"{where}: {match.group(0).strip()}"
        for where, doc in _public_docstrings()
        for match in _REST_MARKUP.finditer(doc)
    ]
    assert offending == []


def test_the_rest_markup_check_finds_roles_and_fields() -> None:
    doc = "Use :func:`init` or :class:`~accelbackends.Context`::\n\n    x()\n\n:param x: a\n"
    found = [m.group(0).strip() for m in _REST_MARKUP.finditer(doc)]
    assert found == [":func:`", ":class:`", "`::", ":param"]
    assert not _REST_MARKUP.search("Use [`init`][accelbackends.init] with `x: int`; `a::b`.")


def test_every_field_of_a_public_dataclass_is_documented_in_its_attributes_section() -> None:
    modules = [accelbackends, plugin, testing, pytest_plugin]
    modules += [m for m in map(vars(plugin).get, plugin.__all__) if inspect.ismodule(m)]
    public = [getattr(m, name) for m in modules for name in m.__all__ if name != "__version__"]
    undocumented = {
        cls.__name__: sorted(
            {f.name for f in dataclasses.fields(cls)}
            - _section_names(inspect.getdoc(cls) or "", "Attributes")
        )
        for cls in public
        if isinstance(cls, type) and dataclasses.is_dataclass(cls)
    }
    assert {name: fields for name, fields in undocumented.items() if fields} == {}


def test_the_docs_site_needs_no_other_host_to_render() -> None:
    """Air-gapped clusters read the docs offline: no diagram drawn by a script from a CDN, no
    web fonts, no script or style sheet from another host."""
    config_text = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^\s+font: false$", config_text, flags=re.MULTILINE)
    assert not re.search(r"extra_(?:javascript|css):(?:\n\s+- .*)*https?://", config_text)
    fenced = [p.name for p in DOCS.rglob("*.md") if "```mermaid" in p.read_text()]
    assert fenced == []
    for page in DOCS.rglob("*.md"):
        for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()):
            assert not image.startswith(("http:", "https:")), (page.name, image)
            assert (page.parent / image).is_file(), (page.name, image)
