"""Meeting the other ranks: a store the core creates itself, with its own join timeout.

``init_process_group``'s single ``timeout`` is both the rendezvous wait and the collective
timeout (30 minutes by default): a rank that never starts would keep the others waiting that
long. Here every rank first joins through the store within the rendezvous timeout and, if some
never come, fails with "k/N ranks joined"; only then is the collective timeout set.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import struct
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..plugin import torchcompat
from ..plugin.errors import (
    AccelBackendsError,
    ConfigError,
    RendezvousError,
    RendezvousWarning,
    first_line,
)
from ..plugin.types import ClusterInfo
from . import membership, network, storewire
from .membership import Admission, Secret, load_secret
from .torchlog import quiet_torch_logs

__all__ = [
    "DEFAULT_RENDEZVOUS_TIMEOUT",
    "Rendezvous",
    "host_early",
    "host_loopback_store",
    "meet",
    "quiet_torch_logs",
]

DEFAULT_RENDEZVOUS_TIMEOUT = 300.0
_KEY = "accelbackends"
_WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", "*"})
#: How often a client on rank 0's host looks whether rank 0's store listens yet, seconds.
_LISTEN_POLL = 0.005
#: How long it looks before connecting anyway (torch's client then retries on its own): a rank 0
#: slower than this pays one back-off, and a judgement of "this host" that was wrong costs no
#: more than this.
_LISTEN_WAIT = 10.0
#: How long a rank 0 that found its port taken tries to tell the job holding it, seconds.
_CONFLICT_TIMEOUT = 2.0
_PEERS_SHOWN = 8
#: How long a rank that refused its configuration tries a port that refuses connections (or a
#: name that does not resolve: not at all) before it gives up telling rank 0, seconds.
_TELL_PATIENCE = 2.0
#: Connections to rank 0's store that each rank makes, at most, as it joins (with room for one
#: retry): more different ones during the wait are somebody else's.
_CONNECTIONS_PER_RANK = 3
#: How long a rank waits before it connects again to a store that went away before this rank
#: took an attempt in it (the previous cycle's, replaced by rank 0 in a moment), seconds.
_RECONNECT = 0.05
#: The shortest bound on a store read past the rendezvous deadline (a failing rank 0's last
#: words, the conflict key read before the first collective), seconds.
_LAST_READ = 1.0

log = logging.getLogger("accelbackends.rendezvous")


@dataclass
class Rendezvous:
    """The store handed to ``init_process_group`` (prefixed per attempt) and the raw one."""

    store: Any
    raw: Any
    #: What the ranks agreed on when they proved membership (None for a single rank).
    admission: Admission | None = None
    #: The attempt rank 0 opened (see `membership.open_attempt`); 0 for a single rank.
    generation: int = 0
    #: The socket of a rank's store client, whose reads `bound_reads` bounds (None: rank 0,
    #: spawn's file store, a single rank).
    client: _Bounded | None = None

    def bound_reads(self, seconds: float) -> None:
        """Bound every later read of the store client's socket by ``seconds`` (the collective
        timeout, once the rendezvous is over)."""
        if self.client is not None:
            self.client.rest = seconds
            self.client.bound(seconds)


def _socket_fds() -> set[int]:
    """The file descriptors of this process that are sockets (Linux; empty elsewhere)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    found.add(int(name))
    return found


class _Bounded:
    """torch's store client, every call of which reads its socket with a deadline.

    torch's client (2.4 to 2.13) waits for an answer to ``check``, ``get``, ``compare_set``,
    ``add`` or ``multi_get`` without any deadline: its ``timeout`` bounds only the wait for a key.
    A store that keeps the connection and stops answering (rank 0's store of the previous
    cycle, torn down under a rank that came back sooner) held ``init()`` for minutes. The
    socket's own receive and send timeouts (``SO_RCVTIMEO``/``SO_SNDTIMEO``), set on the
    descriptor torch's client made, end such a read with torch's "Socket Timeout"
    (``DistNetworkError``) by the rendezvous deadline; between calls they are ``rest``
    (none during the rendezvous, then the collective timeout)."""

    def __init__(self, raw: Any, fds: list[int], deadline: float) -> None:
        self.raw = raw
        self.deadline = deadline
        self.rest = 0.0
        # Duplicates of torch's descriptors: options set on them are the same socket's.
        self._sockets: list[socket.socket] = []
        for fd in fds:
            with contextlib.suppress(OSError):
                self._sockets.append(socket.socket(fileno=os.dup(fd)))

    def bound(self, seconds: float) -> None:
        """Bound each read and write of the socket by ``seconds`` (0: no bound)."""
        whole = int(seconds)
        value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.raw, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self.bound(max(_LAST_READ, self.deadline - time.monotonic()))
            try:
                return attribute(*args, **kwargs)
            finally:
                self.bound(self.rest)

        return call


