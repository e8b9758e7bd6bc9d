"""How every part of ``check`` writes: lines on stdout that survive a closed pipe, and the
wording it repeats."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["plural", "rank_list", "say"]


def say(line: str) -> None:
    """Print ``line`` (one or more lines) to stdout and flush."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        # The reader went away (``check | head``): finish quietly; the exit status still tells.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout for good


def plural(count: int, word: str) -> str:
    """``word`` for one, ``words`` for any other count (the count itself is not included)."""
    return word if count == 1 else word + "s"


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    return f"{plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"
