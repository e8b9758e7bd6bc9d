"""The steps of ``init()`` are told in one order: the code's, the module docstring's and the
diagram's (docs/img/lifecycle.dot) name the same steps in the same order."""

from __future__ import annotations

import re
from pathlib import Path

from accelbackends.job import lifecycle

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(lifecycle.__file__)
DIAGRAM = ROOT / "docs" / "img" / "lifecycle.dot"


def code_steps(source: str) -> list[str]:
    """The ``# step: name`` markers of the code, top to bottom."""
    return re.findall(r"^[ \t]+# step: (\w+)$", source, flags=re.MULTILINE)


def docstring_steps(docstring: str) -> list[str]:
    """The numbered list of the docstring: ``N. ``name``: ...``."""
    return re.findall(r"^\d+\. ``(\w+)``:", docstring, flags=re.MULTILINE)


def diagram_steps(dot: str) -> list[str]:
    """The chain of edges from ``init`` to ``context``, without its two ends."""
    chain = re.search(r"init\s*->(.*?);", dot, flags=re.DOTALL)
    assert chain is not None, "no `init -> ... ;` chain in the diagram"
    names = [name.strip() for name in chain.group(1).split("->")]
    assert names[-1] == "context", names
    return names[:-1]


def test_the_docstring_lists_the_steps_in_the_order_the_code_runs_them() -> None:
    steps = code_steps(SOURCE.read_text())
    assert len(steps) >= 10
    assert docstring_steps(lifecycle.__doc__ or "") == steps


def test_the_diagram_draws_the_steps_in_the_order_the_code_runs_them() -> None:
    assert diagram_steps(DIAGRAM.read_text()) == code_steps(SOURCE.read_text())


def test_the_readers_see_a_step_out_of_order() -> None:
    code = "def f():\n    # step: bind\n    x = 1\n    # step: select\n"
    assert code_steps(code) == ["bind", "select"]
    assert docstring_steps("1. ``select``: a\n2. ``bind``: b\n") == ["select", "bind"]
    assert diagram_steps("init -> select -> bind\n    -> context;") == ["select", "bind"]
