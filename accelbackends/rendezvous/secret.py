"""Where a job's secret comes from: ``ACCELBACKENDS_SECRET`` (a value, the path of a file
holding one, or ``off``), else a per-user file created on first use with mode 0600.

Kept apart from `membership` (the proof that uses the secret) so that ``info``,
which only describes the source, does not import the proof's hashing, networking and logging.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import stat
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..plugin import config
from ..plugin.errors import ConfigError, RendezvousWarning

__all__ = [
    "OFF",
    "MIN_LENGTH",
    "SECRET",
    "Secret",
    "info_line",
    "load_secret",
    "secret_source",
    "user_secret_path",
]

SECRET = config.SECRET
OFF = "off"
_SECRET_BYTES = 32
_FILE_NAME = "secret"
#: The shortest value ``ACCELBACKENDS_SECRET`` may hold. Every rank's proof is an HMAC of the
#: secret that any process reaching the store can read, so a short value is recovered offline
#: by trying them all (one character: 24 tries). 16 characters of a random hex string are 64
#: bits; a generated file holds 64 hex characters.
MIN_LENGTH = 16
#: The fewest bits a secret's own character frequencies must give (see `_weakness`).
_MIN_BITS = 32
#: The largest secret file read: a key is tens of bytes; a bigger file is a mistake (or a
#: device), and is refused before it is read.
MAX_FILE_BYTES = 1 << 20
#: The most symbolic links followed on a secret's path, as the kernel's own limit.
_MAX_LINKS = 40
_warned_off = False


@dataclass(frozen=True)
class Secret:
    """The job's secret and where it came from; ``key`` is None when the check is off."""

    key: bytes | None
    #: Where it comes from, for ``info`` and errors; never the value.
    source: str

    @property
    def enabled(self) -> bool:
        return self.key is not None


def user_secret_path(env: Mapping[str, str] | None = None) -> Path:
    """The per-user secret file: ``$XDG_CONFIG_HOME/accelbackends/secret`` or
    ``~/.config/accelbackends/secret``."""
    environ = os.environ if env is None else env
    # Like Path.home(), fall back on the process's own variable where ``env`` has none.
    base = (environ.get("XDG_CONFIG_HOME") or os.environ.get("XDG_CONFIG_HOME", "")).strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "accelbackends" / _FILE_NAME


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", "~", "./", "../"))


def secret_source(env: Mapping[str, str] | None = None) -> str:
    """Where the secret would come from, in words (for ``info`` and ``check``); creates nothing
    and never shows the value. An existing secret file is read and judged as a job reads it. A
    bad ``ACCELBACKENDS_SECRET`` is a ConfigError."""
    environ = os.environ if env is None else env
    value = environ.get(SECRET)
    if value is None or not value.strip():
        path = user_secret_path(environ)
        if os.path.lexists(path):
            _, info = _read_key(path, None)
            return f"per-user file {path} (mode {stat.S_IMODE(info.st_mode):04o})"
        _check_creatable(path)
        return f"per-user file {path} (mode 0600; created on first use)"
    text = value.strip()
    if text.lower() == OFF:
        return (
            f"off: membership is not checked ({SECRET}=off); any process that reaches "
            "MASTER_PORT can join this job"
        )
    if _looks_like_path(text):
        path = Path(text).expanduser()
        _, info = _read_key(path, SECRET)
        return f"{SECRET} file {path} (mode {stat.S_IMODE(info.st_mode):04o})"
    _check_value(text)
    return f"{SECRET} (a value, {len(text)} characters)"


def _check_value(text: str) -> None:
    """Refuse a value that names a file without saying so (it would be taken as the secret
    itself), or that is too weak."""
    if os.path.lexists(text):
        raise ConfigError(
            f"{SECRET}={text!r} names the file ./{text}, but a value that does not start with "
            "'/', '~', './' or '../' is taken as the secret itself, not as a file; write "
            f"{SECRET}=./{text} (or an absolute path) to use the file, or give a value that "
            "names no file"
        )
    hint = (
        " (a file's path must start with '/', '~', './' or '../'; no file of that name exists here)"
        if os.sep in text and _weakness(text)
        else ""
    )
    try:
        _check_strength(text)
    except ConfigError as exc:
        raise ConfigError(f"{exc}{hint}") from None


