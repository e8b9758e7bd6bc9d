"""Byte sizes as ``check`` reads and writes them. Units are binary, as in nccl-tests."""

from __future__ import annotations

import argparse
import re

__all__ = ["GIB", "KIB", "MIB", "format_size", "parse_size"]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1 << 40}
_SIZE_HINT = "use a byte count such as 4096, 64KiB, 1MiB or 1GiB (units are powers of 1024)"


def parse_size(text: str) -> int:
    """``"64KiB"``, ``"64K"``, ``"1.5MiB"`` or ``"4096"`` as a number of bytes (>= 1).

    Units are binary, as in nccl-tests: K = KB = KiB = 1024 bytes.
    """
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; {_SIZE_HINT}")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of bytes >= 1; {_SIZE_HINT}"
        )
    return int(value)


def format_size(nbytes: int) -> str:
    """``1024`` → ``1 KiB``; a size that is not a whole number of units keeps one decimal."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes >= unit:
            value = nbytes / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{nbytes} B"
