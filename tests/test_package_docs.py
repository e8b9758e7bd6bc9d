"""Every folder of ``accelbackends/`` is its own index: its ``__init__`` docstring names each
module of the folder at the head of a list item that says what the module holds, and no item
names a module the folder does not have.

A list item is a line starting with ``-``, ``*`` or ``N.`` whose first word is the module's name
in backticks (```name``` or ````name````, optionally dotted: ```accelbackends.cli.text```).
The fake vendor packages under ``testing/fakes/`` copy the docstrings of the packages they stand
in for, so only ``testing/fakes/__init__.py`` itself is indexed there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "accelbackends"
#: Folders whose sub-packages are not indexed (their ``__init__`` is).
NOT_INDEXED_BELOW = (PACKAGE / "testing" / "fakes",)

#: A list item led by a name in backticks: the name (its last dotted part), and whether a colon
#: follows it at once (``- `name`: what it holds``, the shape of an index entry).
_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s+`{1,2}(?:[\w.]+\.)?(\w+)`{1,2}(:?)", re.MULTILINE)


def packages(root: Path = PACKAGE) -> list[Path]:
    """Every folder under ``root`` (``root`` included) that is a package and is indexed."""
    found = []
    for init in sorted(root.rglob("__init__.py")):
        folder = init.parent
        if any(folder != top and top in folder.parents for top in NOT_INDEXED_BELOW):
            continue
        found.append(folder)
    return found


def members(folder: Path) -> list[str]:
    """The modules of ``folder``: its ``.py`` files and its sub-packages, without ``__init__``."""
    return sorted(
        path.stem if path.is_file() else path.name
        for path in folder.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and (path / "__init__.py").is_file())
    )


def index_problems(folder: Path) -> list[str]:
    """What the ``__init__`` docstring of ``folder`` leaves out or names wrongly, one line each."""
    init = folder / "__init__.py"
    where = (init.relative_to(ROOT) if ROOT in init.parents else init).as_posix()
    docstring = ast.get_docstring(ast.parse(init.read_text(), str(init)))
    if not docstring:
        return [f"{where}: no docstring; it must name each module of the folder"]
    present = members(folder)
    items = _ITEM.findall(docstring)
    led = {name for name, _ in items}
    problems = [
        f"{where}: no list item names `{name}` (add a line '- `{name}`: what it holds')"
        for name in present
        if name not in led
    ]
    problems += [
        f"{where}: the item '- `{name}`:' names no module of this folder"
        for name, colon in items
        if colon and name.islower() and name not in present
    ]
    return problems


def test_every_module_of_a_folder_is_named_in_its_init_docstring() -> None:
    problems = [line for folder in packages() for line in index_problems(folder)]
    assert problems == [], "\n".join(problems)


def test_index_check_finds_a_missing_module_and_a_stale_entry(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "__init__.py").write_text('"""Sub."""\n')
    (folder / "kept.py").write_text("")
    (folder / "forgotten.py").write_text("")
    (folder / "notes.txt").write_text("not a module\n")
    (folder / "__init__.py").write_text(
        '"""A folder.\n\n'
        "- `kept`: named.\n"
        "- ``pkg.sub``: a sub-package, named by its dotted path.\n"
        "- `moved`: lives elsewhere now.\n"
        "- `Thing`: a class, not a module.\n"
        '"""\n'
    )
    assert members(folder) == ["forgotten", "kept", "sub"]
    assert index_problems(folder) == [
        f"{folder / '__init__.py'}: no list item names `forgotten` "
        "(add a line '- `forgotten`: what it holds')",
        f"{folder / '__init__.py'}: the item '- `moved`:' names no module of this folder",
    ]
    (folder / "__init__.py").write_text("")
    assert index_problems(folder) == [
        f"{folder / '__init__.py'}: no docstring; it must name each module of the folder"
    ]


def test_the_fake_vendor_packages_are_not_indexed_but_their_folder_is() -> None:
    indexed = {folder.relative_to(PACKAGE).as_posix() for folder in packages()}
    assert {".", "job", "cli/check", "testing/fakes"} <= indexed
    assert not any(name.startswith("testing/fakes/") for name in indexed)


#: "issue 28", "Issue #27", "(#21)": this project's tracker numbers, which no reader of the code
#: can resolve. Upstream issues are cited by their repository (``NVIDIA/NVSentinel#808``) or as
#: "torch's issue 190489", whose numbers are far larger.
_TRACKER_NUMBER = re.compile(r"\b[Ii]ssues? #?\d{1,3}\b|(?<![\w/])#\d{1,3}\b(?!\w)")


def test_no_comment_or_docstring_cites_this_projects_tracker_numbers() -> None:
    here = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for top in ("accelbackends", "tests", "benchmarks", "plugins")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path != here
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _TRACKER_NUMBER.search(line)
    ]
    assert found == [], "say the reason instead:\n" + "\n".join(found)