def _weakness(text: str) -> str | None:
    """Why ``text`` is too weak to be a secret (too short, or too little variety: one character
    repeated, or two alternating), or None. The variety test is simple on purpose: it counts
    the bits the text's own character frequencies give (0 for one repeated letter, 16 for
    ``abab…`` of 16) and only catches the obvious; a random value passes it."""
    if len(text) < MIN_LENGTH:
        return (
            f"{len(text)} character{'s' if len(text) != 1 else ''}, shorter than the "
            f"{MIN_LENGTH} accepted"
        )
    counts = collections.Counter(text)
    bits = sum(n * math.log2(len(text) / n) for n in counts.values())
    if bits < _MIN_BITS:
        return (
            f"{len(text)} characters with too little variety ({len(counts)} different "
            f"character{'s' if len(counts) != 1 else ''}, about {bits:.0f} bits where "
            f"{_MIN_BITS} are the floor)"
        )
    return None


def _check_strength(text: str, where: str | None = None) -> None:
    """Refuse a weak secret; ``where`` names the file that holds it (None: the variable's
    value)."""
    problem = _weakness(text)
    if problem is None:
        return
    holder = where if where is not None else SECRET
    raise ConfigError(
        f"{holder} holds a value of {problem}: any process that reaches the store can read a "
        "rank's proof and recover a weak secret by trying values; use a long random value "
        "(python -c 'import secrets; print(secrets.token_hex(32))')"
        + (" or a file" if where is None else " in it")
    )


def _cannot_create(path: Path) -> str | None:
    """Why ``path`` could not be created by this user (its nearest existing ancestor is not a
    writable directory), or None where it could; creates nothing."""
    for parent in path.parents:
        if not os.path.lexists(parent):
            continue
        if not parent.is_dir():
            return f"{parent} is not a directory"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"{parent} is not writable by this user"
        return None
    return None


def _check_creatable(path: Path) -> None:
    """Refuse a per-user secret file that this user cannot create, or that would be created
    where another user could replace it (a directory on its path not safe, as `_judge_path`
    says); creates nothing."""
    problem = _cannot_create(path)
    if problem is not None:
        # What the first job of more than one rank would hit, told now (info, check).
        raise ConfigError(
            f"the per-user secret file {path} cannot be created ({problem}), so a job of "
            f"more than one rank would fail; set {SECRET} to a secret value or file shared "
            "by every rank, or make that directory writable"
        )
    existing = next(parent for parent in path.parents if os.path.lexists(parent))
    where = f"the per-user secret file {path}"
    real, info, directories, links = _walk(existing, where)
    _judge_path(real, [*directories, (real, info)], links, where)


def info_line(env: Mapping[str, str] | None = None) -> str:
    """One line for ``info``: where the secret comes from, a warning when the check is off, or
    what is wrong with ``ACCELBACKENDS_SECRET``; never the secret itself."""
    try:
        source = secret_source(env)
    except ConfigError as exc:
        return f"error: {exc}"
    if source.startswith("off"):
        return f"WARNING: {source}"
    return f"ranks prove they hold the job's secret, from {source}"


