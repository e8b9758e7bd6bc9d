"""The site policy: what it may say, where it is read from, and how it changes backend options.

A policy comes from a TOML file named by ``ACCELBACKENDS_SITEPOLICY_FILE`` and from
``ACCELBACKENDS_SITEPOLICY_*`` variables, which win over the file key by key::

    min_timeout = 900                 # seconds; shorter collective timeouts are raised to this
    nccl_socket_ifname = "ib0"        # NCCL_SOCKET_IFNAME for jobs whose backend uses NCCL
    gloo_socket_ifname = "eth0"       # GLOO_SOCKET_IFNAME for jobs whose backend uses Gloo

    [required_backend]                # accelerator = the backend it must use on this site
    cuda = "nccl"

    [env]                             # more variables to set for every job
    NCCL_IB_HCA = "mlx5"

Variables set this way are defaults: ``init()`` sets each one only where the user's environment
does not have it, so a user can still override an interface for one job. Every value is checked
when the policy is read; a bad one is a :class:`~accelbackends.ConfigError` naming the file or
the variable, the key, the value and what is accepted.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from accelbackends import plugin

__all__ = [
    "FILE",
    "GLOO_SOCKET_IFNAME",
    "KEYS",
    "MIN_TIMEOUT",
    "NCCL_SOCKET_IFNAME",
    "PREFIX",
    "REQUIRED_BACKEND",
    "VARIABLES",
    "Policy",
    "backends_in",
    "load_policy",
    "policy_from_environment",
    "policy_from_file",
    "policy_from_mapping",
]

PREFIX = "ACCELBACKENDS_SITEPOLICY_"
FILE = PREFIX + "FILE"
MIN_TIMEOUT = PREFIX + "MIN_TIMEOUT"
NCCL_SOCKET_IFNAME = PREFIX + "NCCL_SOCKET_IFNAME"
GLOO_SOCKET_IFNAME = PREFIX + "GLOO_SOCKET_IFNAME"
REQUIRED_BACKEND = PREFIX + "REQUIRED_BACKEND"

#: Every variable the plugin reads, with its meaning.
VARIABLES: dict[str, str] = {
    FILE: "the policy file (TOML)",
    MIN_TIMEOUT: "minimum collective timeout in seconds (the file's min_timeout)",
    NCCL_SOCKET_IFNAME: "NCCL_SOCKET_IFNAME for NCCL jobs (the file's nccl_socket_ifname)",
    GLOO_SOCKET_IFNAME: "GLOO_SOCKET_IFNAME for Gloo jobs (the file's gloo_socket_ifname)",
    REQUIRED_BACKEND: "accelerator=backend pairs, comma-separated (the file's [required_backend])",
}
#: The keys a policy file may have.
KEYS = ("env", "gloo_socket_ifname", "min_timeout", "nccl_socket_ifname", "required_backend")

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTERFACE = r"[A-Za-z0-9_.:@-]+"
# NCCL: a comma-separated list of interface name prefixes; "^" excludes them, "=" makes the
# names exact (NCCL's environment-variable documentation).
_NCCL_IFNAME = re.compile(rf"[\^=]?{_INTERFACE}(,{_INTERFACE})*")
# Gloo (torch.distributed): a comma-separated list of interface names, one device per name.
_GLOO_IFNAME = re.compile(rf"{_INTERFACE}(,{_INTERFACE})*")
_NCCL_FORM = (
    "interface names or prefixes, comma-separated, optionally after ^ (exclude) or = (exact), "
    "e.g. ib0 or ^docker,lo"
)
_GLOO_FORM = "interface names, comma-separated, e.g. eth0"


@dataclass(frozen=True)
class Policy:
    """A site's rules. ``sources`` says where each setting came from (a file's key or a
    variable), for messages and for ``python -m accelbackends_sitepolicy``."""

    min_timeout: float | None = None
    nccl_socket_ifname: str | None = None
    gloo_socket_ifname: str | None = None
    required_backend: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.min_timeout
            or self.nccl_socket_ifname
            or self.gloo_socket_ifname
            or self.required_backend
            or self.env
        )

    def source(self, setting: str) -> str:
        return self.sources.get(setting, setting)

    def apply(
        self, accelerator: plugin.AcceleratorSpec, options: plugin.BackendOptions
    ) -> plugin.BackendOptions:
        """``options`` as this site wants them for ``accelerator``.

        :raises plugin.ConfigError: The job would use a backend the site does not allow.
        """
        used = backends_in(options.process_group_backend)
        required = self.required_backend.get(accelerator.name)
        if required is not None:
            where = self.source(f"required_backend.{accelerator.name}")
            if required not in accelerator.backends:
                raise plugin.ConfigError(
                    f"site policy: the required backend {required!r} for accelerator "
                    f"{accelerator.name!r} ({where}) is not one of its backends; use one of "
                    f"{', '.join(accelerator.backends)}"
                )
            actual = used.get(accelerator.device_type, used.get("", ""))
            if actual != required:
                raise plugin.ConfigError(
                    f"site policy: accelerator {accelerator.name!r} must use backend "
                    f"{required!r} on this site ({where}), but this job would use {actual!r} "
                    f"(process-group backend {options.process_group_backend!r}); unset "
                    f"ACCELBACKENDS_BACKEND or the backend= argument, or set it to {required!r}"
                )
        env = dict(options.env_defaults)
        env.update(self.env)
        if self.nccl_socket_ifname and "nccl" in used.values():
            env["NCCL_SOCKET_IFNAME"] = self.nccl_socket_ifname
        if self.gloo_socket_ifname and "gloo" in used.values():
            env["GLOO_SOCKET_IFNAME"] = self.gloo_socket_ifname
        timeout = options.timeout
        if self.min_timeout is not None and timeout.total_seconds() < self.min_timeout:
            timeout = timedelta(seconds=self.min_timeout)
        return dataclasses.replace(options, timeout=timeout, env_defaults=env)

    def describe(self) -> list[str]:
        """One line per setting, with where it came from."""
        lines = []
        if self.min_timeout is not None:
            lines.append(f"min_timeout = {self.min_timeout:g} s  ({self.source('min_timeout')})")
        for key in ("nccl_socket_ifname", "gloo_socket_ifname"):
            value = getattr(self, key)
            if value:
                lines.append(f"{key} = {value!r}  ({self.source(key)})")
        for name, backend in sorted(self.required_backend.items()):
            key = f"required_backend.{name}"
            lines.append(f"{key} = {backend!r}  ({self.source(key)})")
        for name, value in sorted(self.env.items()):
            lines.append(f"env.{name} = {value!r}  ({self.source(f'env.{name}')})")
        return lines


def backends_in(backend: str) -> dict[str, str]:
    """The backend per device of a process-group backend string: ``"cpu:gloo,cuda:nccl"`` is
    ``{"cpu": "gloo", "cuda": "nccl"}``; a plain ``"gloo"`` is ``{"": "gloo"}`` (every device)."""
    if ":" not in backend:
        return {"": backend}
    pairs = (item.partition(":") for item in backend.split(","))
    return {device.strip(): name.strip() for device, _, name in pairs}


class _Reader:
    """Checks values, and names where a bad one came from: a file's key or a variable."""

    def __init__(self, origin: str | None) -> None:
        self.origin = origin  # the file, or None for variables
        self.sources: dict[str, str] = {}

    def label(self, key: str, variable: str | None = None) -> str:
        return variable if variable is not None else f"{self.origin}: {key}"

    def error(
        self, key: str, value: object, accepted: str, variable: str | None = None
    ) -> plugin.ConfigError:
        if variable is not None:
            return plugin.ConfigError(f"{variable}={value!r} is not valid; use {accepted}")
        return plugin.ConfigError(
            f"site policy {self.origin}: {key} = {value!r} is not valid; use {accepted}"
        )

    def seconds(self, key: str, value: object, variable: str | None = None) -> float:
        accepted = "a positive number of seconds, e.g. 900"
        number = value
        if isinstance(value, str) and variable is not None:
            try:
                number = float(value)
            except ValueError:
                raise self.error(key, value, accepted, variable) from None
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or not math.isfinite(number)
            or number <= 0
        ):
            raise self.error(key, value, accepted, variable)
        self.sources[key] = self.label(key, variable)
        return float(number)

    def ifname(
        self, key: str, value: object, pattern: re.Pattern[str], form: str, variable: str | None
    ) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise self.error(key, value, form, variable)
        self.sources[key] = self.label(key, variable)
        return value

    def required(self, pairs: Mapping[str, object], variable: str | None = None) -> dict[str, str]:
        result = {}
        for name, backend in pairs.items():
            key = f"required_backend.{name}"
            if not _NAME.fullmatch(name):
                raise self.error(
                    "required_backend", name, "accelerator names in lower case, e.g. cuda"
                )
            if not isinstance(backend, str) or not _NAME.fullmatch(backend):
                raise self.error(key, backend, 'a backend name in lower case, e.g. "nccl"')
            result[name] = backend
            self.sources[key] = self.label(key, variable)
        return result