def _port_said(cluster: ClusterInfo) -> str:
    source = cluster.source("master_port")
    if source.isidentifier() and source.isupper():
        return f"{source}={cluster.master_port}"
    return f"port {cluster.master_port} ({source})"


def _server(cluster: ClusterInfo, timeout: timedelta) -> Any:
    import torch.distributed as dist

    try:
        # The store listens on every address whatever host it is given; the host only serves
        # its own internal client, and loopback keeps that from depending on name lookups or
        # on MASTER_ADDR being this host (a foreign address made torch fail with "Ping failed").
        return dist.TCPStore(
            "127.0.0.1",
            cluster.master_port or 0,
            cluster.world_size,
            True,
            timeout,
            wait_for_workers=False,
        )
    except RuntimeError as exc:  # DistNetworkError from torch 2.6, a plain one on 2.4
        if torchcompat.address_in_use(exc):
            message = (
                f"{_port_said(cluster)}: port {cluster.master_port} is already in use on this "
                "host, so rank 0 cannot host the rendezvous store there (another job or "
                "program holds it); set MASTER_PORT to a free port"
            )
            _warn_the_other_job(cluster)
            raise RendezvousError(message) from None
        raise RendezvousError(
            f"rank 0 could not host the rendezvous store on {_port_said(cluster)}: "
            f"{first_line(exc).rstrip('.')}"
        ) from None


def _warn_the_other_job(cluster: ClusterInfo) -> None:
    """This job's other ranks may already have joined the job that holds the port (same port,
    same keys when the launcher gives no job identity): tell that job's rank 0, which then
    refuses to admit them rather than run with another job's ranks. Best effort, quick, and in
    plain Python on the calling thread: whatever holds the port may accept and never answer,
    where torch's client would block for minutes (`accelbackends.rendezvous.storewire`)."""
    deadline = time.monotonic() + _CONFLICT_TIMEOUT
    peer, client, _ = storewire.probe("127.0.0.1", cluster.master_port or 0, deadline)
    if client is None:
        log.debug(
            "port %s: not telling its holder about the conflict: %s",
            cluster.master_port,
            peer.value,
        )
        return
    with contextlib.closing(client), contextlib.suppress(OSError):
        membership.report_conflict(
            client,
            f"{_KEY}/{cluster.run_id}/",
            f"a job's rank 0 ({socket.gethostname()}, pid {os.getpid()}) found "
            f"{_port_said(cluster)} taken by another job, so ranks of both jobs may be "
            "joining one rendezvous; give each job its own MASTER_PORT",
            _key_if_any(),
        )


def _key_if_any() -> bytes | None:
    """This user's job secret, to sign a message to a job with, or None where it is off or
    cannot be loaded (the message is then quoted as a process on the port's)."""
    try:
        return load_secret(None).key
    except AccelBackendsError:
        return None


def _client(cluster: ClusterInfo, timeout: timedelta, deadline: float) -> _Bounded:
    """torch's store client, constructed on the calling thread once a pure-Python query has shown
    that a store answers at rank 0's address (`storewire`): torch's client blocks
    for minutes, whatever its timeout, on a peer that accepts and never answers, and a thread
    left waiting for it would still be inside torch when ``init()`` returns. Costs one extra
    connection to the store per rank (its server looks the peer's name up, as for every
    connection: docs/performance.md)."""
    assert cluster.master_addr and cluster.master_port
    where = (
        f"{cluster.master_addr}:{cluster.master_port} "
        f"({cluster.source('master_addr')}/{cluster.source('master_port')})"
    )
    seconds = timeout.total_seconds()
    nobody_listens = (
        f"rank {cluster.rank} could not reach the rendezvous store at {where} within "
        f"{seconds:g} s: nothing accepts connections there; is rank 0 running, and is the "
        "address reachable from this node?"
    )
    report = membership.Waiting(cluster.rank, where, deadline, seconds)

    def waiting() -> None:
        report(membership.WAIT_STORE)

    if network.is_this_host(cluster.master_addr):
        limit = min(deadline, time.monotonic() + _LISTEN_WAIT)
        if _until_listening(cluster.master_port, limit, waiting) is False and limit == deadline:
            raise RendezvousError(nobody_listens)
    peer, probe, error = storewire.probe(
        cluster.master_addr, cluster.master_port, deadline, waiting
    )
    if probe is not None:
        probe.close()
    _refuse_unless_a_store(peer, error, cluster.rank, where, seconds, deadline, nobody_listens)
    return _connect(cluster, where, seconds, deadline)


