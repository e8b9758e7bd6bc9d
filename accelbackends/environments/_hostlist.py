"""Slurm hostlists: ``node[01-04,07]``, ``rack[1-2]-n[07-08]``, ``login1,gpu[1-3]``.

A hostlist is a list of host patterns separated by commas or white space (Slurm's own parser
accepts ``"alpha, host[5-9]"``, and skips empty items between separators); a pattern is literal
text with bracketed ranges in it. Every range keeps the zero padding of its lower bound
(``[08-10]`` is ``08, 09, 10``; ``[8-10]`` is ``8, 9, 10``), and several brackets in one pattern
multiply out with the first bracket varying slowest, the order ``scontrol show hostnames``
prints. `first_host` and `count` work on the parsed patterns without expanding them, so a
10,000-node list costs nothing, and parsing is one pass over the text (linear in its length,
whatever its shape).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import product

from ..plugin import ConfigError

__all__ = ["compress", "count", "expand", "first_host"]

_ACCEPTED = "use host names with bracketed ranges, such as node[01-04,07] or rack[1-2]-n[07-08]"
_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_TRAILING_DIGITS = re.compile(r"^(.*?)([0-9]*)$", re.DOTALL)
_FORBIDDEN = frozenset("[],") | frozenset(" \t\r\n")


@dataclass(frozen=True)
class _Range:
    low: int
    high: int
    width: int

    def values(self) -> Iterator[str]:
        for number in range(self.low, self.high + 1):
            yield str(number).zfill(self.width)


@dataclass(frozen=True)
class _Pattern:
    """Literal text and bracketed ranges, alternating (a literal may be empty)."""

    literals: tuple[str, ...]
    brackets: tuple[tuple[_Range, ...], ...]

    def count(self) -> int:
        total = 1
        for bracket in self.brackets:
            total *= sum(r.high - r.low + 1 for r in bracket)
        return total

    def first(self) -> str:
        return self._join(next(bracket[0].values()) for bracket in self.brackets)

    def hosts(self) -> Iterator[str]:
        choices = [[v for r in bracket for v in r.values()] for bracket in self.brackets]
        for numbers in product(*choices):
            yield self._join(iter(numbers))

    def _join(self, numbers: Iterator[str]) -> str:
        text = self.literals[0]
        for literal in self.literals[1:]:
            text += next(numbers) + literal
        return text


def _error(source: str, text: str, why: str) -> ConfigError:
    return ConfigError(f"{source}={text!r} is not a valid hostlist ({why}); {_ACCEPTED}")


# One token at a time: a separator run, a bracket with its body, or literal text.
_TOKEN = re.compile(
    r"(?P<sep>[,\s]+)|\[(?P<body>[^\[\],\s]*(?:,[^\[\],\s]*)*)\]|(?P<text>[^\[\],\s]+)", re.ASCII
)


def _parse_bracket(body: str, text: str, source: str) -> tuple[_Range, ...]:
    ranges = []
    for item in body.split(","):
        match = _RANGE.match(item)
        if not match:
            raise _error(source, text, f"range {item!r} is not N or N-M with digits")
        low_text, high_text = match.group(1), match.group(2)
        low = int(low_text)
        high = low if high_text is None else int(high_text)
        if high < low:
            raise _error(source, text, f"range {item!r} runs backwards")
        ranges.append(_Range(low, high, len(low_text)))
    return tuple(ranges)


def _why_not_a_token(text: str, position: int) -> str:
    char = text[position]
    if char == "]":
        return "']' without '['"
    closing = text.find("]", position)
    if closing < 0:
        return "'[' is never closed"
    inside = text[position + 1 : closing]
    if "[" in inside:
        return "nested '['"
    return "white space inside brackets"


def _parse(text: str, source: str) -> tuple[_Pattern, ...]:
    patterns: list[_Pattern] = []
    literals: list[str] = []
    brackets: list[tuple[_Range, ...]] = []
    pending = ""  # literal text since the last bracket

    def finish() -> None:
        nonlocal pending
        if literals or pending or brackets:
            patterns.append(_Pattern((*literals, pending), tuple(brackets)))
        literals.clear()
        brackets.clear()
        pending = ""

    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _error(source, text, _why_not_a_token(text, position))
        if match.group("sep") is not None:
            finish()
        elif match.group("body") is not None:
            literals.append(pending)
            pending = ""
            brackets.append(_parse_bracket(match.group("body"), text, source))
        else:
            pending += match.group("text")
        position = match.end()
    finish()
    if not patterns:
        raise _error(source, text, "empty")
    return tuple(patterns)


def first_host(text: str, *, source: str = "hostlist") -> str:
    """The first host of ``text``; a bad list is a ConfigError naming ``source``."""
    return _parse(text, source)[0].first()


def count(text: str, *, source: str = "hostlist") -> int:
    """How many hosts ``text`` names (duplicates counted), without expanding it."""
    return sum(pattern.count() for pattern in _parse(text, source))


def expand(text: str, *, source: str = "hostlist") -> list[str]:
    """Every host of ``text``, in the order written."""
    return [host for pattern in _parse(text, source) for host in pattern.hosts()]


def compress(hosts: Iterable[str]) -> str:
    """The shortest-order-preserving hostlist for ``hosts``: ``expand(compress(h)) == list(h)``.

    Neighbours that share a prefix and count up by one become a range, and neighbouring ranges
    with the same prefix share one bracket (``n01,n02,n03,n07`` → ``n[01-03,07]``).
    """
    runs: list[tuple[str, int, int, int]] = []  # prefix, low, high, width; width -1: literal
    for host in hosts:
        if not host or any(c in _FORBIDDEN for c in host):
            raise ValueError(f"host name {host!r} cannot be written in a hostlist")
        match = _TRAILING_DIGITS.match(host)
        assert match is not None
        prefix, digits = match.group(1), match.group(2)
        if not digits:
            runs.append((host, 0, 0, -1))
            continue
        number = int(digits)
        if runs:
            last_prefix, low, high, width = runs[-1]
            if (
                width >= 0
                and last_prefix == prefix
                and number == high + 1
                and str(number).zfill(width) == digits
            ):
                runs[-1] = (prefix, low, number, width)
                continue
        runs.append((prefix, number, number, len(digits)))

    parts: list[str] = []
    index = 0
    while index < len(runs):
        prefix, low, high, width = runs[index]
        if width < 0:
            parts.append(prefix)
            index += 1
            continue
        same = [runs[index]]
        while index + len(same) < len(runs):
            following = runs[index + len(same)]
            if following[0] != prefix or following[3] < 0:
                break
            same.append(following)
        index += len(same)
        if len(same) == 1 and low == high:
            parts.append(prefix + str(low).zfill(width))
            continue
        items = [
            str(lo).zfill(w) if lo == hi else f"{str(lo).zfill(w)}-{str(hi).zfill(w)}"
            for _, lo, hi, w in same
        ]
        parts.append(f"{prefix}[{','.join(items)}]")
    return ",".join(parts)
