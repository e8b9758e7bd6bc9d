"""Wording for the reasons a plugin's probes give: `plural`, `did_you_mean`.

Until 0.2 this module also held the command line's printing (`say`, `aligned`, `wrap`, colour
and the terminal's width); that moved to ``accelbackends.cli.text``, which is not part of the
plugin layer. The old names still resolve here, with a ``DeprecationWarning``, for one minor
release (see the changelog); they are removed in 0.3.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["did_you_mean", "plural"]

#: Names that moved to ``accelbackends.cli.text`` in 0.2; kept here until 0.3.
_MOVED = frozenset(
    {
        "aligned",
        "clean",
        "colour",
        "colour_enabled",
        "columns",
        "rank_list",
        "report_to",
        "say",
        "terminal_width",
        "wrap",
    }
)


def plural(count: int, word: str) -> str:
    """``word`` for one, ``words`` for any other count (the count itself is not included)."""
    return word if count == 1 else word + "s"


def did_you_mean(given: str, known: Sequence[str]) -> str:
    """``"; did you mean 'cpu'?"`` for the known name closest to ``given`` (the same name in
    another case first), or ``""`` where none is close."""
    import difflib  # only on an error path

    same = [name for name in known if name.lower() == given.lower()]
    close = same or difflib.get_close_matches(given, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"accelbackends.plugin.text.{name} moved to accelbackends.cli.text in accelbackends 0.2 "
        "and is removed from the plugin layer in 0.3: it is how the command line prints, not "
        "part of the plugin SDK",
        DeprecationWarning,
        stacklevel=2,
    )
    # Imported by name, not by an import statement: the plugin layer imports nothing above it,
    # and this alias reaches up only for the deprecated names, only when one is used.
    return getattr(importlib.import_module("accelbackends.cli.text"), name)
