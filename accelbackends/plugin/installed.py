"""What is installed on ``sys.path``: entry points and distributions, as `importlib.metadata`
answers, remembered on disk between processes for as long as nothing on ``sys.path`` changed.

Importing `importlib.metadata` (it pulls in ``email``, ``zipfile``, ``shutil``, ``bz2``,
``lzma``, ``csv`` and ``tempfile``) and scanning every installed distribution costs a cold
``accelbackends info`` about as much as starting the interpreter does, twice over; the answers
change only when something is installed, upgraded or removed. So the answers are kept in one
small JSON file per interpreter under ``$XDG_CACHE_HOME/accelbackends`` (``~/.cache`` by
default), next to a *stamp* of everything they were read from:

- the interpreter and the resolved ``sys.path``;
- for every ``sys.path`` entry, its own modification time (a directory's changes whenever a
  ``*.dist-info`` is created, renamed or removed in it: every install, upgrade and uninstall);
- for every ``*.dist-info`` / ``*.egg-info`` in it, the modification time and size of the two
  files read from it, ``entry_points.txt`` and ``METADATA`` (``PKG-INFO``), which catches a
  file rewritten in place (``setup.py egg_info`` does that).

The stamp is taken afresh by every process, before anything is read (about 1 ms for 50
distributions), and the file is used only when it matches exactly; otherwise
`importlib.metadata` answers and the file is rewritten. A newly installed plugin is thus
seen by the next process, never missed. Two more rules keep it exact:

- *Racy stamps*: a file system stamps modification times with a coarse clock (a kernel tick, up
  to 2 s on some), so a change made right after the stamp was taken could leave the same time.
  Answers are therefore not written while any stamped time is less than `SETTLE_SECONDS`
  old; the next process reads afresh.
- *Other finders*: a meta-path finder other than the standard path finder that can list
  distributions (``find_distributions``) answers from somewhere the stamp cannot see; with one
  installed, nothing is cached.

Only answers about ``sys.path`` itself are cached; a caller asking about other directories
(tests pointing a probe at a fake tree) always gets `importlib.metadata`'s fresh answer. A
cache file that cannot be read, parsed or written, or whose answers have another shape than
this module writes (or that is not a regular file of the user's, or is too large: refused
without being read) is ignored and rewritten: it can cost time, never a plugin.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import stat
import sys
import threading
import time
import zlib
from typing import Any, NamedTuple

__all__ = [
    "KEEP_FILES",
    "SETTLE_SECONDS",
    "Distribution",
    "EntryPoint",
    "cache_path",
    "distribution",
    "entry_points",
]

#: Answers are written only when every stamped modification time is at least this old.
SETTLE_SECONDS = 2.0
#: Cache files kept (one per ``sys.path`` seen); the least recently written go first.
KEEP_FILES = 32
#: The largest cache file read; a real one is tens of kilobytes.
MAX_BYTES = 16 << 20
_FORMAT = 1
_lock = threading.Lock()
#: This process's view: the directories it was taken for, the stamp, the answers, and whether
#: the stamp is old enough to be written.
_snapshot: tuple[list[Any], dict[str, Any], dict[str, Any], bool] | None = None
_DIST_SUFFIXES = (".dist-info", ".egg-info")
#: The syntax of an entry point's value, ``module[:attr[.attr...]] [extras]``, as
#: `importlib.metadata.EntryPoint` reads it.
_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


# NamedTuples, not dataclasses: a frozen dataclass costs about as much to create at import time
# as this module's whole warm-cache answer.
class Distribution(NamedTuple):
    """An installed distribution: its name as its metadata spells it, its version, and the
    directory its files are relative to (``site-packages``)."""

    name: str
    version: str
    location: str


class EntryPoint(NamedTuple):
    """An entry point with the distribution that declares it (empty where none is known)."""

    name: str
    value: str
    group: str
    distribution: str = ""
    version: str = ""

    def load(self) -> Any:
        """Import the module the value names and return the attribute, as
        `importlib.metadata.EntryPoint.load` does."""
        match = re.match(_VALUE, self.value)
        if match is None:
            raise ValueError(f"entry point {self.name!r} = {self.value!r} is not module:attr")
        found: Any = importlib.import_module(match.group("module"))
        for attr in filter(None, (match.group("attr") or "").split(".")):
            found = getattr(found, attr)
        return found


def entry_points(group: str) -> tuple[EntryPoint, ...]:
    """Every entry point of ``group`` on ``sys.path``, in `importlib.metadata`'s order
    (one per distribution name: the first found on ``sys.path``)."""
    facts = _facts(f"entry_points:{group}", lambda: _read_entry_points(group))
    return tuple(
        EntryPoint(name, value, group, dist, version) for name, value, dist, version in facts
    )


def distribution(name: str) -> Distribution | None:
    """The distribution called ``name`` (any spelling: ``-``, ``_``, ``.``, case) that
    `importlib.metadata` finds first on ``sys.path``, or None."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    found = _facts(f"distribution:{key}", lambda: _read_distribution(name))
    return Distribution(*found) if found else None