def _refuse_unless_a_store(
    peer: storewire.Peer,
    error: str,
    rank: int,
    where: str,
    seconds: float,
    deadline: float,
    nobody_listens: str,
) -> None:
    """Raise the error for what the probe found at rank 0's address, unless it is a store."""
    if peer is storewire.Peer.NOBODY:
        raise RendezvousError(nobody_listens)
    if peer is storewire.Peer.UNTAKEN:
        # Neither taken nor turned away: a backlog flooded with idle connections, which is not
        # "nothing accepts connections there" and must not be reported so.
        raise RendezvousError(
            f"rank {rank} could not reach the rendezvous store at {where} within "
            f"{seconds:g} s: the port turns no connection away but takes none ({error}): its "
            "backlog is full of connections that never speak (a denial of service on "
            "MASTER_PORT), or a firewall drops them; rank 0 may be running"
        )
    if peer is not storewire.Peer.STORE:
        other = RendezvousError(
            f"rank {rank}: the process at {where} accepted the connection but did not "
            f"answer as a rendezvous store within {seconds:g} s ({peer.value}): another program "
            "is using that port, or the store is flooded with connections that never speak (a "
            "denial of service on MASTER_PORT)"
        )
        if peer is storewire.Peer.OTHER and time.monotonic() < deadline:
            # Closed or reset under the query: rank 0's store of the previous cycle as it goes
            # (`meet` asks again until the deadline; another program stays named then).
            raise _StoreGone(other)
        raise other


def _connect(cluster: ClusterInfo, where: str, seconds: float, deadline: float) -> _Bounded:
    """torch's client of the store a probe has just found at rank 0's address."""
    import torch.distributed as dist

    assert cluster.master_addr and cluster.master_port
    try:
        remaining = torchcompat.store_timeout(max(0.1, deadline - time.monotonic()))
        before = _socket_fds()
        client = dist.TCPStore(
            cluster.master_addr, cluster.master_port, cluster.world_size, False, remaining
        )
        return _Bounded(client, sorted(_socket_fds() - before), deadline)
    except RuntimeError as exc:  # DistError; a plain RuntimeError before torch 2.6
        unreached = RendezvousError(
            f"rank {cluster.rank} could not reach the rendezvous store at {where} within "
            f"{seconds:g} s: {first_line(exc).rstrip('.')}; is rank 0 running, "
            "and is the address reachable from this node?"
        )
        # A store answered the probe a moment ago: it went away in between (the previous
        # cycle's, see `meet`), unless the time is up.
        raise (_StoreGone(unreached) if time.monotonic() < deadline else unreached) from None


def _until_listening(
    port: int, deadline: float, waiting: Callable[[], None] | None = None
) -> bool | None:
    """Wait, without connecting, until something on this host listens on ``port``.

    A torch store client that is refused (rank 0 not listening yet) sleeps 0.25-0.75 s before
    it tries again, in C++ that no timeout shortens; ranks that detect faster than rank 0 reaches
    ``host_early`` met that sleep in up to half the starts of 8 ranks on 2 cores. Where rank 0 is
    on this host the kernel can say when its port listens, at no cost to rank 0's store (a
    probing connection would cost the store a reverse name look-up, the 5-second stall's
    cause). Returns the kernel's last answer: True once the port listens, False at
    ``deadline`` with nothing listening, None at once where the kernel cannot be asked (the
    client then connects as it always did)."""
    while True:
        listens = network.listening(port)
        if listens is not False or time.monotonic() >= deadline:
            return listens
        if waiting is not None:
            waiting()
        time.sleep(_LISTEN_POLL)


