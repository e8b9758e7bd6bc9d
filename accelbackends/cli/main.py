"""The ``accelbackends`` command line: ``info`` and ``check``.

Errors are one line on stderr, never a traceback: exit 2 for bad input (a wrong variable, flag or
override), 1 for a failure (a check that failed, a rank that died), 130 on Ctrl-C, 143 on
SIGTERM; in both, the ranks started by ``check`` are stopped first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
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
from .text import clean, colour, columns, say, terminal_width

__all__ = ["main", "run"]


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


_EXAMPLES = """\
examples:
  accelbackends info                   what this node has and what would be chosen, and why
  accelbackends info --report          a block to paste into a bug report
  accelbackends check                  start 2 local ranks (CPU) or one per device and test them
  accelbackends check -v --nproc 4     4 ranks, with torch's own log lines and full tracebacks
  torchrun --nproc-per-node 8 -m accelbackends check
                                       join the ranks torchrun started
  accelbackends check --json | jq .ok  one JSON object, also on failure
  accelbackends docs troubleshooting   the guide's page for an error message

exit status: 0 ok, 1 a check failed or a rank died, 2 bad input (a flag or a variable).
"""


def _docs_link() -> str:
    """Where the documentation lives: the distribution's Documentation URL where it has one,
    else the guide that ships inside the package."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("accelbackends").get_all("Project-URL") or []
    except PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("documentation", "docs"):
            return f"documentation: {url.strip()}"
    return (
        "documentation: accelbackends docs (the guide ships with the package; "
        "accelbackends docs troubleshooting first)"
    )


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions as usual but keeps a text with its own line breaks (the examples).

    Told the terminal's width: argparse makes one for every argument added and would import
    shutil (and with it bz2 and lzma) each time to ask."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        super().__init__(prog, indent_increment, max_help_position, width or columns())

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _UsageError(Exception):
    """argparse refused the command line; ``main`` reports it (as JSON too, where asked)."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


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


class _Later(str):
    """An epilog completed with the documentation link only when help is shown: finding the
    link reads the package metadata (importlib.metadata), which ``info`` must not pay for."""


class _Parser(argparse.ArgumentParser):
    #: Adds this parser's arguments on first use: ``check``'s come from accelbackends.cli.check,
    #: which ``info`` must not pay for importing.
    deferred: Callable[[argparse.ArgumentParser], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        if self.deferred is not None:
            add_arguments, self.deferred = self.deferred, None
            add_arguments(self)
        return super().parse_known_args(*args, **kwargs)

    def format_help(self) -> str:
        if isinstance(self.epilog, _Later):
            self.epilog = str(self.epilog) + _docs_link()
        return super().format_help()

    def error(self, message: str) -> None:  # type: ignore[override]
        # One prefix for every error, argparse's and ours: "accelbackends: error: ...", with
        # the help of the (sub)command that refused the argument.
        choice = re.match(r"argument COMMAND: invalid choice: '(.*?)'", message)
        if choice:
            import difflib

            close = difflib.get_close_matches(choice.group(1), _COMMANDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            message = (
                f"{clean(repr(choice.group(1)), 200)} is not a command{hint} "
                f"(commands: {', '.join(_COMMANDS)})"
            )
        unknown = re.match(r"unrecognized arguments: (-[^\s=]+)", message)
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown.group(1), _all_options(self), n=1)
            if close:
                message += f"; did you mean {close[0]}?"
        raise _UsageError(message, self.prog)


_COMMANDS = ("info", "check", "docs")


def _all_options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and of its subcommands (argparse reports an unknown
    option of a subcommand from the top-level parser)."""
    found: list[str] = []
    for action in parser._actions:
        found += [o for o in action.option_strings if o.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _all_options(sub)
    return found


def _verbose_flag(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="show torch's own C++ log lines and full tracebacks",
    )


def _parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = _Parser(
        prog="accelbackends",
        description="Which accelerator, device and communication backend this process uses, "
        "and proof that the ranks can talk.",
        epilog=_Later(_EXAMPLES),
        formatter_class=_Formatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"accelbackends {__version__}")
    _verbose_flag(parser, False)
    # prog given: argparse would otherwise render a usage line to find it, which imports
    # shutil (and with it bz2 and lzma) for the terminal width.
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser, prog=parser.prog
    )
    info = commands.add_parser(
        "info",
        help="what this node has, what would be chosen and why (does not import torch)",
        description="What this node has, which accelerator and backend would be chosen and "
        "why, the cluster environment the launcher variables describe, and the "
        "ACCELBACKENDS_* variables set. A bad variable is shown where it applies; the report "
        "is still printed. Exit 0: no problem found; 1: torch is missing or unusable, or a "
        "plugin failed; 2: a bad variable or override. Does not import torch (unless "
        "--import-torch).",
        epilog=_Later(),
        formatter_class=_Formatter,
    )
    # -v after the subcommand too (``accelbackends check -v``); SUPPRESS keeps the value given
    # before it.
    _verbose_flag(info, argparse.SUPPRESS)
    shown = info.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print one JSON object")
    shown.add_argument(
        "--report",
        action="store_true",
        help="print a block to paste into a bug report: versions, platform, the report",
    )
    info.add_argument("--all", action="store_true", help="list the built-in plugins too")
    info.add_argument(
        "--import-torch",
        action="store_true",
        help="ask the imported torch which distributed backends it has (default: read from "
        "torch's build files, without importing it)",
    )
    check = commands.add_parser(
        "check",
        help="start (or join) the ranks, verify collectives and measure bandwidth",
        epilog=_Later(),
    )
    _verbose_flag(check, argparse.SUPPRESS)
    check.deferred = _check_arguments
    docs = commands.add_parser(
        "docs",
        help="list the pages of the user guide that ships with the package, or print one",
        description="The user guide ships inside the package (Markdown). Without PAGE, list "
        "the pages; with PAGE (e.g. troubleshooting, launchers/slurm), print it. Exit 2: no "
        "such page.",
    )
    _verbose_flag(docs, argparse.SUPPRESS)
    docs.add_argument("page", nargs="?", metavar="PAGE", help="the page to print")
    docs.add_argument("--path", action="store_true", help="print the guide's folder only")
    return parser


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    from .check import add_arguments

    add_arguments(parser)


def _info(args: argparse.Namespace, argv: list[str]) -> int:
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


def _json_failure(args: argparse.Namespace, exc: BaseException, message: str = "") -> None:
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
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        # Nothing asked: show what can be asked, as git and pip do (exit 0: not an error).
        say(parser.format_help().rstrip(), plain=True)
        return EXIT_OK
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error("a command is required: info, check or docs")
    except _UsageError as exc:
        if _wants_json(argv):
            from .check.report import failure_report, print_json

            print_json(failure_report(clean(str(exc))))
        print(f"accelbackends: error: {clean(str(exc))} (see {exc.prog} --help)", file=sys.stderr)
        return EXIT_USAGE
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


def _docs(args: argparse.Namespace) -> int:
    from . import manual

    if args.path:
        say(str(manual.folder()), plain=True)
    elif args.page:
        say(manual.page_text(args.page).rstrip(), plain=True)
    else:
        say(manual.listing(), plain=True)
    return EXIT_OK


def _run(args: argparse.Namespace, argv: list[str]) -> int:
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
    from .process import exit

    exit(main())