def cache_path() -> str | None:
    """The cache file for this interpreter and this ``sys.path``, or None where no cache
    directory can be named. One file per ``sys.path``: a script's directory and the working
    directory are on it, and two programs that take turns must not overwrite each other's."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None  # XDG says to ignore a relative path; "~" unexpanded means no home
    key = "\0".join([sys.executable, sys.prefix, *_search_path()])
    tag = zlib.crc32(key.encode(errors="surrogateescape"))
    return os.path.join(base, "accelbackends", f"installed-{tag:08x}.json")


# -- reading through importlib.metadata (imported only here) ------------------------------------


def _read_entry_points(group: str) -> list[list[str]]:
    from importlib import metadata

    found = []
    for ep in metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        name = str(dist.metadata["Name"] or "") if dist is not None else ""
        version = str(dist.version or "") if dist is not None else ""
        found.append([ep.name, ep.value, name, version])
    return found


def _read_distribution(name: str) -> list[str] | None:
    from importlib import metadata

    for dist in metadata.distributions(name=name):
        return [str(dist.metadata["Name"] or name), str(dist.version), str(dist.locate_file(""))]
    return None


# -- the cache ----------------------------------------------------------------------------------


def _facts(key: str, read: Any) -> Any:
    """The cached answer to ``key`` if the stamp still holds, else ``read()`` (and cache it)."""
    global _snapshot
    if _other_finders():
        return read()
    path = cache_path()
    # Detection asks from several threads at once; one at a time, so that each adds its answer
    # to the others' instead of overwriting them.
    with _lock:
        directories = _directories()
        if _snapshot is None or _snapshot[0] != directories:
            started = time.time()
            stamp = _stamp()
            facts = (_load(path, stamp) if path else None) or {}
            _snapshot = (directories, stamp, facts, _settled(stamp, started))
        _, stamp, facts, settled = _snapshot
        if key not in facts:
            facts[key] = read()
            if path and settled:
                _store(path, stamp, facts)
        return facts[key]


def _other_finders() -> bool:
    """Is there a meta-path finder besides the standard path finder that lists distributions?"""
    return any(
        hasattr(finder, "find_distributions") and getattr(finder, "__name__", "") != "PathFinder"
        for finder in sys.meta_path
    )


def _search_path() -> list[str]:
    """``sys.path`` as `importlib.metadata` searches it ("" is the working directory)."""
    return [entry or os.getcwd() for entry in sys.path if isinstance(entry, str)]


def _directories() -> list[Any]:
    """The ``sys.path`` entries and their own stat: within one process, the stamp is taken
    again only when these change, which is how `importlib.metadata` itself decides
    whether to list a directory again."""
    found: list[Any] = []
    for path in _search_path():
        try:
            status = os.stat(path)
        except OSError:
            found.append([path, None])
        else:
            found.append([path, status.st_mtime_ns, status.st_ino, status.st_size])
    return found


def _stamp() -> dict[str, Any]:
    """What the answers depend on; see the module's docstring."""
    entries = []
    for entry in _directories():
        if entry[1] is not None:
            entry.append(_dists(entry[0]))
        entries.append(entry)
    return {
        "format": _FORMAT,
        "python": [sys.executable, sys.prefix, sys.version],
        "path": entries,
    }


