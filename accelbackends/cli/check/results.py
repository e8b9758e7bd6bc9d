"""A check's verdict: one per rank while the checks run, merged over the ranks for the report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..text import rank_list

__all__ = ["Gathered", "Result", "merge"]

#: Every rank's verdicts as they travel: per rank, a list of (name, status, detail).
Gathered = Sequence[Sequence[tuple[str, str, str]]]


@dataclass
class Result:
    """One check's verdict: per rank while running, merged over the ranks for the report."""

    name: str
    status: str  # "passed", "skipped", "failed" or "not run" (which counts as failed)
    detail: str = ""
    ranks: list[int] = field(default_factory=list)  # where it failed

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.status in ("passed", "skipped"),
            "skipped": self.status == "skipped",
            "detail": self.detail,
            "ranks": self.ranks,
        }


def merge(gathered: Gathered) -> list[Result]:
    """Every rank's verdicts, merged: a check passed only where it passed on every rank."""
    names = list(dict.fromkeys(name for per_rank in gathered for name, _, _ in per_rank))
    return [
        _merge_one(
            name,
            {r: (s, d) for r, per_rank in enumerate(gathered) for n, s, d in per_rank if n == name},
        )
        for name in names
    ]


def _merge_one(name: str, by_rank: dict[int, tuple[str, str]]) -> Result:
    failed = {r: d for r, (s, d) in sorted(by_rank.items()) if s == "failed"}
    not_run = {r: d for r, (s, d) in sorted(by_rank.items()) if s == "not run"}
    skipped = [r for r, (s, _) in sorted(by_rank.items()) if s == "skipped"]
    if failed:
        return Result(name, "failed", _per_rank(failed), list(failed))
    if not_run:
        # Every rank stopped at the same point, for the reason they agreed on.
        return Result(name, "not run", next(iter(not_run.values())), list(not_run))
    if skipped and len(skipped) < len(by_rank):
        detail = by_rank[skipped[0]][1]
        text = f"skipped on {rank_list(skipped)} ({detail}) but ran on the others"
        return Result(name, "failed", text, skipped)
    if skipped:
        return Result(name, "skipped", by_rank[skipped[0]][1])
    return Result(name, "passed", next(iter(by_rank.values()))[1])


def _per_rank(details: dict[int, str]) -> str:
    """``rank 1: X`` or ``ranks 0, 1: X; rank 2: Y`` (identical details share one entry)."""
    grouped: dict[str, list[int]] = {}
    for rank, detail in details.items():
        grouped.setdefault(detail, []).append(rank)
    return "; ".join(f"{rank_list(ranks)}: {detail}" for detail, ranks in grouped.items())
