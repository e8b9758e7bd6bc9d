"""Where a job's secret comes from: ``ACCELBACKENDS_SECRET`` (a value, the path of a file
holding one, or ``off``), else a per-user file created on first use with mode 0600.

Kept apart from `membership` (the proof that uses the secret) so that ``info``,
which only describes the source, does not import the proof's hashing, networking and logging.
"""

from __future__ import annotations

import contextlib
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
    """Where the secret would come from, in words (for ``info``); reads and creates nothing, and
    never shows the value. A bad ``ACCELBACKENDS_SECRET`` is a ConfigError."""
    environ = os.environ if env is None else env
    value = environ.get(SECRET)
    if value is None or not value.strip():
        path = user_secret_path(environ)
        if path.exists():
            info = _check_file(path, None)
            return f"per-user file {path} (mode {stat.S_IMODE(info.st_mode):04o})"
        problem = _cannot_create(path)
        if problem is not None:
            # What the first job of more than one rank would hit, told now (info, check).
            raise ConfigError(
                f"the per-user secret file {path} cannot be created ({problem}), so a job of "
                f"more than one rank would fail; set {SECRET} to a secret value or file shared "
                "by every rank, or make that directory writable"
            )
        return f"per-user file {path} (mode 0600; created on first use)"
    if value.strip().lower() == OFF:
        return (
            f"off: membership is not checked ({SECRET}=off); any process that reaches "
            "MASTER_PORT can join this job"
        )
    if _looks_like_path(value.strip()):
        path = Path(value.strip()).expanduser()
        info = _check_file(path, SECRET)
        return f"{SECRET} file {path} (mode {stat.S_IMODE(info.st_mode):04o})"
    _check_length(value.strip())
    return f"{SECRET} (a value, {len(value.strip())} characters)"


def _check_length(text: str) -> None:
    if len(text) < MIN_LENGTH:
        raise ConfigError(
            f"{SECRET} holds a value of {len(text)} character{'s' if len(text) != 1 else ''}, "
            f"shorter than the {MIN_LENGTH} accepted: any process that reaches the store can "
            "read a rank's proof and recover a short secret by trying values; use a long "
            "random value (python -c 'import secrets; print(secrets.token_hex(32))') or a file"
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


def _check_file(path: Path, variable: str | None) -> os.stat_result:
    """The secret file's status, refused as ssh refuses a private key: not a regular file,
    another user's, or open to anyone but its owner (read: they know the secret; write: they
    can replace it with one they know). ``variable`` names the setting that gave the path;
    None: the per-user file."""
    where = f"{variable}={str(path)!r}" if variable else f"the per-user secret file {path}"
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigError(
            f"{where}: the secret file cannot be read ({exc.strerror}); give the "
            "path of a file only you can read, a secret value, or 'off'"
        ) from None
    # The path is named once: in the command that fixes it, or here.
    what = f"{variable}'s secret file" if variable else "the per-user secret file"
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{where} is not a regular file; give a secret file")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"{where} belongs to another user (uid {info.st_uid}), who can replace it with a "
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
    return info


def _read_key(path: Path, variable: str | None) -> bytes:
    _check_file(path, variable)
    where = f"{variable}={str(path)!r}" if variable else f"the per-user secret file {path}"
    try:
        data = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{where}: the secret file cannot be read ({exc.strerror})") from None
    if not data:
        raise ConfigError(f"{where} is empty; put a long random value in it")
    return data


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
            return Secret(_read_key(path, SECRET), f"{SECRET} file {path}")
        _check_length(text)
        return Secret(text.encode(), f"{SECRET} (a value)")
    path = user_secret_path(environ)
    if not path.exists():
        try:
            _create_user_secret(path)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the per-user secret file {path} ({exc.strerror}); set {SECRET} "
                "to a secret value or file shared by every rank of the job"
            ) from None
    return Secret(_read_key(path, None), f"per-user file {path}")


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