def _dists(path: str) -> list[Any]:
    """For each distribution directory in ``path``: its name and the stat of the files read."""
    found: list[Any] = []
    try:
        with os.scandir(path) as listing:
            children = [(child.name, child.path, child.is_dir()) for child in listing]
    except OSError:
        return found  # not a directory (a zip file's own stat covers it), or unreadable
    egg = path.lower().endswith(".egg")
    for name, child, is_dir in sorted(children):
        low = name.lower()
        if not (low.endswith(_DIST_SUFFIXES) or (egg and low == "egg-info")):
            continue
        if not is_dir:
            found.append([name, _stat(child)])  # a one-file PKG-INFO (distutils)
            continue
        info = "METADATA" if low.endswith(".dist-info") else "PKG-INFO"
        found.append(
            [
                name,
                _stat(os.path.join(child, "entry_points.txt")),
                _stat(os.path.join(child, info)),
            ]
        )
    return found


def _stat(path: str) -> list[int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return [status.st_mtime_ns, status.st_size]


def _times(stamp: dict[str, Any]) -> list[int]:
    times = []
    for entry in stamp["path"]:
        if entry[1] is None:
            continue
        times.append(entry[1])
        for dist in entry[4]:
            times += [status[0] for status in dist[1:] if status is not None]
    return times


def _settled(stamp: dict[str, Any], now: float) -> bool:
    """Is every stamped time old enough that a later change cannot share it?"""
    limit = int((now - SETTLE_SECONDS) * 1e9)
    return all(t < limit for t in _times(stamp))


def _load(path: str, stamp: dict[str, Any]) -> dict[str, Any] | None:
    """The answers in the cache file at ``path`` where its stamp is ``stamp`` and every answer
    has the shape this module writes; None (read afresh, rewrite) on any doubt. Only a regular
    file of this user's, no larger than `MAX_BYTES`, is read at all: a FIFO would block, a
    device or a link (to ``/dev/zero``) fill memory."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if (
            not stat.S_ISREG(status.st_mode)
            or status.st_uid != os.getuid()
            or status.st_size > MAX_BYTES
        ):
            return None
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            raw = handle.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return None
    finally:
        os.close(descriptor)
    if not isinstance(data, dict) or data.get("stamp") != stamp:
        return None
    facts = data.get("facts")
    if not isinstance(facts, dict) or not all(_well_formed(k, v) for k, v in facts.items()):
        return None
    return facts


def _strings(value: Any, count: int) -> bool:
    return (
        isinstance(value, list)
        and len(value) == count
        and all(isinstance(item, str) for item in value)
    )


def _well_formed(key: Any, value: Any) -> bool:
    """Whether ``value`` has the shape `_read_entry_points` or `_read_distribution` gives the
    answer ``key``."""
    if not isinstance(key, str):
        return False
    if key.startswith("entry_points:"):
        return isinstance(value, list) and all(_strings(item, 4) for item in value)
    if key.startswith("distribution:"):
        return value is None or _strings(value, 3)
    return False


def _store(path: str, stamp: dict[str, Any], facts: dict[str, Any]) -> None:
    """Write atomically (a reader sees the old file or the new one), or not at all; then keep
    only the `KEEP_FILES` most recently written files."""
    folder = os.path.dirname(path)
    partial = f"{path}.{os.getpid()}.partial"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump({"stamp": stamp, "facts": facts}, handle)
        os.replace(partial, path)
        with os.scandir(folder) as listing:
            files = [
                (entry.stat().st_mtime_ns, entry.path)
                for entry in listing
                if entry.name.startswith("installed-") and entry.name.endswith(".json")
            ]
        for _, old in sorted(files)[:-KEEP_FILES]:
            os.unlink(old)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)
