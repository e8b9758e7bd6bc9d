"""The ``accelbackends`` command line: ``info`` and ``check``.

Errors are one line on stderr, never a traceback: exit 2 for bad input (a wrong variable, flag or
override), 1 for a failure (a check that failed, a rank that died), 130 on Ctrl-C, 143 on
SIGTERM; in both, the ranks started by ``check`` are stopped first.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any, TextIO

from ..plugin.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    AccelBackendsError,
    ConfigError,
    first_line,
)
from ..rendezvous import torchlog
from .process import keep_plugin_output_off_stdout
from .sigterm import ImportShield, Watchdog, shield_imports, watch_sigterm
from .text import clean, colour, say, terminal_width

__all__ = ["main", "quick_info_args", "run"]


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that cleanup (stopping ranks) runs on the way out."""


def _raise_terminated(signum: int, frame: object) -> None:
    if os.getpid() != _command_pid:
        # A rank forked by the command, before it put back SIGTERM's default action: the parent
        # stops its ranks with SIGTERM, so die by it here too, not by a traceback.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if _shield is not None and _shield.hold():
        return  # raised by _terminate_now once the import under way has returned
    _terminate_now()


def _terminate_now() -> None:
    global _terminating
    _terminating = True
    if _watchdog is not None:
        _watchdog.handled()
    raise _Terminated


def _terminated_where_it_cannot_propagate(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a command runs. The handler's `_Terminated`, raised inside
    code whose exceptions Python only reports (an at-fork hook such as logging's
    ``_releaseLock`` while the ranks are started, a finaliser), would print "Exception ignored
    in ..." with a traceback and be lost: send SIGTERM again instead, a moment later from
    another thread (sent from here, its handler would run inside this hook), so that the handler
    runs once more in the main thread's own code, after the fork has returned its child."""
    if isinstance(unraisable.exc_value, _Terminated) and os.getpid() == _command_pid:
        again = threading.Timer(_RESEND_S, os.kill, (_command_pid, signal.SIGTERM))
        again.daemon = True
        again.start()
        return
    (_previous_unraisable or sys.__unraisablehook__)(unraisable)


#: Ends the process if ``_raise_terminated`` cannot run (main thread stuck in native code).
_watchdog: Watchdog | None = None
#: Holds a SIGTERM while the main thread imports (torch's C extensions must not see it).
_shield: ImportShield | None = None
#: Set once SIGTERM was raised: where the exception was swallowed (raised in a callback of
#: os.fork or a finalizer, whose exceptions Python only reports), the command still exits 143.
_terminating = False
#: ``sys.unraisablehook`` as the command found it (see _terminated_where_it_cannot_propagate).
_previous_unraisable: Any = None
#: How long after a swallowed SIGTERM it is sent again.
_RESEND_S = 0.05
#: The command's own process (a forked rank inherits the handler; see _raise_terminated).
_command_pid = 0


def _parser() -> Any:
    """The whole command line's parser (`accelbackends.cli.parser`)."""
    from .parser import build

    return build()


#: ``info``'s own flags, as its parser names them (the parser's ``dest``).
_INFO_FLAGS = {
    "--json": "json",
    "--report": "report",
    "--all": "all",
    "--import-torch": "import_torch",
}


def quick_info_args(argv: Sequence[str]) -> Any:
    """``info`` with its own flags spelt in full, read without argparse (which, with the
    ``gettext`` and ``locale`` it imports and the parsers it builds, is a few percent of an
    ``info``): the namespace argparse would return, or None for any other command line
    (help, abbreviations, a repeated or conflicting flag, another command), which the parser
    reads and refuses as before."""
    if not argv or argv[0] != "info":
        return None
    given = argv[1:]
    known = {*_INFO_FLAGS, "-v", "--verbose"}
    if len(set(given)) != len(given) or not known.issuperset(given):
        return None
    if "--json" in given and "--report" in given:
        return None  # mutually exclusive: the parser says so
    import types

    flags = {dest: flag in given for flag, dest in _INFO_FLAGS.items()}
    verbose = "-v" in given or "--verbose" in given
    return types.SimpleNamespace(command="info", verbose=verbose, **flags)


def _parse(argv: list[str]) -> Any:
    """The command line as argparse reads it, or the exit status where it is refused (or
    empty: the help is shown)."""
    from .parser import UsageError

    parser = _parser()
    if not argv:
        # Nothing asked: show what can be asked, as git and pip do (exit 0: not an error).
        say(parser.format_help().rstrip(), plain=True)
        return EXIT_OK
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error("a command is required: info, check or docs")
    except UsageError as exc:
        if _wants_json(argv):
            from .check.report import failure_report, print_json

            print_json(failure_report(clean(str(exc))))
        print(f"accelbackends: error: {clean(str(exc))} (see {exc.prog} --help)", file=sys.stderr)
        return EXIT_USAGE
    return args


def _info(args: Any, argv: list[str]) -> int:
    from ..registry.facade import default_registry
    from .info import collect, render, render_bug_report

    report = collect(default_registry(), show_all=args.all, import_torch=args.import_torch)
    if args.json:
        say(json.dumps(report, indent=2), plain=True)
    elif args.report:
        say(render_bug_report(report, argv), plain=True)
    else:
        say(render(report, terminal_width()))
    if report["error"]:
        if not args.json:
            print(f"accelbackends: error: {clean(report['error'])}", file=sys.stderr)
        return EXIT_USAGE if report["error_kind"] == "bad input" else EXIT_FAILED
    return EXIT_OK


def _json_failure(args: Any, exc: BaseException, message: str = "") -> None:
    """``check --json`` prints exactly one JSON object, also when it fails before any rank ran
    (bad input, a failed rendezvous): scripts piping it to ``jq .ok`` never break."""
    if getattr(args, "command", None) != "check" or not getattr(args, "json", False):
        return
    from ..job.recognise import recognise
    from ..registry.facade import default_registry
    from .check.report import failure_report, print_json

    try:
        rank = recognise(default_registry()).rank
    except Exception:
        rank = 0  # the launcher variables are the problem: every rank says so
    if rank != 0:
        return  # under a launcher rank 0 reports, as on success

    error = message or clean(first_line(exc))
    print_json(failure_report(error, getattr(exc, "report_so_far", None)))


def _wants_json(argv: list[str]) -> bool:
    """Whether a command line that argparse refused asked for ``check --json``."""
    return "check" in argv and "--json" in argv


def _show_warnings_as_one_line() -> None:
    """The package's warnings as ``accelbackends: warning: ...`` (yellow on a terminal) instead
    of Python's ``path:line: Category: message`` and a source line; others as Python shows them."""
    from ..plugin.errors import AccelBackendsWarning

    python_way = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, AccelBackendsWarning):
            python_way(message, category, filename, lineno, file, line)
            return
        stream = file or sys.stderr
        prefix = colour("accelbackends: warning:", "yellow", stream)
        with contextlib.suppress(OSError):
            print(f"{prefix} {clean(str(message))}", file=stream)

    warnings.showwarning = show


