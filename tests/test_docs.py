"""Meta-tests that keep the reference honest: variables, hooks and CLI options all documented."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import accelbackends
from accelbackends.cli import _parser
from accelbackends.plugin import config, hookspecs

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
        documented = set(re.findall(r":param (\w+):", doc))
        actual = set(inspect.signature(fn).parameters)  # type: ignore[arg-type]
        assert documented <= actual, f"{name} documents parameters it does not take"
        assert (
            actual - documented
            <= {"env", "accelerator", "options", "cluster", "context", "candidates"}
            or documented == actual
        )


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
