"""Wording for the reasons a plugin's probes give: `plural`, `did_you_mean`.

The command line's printing (`say`, `aligned`, `wrap`, colour and the terminal's width) lives in
``accelbackends.cli.text``, which is not part of the plugin layer. Asked for here, one of its
names raises an `AttributeError` that says where it lives: the plugin layer imports nothing
above it, so it does not fetch the name for the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["did_you_mean", "plural"]

#: The command line's printing, which lives in ``accelbackends.cli.text``.
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
    if name in _MOVED:
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}: the command line's printing is not "
            f"part of the plugin SDK; it is accelbackends.cli.text.{name}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