def _show_library_messages() -> None:
    """The library's progress and warnings (e.g. "waiting for ranks: 1/2 joined …"), logged
    under ``accelbackends``, as plain lines on stderr."""
    import logging

    logger = logging.getLogger("accelbackends")
    if not any(getattr(h, "_accelbackends_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("accelbackends: %(message)s"))
        handler._accelbackends_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m accelbackends``."""
    _show_warnings_as_one_line()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = quick_info_args(argv)
    if args is None:
        parsed = _parse(argv)
        if isinstance(parsed, int):
            return parsed
        args = parsed
    if not args.verbose:
        # torch prints C++ log lines with stack frames for store errors we already explain;
        # set in os.environ whatever is imported, so that check's ranks inherit it.
        torchlog.quiet_torch_logs(torchlog.QUIET, os.environ)
    global _watchdog, _shield, _command_pid, _previous_unraisable
    _command_pid = os.getpid()
    if args.command != "info":
        # Only the rendezvous logs (check); info would import logging for nothing.
        _show_library_messages()
    restore_stdout = keep_plugin_output_off_stdout(getattr(args, "json", False))
    try:
        with (
            watch_sigterm(EXIT_TERMINATED, "accelbackends: terminated") as _watchdog,
            shield_imports(_terminate_now) as _shield,
        ):
            _previous_unraisable = sys.unraisablehook
            sys.unraisablehook = _terminated_where_it_cannot_propagate
            previous = signal.signal(signal.SIGTERM, _raise_terminated)
            try:
                code = _run(args, argv)
                if _terminating and code != EXIT_TERMINATED:
                    raise _Terminated
                return code
            finally:
                _watchdog = _shield = None
                signal.signal(signal.SIGTERM, previous)
                sys.unraisablehook = _previous_unraisable
                restore_stdout()
    except _Terminated:
        # Arrived between installing the handler and _run's own handling of it, or on the
        # way out: the exit is the same.
        print("accelbackends: terminated", file=sys.stderr)
        return EXIT_TERMINATED


def _docs(args: Any) -> int:
    from . import manual

    if args.path:
        say(str(manual.folder()), plain=True)
    elif args.page:
        say(manual.page_text(args.page).rstrip(), plain=True)
    else:
        say(manual.listing(), plain=True)
    return EXIT_OK


def _run(args: Any, argv: list[str]) -> int:
    try:
        if args.command == "info":
            return _info(args, argv)
        if args.command == "docs":
            return _docs(args)
        from . import check as check_command

        return check_command.run(args)
    except AccelBackendsError as exc:  # bad input (ConfigError) is exit 2, any other failure 1
        _json_failure(args, exc)
        if args.verbose:
            raise
        print(f"accelbackends: error: {clean(first_line(exc))}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILED
    except KeyboardInterrupt as exc:
        _json_failure(args, exc, "interrupted (SIGINT)")
        print("accelbackends: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Terminated as exc:
        _json_failure(args, exc, "terminated (SIGTERM)")
        print("accelbackends: terminated", file=sys.stderr)
        return EXIT_TERMINATED


def run() -> None:
    """The console script: ``main``, then exit without waiting for plugins' threads."""
    from ..host import guard
    from .process import exit

    guard.own_process()
    exit(main())