def _check_master_addr(cluster: ClusterInfo, timeout: float) -> None:
    """Resolve rank 0's address once, up front, and say what is wrong with it in words."""
    assert cluster.master_addr is not None
    problem = network.master_addr_problem(cluster.master_addr, cluster.source("master_addr"))
    if problem:
        raise ConfigError(f"rank {cluster.rank}: {problem}")
    if cluster.rank != 0 or cluster.store_hosted:
        return
    addresses = network.resolve(cluster.master_addr, min(timeout, network.RESOLVE_TIMEOUT)) or []
    if addresses and not any(network.is_local_address(a) for a in addresses):
        log.warning(
            "%s=%s resolves to %s, which is not an address of this host (%s), where rank 0 "
            "runs: the other ranks will look for the rendezvous store there",
            cluster.source("master_addr"),
            cluster.master_addr,
            ", ".join(sorted(set(addresses))),
            socket.gethostname(),
        )


def host_early(cluster: ClusterInfo, join_timeout: float) -> Any | None:
    """Rank 0's TCP store, started before anything else in ``init()``, or None where this rank
    hosts none.

    The other ranks connect as soon as they are ready; a client that finds nobody listening
    backs off and retries, and comes back 0.4 to 0.6 s later (torch 2.13) even when rank 0 was
    ready a few milliseconds after it. Listening before detection and binding keeps the ranks
    that are quicker than rank 0 from falling into that back-off."""
    if (
        cluster.rank != 0
        or cluster.world_size == 1
        or cluster.store_hosted
        or cluster.store_socket is not None
        or not cluster.master_addr
        or cluster.master_port is None
    ):
        return None
    if cluster.master_addr not in _WILDCARDS:
        _check_master_addr(cluster, join_timeout)
    return _server(cluster, timedelta(seconds=join_timeout))


def meet(
    cluster: ClusterInfo,
    *,
    join_timeout: float,
    generation: int,
    server: Any | None = None,
    env: Mapping[str, str] | None = None,
    choice: dict[str, str] | None = None,
) -> Rendezvous:
    """Connect to (or host) the store, prove membership and wait until rank 0 has admitted all
    ``world_size`` ranks. ``server`` is rank 0's store if `host_early` already started it;
    ``env`` is where the job's secret is configured (``os.environ`` by default); ``choice``
    what this rank chose (`membership.CHOICE_FIELDS`), which rank 0 compares."""
    import torch.distributed as dist

    deadline = time.monotonic() + join_timeout
    if cluster.store_socket is not None:
        return _meet_on_file(
            cluster, cluster.store_socket, join_timeout, deadline, generation, choice
        )
    if cluster.world_size == 1 and not cluster.store_hosted:
        store = dist.HashStore()
        return Rendezvous(store, store)
    if not cluster.master_addr or cluster.master_port is None:
        raise RendezvousError(
            f"{cluster.world_size} ranks need a rendezvous address, but the {cluster.launcher} "
            "environment gives none; set MASTER_ADDR and MASTER_PORT to rank 0's host and a "
            "free port"
        )
    secret = load_secret(env)
    if cluster.master_addr in _WILDCARDS:
        warnings.warn(
            f"{cluster.source('master_addr')}={cluster.master_addr} is a wildcard address: "
            "ranks on other hosts cannot reach it, and the rendezvous store and Gloo are "
            "unauthenticated, so keep them on a private network; set it to rank 0's address "
            "on that network",
            RendezvousWarning,
            stacklevel=3,
        )
    elif server is None:  # host_early checked it before hosting
        _check_master_addr(cluster, join_timeout)
    timeout = timedelta(seconds=join_timeout)
    where = f"{cluster.master_addr}:{cluster.master_port}"
    if server is not None or (cluster.rank == 0 and not cluster.store_hosted):
        raw = server if server is not None else _server(cluster, timeout)
        return _join(
            raw,
            cluster,
            join_timeout,
            deadline,
            generation,
            where=where,
            secret=secret,
            choice=choice,
        )
    return _meet_as_client(
        cluster, join_timeout, deadline, generation, where=where, secret=secret, choice=choice
    )