def _who(uid: int) -> str:
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _walk(
    path: Path, where: str
) -> tuple[str, os.stat_result, list[tuple[str, os.stat_result]], list[tuple[str, str, int]]]:
    """Resolve ``path`` one name at a time, as the kernel would, looking at each name before
    going through it. Returns the real path, its own status (not followed), every directory
    passed through on the way to it with its status, and every symbolic link followed (where
    it is, what it names, its owner)."""
    names = list(Path(os.path.abspath(path) if not path.is_absolute() else path).parts[1:])
    current = "/"
    directories = [("/", os.lstat("/"))]
    links: list[tuple[str, str, int]] = []
    while True:
        name = names.pop(0) if names else None
        if name is None:
            return current, directories[-1][1], directories[:-1], links
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            directories.append((current, os.lstat(current)))
            continue
        candidate = os.path.join(current, name)
        try:
            info = os.lstat(candidate)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(candidate)
        except OSError as exc:
            at = f": {candidate}" if names else ""  # the file itself is named by ``where``
            raise ConfigError(
                f"{where}: the secret file cannot be read ({exc.strerror}{at}); give the path "
                "of a file only you can read, a secret value, or 'off'"
            ) from None
        if stat.S_ISLNK(info.st_mode):
            links.append((candidate, target, info.st_uid))
            if len(links) > _MAX_LINKS:
                raise ConfigError(
                    f"{where}: more than {_MAX_LINKS} symbolic links on its path (a loop at "
                    f"{candidate} -> {target}); give the file's own path"
                )
            if os.path.isabs(target):
                current = "/"
            names[:0] = [part for part in Path(target).parts if part != "/"]
            continue
        current = candidate
        if names and not stat.S_ISDIR(info.st_mode):
            raise ConfigError(
                f"{where}: {candidate} on its path is not a directory; give the path of a file "
                "only you can read, a secret value, or 'off'"
            )
        directories.append((current, info))


def _judge_path(
    real: str,
    directories: list[tuple[str, os.stat_result]],
    links: list[tuple[str, str, int]],
    where: str,
) -> None:
    """Refuse a path another user could redirect, as ssh's StrictModes does: every symbolic
    link followed, and every directory from the file up to the user's home (or up to ``/``
    for a file outside it), must belong to this user or root, and no directory may be
    writable by group or others. One difference from ssh: a directory others may write but
    whose sticky bit is set (``/tmp``) is accepted, since only an entry's owner (or the
    directory's) may then remove or rename it, and every entry on the path is checked to be
    this user's or root's."""
    trusted = (os.getuid(), 0)
    via = "".join(f"; it goes through the link {at} -> {target}" for at, target, _ in links)
    home = os.path.realpath(os.path.expanduser("~"))
    inside = real == home or real.startswith(home.rstrip("/") + "/")
    for directory, info in directories:
        if inside and home.startswith(directory.rstrip("/") + "/"):
            continue  # above the home directory, as ssh: not the user's to secure
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid not in trusted:
            raise ConfigError(
                f"{where}: the directory {directory} on its path belongs to another user "
                f"({_who(info.st_uid)}, mode {mode:04o}), who can replace the file or a "
                "directory under it with one holding a value they know; keep the secret in a "
                f"directory of your own{via}"
            )
        if mode & 0o022 and not mode & stat.S_ISVTX:
            who = " and ".join(
                name for bit, name in ((0o020, "its group"), (0o002, "other users")) if mode & bit
            )
            raise ConfigError(
                f"{where}: the directory {directory} on its path can be written by {who} "
                f"(owner {_who(info.st_uid)}, mode {mode:04o}), who can replace the file or a "
                f"directory under it with one holding a value they know; run chmod go-w "
                f"{directory}{via}"
            )
    for at, target, owner in links:
        if owner not in trusted:
            raise ConfigError(
                f"{where}: the symbolic link {at} -> {target} on its path belongs to another "
                f"user ({_who(owner)}), who chose the file it names; remove the link and give "
                "the path of a file of your own"
            )


def _check_file(info: os.stat_result, path: Path, variable: str | None) -> None:
    """Refuse the secret file itself as ssh refuses a private key: not a regular file (a FIFO
    or a device is never opened), another user's, open to anyone but its owner (read: they
    know the secret; write: they can replace it with one they know), or larger than a key."""
    where = f"{variable}={str(path)!r}" if variable else f"the per-user secret file {path}"
    # The path is named once: in the command that fixes it, or here.
    what = f"{variable}'s secret file" if variable else "the per-user secret file"
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{where} is not a regular file; give a secret file")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"{where} belongs to another user ({_who(info.st_uid)}), who can replace it with a "
            f"value they know; use a file of your own, or set {SECRET}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        others = []
        if mode & 0o044:
            others.append("read")
        if mode & 0o022:
            others.append("written")
        if not others:  # only execute bits: still not a private key's mode
            others.append("used")
        raise ConfigError(
            f"{what} is open to other users (mode {mode:04o}: it can be "
            f"{' and '.join(others)} by users other than its owner, who then pass every "
            f"proof); run chmod 600 {path}"
        )
    if info.st_size > MAX_FILE_BYTES:
        raise ConfigError(_too_large(where, info.st_size))


