"""Reading what the kernel exposes (sysfs, procfs, device nodes) without ever raising.

Probes call these with paths under their [`Probe`][accelbackends.Probe] root, so a
test can point them at a fake tree; a missing or unreadable file is an answer ("not there"),
not an error.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["exists", "listing", "read", "read_keyed", "target_name"]

_DIGITS = re.compile(r"(\d+)")


def _natural(name: str) -> list[object]:
    """``accel2`` before ``accel10``."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(name)]


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def read(path: Path) -> str | None:
    """The file's text, stripped, or None where it cannot be read."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, ValueError):
        return None


def read_keyed(path: Path, separator: str | None = None) -> dict[str, str]:
    """``KEY=value`` (``separator="="``, as in ``uevent``) or ``key value`` lines (as in KFD
    ``properties``) as a dict; empty where the file cannot be read."""
    text = read(path)
    if text is None:
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(separator or " ")
        if key:
            values[key] = value.strip()
    return values


def listing(directory: Path, pattern: str) -> list[Path]:
    """Entries of ``directory`` whose whole name matches ``pattern``, in natural order."""
    compiled = re.compile(pattern)
    try:
        names = [entry.name for entry in directory.iterdir() if compiled.fullmatch(entry.name)]
    except OSError:
        return []
    return [directory / name for name in sorted(names, key=_natural)]


def target_name(link: Path) -> str | None:
    """The last path component a symbolic link points to (``driver`` -> ``xe``), or None."""
    try:
        return Path(link.readlink()).name if link.is_symlink() else None
    except OSError:
        return None
