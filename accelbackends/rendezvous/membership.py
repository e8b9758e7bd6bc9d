"""Who belongs to a job: the shared secret, and the proof every rank gives before any collective.

torch's TCP store and Gloo authenticate nobody: any process that can reach ``MASTER_PORT`` can
count itself in as a rank and answer collectives (see docs/security.md). Here every rank proves
that it knows the job's secret — an HMAC over the job's rendezvous identity, its rank and a fresh
nonce from rank 0, so the secret never crosses the store and no proof can be replayed in another
job or attempt — and rank 0 admits the group only when every rank's proof checks out. A second
proof is exchanged over the initialised process group itself, before the first user collective.

The secret comes from ``ACCELBACKENDS_SECRET`` (a value, or the path of a file holding one), or
else from a per-user file, created on first use with mode 0600 in the user's configuration
directory; on a cluster the home directory is shared, so every node of a user's job finds the same
file. ``ACCELBACKENDS_SECRET=off`` turns the check off. Reading it is `secret`'s
part, re-exported here.

Nothing here imports torch at import time; the store protocol imports it when it runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..plugin import config
from ..plugin.errors import RendezvousError, first_line
from .secret import OFF, SECRET, Secret, info_line, load_secret, secret_source, user_secret_path

__all__ = [
    "OFF",
    "SECRET",
    "Admission",
    "Secret",
    "WAIT_OPEN",
    "WAIT_STORE",
    "WAIT_VERDICT",
    "Waiting",
    "admit",
    "info_line",
    "load_secret",
    "open_attempt",
    "report_conflict",
    "secret_source",
    "user_secret_path",
    "verify_group",
]

#: How often a rank waiting for rank 0's nonce looks for a conflict rank 0 reported, seconds.
_NONCE_POLL = 1.0

#: How often rank 0 looks for a process that wrote to the rendezvous without a proof, and how
#: often it says who is still missing.
_TICK = 1.0
PROGRESS_EVERY = 10.0
#: How often a wait for keys asks the store again (one round trip each, only rank 0 asks):
#: first after `_POLL_FIRST`, then twice as long each time, up to `_POLL`. A fixed 50 ms made
#: every rendezvous of ranks that arrive within milliseconds of each other (the usual case on
#: one host) wait out most of a period twice, once for the members and once for their answers:
#: +70 ms of a 2-rank Gloo ``init()`` that torch initialises in under 10 ms. On a busy host the
#: ranks arrive tens of ms apart, and a longer period is paid again as a late look; 100 looks a
#: second are nothing to the store.
_POLL_FIRST = 0.001
_POLL = 0.01
#: How long the other ranks wait for rank 0's verdict after the rendezvous timeout has passed
#: (rank 0 writes a failure verdict when its own, slightly earlier, deadline passes).
_VERDICT_GRACE = 3.0
_MISSING_SHOWN = 8
#: The most characters of an unsigned message quoted from the store.
_QUOTED = 300

log = logging.getLogger("accelbackends.rendezvous")


def _mac(key: bytes, *parts: object) -> str:
    message = "\0".join(str(part) for part in parts).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


#: What a rank chose, as its record carries it: ranks that disagree on any of the first three
#: never meet in a collective (a rank on the CPU with Gloo waits for ranks on GPUs with NCCL
#: until the collective timeout), so rank 0 compares them before init_process_group.
CHOICE_FIELDS = ("accelerator", "backend", "process_group_backend")


def _proof(key: bytes, identity: str, rank: int, nonce: str, choice: dict[str, str] | None) -> str:
    """A rank's proof of the secret, over what it chose as well: a process that rewrites a
    rank's record cannot make rank 0 see another choice than the rank's own."""
    extra = (json.dumps(choice, sort_keys=True),) if choice else ()
    return _mac(key, identity, rank, nonce, *extra)


@dataclass(frozen=True)
class Admission:
    """What the ranks agreed on at the rendezvous; the second proof is made from it."""

    identity: str
    nonce: str
    secret: Secret
    #: Reads a collision reported after the admission (a late rank of this job finding its
    #: place taken); checked once more before the first user collective.
    conflict: Callable[[], str | None] | None = field(default=None, repr=False, compare=False)


class _Store:
    """The rendezvous keys of one job attempt, on whichever store carries them."""

    def __init__(
        self, raw: Any, prefix: str, key: bytes | None = None, where: str = "", attempt: int = 0
    ) -> None:
        self.raw = raw
        self.prefix = prefix
        #: The keys shared by every attempt of the job: the prefix without its attempt number,
        #: or the prefix itself where it has none.
        self.job_prefix = (
            prefix.rstrip("/").rsplit("/", 1)[0] + "/"
            if prefix.rstrip("/").rsplit("/", 1)[-1].isdigit()
            else prefix
        )
        #: The job's secret: what this rank writes to the job's keys is signed with it.
        self.secret_key = key
        self.where = where
        #: The attempt these keys belong to (a conflict signed for an earlier one is stale).
        self.attempt = attempt

    def key(self, name: str) -> str:
        return self.prefix + name

    def job_key(self, name: str) -> str:
        """A key shared by every attempt of the job."""
        return self.job_prefix + name

    def claim(self, name: str, value: str) -> str:
        """Set ``name`` unless someone already did; returns the value it has now."""
        current = self.raw.compare_set(self.key(name), "", value)
        return bytes(current).decode(errors="replace")

    def get(self, name: str) -> str:
        return bytes(self.raw.get(self.key(name))).decode(errors="replace")

    def get_within(self, name: str, seconds: float) -> str | None:
        """The value of ``name`` once someone sets it (one round trip), or None after
        ``seconds``."""
        self.raw.set_timeout(timedelta(seconds=max(seconds, 0.01)))
        try:
            return self.get(name)
        except RuntimeError:  # TCPStore: DistStoreError; FileStore (spawn's): a plain one
            return None

    def get_many(self, names: list[str]) -> list[str]:
        keys = [self.key(n) for n in names]
        try:
            values = self.raw.multi_get(keys)  # one round trip where the store offers it
        except (AttributeError, NotImplementedError, RuntimeError):
            values = [self.raw.get(k) for k in keys]
        return [bytes(v).decode(errors="replace") for v in values]

    def has(self, name: str) -> bool:
        return bool(self.raw.check([self.key(name)]))

    def wait(self, names: list[str], seconds: float) -> bool:
        """True once every key of ``names`` is set, False after ``seconds``.

        Polls ``check`` instead of the store's blocking ``wait``: a TCPStore wait that times out
        logs a ``[W… socket.cpp] waitForInput … timed out`` warning (torch 2.4 to 2.13), two
        a second while rank 0 waits, and ``TORCH_CPP_LOG_LEVEL`` cannot silence it once the
        user imported torch first. ``check`` answers at once and logs nothing.
        """
        keys = [self.key(n) for n in names]
        end = time.monotonic() + max(seconds, 0.01)
        pause = _POLL_FIRST
        while not self.raw.check(keys):
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, _POLL)
        return True


def _member(rank: int) -> str:
    return f"member/{rank}"


def _port_hint(where: str) -> str:
    return f"another process is using this job's MASTER_PORT ({where})"


def _claimed_by(record: str) -> str:
    try:
        data = json.loads(record)
        return f"{data['host']}, pid {data['pid']}"
    except (ValueError, KeyError, TypeError):
        return "a process that speaks no accelbackends"


def _fail(store: _Store, message: str, attempt: int | None = None) -> RendezvousError:
    """Tell every rank (rank 0's verdict or a conflict mark) and return the error to raise.
    ``attempt`` is the attempt the mark is for (this one by default; 0: whichever the reader is
    in)."""
    with contextlib.suppress(Exception):
        store.raw.set(
            store.job_key("conflict"),
            conflict_record(
                store.job_prefix,
                message,
                store.secret_key,
                store.attempt if attempt is None else attempt,
            ),
        )
    return RendezvousError(message)


def _announcement_replaced(store: _Store, where: str) -> str | None:
    """Rank 0: the attempt number it announced, where a process on the port has since replaced
    it (the other ranks would wait in an attempt rank 0 never opens); None while it stands."""
    if store.secret_key is None or not store.attempt:
        return None
    name = store.job_key("open")
    ours = f"{store.attempt} {_mac(store.secret_key, store.job_prefix, 'open', store.attempt)}"
    if not store.raw.check([name]):
        return None  # a caller that announces none (the admission alone)
    found = bytes(store.raw.get(name)).decode(errors="replace")
    if found == ours:
        return None
    return f"rank 0: the attempt number it announced at {where} was replaced: " + _said_on_the_port(
        f"attempt {found}", where
    )


def conflict_record(job_prefix: str, message: str, key: bytes | None, attempt: int = 0) -> str:
    """The job's ``conflict`` key's value: ``message``, signed with the job's secret ``key``
    where the writer holds it, for the ``attempt`` it failed in (0: before any, e.g. a rank
    that refused its configuration)."""
    mac = _mac(key, job_prefix, "conflict", attempt, message) if key else ""
    return json.dumps({"message": message, "attempt": attempt, "mac": mac})


def _said_on_the_port(text: str, where: str) -> str:
    shown = text if len(text) <= _QUOTED else text[:_QUOTED] + "…"
    return (
        f"a process on the port says: {shown!r} (not signed with this job's secret, so not "
        f"this job's own word); {_port_hint(where)}"
    )


def admit(
    raw: Any,
    prefix: str,
    *,
    rank: int,
    world_size: int,
    secret: Secret,
    deadline: float,
    join_timeout: float,
    where: str,
    diagnose: Callable[[], str] | None = None,
    peers: Callable[[], str] | None = None,
    choice: dict[str, str] | None = None,
    sample: Callable[[], None] | None = None,
) -> Admission:
    """Count this rank in and wait until rank 0 has admitted every rank, or fail naming the rank
    or process that broke the rendezvous. ``diagnose`` adds what rank 0 can see when ranks are
    missing (e.g. connections held on its port), ``peers`` who is connected to the store when a
    process is refused. ``choice`` is what this rank chose (`CHOICE_FIELDS` and ``reason``):
    rank 0 refuses the job where the ranks' choices differ. ``sample`` is called by rank 0
    about once a second while it waits (what ``diagnose`` later reports on)."""
    attempt = prefix.rstrip("/").rsplit("/", 1)[-1]
    store = _Store(raw, prefix, secret.key, where, int(attempt) if attempt.isdigit() else 0)
    identity = f"{prefix}|world_size={world_size}"
    if rank == 0:
        nonce = secrets.token_hex(16)
        if store.claim("nonce", nonce) != nonce:
            raise _fail(
                store,
                f"rank 0: this job's rendezvous keys at {where} were already written by "
                f"another process before rank 0 started it; {_port_hint(where)}",
            )
    else:
        nonce = _await_opening(store, rank, where, deadline, join_timeout)
    admission = Admission(identity, nonce, secret)
    record = json.dumps(
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "world_size": world_size,
            "nonce": nonce,
            "proof": _proof(secret.key, identity, rank, nonce, choice) if secret.key else "",
            "choice": choice,
        },
        sort_keys=True,
    )
    if rank == 0:
        # Rank 0 knows its own proof; it leaves no record and waits for the others'.
        _admit_as_rank_zero(
            store,
            admission,
            world_size,
            deadline,
            join_timeout,
            where,
            diagnose,
            peers,
            choice,
            sample,
        )
        return Admission(identity, nonce, secret, lambda: _conflict(store))
    current = store.claim(_member(rank), record)
    if current != record:
        raise _taken(store, admission, rank, world_size, where, current)
    _await_verdict(store, admission, rank, world_size, deadline, join_timeout, where)
    return Admission(identity, nonce, secret, lambda: _conflict(store))


def _taken(
    store: _Store, admission: Admission, rank: int, world_size: int, where: str, current: str
) -> RendezvousError:
    """Why this rank's place was taken: by this job's own rank (so this process belongs to
    another job that shares the port and keys, e.g. a second MPICH job), or by an intruder."""
    if store.has("verdict"):
        verdict = _read_verdict(store.get("verdict"), admission)
        if verdict is not None and not verdict[0]:
            return RendezvousError(verdict[1])
        return _fail(
            store,
            f"rank {rank}: the rendezvous at {where} has already admitted all its ranks, "
            f"so this rank belongs to another job (no more ranks than the world size of "
            f"{world_size} are admitted); {_port_hint(where)}; give each job its own "
            "MASTER_PORT",
        )
    return _fail(
        store,
        f"rank {rank}: rank {rank} of the rendezvous at {where} was already taken by "
        f"{_claimed_by(current)}; {_port_hint(where)}; give each job its own MASTER_PORT",
    )


def _await_opening(
    store: _Store, rank: int, where: str, deadline: float, join_timeout: float
) -> str:
    """The nonce rank 0 opened the rendezvous with, waited for by a rank other than 0."""
    waiting = Waiting(rank, where, deadline, join_timeout)
    found = store.get_within("nonce", min(deadline - time.monotonic(), _NONCE_POLL))
    while found is None and deadline - time.monotonic() > 0:
        waiting(WAIT_OPEN)
        # This job's rank 0 may have found the port taken by another job and said so in
        # the store this rank reached (the other job's): fail now, not at the timeout.
        conflict = _conflict(store)
        if conflict is not None:
            raise RendezvousError(f"rank {rank}: {conflict}")
        found = store.get_within("nonce", min(deadline - time.monotonic(), _NONCE_POLL))
    if found is None:
        raise RendezvousError(
            f"rank {rank}: rank 0 did not open the rendezvous at {where} within "
            f"{join_timeout:g} s (raise {config.RENDEZVOUS_TIMEOUT} if rank 0 starts slowly)"
        )
    return found


#: How often a rank waiting for rank 0 to open a later attempt than the one it holds looks.
_OPEN_POLL = 0.05


def open_attempt(
    raw: Any,
    job_prefix: str,
    *,
    rank: int,
    generation: int,
    deadline: float,
    join_timeout: float,
    where: str,
    key: bytes | None = None,
) -> int:
    """The attempt of this ``init()``, as rank 0 numbers it: the ranks agree on it without
    counting their own attempts alike, so that one rank's failed attempt (a connection reset by
    rank 0's store of the previous cycle) does not leave the ranks one attempt apart for good.
    Rank 0 announces ``generation`` (its own count, raised on every attempt);
    another rank takes the attempt rank 0 announces, once it is at least ``generation`` (one
    more than the last attempt this process joined): an announcement left on a store that
    outlives the cycles (torchrun's agent's) is not taken for the next one. With the job's
    secret ``key``, the announcement is signed, and one that is not is never taken."""
    if rank == 0:
        mac = _mac(key, job_prefix, "open", generation) if key else ""
        raw.set(job_prefix + "open", f"{generation} {mac}".rstrip())
        return generation
    # ``store`` holds the job's prefix here, not an attempt's: the job's keys are under it.
    store = _Store(raw, job_prefix, key, where, generation)
    unsigned = None
    waiting = Waiting(rank, where, deadline, join_timeout)
    while True:
        waiting(WAIT_OPEN)
        found = store.get_within("open", min(deadline - time.monotonic(), _NONCE_POLL))
        if found is not None:
            number, _, mac = found.partition(" ")
            try:
                announced = int(number)
            except ValueError:
                raise RendezvousError(
                    f"rank {rank}: the rendezvous at {where} holds an attempt number "
                    f"{found[:40]!r} that rank 0 did not write; {_port_hint(where)}"
                ) from None
            if key and not hmac.compare_digest(mac, _mac(key, job_prefix, "open", announced)):
                # Not signed with this rank's secret: a process on the port wrote it, or rank
                # 0's secret differs (its verdict then says so, and rank 0 names a number
                # that replaced its own). Taken all the same, so that the rendezvous names it.
                unsigned = found
            else:
                unsigned = None
            if announced >= generation:
                return announced
        conflict = _conflict(store)
        if conflict is not None:
            raise RendezvousError(f"rank {rank}: {conflict}")
        if time.monotonic() >= deadline:
            seen = (
                ""
                if found is None
                else f" (it still announces attempt {found}, not {generation} or later)"
            )
            if unsigned is not None:
                seen = f"; {_said_on_the_port(f'attempt {unsigned}', where)}"
            raise RendezvousError(
                f"rank {rank}: rank 0 did not open the rendezvous at {where} within "
                f"{join_timeout:g} s{seen} (raise {config.RENDEZVOUS_TIMEOUT} if rank 0 starts "
                "slowly)"
            )
        if found is not None:
            time.sleep(_OPEN_POLL)


def report_conflict(raw: Any, job_prefix: str, message: str, key: bytes | None = None) -> None:
    """Mark the job at ``job_prefix`` (``accelbackends/<run id>/``) as collided with: its rank 0
    fails with ``message`` instead of admitting ranks that may belong to another job. Signed
    with the job's secret ``key`` where the writer holds it; otherwise the ranks quote it as a
    process on the port."""
    raw.set(job_prefix + "conflict", conflict_record(job_prefix, message, key))


def _verdict_mac(admission: Admission, ok: bool, message: str) -> str:
    key = admission.secret.key
    return _mac(key, admission.identity, admission.nonce, "verdict", ok, message) if key else ""


def _missing(store: _Store, world_size: int) -> list[int]:
    """The ranks other than 0 that have left no record yet."""
    return [r for r in range(1, world_size) if not store.has(_member(r))]


def _unproven_joiner(store: _Store, world_size: int, where: str) -> str | None:
    """A process that wrote to the rendezvous without the protocol (plain torch, a raw client):
    the join counter ahead of the ranks that left a record, or torch's completion key."""
    if store.has("complete"):
        return (
            f"a process that is not part of this job wrote the rendezvous key 'complete' at "
            f"{where} (no proof of membership); {_port_hint(where)}"
        )
    # The ranks of this job never touch the counter: whoever counted itself in is foreign.
    if store.has("joined"):
        joined = int(store.raw.add(store.key("joined"), 0))
        return (
            f"{joined} process(es) counted themselves into the rendezvous at {where} without a "
            f"proof of membership (the join counter is not this job's); {_port_hint(where)}"
        )
    return None


class Waiting:
    """What a rank other than 0 waits for and since when, said every `PROGRESS_EVERY` seconds
    of the rendezvous (rank 0 says who is missing instead): without it such a rank stayed
    silent for the whole rendezvous timeout while rank 0 never came."""

    def __init__(self, rank: int, where: str, deadline: float, join_timeout: float) -> None:
        self.rank, self.where, self.limit = rank, where, join_timeout
        self.started = deadline - join_timeout
        began = time.time() - (time.monotonic() - self.started)
        self.since = time.strftime("%H:%M:%S", time.localtime(began))
        self.next = self._after(time.monotonic())

    def _after(self, now: float) -> float:
        """The first report time after ``now``, on the rendezvous' own cadence (so that the
        waits of one rendezvous, each with its own `Waiting`, report like one)."""
        return self.started + PROGRESS_EVERY * (int((now - self.started) // PROGRESS_EVERY) + 1)

    def __call__(self, what: str) -> None:
        """Say that this rank waits for ``what``, where a report is due."""
        now = time.monotonic()
        if now < self.next:
            return
        self.next = self._after(now)
        log.warning(
            "rank %d: waiting for %s at %s since %s (%.0f s of %g s)",
            self.rank,
            what,
            self.where,
            self.since,
            now - self.started,
            self.limit,
        )


#: What the other ranks wait for, in the words of `Waiting`.
WAIT_STORE = "rank 0's rendezvous store (nothing answers there yet: is rank 0 running?)"
WAIT_OPEN = "rank 0 to open the rendezvous (its store answers)"
WAIT_VERDICT = "rank 0's verdict (it admits the job once every rank has joined)"


def _progress(missing: list[int], world_size: int, waited: float, limit: float) -> str:
    shown = ", ".join(str(r) for r in missing[:_MISSING_SHOWN])
    more = f" and {len(missing) - _MISSING_SHOWN} more" if len(missing) > _MISSING_SHOWN else ""
    label = "rank" if len(missing) == 1 else "ranks"
    return (
        f"waiting for ranks: {world_size - len(missing)}/{world_size} joined "
        f"({label} {shown}{more} missing), {waited:.0f} s of {limit:g} s"
    )


def _admit_as_rank_zero(
    store: _Store,
    admission: Admission,
    world_size: int,
    deadline: float,
    join_timeout: float,
    where: str,
    diagnose: Callable[[], str] | None,
    peers: Callable[[], str] | None,
    choice: dict[str, str] | None = None,
    sample: Callable[[], None] | None = None,
) -> None:
    try:
        _await_members(store, world_size, deadline, join_timeout, where, diagnose, sample)
        _check_members(store, admission, world_size, where, choice)
        verdict = json.dumps({"ok": True, "message": "", "mac": _verdict_mac(admission, True, "")})
        store.raw.set(store.key("verdict"), verdict)
        # A rank that read another verdict (one a process outside the job wrote before this
        # one) or cannot check this one leaves; without its answer rank 0 would enter
        # init_process_group and wait the whole collective timeout for it.
        _await_answers(store, admission, world_size, deadline, where, verdict)
        return
    except _Refused as exc:
        # The ranks that refused have left; the others are in init_process_group and fail
        # when this rank's store goes: nobody reads a failure verdict, so none is written.
        raise RendezvousError(str(exc)) from None
    except RendezvousError as exc:
        message = str(exc)
        if peers is not None and ("not part of this job" in message or "proof" in message):
            message += peers()
            exc = RendezvousError(message)
        _publish_failure(store, admission, world_size, message)
        raise exc from None


def _await_members(
    store: _Store,
    world_size: int,
    deadline: float,
    join_timeout: float,
    where: str,
    diagnose: Callable[[], str] | None,
    sample: Callable[[], None] | None,
) -> None:
    """Wait until every rank other than 0 has left its record; raise on a conflict, a foreign
    writer or the deadline, and say who is missing every `PROGRESS_EVERY` seconds."""
    started = deadline - join_timeout
    members = [_member(r) for r in range(1, world_size)]
    next_report = started + PROGRESS_EVERY
    while True:
        now = time.monotonic()
        if store.wait(members, min(_TICK, deadline - now)):
            return
        if sample is not None:
            sample()
        conflict = _conflict(store)
        if conflict:
            raise RendezvousError(conflict)
        replaced = _announcement_replaced(store, where)
        if replaced:
            # For every attempt: the ranks misled into another one read it there.
            raise _fail(store, replaced, attempt=0)
        intruder = _unproven_joiner(store, world_size, where)
        if intruder:
            raise RendezvousError(f"rank 0: {intruder}")
        now = time.monotonic()
        if now >= deadline:
            missing = _missing(store, world_size)
            extra = diagnose() if diagnose else ""
            raise RendezvousError(
                f"rendezvous timed out after {join_timeout:g} s: "
                f"{world_size - len(missing)}/{world_size} ranks joined at {where}, rank"
                f"{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} missing "
                f"(raise {config.RENDEZVOUS_TIMEOUT} if ranks start slowly; otherwise the "
                f"missing ranks never started or cannot reach this address){extra}"
            )
        if now >= next_report:
            log.warning(
                _progress(_missing(store, world_size), world_size, now - started, join_timeout)
            )
            next_report += PROGRESS_EVERY


def _publish_failure(store: _Store, admission: Admission, world_size: int, message: str) -> None:
    """Write rank 0's failure verdict, signed, and give the ranks that joined a moment to read
    it (best effort: the store may be what failed)."""
    with contextlib.suppress(Exception):
        store.raw.set(
            store.key("verdict"),
            json.dumps(
                {
                    "ok": False,
                    "message": message,
                    "mac": _verdict_mac(admission, False, message),
                }
            ),
        )
        _let_ranks_read_the_verdict(store, world_size)


class _Refused(RendezvousError):
    """A rank refused rank 0's admission (see `_await_answers`)."""


def _answer(rank: int) -> str:
    return f"answer/{rank}"


def _answer_mac(admission: Admission, rank: int, ok: bool, seen: str) -> str:
    key = admission.secret.key
    return _mac(key, admission.identity, admission.nonce, "answer", rank, ok, seen) if key else ""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _send_answer(store: _Store, admission: Admission, rank: int, ok: bool, seen: str) -> None:
    """Tell rank 0 whether this rank accepts the verdict it read (``seen`` is that verdict's
    digest, so that rank 0 can tell a forged verdict from a secret that differs)."""
    answer = {"ok": ok, "seen": seen, "mac": _answer_mac(admission, rank, ok, seen)}
    with contextlib.suppress(Exception):
        store.claim(_answer(rank), json.dumps(answer, sort_keys=True))


def _await_answers(
    store: _Store,
    admission: Admission,
    world_size: int,
    deadline: float,
    where: str,
    verdict: str,
) -> None:
    """Wait, until the other ranks' verdict deadline, for every rank's answer to the verdict;
    raise `_Refused` naming the first rank that refused it, or whose answer is not its own."""
    names = [_answer(r) for r in range(1, world_size)]
    limit = deadline + _VERDICT_GRACE
    while True:
        complete = store.wait(names, min(_TICK, max(limit - time.monotonic(), 0.01)))
        present = [r for r in range(1, world_size) if complete or store.has(_answer(r))]
        if present:
            values = store.get_many([_answer(r) for r in present])
            for rank, text in zip(present, values, strict=True):
                problem = _judge_answer(admission, rank, text, verdict, where)
                if problem:
                    raise _Refused(problem)
        if complete:
            return
        if time.monotonic() >= limit:
            missing = [r for r in range(1, world_size) if r not in present]
            raise _Refused(
                f"rank 0: rank{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(str, missing))} of the rendezvous at {where} did not answer "
                f"rank 0's verdict within {_VERDICT_GRACE:g} s after the rendezvous timeout "
                "(they ended, or lost the store)"
            )


def _judge_answer(
    admission: Admission, rank: int, text: str, verdict: str, where: str
) -> str | None:
    """What is wrong with ``rank``'s answer, or None where it accepted rank 0's verdict."""
    try:
        data = json.loads(text)
        ok, seen, mac = bool(data["ok"]), str(data["seen"]), str(data["mac"])
    except (ValueError, KeyError, TypeError):
        ok, seen, mac = False, "", None
    key = admission.secret.key
    signed = mac is not None and (
        key is None or hmac.compare_digest(mac, _answer_mac(admission, rank, ok, seen))
    )
    if not signed:
        return (
            f"rank 0: the answer of rank {rank} to the verdict of the rendezvous at {where} "
            f"was written by a process that is not part of this job (a forged key); "
            f"{_port_hint(where)}"
        )
    if ok:
        return None
    if seen != _digest(verdict):
        return (
            f"rank 0: rank {rank} refused the rendezvous at {where} because the verdict it "
            "read was not rank 0's: a process that is not part of this job wrote the "
            f"verdict (a forged verdict); {_port_hint(where)}"
        )
    return (
        f"rank 0: rank {rank} refused the verdict of the rendezvous at {where}: it is not "
        f"signed with rank {rank}'s secret, so the ranks' secrets differ (rank 0: "
        f"{admission.secret.source}; set {SECRET} the same on every rank)"
    )


def _conflict(store: _Store) -> str | None:
    """A collision some rank or a second job's rank 0 reported, for this attempt or the job:
    its message where it is signed with the job's secret (or the job has none), else quoted
    as a process on the port; None where there is none, or it was signed for an earlier
    attempt (a failed ``init()`` of this process, its store kept by the launcher)."""
    name = store.job_key("conflict")
    if not store.raw.check([name]):
        return None
    text = bytes(store.raw.get(name)).decode(errors="replace")
    try:
        record = json.loads(text)
        message, attempt, mac = record["message"], record["attempt"], record["mac"]
        if not (isinstance(message, str) and type(attempt) is int and isinstance(mac, str)):
            raise TypeError(record)
    except (ValueError, KeyError, TypeError):
        return text if store.secret_key is None else _said_on_the_port(text, store.where)
    if store.secret_key is None:
        return message
    expected = _mac(store.secret_key, store.job_prefix, "conflict", attempt, message)
    if not hmac.compare_digest(mac, expected):
        return _said_on_the_port(message, store.where)
    if 0 < attempt < store.attempt:
        return None
    return message


def _let_ranks_read_the_verdict(store: _Store, world_size: int) -> None:
    """Keep the store (which dies with rank 0 when rank 0 hosts it) up until the ranks that
    joined have read a failure verdict, briefly: they then fail with rank 0's message instead
    of a broken connection."""
    readers = world_size - len(_missing(store, world_size)) - 1
    limit = time.monotonic() + _VERDICT_GRACE
    while readers > 0 and time.monotonic() < limit:
        if int(store.raw.add(store.key("verdict-read"), 0)) >= readers:
            return
        time.sleep(0.02)


def _check_members(
    store: _Store,
    admission: Admission,
    world_size: int,
    where: str,
    choice: dict[str, str] | None = None,
) -> None:
    # A conflict reported from now on is caught by verify_group, before the first collective.
    members = [_member(r) for r in range(1, world_size)]
    current, *records = store.get_many(["nonce", *members])
    if current != admission.nonce:
        raise RendezvousError(
            f"rank 0: another process overwrote this job's rendezvous challenge at {where}; "
            f"{_port_hint(where)}"
        )
    key = admission.secret.key
    choices: list[dict[str, str] | None] = [choice]
    for rank, record in enumerate(records, start=1):
        try:
            data = json.loads(record)
            claimed = f"{data['host']}, pid {data['pid']}"
            proof, nonce, size = str(data["proof"]), str(data["nonce"]), data["world_size"]
            chosen = data.get("choice")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise RendezvousError(
                f"rank {rank} at {where}: not part of this job (no valid proof; its record is "
                f"not accelbackends'); {_port_hint(where)}"
            ) from None
        if size != world_size:
            raise RendezvousError(
                f"rank {rank} ({claimed}) at {where}: not part of this job (it belongs to a job "
                f"of {size} ranks, this one has {world_size}); {_port_hint(where)}"
            )
        choices.append(chosen if isinstance(chosen, dict) else None)
        if key is None:
            continue
        if nonce != admission.nonce:
            raise RendezvousError(
                f"rank {rank} ({claimed}) at {where}: not part of this job (its proof answers an "
                f"old challenge: a stale rank from an earlier attempt or job); {_port_hint(where)}"
            )
        if not hmac.compare_digest(
            proof,
            _proof(
                key, admission.identity, rank, nonce, chosen if isinstance(chosen, dict) else None
            ),
        ):
            raise RendezvousError(
                f"rank {rank} ({claimed}) at {where}: not part of this job (no valid proof of "
                f"the job's secret); {_port_hint(where)}, or that rank's secret differs from "
                f"rank 0's ({admission.secret.source}; set {SECRET} to the same value on every "
                "host when they share no home directory)"
            )
    if choice is not None:
        _check_choices(choices, where)
        _check_devices(choices, where)


def _chose(choice: dict[str, str] | None) -> tuple[str, ...]:
    if not choice:
        return ("?",) * len(CHOICE_FIELDS)
    return tuple(str(choice.get(name, "?")) for name in CHOICE_FIELDS)


def _check_choices(choices: list[dict[str, str] | None], where: str) -> None:
    """Refuse ranks that chose different accelerators or backends (``choices[r]`` is rank
    ``r``'s), naming each group of ranks, what it chose and why (its first rank's reason)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for rank, chosen in enumerate(choices):
        groups.setdefault(_chose(chosen), []).append(rank)
    if len(groups) == 1:
        return
    parts = []
    for (accelerator, backend, group_backend), ranks in groups.items():
        shown = ", ".join(str(r) for r in ranks[:_MISSING_SHOWN])
        more = f" and {len(ranks) - _MISSING_SHOWN} more" if len(ranks) > _MISSING_SHOWN else ""
        first = choices[ranks[0]] or {}
        reason = first.get("reason") or "it did not say (an older accelbackends?)"
        parts.append(
            f"rank{'s' if len(ranks) > 1 else ''} {shown}{more} chose {accelerator} with "
            f"{backend} (process group {group_backend!r}), because: {reason}"
        )
    raise RendezvousError(
        f"rank 0: the ranks of the rendezvous at {where} chose different accelerators or "
        f"backends, so their collectives would never meet: {'; '.join(parts)}; make every "
        f"rank choose the same (repair the node that chose differently, or set "
        f"{config.ACCELERATOR} and {config.BACKEND} alike on every rank)"
    )


def _check_devices(choices: list[dict[str, str] | None], where: str) -> None:
    """Refuse two ranks on one host that hold one device (``device``, the same whatever name
    each rank gave it) where a rank says its backend forbids that (``exclusive_device``):
    without this, each rank would fail only at its first collective."""
    said = [chosen or {} for chosen in choices]
    holders: dict[tuple[str, str], list[int]] = {}
    for rank, chosen in enumerate(said):
        if chosen.get("device") and chosen.get("host"):
            holders.setdefault((chosen["host"], chosen["device"]), []).append(rank)
    for (host, device), ranks in holders.items():
        rule = next(
            (said[r]["exclusive_device"] for r in ranks if said[r].get("exclusive_device")), ""
        )
        if len(ranks) < 2 or not rule:
            continue
        listed = ranks[:_MISSING_SHOWN]
        more = f" and {len(ranks) - _MISSING_SHOWN} more" if len(ranks) > _MISSING_SHOWN else ""
        names = f"{', '.join(map(str, listed[:-1]))} and {listed[-1]}{more}"
        shown = "; ".join(f"rank {r}: {said[r].get('device_shown', device)}" for r in listed)
        raise RendezvousError(
            f"rank 0: ranks {names} of the rendezvous at {where} hold the same device on host "
            f"{host}, {device} ({shown}), but {rule}"
        )


def _read_verdict(text: str, admission: Admission) -> tuple[bool, str] | None:
    """Rank 0's verdict (admitted, message), or None where the key holds something rank 0 did
    not sign."""
    try:
        verdict = json.loads(text)
        ok, message, mac = bool(verdict["ok"]), str(verdict["message"]), str(verdict["mac"])
    except (ValueError, KeyError, TypeError):
        return None
    if admission.secret.key is not None and not hmac.compare_digest(
        mac, _verdict_mac(admission, ok, message)
    ):
        return None
    return ok, message


def _unsigned(text: str) -> bool:
    """Whether a verdict carries no signature at all (nothing that could be checked)."""
    try:
        data = json.loads(text)
    except ValueError:
        return True
    return not isinstance(data, dict) or not data.get("mac")


def _await_verdict(
    store: _Store,
    admission: Admission,
    rank: int,
    world_size: int,
    deadline: float,
    join_timeout: float,
    where: str,
) -> None:
    waiting = Waiting(rank, where, deadline, join_timeout)
    limit = deadline + _VERDICT_GRACE
    found = None
    while time.monotonic() < limit:
        # In steps, so that this rank says what it waits for; `_Store.wait` polls ``check``,
        # which logs nothing where a timed-out TCPStore get would.
        if store.wait(["verdict"], min(_TICK, limit - time.monotonic())):
            found = store.get("verdict")
            break
        waiting(WAIT_VERDICT)
    if found is None:
        conflict = _conflict(store)
        if conflict:
            raise RendezvousError(conflict)
        missing = _missing(store, world_size)
        raise RendezvousError(
            f"rendezvous timed out after {join_timeout:g} s: "
            f"{world_size - len(missing)}/{world_size} ranks joined at {where}"
            + (f", ranks {', '.join(map(str, missing))} missing" if missing else "")
            + f" (raise {config.RENDEZVOUS_TIMEOUT} if ranks start slowly; otherwise the "
            "missing ranks never started or cannot reach this address)"
        )
    verdict = _read_verdict(found, admission)
    if verdict is not None and verdict[0]:
        _send_answer(store, admission, rank, True, _digest(found))
        return
    with contextlib.suppress(Exception):
        store.raw.add(store.key("verdict-read"), 1)  # rank 0 may end now
    if verdict is not None:
        raise RendezvousError(verdict[1])
    # Signed with another secret, or written by another process: either way this rank cannot
    # tell that it was admitted, and waiting would not change that. Rank 0 is told, so that
    # it does not wait for this rank in init_process_group.
    _send_answer(store, admission, rank, False, _digest(found))
    raise RendezvousError(
        f"rank {rank}: the verdict of the rendezvous at {where} is not signed with this "
        f"rank's secret ({admission.secret.source}): "
        + (
            f"it carries no signature, so a process that is not part of this job forged it "
            f"({_port_hint(where)}) or rank 0 runs with {SECRET}=off"
            if _unsigned(found)
            else f"this rank is not part of that job, its secret differs from rank 0's, or "
            f"{_port_hint(where)}"
        )
    )


def verify_group(
    admission: Admission, rank: int, world_size: int, device: Any, timeout: float
) -> bool:
    """Each rank's second proof, exchanged over the initialised process group: every rank sends
    every other rank a tag only a holder of the secret can make, for that pair (an all-to-all,
    so that every connection of the mesh carries one, not only a ring's). A process that took a
    rank's place in the collectives by writing the store directly cannot answer it. Raises
    naming the rank whose answer is wrong. Returns False, without exchanging anything, where the
    process group's backend cannot run an all-to-all at all (a third-party backend may lack
    it): the caller then synchronises through the store, and membership rests on the
    rendezvous proof alone."""
    import torch
    import torch.distributed as dist

    key = admission.secret.key
    if key is None or world_size == 1:
        return True

    def tag(sender: int, receiver: int) -> bytes:
        text = _mac(key, admission.identity, admission.nonce, "group", sender, receiver)
        return bytes.fromhex(text)

    outgoing = b"".join(tag(rank, r) for r in range(world_size))
    sent = torch.frombuffer(bytearray(outgoing), dtype=torch.uint8).to(device)
    received = torch.empty_like(sent)
    try:
        work = dist.all_to_all_single(received, sent, async_op=True)
    except (RuntimeError, NotImplementedError) as exc:
        # Refused when dispatched, before anything was sent: the same on every rank, since
        # every rank has the same backend.
        log.warning(
            "rank %d: the process group's backend cannot run all_to_all (%s); membership was "
            "proven at the rendezvous only",
            rank,
            first_line(exc),
        )
        return False
    # Asked while the exchange is in flight, so that it costs no extra time.
    conflict = admission.conflict() if admission.conflict else None
    try:
        assert work is not None
        work.wait(timeout=timedelta(seconds=timeout))
    except Exception as exc:
        raise RendezvousError(
            f"rank {rank}: the membership check over the process group did not complete within "
            f"{timeout:g} s ({first_line(exc) if str(exc).strip() else repr(exc)})"
        ) from None
    if conflict:
        raise RendezvousError(conflict)
    answers = bytes(received.cpu().tolist())
    for r in range(world_size):
        if not hmac.compare_digest(answers[32 * r : 32 * (r + 1)], tag(r, rank)):
            raise RendezvousError(
                f"rank {rank}: rank {r} in the process group is not part of this job (its "
                "answer over the process group does not prove the job's secret: another "
                "process took its place by writing the rendezvous store); another process is "
                "using this job's MASTER_PORT"
            )
    return True
