"""Waiting, without a connection, until rank 0's TCP store listens on this host.

A torch TCP store client that connects before the server listens is refused, and torch 2.13
then backs off for 0.25 to 0.75 s (``ExponentialBackoffWithJitter``, 500 ms ± 50 %) before it
tries again, in C++ that no timeout shortens. When the ranks of a node start together, a rank
that detects quicker than rank 0 reaches its store first now and then, and the whole job waits
out the back-off: most of ``init()``'s first-call overhead at 8 ranks on 2 cores.

Knocking first would not do: every connection the store accepts costs the server a reverse name
lookup of the client (c10d formats peer addresses with ``getnameinfo``), the lookup behind the
5-second stall (see docs/performance.md). Where the store is on this host, Linux lists its
listening sockets in ``/proc/net/tcp`` and ``/proc/net/tcp6``: a client waits, reading those,
until the port listens (a few milliseconds at most), and only then connects, once. Elsewhere,
or where ``/proc/net`` cannot tell, nothing changes.
"""

from __future__ import annotations

import socket
import time

__all__ = ["is_listening", "is_this_host", "wait_until_listening"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_LISTEN = "0A"  # TCP_LISTEN in include/net/tcp_states.h
#: The first pause between two looks, and the longest.
_FIRST_PAUSE, _LONGEST_PAUSE = 0.002, 0.02


def is_this_host(host: str | None) -> bool:
    """Is ``host`` this machine, by its text alone (no name is resolved)?"""
    if not host:
        return False
    name = host.strip("[]").lower()
    return (
        name in ("localhost", "::1", "0:0:0:0:0:0:0:1")
        or name.startswith("127.")
        or name == socket.gethostname().lower()
    )


def is_listening(port: int, tables: tuple[str, ...] = _TABLES) -> bool | None:
    """Does a TCP socket of this network namespace listen on ``port``? None where none of
    ``tables`` could be read (not Linux, or /proc hidden)."""
    # A listening socket's line reads "<local address>:<PORT> <zero address>:0000 0A".
    suffix = f":{port:04X} "
    readable = False
    for table in tables:
        try:
            with open(table, encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split(None, 4)
            if len(fields) > 3 and fields[3] == _LISTEN and (fields[1] + " ").endswith(suffix):
                return True
    return False if readable else None


def wait_until_listening(host: str | None, port: int | None, timeout: float) -> None:
    """Return once ``port`` listens, if ``host`` is this host and /proc/net can tell; give up
    silently after ``timeout`` seconds (the connection that follows then reports the error)."""
    if port is None or not is_this_host(host):
        return
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while is_listening(port) is False:
        if time.monotonic() + pause > deadline:
            return
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)
