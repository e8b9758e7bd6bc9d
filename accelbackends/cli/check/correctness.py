"""Step 3: every check on every rank, the ranks agreeing after each whether to go on; the
verdicts gathered so that rank 0 names the failing check *and* rank."""

from __future__ import annotations

from .collectives import DTYPES, LENGTHS, Check, Verifier, checks
from .report import grid
from .results import Result
from .session import RAISED, UNSUPPORTED, Session

__all__ = ["run_checks"]


def run_checks(session: Session) -> list[Result]:
    """Step 3; returns the verdicts merged over the ranks, the same on every rank."""
    every = checks(session.ctx.world_size)
    operations = len(dict.fromkeys(c.row for c in every))
    session.say(
        f"[3/4] correctness: {operations} operations on {', '.join(DTYPES)} at lengths "
        f"{', '.join(map(str, LENGTHS))} ({len(every)} checks)"
    )
    merged = session.gather([_run_check(session, check) for check in every], "correctness")
    for line in grid(every, merged, session.ctx.world_size):
        session.say("      " + line)
    return merged


def _run_check(session: Session, check: Check) -> Result:
    if session.stopped:
        return Result(check.name, "not run", f"not run: {session.stopped}")
    verifier = Verifier()
    attempt = session.attempt(
        lambda: check.body(session.ctx, check.dtype or "", verifier),
        step=f"check {check.name!r}",
        what=check.name,
    )
    if attempt.outcome == UNSUPPORTED:
        detail = f"not supported by {session.ctx.backend} ({attempt.error})"
        return Result(check.name, "skipped", detail)
    if attempt.outcome == RAISED:
        return Result(check.name, "failed", f"raised {attempt.error}")
    if verifier.mismatch:
        return Result(check.name, "failed", verifier.mismatch)
    detail = attempt.value or ""
    if detail.startswith("skipped: "):
        return Result(check.name, "skipped", detail.removeprefix("skipped: "))
    return Result(check.name, "passed", detail)
