"""Just enough of torch's TCP store protocol, in plain Python, to ask a port whether a live store
is there and to leave it one key, with a deadline that Python's socket honours.

torch's own store client (``TCPStore(..., is_master=False)``, torch 2.13) blocks for minutes
whatever its timeout when the peer accepts the connection but never answers (another program on
``MASTER_PORT``, a store whose backlog is full of idle connections), and it cannot be interrupted:
run in a thread and given up on, it stays inside torch's C++, where the interpreter's shutdown
aborts the process when the call finally returns (CPython 3.10-3.13). So the rendezvous first
asks here, on the calling thread, and constructs torch's client only for a peer that answered
as a store (`accelbackends.rendezvous`); the notice to a job holding rank 0's port goes out here
entirely. Nothing here needs a thread, and a socket left behind is closed by the kernel.

The wire format (``torch/csrc/distributed/c10d/TCPStoreBackend.hpp`` and ``Utils.hpp``, the same
from torch 2.4, the floor, to 2.15, legacy and libuv servers alike): a one-byte query type, then
its arguments in native byte order, strings and byte vectors as a 64-bit length followed by the
bytes. A client first sends ``VALIDATE`` with a magic number (no reply; a wrong one closes the
connection); ``GETNUMKEYS`` is answered with the store's key count as a 64-bit integer (``PING``
would echo a number, but torch 2.4 has no ``PING``); ``SET`` has no reply, so a
key count after it says it was applied (one connection is served in order). torch's client puts
``/`` in front of every key.
"""

from __future__ import annotations

import enum
import socket
import struct
import time
from collections.abc import Callable

__all__ = ["Peer", "StoreClient", "probe"]

_VALIDATE, _SET, _GETNUMKEYS = 0, 1, 7
#: More keys than any rendezvous writes: an answer above it is not a key count.
_MAX_KEYS = 1 << 40
_MAGIC = 0x3C85F7CE
_KEY_PREFIX = "/"
#: How often a peer that refused the connection (rank 0 not listening yet) is asked again, s.
_RETRY = 0.05


class Peer(enum.Enum):
    """What answered at a store's address."""

    STORE = "a torch store answered"
    NOBODY = "nothing accepts connections there"
    UNTAKEN = "connections are neither refused nor taken"
    SILENT = "the connection was accepted, but no answer came"
    OTHER = "the peer answered, but not as a torch store"


class StoreClient:
    """A connection to a torch TCP store that has answered a key-count query; ``set`` as torch's
    client does it. Every exchange ends by ``deadline`` (``time.monotonic()``) or raises
    ``OSError``."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def _exchange(self, message: bytes) -> None:
        self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))
        self._sock.sendall(message + struct.pack("=B", _GETNUMKEYS))
        answer = b""
        while len(answer) < 8:
            chunk = self._sock.recv(8 - len(answer))
            if not chunk:
                raise ConnectionResetError("the peer closed the connection")
            answer += chunk
        if not 0 <= struct.unpack("=q", answer)[0] < _MAX_KEYS:
            raise ConnectionError("the peer answered a key-count query with no key count")

    def set(self, key: str, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else value
        name = (_KEY_PREFIX + key).encode()
        self._exchange(
            struct.pack("=BQ", _SET, len(name)) + name + struct.pack("=Q", len(data)) + data
        )

    def close(self) -> None:
        self._sock.close()


def probe(
    host: str,
    port: int,
    deadline: float,
    waiting: Callable[[], None] | None = None,
    *,
    patience: float | None = None,
) -> tuple[Peer, StoreClient | None, str]:
    """Ask ``host:port`` until ``deadline`` whether a torch store answers there.

    A refused or unreachable connection is tried again every few milliseconds (the store may
    not listen yet), calling ``waiting`` before each new try, for ``patience`` seconds at most
    where it is given; with ``patience``, a host name that does not resolve is not tried again
    at all. An accepted connection is waited on until the deadline, which also covers a store
    that answers late (the 5-second stall of docs/performance.md). Returns what answered, a
    connected client when it was a store (the caller closes it), and the last error in words."""
    error = "no answer"
    if patience is not None:
        deadline = min(deadline, time.monotonic() + patience)
    while True:
        remaining = deadline - time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=max(0.001, remaining))
        except OSError as exc:  # refused (not listening yet), unreachable, dropped: again
            error = str(exc) or type(exc).__name__
            if patience is not None and isinstance(exc, socket.gaierror):
                return Peer.NOBODY, None, error
            if time.monotonic() + _RETRY >= deadline:
                # A connect that timed out was neither refused nor accepted: a backlog full of
                # connections that never speak, or a firewall dropping them.
                untaken = isinstance(exc, TimeoutError)
                if untaken:
                    error = "a connection attempt timed out"
                return (Peer.UNTAKEN if untaken else Peer.NOBODY), None, error
            if waiting is not None:
                waiting()
            time.sleep(_RETRY)
            continue
        client = StoreClient(sock, deadline)
        try:
            client._exchange(struct.pack("=BI", _VALIDATE, _MAGIC))
        except TimeoutError as exc:
            client.close()
            return Peer.SILENT, None, str(exc)
        except OSError as exc:  # closed, reset, or a wrong answer
            client.close()
            return Peer.OTHER, None, str(exc) or type(exc).__name__
        return Peer.STORE, client, ""