def policy_from_mapping(data: Mapping[str, object], origin: str) -> Policy:
    """A policy from a parsed policy file; ``origin`` (the file) is named in errors."""
    r = _Reader(origin)
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise plugin.ConfigError(
            f"site policy {origin}: unknown key {unknown[0]!r}; accepted keys: {', '.join(KEYS)}"
        )
    min_timeout = nccl = gloo = None
    if "min_timeout" in data:
        min_timeout = r.seconds("min_timeout", data["min_timeout"])
    if "nccl_socket_ifname" in data:
        nccl = r.ifname(
            "nccl_socket_ifname", data["nccl_socket_ifname"], _NCCL_IFNAME, _NCCL_FORM, None
        )
    if "gloo_socket_ifname" in data:
        gloo = r.ifname(
            "gloo_socket_ifname", data["gloo_socket_ifname"], _GLOO_IFNAME, _GLOO_FORM, None
        )
    tables: dict[str, dict[str, object]] = {}
    for name in ("required_backend", "env"):
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise r.error(name, table, f"a table: [{name}] with one key per line")
        tables[name] = table
    required = r.required(tables["required_backend"])
    env: dict[str, str] = {}
    for name, value in tables["env"].items():
        key = f"env.{name}"
        if not _VARIABLE.fullmatch(name):
            raise r.error(key, name, "environment variable names (letters, digits, '_')")
        if not isinstance(value, str):
            raise r.error(key, value, 'a string, e.g. "1"')
        if name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") and name.lower() in data:
            raise plugin.ConfigError(
                f"site policy {origin}: {name} is given twice, as {name.lower()} and as "
                f"{key}; keep one"
            )
        env[name] = value
        r.sources[key] = r.label(key)
    return Policy(min_timeout, nccl, gloo, required, env, r.sources)


