"""The ranks' stderr, relayed: each rank ``spawn()`` starts writes its stderr (fd 2, so C
libraries' messages too) into a pipe; one thread here copies every pipe to this process's stderr
as the bytes come, and keeps each rank's last lines, so that a rank that dies is named with what
it said last.

The thread drains the pipes whatever the parent does (a rank never blocks on a full pipe while
the parent waits for it), and the copy goes to the same file descriptor the rank would have
written to itself, so the user sees the same output at the same time. A rank's bytes need not
be text or end in a newline: the tail is decoded leniently when it is asked for.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading

__all__ = ["LAST_BYTES", "LAST_LINES", "StderrRelay"]

#: How many of a rank's last stderr lines a death message quotes.
LAST_LINES = 10
#: How many of a rank's last stderr bytes are kept to find them.
LAST_BYTES = 4096
#: The longest line quoted; a longer one is cut, with its end kept.
_LINE_CHARS = 240


class StderrRelay:
    """Copies each rank's stderr pipe to ``target`` (this process's fd 2) and keeps its tail."""

    def __init__(self, target: int = 2) -> None:
        self._target = target
        self._selector = selectors.DefaultSelector()
        self._tails: dict[int, bytearray] = {}
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._thread: threading.Thread | None = None
        self._closing = False

    def add(self, rank: int, fd: int) -> None:
        """Relay ``fd``, the read end of ``rank``'s stderr pipe; the relay owns it from now."""
        os.set_blocking(fd, False)
        with self._lock:
            self._tails[rank] = bytearray()
            self._fds[rank] = fd
            self._selector.register(fd, selectors.EVENT_READ, rank)

    def start(self) -> None:
        """Start copying. Called once every rank is started: forking while a thread runs could
        leave a rank with a lock that thread held."""
        self._thread = threading.Thread(target=self._run, name="accelbackends-stderr", daemon=True)
        self._thread.start()

    def last_lines(self, rank: int) -> tuple[str, ...]:
        """``rank``'s last stderr lines (at most `LAST_LINES`, blank ones left out), after
        reading whatever it wrote that is still in its pipe: for a rank that has ended, that is
        everything it wrote."""
        with self._lock:
            self._drain(rank)
            tail = bytes(self._tails.get(rank, b""))
        cut = len(tail) >= LAST_BYTES
        lines = tail.decode("utf-8", errors="replace").splitlines()
        if cut and lines:
            lines = lines[1:]  # its start was cut off
        shown = [_printable(line) for line in lines if line.strip()]
        return tuple(shown[-LAST_LINES:])

    def close(self) -> None:
        """Copy what the pipes still hold, stop the thread and close the pipes. A pipe whose
        write end a rank's leftover helper still holds is not waited for."""
        self._closing = True
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for rank in list(self._fds):
                self._drain(rank)
                self._forget(rank)
            self._selector.close()
            for fd in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _run(self) -> None:
        while not self._closing:
            for key, _ in self._selector.select():
                if key.data is None:
                    return  # woken by close()
                with self._lock:
                    self._drain(key.data)

    def _drain(self, rank: int) -> None:
        """Read and copy everything ``rank``'s pipe holds now (the lock is held)."""
        fd = self._fds.get(rank)
        while fd is not None:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # every writer has closed it
                self._forget(rank)
                return
            self._copy(chunk)
            tail = self._tails[rank]
            tail += chunk
            if len(tail) > 2 * LAST_BYTES:
                del tail[:-LAST_BYTES]

    def _copy(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            try:
                written = os.write(self._target, view)
            except InterruptedError:
                continue
            except OSError:
                return  # this process's stderr is gone: the tail is still kept
            view = view[written:]

    def _forget(self, rank: int) -> None:
        fd = self._fds.pop(rank, None)
        if fd is None:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)


def _printable(line: str) -> str:
    """``line`` without control characters (binary output, terminal escapes), cut to
    `_LINE_CHARS` keeping its end."""
    text = "".join(c if c.isprintable() else "?" for c in line.rstrip())
    return text if len(text) <= _LINE_CHARS else "..." + text[-_LINE_CHARS:]
