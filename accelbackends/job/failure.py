"""When a rank's failure happened, and whether it is a consequence of another rank's.

A rank that fails in ``init()`` (a plugin's post-init hook raising) tears its process group
down before its exception reaches `spawn`'s report; by then a healthy peer has already failed
with "Connection closed by peer", and dating the failures at the report named the healthy
rank. The failure is stamped where it is raised, before the teardown, and an error that
says only that a peer went away is ordered after any rank's own error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

__all__ = ["is_consequence", "raised_at", "stamped"]

_ATTRIBUTE = "_accelbackends_raised_at"

#: What an error says when all it saw is that another rank went away (Gloo, TCPStore, our own
#: rendezvous and check's heartbeat): the other rank's failure is the cause.
_PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "lost contact with the other ranks",
    "failed during the join",
    "timed out waiting",
)


def stamp(exc: BaseException) -> None:
    """Record now as the moment ``exc`` was raised (the first stamp stays)."""
    if getattr(exc, _ATTRIBUTE, None) is None:
        with contextlib.suppress(Exception):
            setattr(exc, _ATTRIBUTE, time.monotonic())


def raised_at(exc: BaseException) -> float:
    """When ``exc`` was raised where `stamped` saw it, else now."""
    when = getattr(exc, _ATTRIBUTE, None)
    return when if isinstance(when, float) else time.monotonic()


@contextlib.contextmanager
def stamped() -> Iterator[None]:
    """Stamp an exception leaving the block; enter it inside the teardown, so that the stamp is
    taken before the teardown runs."""
    try:
        yield
    except BaseException as exc:
        stamp(exc)
        raise


def is_consequence(message: str) -> bool:
    """Whether ``message`` reports only that another rank went away."""
    lowered = message.lower()
    return any(fragment in lowered for fragment in _PEER_LOST)