def _too_large(where: str, size: int | None) -> str:
    shown = f"{size} bytes, more" if size is not None else "more"
    return (
        f"{where} holds {shown} than the {MAX_FILE_BYTES} bytes a secret file may hold; give a "
        "file holding only the secret (python -c 'import secrets; print(secrets.token_hex(32))')"
    )


def _read_key(path: Path, variable: str | None) -> tuple[bytes, os.stat_result]:
    """The secret in ``path`` and the file's status, read as ssh reads a key: its whole path
    judged first (`_judge_path`), the file opened without following a link (the links on the
    way were judged) and without blocking, and checked again once open."""
    where = f"{variable}={str(path)!r}" if variable else f"the per-user secret file {path}"
    real, info, directories, links = _walk(path, where)
    _judge_path(real, directories, links, where)
    _check_file(info, path, variable)
    try:
        descriptor = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(
            f"{where}: the secret file cannot be read ({exc.strerror}); give the path of a "
            "file only you can read, a secret value, or 'off'"
        ) from None
    with os.fdopen(descriptor, "rb") as handle:
        opened = os.fstat(descriptor)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise ConfigError(
                f"{where} was replaced while it was being read; another process is changing "
                "it: give a secret file only you can write"
            )
        _check_file(opened, path, variable)
        try:
            data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{where}: the secret file cannot be read ({exc.strerror})") from None
    if len(data) > MAX_FILE_BYTES:  # a file whose size says nothing (/proc)
        raise ConfigError(_too_large(where, None))
    if b"\0" in data:
        raise ConfigError(
            f"{where} holds a NUL byte, so it is not a text secret (a binary or a device's "
            "copy); put a long random value in it (python -c 'import secrets; "
            "print(secrets.token_hex(32))')"
        )
    data = data.strip()
    if not data:
        raise ConfigError(f"{where} is empty; put a long random value in it")
    _check_strength(data.decode("latin-1"), where)
    return data, opened


def _create_user_secret(path: Path) -> None:
    """Write a fresh secret to ``path`` unless it exists, atomically: a complete file appears
    under its name or none does, and of two processes creating it at once (two ranks, two nodes
    on a shared home) exactly one wins and both then read the winner's."""
    import secrets
    import socket

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{_FILE_NAME}.{socket.gethostname()}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(_SECRET_BYTES) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        # link() never replaces an existing file (rename would), also on NFS.
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def load_secret(env: Mapping[str, str] | None = None) -> Secret:
    """The job's secret: ``ACCELBACKENDS_SECRET`` (value, file path or ``off``), else the per-user
    file (created on first use)."""
    environ = os.environ if env is None else env
    value = environ.get(SECRET)
    if value is not None and value.strip():
        text = value.strip()
        if text.lower() == OFF:
            _warn_off()
            return Secret(None, secret_source(environ))
        if _looks_like_path(text):
            path = Path(text).expanduser()
            return Secret(_read_key(path, SECRET)[0], f"{SECRET} file {path}")
        _check_value(text)
        return Secret(text.encode(), f"{SECRET} (a value)")
    path = user_secret_path(environ)
    if not os.path.lexists(path):
        _check_creatable(path)
        try:
            _create_user_secret(path)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the per-user secret file {path} ({exc.strerror}); set {SECRET} "
                "to a secret value or file shared by every rank of the job"
            ) from None
    return Secret(_read_key(path, None)[0], f"per-user file {path}")


def _warn_off() -> None:
    """Warn once per process that membership is not checked (``info`` says it too)."""
    global _warned_off
    if _warned_off:
        return
    _warned_off = True
    warnings.warn(
        f"{SECRET}=off: membership is not checked; any process that reaches MASTER_PORT can "
        "join this job and answer its collectives",
        RendezvousWarning,
        stacklevel=4,
    )
