"""Meeting the other ranks: a store the core creates itself, with its own join timeout.

``init_process_group``'s single ``timeout`` is both the rendezvous wait and the collective
timeout (30 minutes by default): a rank that never starts would keep the others waiting that
long. Here every rank first joins through the store within the rendezvous timeout and, if some
never come, fails with "k/N ranks joined"; only then is the collective timeout set.
"""

from __future__ import annotations

import socket
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .plugin import config
from .plugin.errors import RendezvousError, RendezvousWarning, first_line
from .plugin.types import ClusterInfo

__all__ = [
    "DEFAULT_RENDEZVOUS_TIMEOUT",
    "Rendezvous",
    "host_early",
    "host_loopback_store",
    "meet",
]

DEFAULT_RENDEZVOUS_TIMEOUT = 300.0
_KEY = "accelbackends"
_WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", "*"})
#: How much longer than its own timeout a store connection may take before it counts as hung
#: (torch retries with back-off inside the timeout and may overrun it by a few seconds).
_CONNECT_GRACE = 5.0


@dataclass
class Rendezvous:
    """The store handed to ``init_process_group`` (prefixed per attempt) and the raw one."""

    store: Any
    raw: Any


def _server(cluster: ClusterInfo, timeout: timedelta) -> Any:
    import torch.distributed as dist

    try:
        return dist.TCPStore(
            cluster.master_addr or "127.0.0.1",
            cluster.master_port or 0,
            cluster.world_size,
            True,
            timeout,
            wait_for_workers=False,
        )
    except dist.DistNetworkError as exc:
        if "EADDRINUSE" in str(exc) or "address already in use" in str(exc):
            raise RendezvousError(
                f"{cluster.source('master_port')}={cluster.master_port}: port "
                f"{cluster.master_port} is already in use on this host, so rank 0 cannot host "
                "the rendezvous store there; choose a free port or stop the process using it"
            ) from None
        raise RendezvousError(
            f"rank 0 could not host the rendezvous store on port {cluster.master_port}: "
            f"{first_line(exc)}"
        ) from None


def _client(cluster: ClusterInfo, timeout: timedelta) -> Any:
    import torch.distributed as dist

    where = (
        f"{cluster.master_addr}:{cluster.master_port} "
        f"({cluster.source('master_addr')}/{cluster.source('master_port')})"
    )
    seconds = timeout.total_seconds()
    outcome: dict[str, Any] = {}

    def connect() -> None:
        try:
            outcome["store"] = dist.TCPStore(
                cluster.master_addr, cluster.master_port, cluster.world_size, False, timeout
            )
        except Exception as exc:
            outcome["error"] = exc

    # A TCPStore client whose peer accepts the connection but never answers (another program on
    # MASTER_PORT) blocks for minutes in torch 2.13, whatever its timeout; the constructor
    # releases the GIL, so wait for it from here and give up on time. The stuck thread is a
    # daemon and dies with the process.
    worker = threading.Thread(target=connect, name="accelbackends-store-connect", daemon=True)
    worker.start()
    worker.join(seconds + _CONNECT_GRACE)
    if worker.is_alive():
        raise RendezvousError(
            f"rank {cluster.rank}: the process at {where} accepted the connection but did not "
            f"answer as a rendezvous store within {seconds:g} s; is another program using that "
            "port?"
        )
    if "error" in outcome:
        raise RendezvousError(
            f"rank {cluster.rank} could not reach the rendezvous store at {where} within "
            f"{seconds:g} s: {first_line(outcome['error'])}; is rank 0 running, and is the "
            "address reachable from this node?"
        ) from None
    return outcome["store"]


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
    return _server(cluster, timedelta(seconds=join_timeout))


def meet(
    cluster: ClusterInfo, *, join_timeout: float, generation: int, server: Any | None = None
) -> Rendezvous:
    """Connect to (or host) the store and wait until all ``world_size`` ranks have joined.
    ``server`` is rank 0's store if `host_early` already started it."""
    import torch.distributed as dist

    if cluster.store_socket is not None:
        # -1: FileStore must not delete the file when its users leave; spawn() removes it.
        raw = dist.FileStore(cluster.store_socket, -1)
        raw.set_timeout(timedelta(seconds=join_timeout))
        return _join(
            raw,
            cluster,
            join_timeout,
            time.monotonic() + join_timeout,
            generation,
            where=f"the local store {cluster.store_socket}",
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
    if cluster.master_addr in _WILDCARDS:
        warnings.warn(
            f"{cluster.source('master_addr')}={cluster.master_addr} is a wildcard address: "
            "ranks on other hosts cannot reach it, and the rendezvous store and Gloo are "
            "unauthenticated, so keep them on a private network; set it to rank 0's address "
            "on that network",
            RendezvousWarning,
            stacklevel=3,
        )
    timeout = timedelta(seconds=join_timeout)
    deadline = time.monotonic() + join_timeout
    if server is not None:
        raw = server
    elif cluster.rank == 0 and not cluster.store_hosted:
        raw = _server(cluster, timeout)
    else:
        raw = _client(cluster, timeout)
    return _join(
        raw,
        cluster,
        join_timeout,
        deadline,
        generation,
        where=f"{cluster.master_addr}:{cluster.master_port}",
    )


def _join(
    raw: Any,
    cluster: ClusterInfo,
    join_timeout: float,
    deadline: float,
    generation: int,
    *,
    where: str,
) -> Rendezvous:
    """Count this rank in and wait, until ``deadline``, for all the others."""
    import torch.distributed as dist

    prefix = f"{_KEY}/{cluster.run_id}/{generation}/"
    joined = raw.add(prefix + "joined", 1)
    if joined >= cluster.world_size:
        raw.set(prefix + "complete", "1")
    else:
        remaining = max(0.1, deadline - time.monotonic())
        try:
            raw.wait([prefix + "complete"], timedelta(seconds=remaining))
        except RuntimeError:  # TCPStore raises DistStoreError, FileStore "Wait timeout"
            try:
                joined = raw.add(prefix + "joined", 0)
            except RuntimeError:
                joined = -1
            count = f"{joined}/{cluster.world_size}" if joined >= 0 else "not all"
            raise RendezvousError(
                f"rendezvous timed out after {join_timeout:g} s: {count} ranks joined at "
                f"{where} (raise {config.RENDEZVOUS_TIMEOUT} if ranks start slowly; otherwise "
                "the missing ranks never started or cannot reach this address)"
            ) from None
    return Rendezvous(dist.PrefixStore(prefix, raw), raw)


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
    import torch.distributed as dist

    sock = free_loopback_socket()
    port = int(sock.getsockname()[1])
    store = dist.TCPStore(
        "127.0.0.1",
        port,
        world_size,
        True,
        timedelta(seconds=timeout),
        wait_for_workers=False,
        master_listen_fd=sock.detach(),
    )
    return store, port
