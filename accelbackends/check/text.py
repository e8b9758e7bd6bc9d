"""How every part of ``check`` writes (``say``, shared with ``info``) and the wording it
repeats."""

from __future__ import annotations

from collections.abc import Sequence

from .._text import plural, say

__all__ = ["plural", "rank_list", "say"]


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    return f"{plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"