def _meet_on_file(
    cluster: ClusterInfo,
    path: str,
    join_timeout: float,
    deadline: float,
    generation: int,
    choice: dict[str, str] | None,
) -> Rendezvous:
    """Join through spawn's file store at ``path``."""
    import torch.distributed as dist

    # A file in a directory only this user may enter: nobody else can open it, so the ranks
    # need no secret to tell each other apart from intruders. -1: FileStore must not delete
    # the file when its users leave; spawn() removes the directory.
    raw = dist.FileStore(path, -1)
    raw.set_timeout(timedelta(seconds=join_timeout))
    return _join(
        raw,
        cluster,
        join_timeout,
        deadline,
        generation,
        where=f"the local store {path}",
        secret=Secret(None, "a private local socket"),
        choice=choice,
    )


def _meet_as_client(
    cluster: ClusterInfo,
    join_timeout: float,
    deadline: float,
    generation: int,
    *,
    where: str,
    secret: Secret,
    choice: dict[str, str] | None,
) -> Rendezvous:
    """Join as a client of rank 0's store, connecting again while a store goes away under the
    join (the previous cycle's) until ``deadline``."""
    timeout = timedelta(seconds=join_timeout)
    raw: _Bounded | None
    while True:
        try:
            raw = _client(cluster, timeout, deadline)
            return _join(
                raw,
                cluster,
                join_timeout,
                deadline,
                generation,
                where=where,
                secret=secret,
                choice=choice,
                reconnect=True,
            )
        except _StoreGone as gone:
            # Rank 0's store of the previous cycle, still up when this rank came back from
            # destroy() sooner than rank 0, was torn down under the wait for this attempt:
            # rank 0 hosts the new one on the same port, in a moment.
            raw = None  # the old store's client goes now, not at the next assignment
            if time.monotonic() + _RECONNECT >= deadline:
                raise gone.error from None
            log.debug("%s; connecting again", gone.error)
            time.sleep(_RECONNECT)


def _join(
    raw: Any,
    cluster: ClusterInfo,
    join_timeout: float,
    deadline: float,
    generation: int,
    *,
    where: str,
    secret: Secret,
    choice: dict[str, str] | None = None,
    reconnect: bool = False,
) -> Rendezvous:
    """Prove membership and wait, until ``deadline``, for rank 0 to admit every rank. With
    ``reconnect`` (a client of rank 0's store), a store that goes away before this rank took an
    attempt in it raises `_StoreGone`, for the caller to connect again."""
    import torch.distributed as dist

    hosts_store = cluster.rank == 0 and not cluster.store_hosted and cluster.master_port
    port = cluster.master_port if hosts_store else None
    watch = network.PortWatch(port) if port is not None else None
    failed = functools.partial(_failed, rank=cluster.rank, where=where, join_timeout=join_timeout)
    try:
        generation = membership.open_attempt(
            raw,
            f"{_KEY}/{cluster.run_id}/",
            rank=cluster.rank,
            generation=generation,
            deadline=deadline,
            join_timeout=join_timeout,
            where=where,
            key=secret.key,
        )
    except dist.DistError as exc:
        if not reconnect:
            raise failed(exc) from None
        # Before this rank took an attempt: the store that went was not (yet) this cycle's.
        raise _StoreGone(failed(exc)) from None
    try:
        prefix = f"{_KEY}/{cluster.run_id}/{generation}/"
        admission = membership.admit(
            raw,
            prefix,
            rank=cluster.rank,
            world_size=cluster.world_size,
            secret=secret,
            deadline=deadline,
            join_timeout=join_timeout,
            where=where,
            diagnose=functools.partial(_crowding, watch, cluster.world_size),
            peers=functools.partial(_connected, port),
            choice=choice,
            sample=watch.sample if watch is not None else None,
        )
    except dist.DistError as exc:
        raise failed(exc) from None
    if isinstance(raw, _Bounded):
        # torch's own store objects for init_process_group; reads bounded as ``rest`` says.
        return Rendezvous(
            dist.PrefixStore(prefix, raw.raw), raw.raw, admission, generation, client=raw
        )
    return Rendezvous(dist.PrefixStore(prefix, raw), raw, admission, generation)


