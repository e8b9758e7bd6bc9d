"""The package's own exception classes.

Every error a user can act on is one of these, with a message that names the input, the bad value
and what would be accepted. The command line turns them into one line on stderr and exit code 2
(bad input) or 1 (a check or a run that failed).
"""

from __future__ import annotations

import re

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "AccelBackendsError",
    "AccelBackendsWarning",
    "ConfigError",
    "InitError",
    "PluginError",
    "PluginWarning",
    "RendezvousError",
    "RendezvousWarning",
    "SelectionError",
    "SpawnError",
]


#: The command line's exit codes: success, a check or run that failed, bad input (argparse's
#: own code for usage errors), and the shell's 128 + signal for Ctrl-C and SIGTERM. They live
#: here, beside the errors they report, so that every command reads them from one place.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143

#: The source location torch puts in its C++ errors, e.g. "[/__w/pytorch/.../pair.cc:537] ".
_CPP_LOCATION = re.compile(r"\[[^\]\s]+\.(?:c|cc|cpp|cu|h|hpp):\d+\]\s*")


#: The lines of torch's NCCL errors that carry NCCL's own reason: torch's first line says only
#: "NCCL error in: …, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9";
#: the error class ("ncclInvalidUsage: …") and NCCL's "Last error:" (its reason, on the same
#: line or the next, e.g. "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60")
#: follow on lines of their own.
_NCCL_CLASS = re.compile(r"nccl[A-Z]\w*:")
_NCCL_LAST_ERROR = "Last error:"
#: NCCL's reasons that older torch releases print without a "Last error:" line before them.
_NCCL_REASONS = ("Duplicate GPU detected",)


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (without the C++ source location
    torch puts in front of its errors), or its type's name.

    Where the message is torch's NCCL error, NCCL's reason follows on the same line: the error
    class line (``ncclInvalidUsage: …``) and NCCL's ``Last error:`` with the line after it,
    joined with ``; `` so that the result is still one line."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    if not lines:
        return type(exc).__name__
    kept = [_CPP_LOCATION.sub("", lines[0])]
    rest = iter(lines[1:])
    for line in rest:
        if _NCCL_CLASS.match(line) or line.startswith(_NCCL_REASONS):
            kept.append(line)
        elif line.startswith(_NCCL_LAST_ERROR):
            reason = line.removeprefix(_NCCL_LAST_ERROR).strip()
            if not reason:
                reason = next((after for after in rest if after), "")
            if reason:
                kept.append(f"{_NCCL_LAST_ERROR} {reason}")
    return "; ".join([*(part.rstrip(".") for part in kept[:-1]), kept[-1]])


def describe(exc: BaseException) -> str:
    """``Type: first line`` for messages that attribute a failure to someone else's code."""
    return f"{type(exc).__name__}: {first_line(exc)}" if str(exc).strip() else type(exc).__name__


class AccelBackendsError(Exception):
    """Base class of every error raised by accelbackends."""


class ConfigError(AccelBackendsError, ValueError):
    """A bad input: an environment variable, a launcher variable or an argument."""


class SelectionError(ConfigError):
    """The requested accelerator or backend is unknown, unavailable or unsupported."""


class PluginError(AccelBackendsError):
    """A plugin failed to load, declared nonsense, or one of its callables raised."""


class InitError(AccelBackendsError):
    """Binding the device or initialising the process group failed."""


class RendezvousError(InitError):
    """The ranks could not meet: a rank did not join in time, or the store could not start."""


class SpawnError(AccelBackendsError):
    """A rank started by [`accelbackends.spawn`][accelbackends.spawn] failed.

    ``rank`` is the first rank that failed, ``traceback`` the text of its traceback (empty when
    the process died without reporting, e.g. killed by a signal). Where the rank died without
    reporting, ``death`` says how (``"was killed by SIGSEGV"``, ``"exited with code 3"``) and
    ``exitcode`` is its exit status as `multiprocessing` gives it (a signal as its negative
    number), and ``last_stderr`` its last lines on stderr (as its death message quotes them);
    ``consequences`` holds ``(rank, message)`` for each other rank whose error only
    says that a peer went away.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int,
        traceback: str = "",
        death: str = "",
        exitcode: int | None = None,
        last_stderr: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback
        self.death = death
        self.exitcode = exitcode
        self.last_stderr = last_stderr
        self.consequences: tuple[tuple[int, str], ...] = ()


class AccelBackendsWarning(UserWarning):
    """Base class of the package's warnings."""


class RendezvousWarning(AccelBackendsWarning):
    """The rendezvous works but is set up in a way that is risky (e.g. a wildcard address)."""


class PluginWarning(AccelBackendsWarning):
    """A plugin failed to load or misbehaved; the rest of the system keeps working."""
