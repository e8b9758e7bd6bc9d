"""How the commands print: printing that survives a closed pipe, aligned columns, wrapping to
the terminal's width, colour. `plural` is the plugin layer's (``accelbackends.plugin.text``),
re-exported here so that the commands take all their wording from one module.

Wrapping and colour are for people at a terminal: piped output keeps every line whole and plain
(a script or ``grep`` sees the full text), unless ``COLUMNS`` asks for a width. Colour follows
https://no-color.org: never with ``NO_COLOR`` set, never when the stream is not a terminal.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ..plugin.text import plural

__all__ = [
    "aligned",
    "clean",
    "colour",
    "colour_enabled",
    "columns",
    "plural",
    "rank_list",
    "report_to",
    "say",
    "terminal_width",
    "wrap",
]

#: Narrower than this, a wrapped column is moved under its row instead of squeezed.
_MIN_COLUMN = 24
_CODES = {"red": "31", "green": "32", "yellow": "33", "bold": "1"}
_VERDICTS = re.compile(r"\b(PASSED|FAILED)\b")
#: Control characters (escape codes included) that must not reach a terminal raw.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The width to wrap to: ``COLUMNS`` where set, else the terminal's, else None (piped)."""
    stream = stream or sys.stdout
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil  # here, not at the top: it brings bz2 and lzma, which `info` never needs

    return shutil.get_terminal_size().columns


def colour_enabled(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` gets colour: a terminal, ``NO_COLOR`` unset, ``TERM`` not ``dumb``."""
    stream = stream or sys.stdout
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def colour(text: str, name: str, stream: TextIO | None = None) -> str:
    """``text`` in colour ``name`` where `colour_enabled`, else unchanged."""
    if not colour_enabled(stream):
        return text
    return f"\x1b[{_CODES[name]}m{text}\x1b[0m"


def clean(text: str, limit: int = 2000) -> str:
    """``text`` safe for a terminal: control characters escaped, at most ``limit`` characters."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if len(text) > limit:
        text = f"{text[: limit - 1]}\u2026 ({len(text) - limit + 1} more characters)"
    return text


def _wrap_text(text: str, width: int, **options: Any) -> list[str]:
    """`textwrap.wrap`, imported on first use: ``info --json`` wraps nothing."""
    import textwrap

    return textwrap.wrap(text, width, **options)


def wrap(text: str, width: int | None) -> str:
    """Each line of ``text`` longer than ``width`` wrapped at spaces, continuation lines
    indented two more than the line's own indent; unchanged where ``width`` is None."""
    if width is None:
        return text
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines += _wrap_text(
            line.strip(),
            max(_MIN_COLUMN, width),
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


_report: TextIO | None = None


def report_to(stream: TextIO | None) -> None:
    """Make ``say`` print to ``stream`` (None: ``sys.stdout``). The command line's own
    stdout while plugins' output is sent to stderr (``accelbackends.cli.process``)."""
    global _report
    _report = stream


def say(line: str, *, plain: bool = False) -> None:
    """Print ``line`` (one or more lines) to stdout and flush; control characters escaped,
    wrapped to the terminal and with PASSED/FAILED in colour, unless ``plain`` (JSON, which
    escapes them itself) or piped."""
    global _report
    stream = _report or sys.stdout
    if not plain:
        # Values from the environment and from plugins may hold escape codes: show, never obey.
        line = wrap(clean(line, limit=sys.maxsize), terminal_width(stream))
        if colour_enabled(stream):
            line = _VERDICTS.sub(
                lambda m: colour(m.group(), "green" if m.group() == "PASSED" else "red", stream),
                line,
            )
    try:
        print(line, file=stream, flush=True)
    except BrokenPipeError:
        # The reader went away (``accelbackends info | head``): finish quietly; the exit
        # status still tells.
        devnull = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout for good
        if _report is not None:
            _report = devnull
        else:
            sys.stdout = devnull


def columns(fallback: int = 80) -> int:
    """The terminal's width as `shutil.get_terminal_size` finds it (``COLUMNS``, else the
    terminal of stdout, else ``fallback``), without importing shutil, which brings bz2 and lzma
    into every command that prints."""
    try:
        width = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        width = 0
    if width > 0:
        return width
    stdout = sys.__stdout__
    try:
        return os.get_terminal_size(stdout.fileno()).columns or fallback if stdout else fallback
    except (ValueError, OSError):
        return fallback


def aligned(rows: Sequence[Sequence[str]], indent: str = "", width: int | None = None) -> list[str]:
    """``rows`` as lines whose columns line up, two spaces apart, without trailing spaces.

    With a ``width``, the last column wraps within it, its continuation lines starting under
    the column; where the column would be narrower than a few words, it goes on the lines
    below its row instead, indented.
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    start = len(indent) + sum(w + 2 for w in widths[:-1])
    room = None if width is None else width - start
    lines: list[str] = []
    for row in rows:
        head = indent + "".join(c.ljust(w + 2) for c, w in zip(row[:-1], widths, strict=False))
        last = row[-1]
        if room is None or len(last) <= room:
            lines.append((head + last).rstrip())
        elif room >= _MIN_COLUMN:
            parts = _wrap_text(last, room, break_long_words=False, break_on_hyphens=False)
            lines.append((head + parts[0]).rstrip())
            lines += [" " * start + part for part in parts[1:]]
        else:
            assert width is not None
            lines.append(head.rstrip())
            lines += _wrap_text(
                last,
                max(_MIN_COLUMN, width),
                initial_indent=indent + "    ",
                subsequent_indent=indent + "    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
    return lines


def rank_list(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    return f"{plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"
