"""Wording shared by ``info``, ``check`` and the plugins' reasons: one text module for all.

Plugins use `plural` in the reasons their probes give; the rest is how the commands print.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TextIO

__all__ = ["aligned", "plural", "rank_list", "report_to", "say"]

_report: TextIO | None = None


def report_to(stream: TextIO | None) -> None:
    """Make ``say`` print to ``stream`` (None: ``sys.stdout``). The command line's own
    stdout while plugins' output is sent to stderr (``accelbackends.console``)."""
    global _report
    _report = stream


def say(line: str) -> None:
    """Print ``line`` (one or more lines) to stdout and flush."""
    global _report
    try:
        print(line, file=_report or sys.stdout, flush=True)
    except BrokenPipeError:
        # The reader went away (``accelbackends info | head``): finish quietly; the exit
        # status still tells.
        devnull = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout for good
        if _report is not None:
            _report = devnull
        else:
            sys.stdout = devnull


def plural(count: int, word: str) -> str:
    """``word`` for one, ``words`` for any other count (the count itself is not included)."""
    return word if count == 1 else word + "s"


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """``rows`` as lines whose columns line up, two spaces apart, without trailing spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    return f"{plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"
