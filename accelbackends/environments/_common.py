"""Reading launcher variables strictly: one place for every environment plugin."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import ConfigError

_INT = re.compile(r"^\s*\+?\d+\s*$")


def read_int(env: Mapping[str, str], var: str) -> int:
    """``env[var]`` as an integer >= 0, or a ConfigError naming the variable and its value."""
    value = env.get(var)
    if value is None:
        raise ConfigError(f"{var} is not set")
    if not _INT.match(value):
        raise ConfigError(f"{var}={value!r} is not valid; use an integer >= 0")
    return int(value)


def read_port(env: Mapping[str, str], var: str) -> int:
    port = read_int(env, var)
    if not 0 < port < 65536:
        raise ConfigError(f"{var}={env[var]!r} is not a TCP port; use 1 to 65535")
    return port


def require(env: Mapping[str, str], launcher: str, *names: str) -> None:
    """Every one of ``names`` must be set (and not blank) for ``launcher``."""
    missing = [name for name in names if not env.get(name, "").strip()]
    if missing:
        raise ConfigError(
            f"the {launcher} environment is missing {', '.join(missing)}; "
            f"a {launcher} launch sets {', '.join(names)}"
        )