def policy_from_file(path: str | Path, variable: str = FILE) -> Policy:
    """A policy from the TOML file at ``path``; ``variable`` named it (for messages)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise plugin.ConfigError(
            f"{variable}={str(path)!r}: no such file; point it at the site policy (TOML)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise plugin.ConfigError(
            f"{variable}={str(path)!r} cannot be read ({type(exc).__name__}: {exc}); point it "
            "at a readable site policy file (TOML, UTF-8)"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise plugin.ConfigError(f"site policy {path} is not valid TOML: {exc}") from None
    return policy_from_mapping(data, str(path))


def policy_from_environment(env: Mapping[str, str], base: Policy | None = None) -> Policy:
    """``base`` (an empty policy by default) with what the ``ACCELBACKENDS_SITEPOLICY_*``
    variables say on top, key by key. Blank variables count as unset."""
    policy = base or Policy()
    r = _Reader(None)
    if value := env.get(MIN_TIMEOUT, "").strip():
        policy = dataclasses.replace(
            policy, min_timeout=r.seconds("min_timeout", value, MIN_TIMEOUT)
        )
    if value := env.get(NCCL_SOCKET_IFNAME, "").strip():
        policy = dataclasses.replace(
            policy,
            nccl_socket_ifname=r.ifname(
                "nccl_socket_ifname", value, _NCCL_IFNAME, _NCCL_FORM, NCCL_SOCKET_IFNAME
            ),
        )
    if value := env.get(GLOO_SOCKET_IFNAME, "").strip():
        policy = dataclasses.replace(
            policy,
            gloo_socket_ifname=r.ifname(
                "gloo_socket_ifname", value, _GLOO_IFNAME, _GLOO_FORM, GLOO_SOCKET_IFNAME
            ),
        )
    if value := env.get(REQUIRED_BACKEND, "").strip():
        pairs: dict[str, object] = {}
        for item in value.split(","):
            name, sep, backend = (part.strip() for part in item.partition("="))
            if not (sep and _NAME.fullmatch(name) and _NAME.fullmatch(backend)):
                raise plugin.ConfigError(
                    f"{REQUIRED_BACKEND}={value!r} is not valid: {item.strip()!r} is not an "
                    "accelerator=backend pair of lower-case names; use accelerator=backend "
                    "pairs, comma-separated, e.g. cuda=nccl,npu=hccl"
                )
            pairs[name] = backend
        required = r.required(pairs, REQUIRED_BACKEND)
        policy = dataclasses.replace(
            policy, required_backend={**policy.required_backend, **required}
        )
    return dataclasses.replace(policy, sources={**policy.sources, **r.sources})


def load_policy(env: Mapping[str, str]) -> Policy:
    """The policy in force: the file ``ACCELBACKENDS_SITEPOLICY_FILE`` names, if any, then the
    ``ACCELBACKENDS_SITEPOLICY_*`` variables."""
    path = env.get(FILE, "").strip()
    return policy_from_environment(env, policy_from_file(path) if path else None)
