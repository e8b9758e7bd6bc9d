"""A rendezvous store for the ranks of one host, over a Unix socket: what ``spawn()`` uses.

torch's TCPStore formats every new connection's peer address with a reverse name lookup
(``getnameinfo`` without ``NI_NUMERICHOST``, in c10d's socket code, torch 2.13), and its client
connects through a v4-mapped IPv6 address that ``/etc/hosts`` does not list; each connection thus
asks DNS, and where a DNS answer is lost the connection stalls for the resolver's 5 s timeout.
With 16 or 32 ranks, most runs hit one. Ranks on one host have no need for TCP at all: this store
serves them from the parent process over a Unix socket in a private (0700) directory, so there is
no name lookup, no port to choose or race for, nothing reachable from the network, and no other
user can connect.

The client is a ``torch.distributed.Store`` written in Python; torch calls it from C++ for every
store operation of Gloo's connection set-up. The protocol is private to this module: a 4-byte
length and a pickled (operation, arguments) tuple each way. Both ends are this package's own
code in processes of the same user, so unpickling is not a trust boundary.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

__all__ = ["LocalStoreServer", "connect"]

_HEADER = struct.Struct("!I")


def _send(sock: socket.socket, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray()
    while len(buffer) < size:
        chunk = sock.recv(size - len(buffer))
        if not chunk:
            raise EOFError("the rendezvous store closed the connection")
        buffer += chunk
    return bytes(buffer)


def _receive(sock: socket.socket) -> Any:
    (size,) = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    return pickle.loads(_receive_exactly(sock, size))


class _Timeout:
    """A reply meaning: the keys did not appear in time."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)


class LocalStoreServer:
    """The keys and values, served to every rank on this host from a thread per connection."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._data: dict[str, bytes] = {}
        self._changed = threading.Condition()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(path)
        self._socket.listen(1024)
        self._connections: list[socket.socket] = []
        self._operations: dict[str, Callable[..., Any]] = {
            "set": self._set,
            "get": self._get,
            "add": self._add,
            "wait": self._wait,
            "check": self._check,
            "compare_set": self._compare_set,
            "delete_key": self._delete_key,
            "num_keys": self._num_keys,
        }
        threading.Thread(target=self._accept, name="accelbackends-store", daemon=True).start()

    def fileno(self) -> int:
        return self._socket.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.close()
        with self._changed:
            self._changed.notify_all()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    operation, args = _receive(conn)
                    _send(conn, self._operations[operation](*args))
                except (EOFError, OSError):
                    return

    def _set(self, key: str, value: bytes) -> None:
        with self._changed:
            self._data[key] = value
            self._changed.notify_all()

    def _get(self, key: str, timeout: float) -> bytes | _Timeout:
        with self._changed:
            if not self._changed.wait_for(lambda: key in self._data, timeout):
                return _Timeout([key])
            return self._data[key]

    def _add(self, key: str, amount: int) -> int:
        with self._changed:
            value = int(self._data.get(key, b"0")) + amount
            self._data[key] = str(value).encode()
            self._changed.notify_all()
            return value

    def _wait(self, keys: list[str], timeout: float) -> _Timeout | None:
        with self._changed:
            present = self._changed.wait_for(lambda: all(k in self._data for k in keys), timeout)
            return None if present else _Timeout(keys)

    def _check(self, keys: list[str]) -> bool:
        with self._changed:
            return all(k in self._data for k in keys)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        # The semantics of torch's stores: set when the current value is ``expected`` (or the
        # key is missing and ``expected`` is empty); return the value now stored.
        with self._changed:
            current = self._data.get(key)
            if (current is None and not expected) or current == expected:
                self._data[key] = desired
                self._changed.notify_all()
                return desired
            return expected if current is None else current

    def _delete_key(self, key: str) -> bool:
        with self._changed:
            return self._data.pop(key, None) is not None

    def _num_keys(self) -> int:
        with self._changed:
            return len(self._data)


def _as_bytes(value: str | bytes | bytearray | memoryview) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def connect(path: str, timeout: timedelta) -> Any:
    """A client of the `LocalStoreServer` at ``path``, usable wherever torch takes a Store.

    Built on first use so that importing this module does not import torch. Keep a reference
    to the returned object for as long as torch uses it: a C++ wrapper such as ``PrefixStore``
    holds only the C++ half, and once the Python object is collected its methods are gone
    ("Not implemented").
    """
    return _client_class()(path, timeout)


_client: type | None = None


def _client_class() -> type:
    global _client
    if _client is not None:
        return _client
    import torch.distributed as dist

    class _LocalStore(dist.Store):  # type: ignore[misc]
        def __init__(self, path: str, timeout: timedelta) -> None:
            super().__init__()
            self.set_timeout(timeout)
            self._path = path
            self._local = threading.local()  # torch may call from several threads

        def _call(self, operation: str, *args: Any) -> Any:
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    conn.connect(self._path)
                except OSError as exc:
                    raise dist.DistNetworkError(
                        f"cannot reach the local rendezvous store at {self._path}: {exc}"
                    ) from None
                self._local.conn = conn
            try:
                _send(conn, (operation, args))
                reply = _receive(conn)
            except (EOFError, OSError) as exc:
                raise dist.DistNetworkError(
                    f"lost the local rendezvous store at {self._path}: {exc}"
                ) from None
            if isinstance(reply, _Timeout):
                raise dist.DistStoreError(
                    f"wait timeout after {self.timeout.total_seconds():g} s, keys: "
                    f"{', '.join(reply.keys)}"
                )
            return reply

        def _seconds(self, timeout: timedelta | None = None) -> float:
            return (timeout or self.timeout).total_seconds()

        def set(self, key: str, value: str | bytes) -> None:
            self._call("set", key, _as_bytes(value))

        def get(self, key: str) -> bytes:
            return self._call("get", key, self._seconds())  # type: ignore[no-any-return]

        def add(self, key: str, amount: int) -> int:
            return self._call("add", key, int(amount))  # type: ignore[no-any-return]

        def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
            self._call("wait", list(keys), self._seconds(timeout))

        def check(self, keys: list[str]) -> bool:
            return self._call("check", list(keys))  # type: ignore[no-any-return]

        def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
            return self._call(  # type: ignore[no-any-return]
                "compare_set", key, _as_bytes(expected), _as_bytes(desired)
            )

        def delete_key(self, key: str) -> bool:
            return self._call("delete_key", key)  # type: ignore[no-any-return]

        def num_keys(self) -> int:
            return self._call("num_keys")  # type: ignore[no-any-return]

    _client = _LocalStore
    return _client
