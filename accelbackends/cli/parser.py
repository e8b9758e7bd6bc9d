"""The command line's parser (argparse), imported only where a command line needs it: the
common ``accelbackends info`` with its own flags is read without it (`main.quick_info_args`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from .text import clean, columns

__all__ = ["UsageError", "build"]


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


class UsageError(Exception):
    """argparse refused the command line; ``main`` reports it (as JSON too, where asked)."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


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
        raise UsageError(message, self.prog)


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


def build() -> argparse.ArgumentParser:
    """The whole command line's parser: every command, its flags and its help."""
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
    _add_info(commands)
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


def _add_info(commands: Any) -> None:
    """``info`` and its flags (`main.quick_info_args` reads the same flags without argparse)."""
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


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    from .check import add_arguments

    add_arguments(parser)
