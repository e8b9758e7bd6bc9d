"""The ``accelbackends`` command line: ``info`` and ``check``.

Errors are one line on stderr, never a traceback: exit 2 for bad input (a wrong variable, flag or
override), 1 for a failure (a check that failed, a rank that died), 130 on Ctrl-C, 143 on
SIGTERM; in both, the ranks started by ``check`` are stopped first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence

from .console import keep_plugin_output_off_stdout
from .plugin.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    AccelBackendsError,
    ConfigError,
    first_line,
)
from .plugin.text import say

__all__ = ["main", "run"]


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that cleanup (stopping ranks) runs on the way out."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's own usage errors already exit 2; keep them to one line plus the hint.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = _Parser(
        prog="accelbackends",
        description="Which accelerator, device and communication backend this process uses, "
        "and proof that the ranks can talk.",
    )
    parser.add_argument("--version", action="version", version=f"accelbackends {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show torch's own C++ log lines and full tracebacks",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    info = commands.add_parser(
        "info", help="what this node has, what would be chosen and why (does not import torch)"
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument("--all", action="store_true", help="list the built-in plugins too")
    check = commands.add_parser(
        "check", help="start (or join) the ranks, verify collectives and measure bandwidth"
    )
    from . import check as check_command

    check_command.add_arguments(check)
    return parser


def _info(args: argparse.Namespace) -> int:
    from .info import collect, render
    from .registry import default_registry

    report = collect(default_registry(), show_all=args.all)
    say(json.dumps(report, indent=2) if args.json else render(report))
    return EXIT_OK


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
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        # torch prints C++ log lines with stack frames for store errors we already explain;
        # the level is read once, when torch is imported, so set it before that.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    _show_library_messages()
    restore_stdout = keep_plugin_output_off_stdout(getattr(args, "json", False))
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if args.command == "info":
            return _info(args)
        from . import check as check_command

        return check_command.run(args)
    except ConfigError as exc:
        if args.verbose:
            raise
        print(f"accelbackends: error: {first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except AccelBackendsError as exc:
        if args.verbose:
            raise
        print(f"accelbackends: error: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("accelbackends: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Terminated:
        print("accelbackends: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
        restore_stdout()


def run() -> None:
    """The console script: ``main``, then exit without waiting for plugins' threads."""
    from .console import exit

    exit(main())