def _crowding(watch: network.PortWatch | None, world_size: int) -> str:
    """Rank 0's words, for its rendezvous timeout, on connections to the store's port that the
    job's ranks do not account for ("" where there are none, or rank 0 hosts no store)."""
    if watch is None:
        return ""
    peers = network.connections_to(watch.port)
    # Each rank holds one connection, rank 0's own client included.
    if len(peers) > world_size:
        return (
            f"; {len(peers)} connections are open to port {watch.port}, more than the "
            f"job's {world_size} ranks use: another program is holding the port's "
            "connections (a denial of service), which may keep the missing ranks out"
        )
    watch.sample()
    # Each rank makes two: the probe that finds the store (`_client`), then torch's client.
    if len(watch.seen) <= _CONNECTIONS_PER_RANK * world_size:
        return ""
    return (
        f"; {len(watch.seen)} different connections came to port {watch.port} during the "
        f"wait (at most {watch.peak} open at once), many more than the job's "
        f"{world_size} ranks make: another program is opening and closing "
        "connections to the port (a denial of service), which may keep the missing ranks "
        "out"
    )


def _connected(port: int | None) -> str:
    """Who is connected to the store rank 0 hosts on ``port`` ("" where none, or no port)."""
    found = network.connections_to(port) if port is not None else []
    if not found:
        return ""
    shown = ", ".join(found[:_PEERS_SHOWN])
    more = f" and {len(found) - _PEERS_SHOWN} more" if len(found) > _PEERS_SHOWN else ""
    return f" (connected to the store: {shown}{more})"


def _failed(exc: Exception, *, rank: int, where: str, join_timeout: float) -> RendezvousError:
    """The error for a store read or write that failed during the join."""
    if first_line(exc).startswith("Socket Timeout"):  # `_Bounded`'s deadline
        return RendezvousError(
            f"rank {rank}: the rendezvous store at {where} stopped answering: no "
            f"reply by the end of the {join_timeout:g} s rendezvous timeout (rank 0 is "
            "stopped or overloaded, or its store of a previous cycle was being torn down)"
        )
    return RendezvousError(
        f"rank {rank}: the rendezvous store at {where} failed during the join: "
        f"{first_line(exc).rstrip('.')} (rank 0 ended, or another process disturbed the "
        "store)"
    )


class _StoreGone(Exception):
    """The store went away before this rank took an attempt in it (``error`` says how)."""

    def __init__(self, error: RendezvousError) -> None:
        super().__init__(str(error))
        self.error = error


def free_loopback_socket() -> socket.socket:
    """A listening socket on 127.0.0.1 with a port the kernel chose; nothing else can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def host_loopback_store(world_size: int, timeout: float) -> tuple[Any, int]:
    """Host a store on loopback only (single-node runs); returns the store and its port.

    TCPStore alone listens on every address; giving it a socket bound to 127.0.0.1 keeps a
    single-node job's unauthenticated store off the network.
    """
    sock = free_loopback_socket()
    port = int(sock.getsockname()[1])
    store = torchcompat.store_on_listening_socket(
        port, world_size, timedelta(seconds=timeout), sock.detach()
    )
    return store, port


def tell_the_job(cluster: ClusterInfo, message: str, seconds: float) -> None:
    """Leave ``message`` for rank 0 in the job's store (a rank other than 0 that refused its
    configuration and leaves): rank 0 and the ranks waiting for it fail with it at once instead
    of waiting for the rendezvous timeout, where no launcher stops them. Best effort, bounded
    by ``seconds``, in plain Python on the calling thread (`storewire`): nothing is left
    running inside torch when the rank goes on to raise its own error."""
    if (
        cluster.rank == 0
        or cluster.world_size < 2
        or cluster.store_socket is not None
        or not cluster.master_addr
        or not cluster.master_port
    ):
        return
    if network.master_addr_problem(
        cluster.master_addr, cluster.source("master_addr"), check_resolves=False
    ):
        return  # the address this rank has just refused: nobody can be told there
    deadline = time.monotonic() + seconds
    # Nothing listening means rank 0 has not hosted its store: it is starting (slower than
    # this rank by a moment at most, as `host_early` listens before detection), or it is not
    # coming (it refused the same setting, or it is not started). Waiting the whole of
    # ``seconds`` for it kept this rank 10 s past rank 0's own exit.
    _, client, _ = storewire.probe(
        cluster.master_addr, cluster.master_port, deadline, patience=_TELL_PATIENCE
    )
    if client is None:
        return
    with contextlib.closing(client), contextlib.suppress(OSError):
        membership.report_conflict(client, f"{_KEY}/{cluster.run_id}/", message, _key_if_any())
