"""One rank's session: the control group that carries the run's own traffic, and the agreement
after every check and size on whether the backend under test may still be used.

The traffic that organises the run (verdicts, timings, agreeing whether to go on) travels over a
separate Gloo group where the backend under test is not Gloo, so a backend that corrupts data
cannot corrupt its own report.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

from ...plugin import torchcompat
from ...plugin.errors import AccelBackendsError, describe
from ..text import say
from .agree import max_over_ranks
from .heartbeat import Heartbeat
from .progress import Progress
from .results import Result, merge
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ...plugin.types import Context
    from .options import Options

__all__ = [
    "COMPLETED",
    "RAISED",
    "UNSUPPORTED",
    "Attempt",
    "Session",
    "control_group",
    "pid_space",
]

_T = TypeVar("_T")

# Outcomes of one call on one rank, ordered so that the maximum over the ranks is the worst.
COMPLETED, UNSUPPORTED, RAISED = 0, 1, 2


def control_group(ctx: Context, timeout: float) -> Any:
    """A Gloo group for the run's own traffic where the backend under test is something else.

    Its timeout is twice the collective timeout: a rank whose call failed at once waits here
    while another rank's call still runs into the backend's timeout.
    """
    from datetime import timedelta

    import torch.distributed as dist

    if ctx.backend == "gloo" or not dist.is_gloo_available():
        return None
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=2 * timeout))


def _is_unsupported(exc: Exception) -> bool:
    """Whether the backend says it does not implement the call, rather than failing it (how
    each torch words that: `torchcompat.unsupported_by_backend`)."""
    return torchcompat.unsupported_by_backend(exc)


@dataclass(frozen=True)
class Attempt(Generic[_T]):
    """One call to the backend under test on this rank, and what the ranks agreed after it."""

    outcome: int  # COMPLETED, UNSUPPORTED or RAISED, on this rank
    value: _T | None  # what the call returned, where it completed
    error: str  # ``Type: message``, where it did not
    go_on: bool  # whether the backend under test may still be used


@dataclass
class Session:
    """One rank's run: its context, its control group, its watchdog, and whether to go on."""

    ctx: Context
    options: Options
    control: Any  # the process group for the run's own traffic (None: the default group)
    watchdog: Watchdog
    heartbeat: Heartbeat
    progress: Progress  # rank 0's report so far
    #: Set when the ranks may no longer agree on the next collective (a call raised on some
    #: ranks only, or ran into the timeout): nothing more is sent over the backend under test.
    stopped: str = ""
    #: Each rank's ``(host, pid, pid_space)`` by rank, once gathered: whom to look for when
    #: contact is lost (see `_ended_peers`).
    peers: dict[int, tuple[str, int, str]] = field(default_factory=dict)

    def say(self, text: str) -> None:
        """Print on rank 0, unless the report is JSON; with ``--quick``, keep it to print after
        the verdict (a preflight's log opens with its verdict)."""
        if self.ctx.rank == 0 and not self.options.json:
            if self.options.quick:
                self.progress.hold(text)
            else:
                say(text)

    def attempt(self, call: Callable[[], _T], *, step: str, what: str) -> Attempt[_T]:
        """Run ``call`` under the watchdog as ``step``, then agree on its outcome (see
        `agree`; ``what`` names it there)."""
        began = time.monotonic()
        value: _T | None = None
        error = ""
        with self.watchdog.step(step):
            try:
                value = call()
                outcome = COMPLETED
            except Exception as exc:
                error = describe(exc)
                outcome = UNSUPPORTED if _is_unsupported(exc) else RAISED
        go_on = self.agree(outcome, time.monotonic() - began, what)
        return Attempt(outcome, value, error, go_on)

    def agree(self, outcome: int, seconds: float, what: str) -> bool:
        """After each check or size: whether the backend under test may still be used (True)
        or not (False, and ``stopped`` says why).

        A call that raised on *every* rank quickly (a dtype the backend rejects) leaves the ranks
        in step, so the run goes on; one that raised on some ranks only, or ran into the
        timeout, may not, and every rank stops using the backend under test at the same point.
        """
        with self.watchdog.step(f"agreeing on the outcome of {what}"):
            try:
                worst, negated_best, slowest = max_over_ranks(
                    self.ctx, self.control, [outcome, -outcome, seconds]
                )
            except Exception as exc:
                self._lost_contact(f"agreeing on the outcome of {what}", exc)
        best = -negated_best
        if worst == RAISED and best != RAISED:
            self.stopped = (
                f"{what} raised on some ranks only (they may disagree on what comes next)"
            )
        elif worst == RAISED and slowest >= self.options.timeout / 2:
            self.stopped = (
                f"{what} raised after {slowest:.0f} s (--timeout {self.options.timeout:g})"
            )
        return not self.stopped

    def gather(self, local: list[Result], what: str) -> list[Result]:
        """Every rank's verdicts, merged: a check passed only where it passed on every rank."""
        mine = [(r.name, r.status, r.detail) for r in local]
        return merge(self.gather_objects(mine, f"{what} results"))

    def gather_objects(self, mine: _T, what: str) -> list[_T]:
        """``mine`` from every rank, by rank, over the control group."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.ctx.world_size
        with self.watchdog.step(f"gathering the {what}"):
            try:
                dist.all_gather_object(gathered, mine, group=self.control)
            except Exception as exc:
                self._lost_contact(f"gathering the {what}", exc)
        return gathered

    def _lost_contact(self, doing: str, exc: Exception) -> NoReturn:
        """The run's own traffic failed: another rank is gone or stuck.

        Fails at once: spawn() dates a rank that died without reporting back by ``DEATH_LEAD``,
        so the dead rank is named rather than this one (torchrun, too, names the rank that
        exited first).
        """
        after = f" after {self.stopped}" if self.stopped else ""
        blame = self.heartbeat.explain()
        if blame:
            raise AccelBackendsError(f"{blame} (rank {self.ctx.rank} was {doing})") from exc
        lost = (
            f"rank {self.ctx.rank} lost contact with the other ranks while {doing}{after} "
            f"({describe(exc)})"
        )
        ended = self._ended_peers()
        if ended:
            which = "rank" if len(ended) == 1 else "ranks"
            error = AccelBackendsError(
                f"{_ended_text(ended)}; {lost} — a consequence of {which} "
                f"{', '.join(str(rank) for rank, _, _ in ended)} ending"
            )
            error.ended_peers = ended  # type: ignore[attr-defined]
            raise error from exc
        raise AccelBackendsError(lost) from exc

    def _ended_peers(self) -> list[tuple[int, int, str]]:
        """The ranks on this host (the same process-id space) whose process has ended or is
        ending, as ``(rank, pid, "has ended" or "is ending")``. Under a launcher no parent of
        theirs is ours: their exit status is the launcher's, and only their end can be seen
        here. spawn()'s parent names its dead ranks with their exit status itself."""
        from ...job.processes import end_state

        if self.ctx.launcher == "spawn":
            return []
        mine = pid_space()
        found = []
        for rank, (host, pid, space) in sorted(self.peers.items()):
            if rank == self.ctx.rank or host != socket.gethostname() or space != mine or not mine:
                continue
            # A peer whose sockets closed under us is in its exit already (they close there).
            state = end_state(pid)
            if state:
                found.append((rank, pid, "has ended" if state == "ended" else "is ending"))
        return found


def pid_space() -> str:
    """This process's process-id space: the boot and the pid namespace (two containers of one
    host may share its name and network but not their process ids); empty where unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _ended_text(ended: list[tuple[int, int, str]]) -> str:
    """``rank 0 (pid 4242 on this host) has ended; its launcher has its exit status``."""
    parts = [f"rank {rank} (pid {pid} on this host) {state}" for rank, pid, state in ended]
    owner = "its launcher has its" if len(ended) == 1 else "their launcher has their"
    return f"{', '.join(parts)}; {owner} exit status"
