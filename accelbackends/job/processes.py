"""The processes ``spawn()`` starts and what they leave behind: ending the ranks and their
helpers, adopting what a rank orphans, reading ``/proc``, and the private temp files that a
later run removes when their owner was killed (``check`` makes them too)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

__all__ = [
    "TEMP_PREFIX",
    "TERMINATE_GRACE",
    "Adopter",
    "children",
    "end_state",
    "is_stopped",
    "private_temp_file",
    "private_temp_folder",
    "proc_stat",
    "reaped",
    "remove_stale_temp",
    "stop",
]

#: After one rank fails, how long the others get to exit on SIGTERM before SIGKILL.
TERMINATE_GRACE = 3.0
#: The prefix of the private folders and files spawn() and check make in the temp folder; the
#: owner's process id follows, so that a later run removes those whose owner was killed.
TEMP_PREFIX = "accelbackends-"


def private_temp_file(kind: str, suffix: str) -> str:
    """A new file only this user can read, named so that `remove_stale_temp` removes it
    once this process is gone."""
    remove_stale_temp()
    prefix = f"{TEMP_PREFIX}{kind}-{os.getpid()}-"
    try:
        handle, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    except OSError as exc:
        raise _temp_refused(f"a private file ({prefix}*{suffix})", exc) from None
    os.close(handle)
    return path


def private_temp_folder(kind: str, *files: str) -> str:
    """A new folder only this user can enter (mode 0700), with the empty ``files`` in it, named
    so that `remove_stale_temp` removes it once this process is gone. The files are made here,
    not by whoever uses them later: a temp folder with no room left fails now, in words, and
    not in a rank as a store error."""
    remove_stale_temp()
    prefix = f"{TEMP_PREFIX}{kind}-{os.getpid()}-"
    try:
        folder = tempfile.mkdtemp(prefix=prefix)
    except OSError as exc:
        raise _temp_refused(f"a private folder ({prefix}*)", exc) from None
    for name in files:
        path = os.path.join(folder, name)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise _temp_refused(f"the file {path}", exc) from None
    return folder


def _temp_refused(what: str, exc: OSError) -> Exception:
    """The error for a temp folder that refused ``what`` (full, read-only, missing)."""
    from ..plugin.errors import ConfigError

    try:
        folder = tempfile.gettempdir()
    except OSError:  # no usable candidate at all: Python's own list is in its message
        folder = "(none usable)"
    value = os.environ.get("TMPDIR")
    said = f"TMPDIR={value!r}" if value is not None else "TMPDIR is unset"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return ConfigError(
        f"cannot create {what} in the temp folder {folder} ({said}): {reason}; free space "
        "and inodes there, or set TMPDIR to a folder of this user's with room"
    )


def remove_stale_temp() -> None:
    """Remove the folders and files that spawn() and check left in the temp folder when their
    process was killed (their owner's process id no longer runs)."""
    folder = tempfile.gettempdir()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith(TEMP_PREFIX):
            continue
        parts = name[len(TEMP_PREFIX) :].split("-")
        if len(parts) < 3 or parts[0] not in ("spawn", "check") or not parts[1].isdigit():
            continue
        path = os.path.join(folder, name)
        try:
            if os.stat(path).st_uid != os.getuid() or running(int(parts[1])):
                continue
        except OSError:
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Adopter:
    """While ranks run, this process adopts what they orphan (Linux's child subreaper), so that
    a helper a rank detached (a new session, a double fork) can be found and ended with them."""

    _PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37

    def __init__(self) -> None:
        self._before = children()
        self._previous: int | None = None
        self._prctl: Any = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(Exception):
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                current = ctypes.c_int(0)
                asked = libc.prctl(self._PR_GET_CHILD_SUBREAPER, ctypes.byref(current), 0, 0, 0)
                if asked == 0 and libc.prctl(self._PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
                    self._previous, self._prctl = current.value, libc.prctl

    def end(self, ranks: set[int]) -> None:
        """End and reap the processes adopted from the ranks, then stop adopting."""
        try:
            if self._prctl is None:
                return
            session = os.getsid(0)
            adopted = [
                pid
                for pid in children() - self._before - ranks
                # A rank's leftover: still in a rank's group, or detached into a session of its
                # own (this process's other children share its session).
                if group_of(pid) in ranks or session_of(pid) not in (session, None)
            ]
            for signum in (signal.SIGTERM, signal.SIGKILL):
                for pid in adopted:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signum)
                        os.kill(pid, signal.SIGCONT)
                if signum == signal.SIGTERM:
                    adopted = [pid for pid in adopted if not reaped(pid, TERMINATE_GRACE)]
            for pid in adopted:
                reaped(pid, TERMINATE_GRACE)
        finally:
            if self._prctl is not None:
                self._prctl(self._PR_SET_CHILD_SUBREAPER, self._previous or 0, 0, 0, 0)
                self._prctl = None


def children() -> set[int]:
    """This process's child processes (Linux's /proc; empty elsewhere)."""
    me = os.getpid()
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit() and stat_field(int(name), 1) == me:
            found.add(int(name))
    return found


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (0 state, 1 ppid, 2 process group,
    3 session, ...): the one reader of that file; empty where it cannot be read (not Linux, or
    the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def stat_field(pid: int, index: int) -> int | None:
    """Field ``index`` of `proc_stat` as a number: 1 ppid, 2 process group, 3 session."""
    fields = proc_stat(pid)
    try:
        return int(fields[index])
    except (IndexError, ValueError):
        return None


def group_of(pid: int) -> int | None:
    return stat_field(pid, 2)


def session_of(pid: int) -> int | None:
    return stat_field(pid, 3)


def reaped(pid: int, within: float) -> bool:
    """Wait up to ``within`` seconds for child ``pid`` to exit and reap it."""
    deadline = time.monotonic() + within
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def is_stopped(pid: int | None) -> bool:
    """Whether ``pid`` is stopped by a signal (Linux's /proc; False where that cannot be read)."""
    if pid is None:
        return False
    return proc_stat(pid)[:1] in (["T"], ["t"])


#: The kernel's task flags (``/proc/PID/stat`` field 9) that mark a process on its way out:
#: PF_EXITING from the start of its exit, PF_SIGNALED once a fatal signal was taken (a core
#: dump runs before the exit).
_PF_EXITING, _PF_SIGNALED = 0x4, 0x400


def end_state(pid: int | None) -> str:
    """``"ended"`` where ``pid`` has exited (a zombie not reaped yet, or gone), ``"ending"``
    where it is on its way out (a fatal signal taken, or its exit begun: closing a device's
    files can take seconds, and a process's sockets close before its last descriptors do),
    ``""`` while it runs or where that cannot be read (not Linux)."""
    if pid is None:
        return ""
    fields = proc_stat(pid)
    if not fields:
        # Unreadable: gone (where there is a /proc), or not Linux.
        return "ended" if os.path.isdir("/proc/self") and not running(pid) else ""
    if fields[0] in ("Z", "X", "x"):
        return "ended"
    try:
        flags = int(fields[6])
    except (IndexError, ValueError):
        return ""
    return "ending" if flags & (_PF_EXITING | _PF_SIGNALED) else ""


def signal_group(process: multiprocessing.process.BaseProcess, signum: int) -> None:
    """``signum`` to the rank's process group (the rank and what it started), or to the rank
    alone where it did not lead one yet."""
    pid = process.pid
    if pid is None:
        return
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
            return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


def stop(processes: Any) -> None:
    """Terminate every rank still running and what the ranks left behind (SIGTERM, then
    SIGKILL) and reap them all."""
    processes = list(processes)
    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        signal_group(process, signal.SIGTERM)
        signal_group(process, signal.SIGCONT)  # a stopped rank acts on SIGTERM only once resumed
    deadline = time.monotonic() + TERMINATE_GRACE
    for process in alive:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            signal_group(process, signal.SIGKILL)
            process.join()
    for process in processes:
        process.join()
        # Helpers still in the rank's group (the rank is gone; its group lives on in them).
        if process.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
