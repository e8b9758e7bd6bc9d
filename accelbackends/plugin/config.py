"""Strict parsing of the ``ACCELBACKENDS_*`` environment variables.

Nothing here runs at import time: each value is read when the code that needs it asks, from the
mapping it is given (``os.environ`` by default, an injected dict in tests).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

from .errors import ConfigError

__all__ = [
    "ACCELERATOR",
    "BACKEND",
    "blanks",
    "CPU_AFFINITY",
    "DISABLE",
    "DIGITS",
    "DISABLE_PLUGIN_AUTOLOAD",
    "EAGER_INIT",
    "KNOWN_VARIABLES",
    "MAX_COUNT",
    "MAX_SECONDS",
    "MIN_SECONDS",
    "NVML",
    "PLUGINS",
    "PLUGIN_TIMEOUT",
    "PREFIX",
    "PROBE_ROOT",
    "RENDEZVOUS_TIMEOUT",
    "SECRET",
    "SHARE_DEVICES",
    "STANDALONE",
    "TIMEOUT",
    "overrides",
    "parse_bool",
    "parse_probe_root",
    "parse_int",
    "parse_name_list",
    "parse_seconds",
    "read_bool",
    "read_name",
    "read_name_list",
    "read_probe_root",
    "read_seconds",
    "shown",
    "unknown",
    "validate",
]

PREFIX = "ACCELBACKENDS_"
ACCELERATOR = PREFIX + "ACCELERATOR"
BACKEND = PREFIX + "BACKEND"
DISABLE = PREFIX + "DISABLE"
PLUGINS = PREFIX + "PLUGINS"
DISABLE_PLUGIN_AUTOLOAD = PREFIX + "DISABLE_PLUGIN_AUTOLOAD"
TIMEOUT = PREFIX + "TIMEOUT"
RENDEZVOUS_TIMEOUT = PREFIX + "RENDEZVOUS_TIMEOUT"
SHARE_DEVICES = PREFIX + "SHARE_DEVICES"
EAGER_INIT = PREFIX + "EAGER_INIT"
NVML = PREFIX + "NVML"
SECRET = PREFIX + "SECRET"
PLUGIN_TIMEOUT = PREFIX + "PLUGIN_TIMEOUT"
CPU_AFFINITY = PREFIX + "CPU_AFFINITY"
STANDALONE = PREFIX + "STANDALONE"
PROBE_ROOT = PREFIX + "PROBE_ROOT"

#: Every variable the package reads, with a one-line meaning. Modules take the names from here,
#: and a test checks this table against the reference docs.
KNOWN_VARIABLES: dict[str, str] = {
    ACCELERATOR: "use this accelerator instead of the automatic choice",
    BACKEND: "use this communication backend instead of the accelerator's default",
    DISABLE: "comma-separated plugin names to block (built-ins too, except cpu)",
    PLUGINS: "comma-separated allow-list of third-party plugins to load (empty: none)",
    DISABLE_PLUGIN_AUTOLOAD: "1: load only the built-in plugins",
    TIMEOUT: "collective timeout in seconds",
    RENDEZVOUS_TIMEOUT: "how long to wait for all ranks to join, in seconds",
    SHARE_DEVICES: "1: let more local ranks than visible devices share them, round robin",
    EAGER_INIT: "1/0: pass device_id= to init_process_group for NCCL eager init, or never",
    NVML: "auto, off, or a module with pynvml's functions: where the CUDA probe asks NVML",
    SECRET: "the job's shared secret (a value, or a file path) proving membership; off: no check",
    PLUGIN_TIMEOUT: "seconds a probe or a third-party plugin's import or hook may take (10)",
    CPU_AFFINITY: "off, numa, exclusive or on: pin each local rank to CPUs near its device",
    STANDALONE: "1: a world smaller than the scheduler's allocation is meant (no cross-check)",
    PROBE_ROOT: "the directory the probes read /sys, /proc and /dev under instead of / (tests)",
}

#: The range of a number of seconds: below a millisecond torch rounds a timeout to zero (no wait
#: at all); above 30 days ``timedelta`` and torch's millisecond counters overflow long before
#: (``1e14`` seconds), and nobody waits that long on purpose.
MIN_SECONDS = 0.001
MAX_SECONDS = 30 * 24 * 3600.0
#: How much of a value an error message echoes: enough to recognise it, never a whole file.
SHOWN_CHARACTERS = 80

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def shown(value: object) -> str:
    """``value`` as an error message quotes it: ``repr`` (so escape codes and other
    non-printables arrive escaped, not raw on the terminal), cut to `SHOWN_CHARACTERS`."""
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return f"{text[: SHOWN_CHARACTERS - 1]}\u2026 ({len(text)} characters)"


# ASCII digits only: ``int()`` would also take "٣" or "३", which no launcher writes.
#: A launcher's integer: optional sign ``+`` and ASCII digits, nothing around them. No launcher
#: writes a blank or a line break there; one that is there came from a hand-written script
#: (``RANK=$(cat file)``, a heredoc) and is refused, naming it (``int()`` alone takes "0\n" for 0).
DIGITS = re.compile(r"\A\+?([0-9]+)\Z", re.ASCII)
#: torch keeps ranks and sizes in a C ``int``; a larger value is a typo, not a job.
MAX_COUNT = 2**31 - 1


def blanks(value: str) -> str:
    """What to add to an error about a number that is valid but for blanks around it."""
    if value != value.strip() and DIGITS.match(value.strip()):
        return " without blanks or line breaks around it (launchers write none)"
    return ""


def parse_int(value: str, var: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """``value`` (of ``var``) as an integer from ``low`` to ``high``, or a ConfigError naming
    both and the range (one message for what is no integer and what is out of range: a world
    size told ">= 0" for "abc" and then refused for 0 sent the user round twice)."""
    match = DIGITS.match(value)
    if not match:
        raise ConfigError(
            f"{var}={shown(value)} is not valid; use an integer >= {low}{blanks(value)}"
        )
    # Compared as text first: int() of thousands of digits hits Python's conversion limit.
    digits = match.group(1).lstrip("0") or "0"
    if len(digits) > len(str(high)) or not low <= int(digits) <= high:
        raise ConfigError(
            f"{var}={shown(value)} is out of range; use an integer from {low} to {high}"
        )
    return int(digits)


def parse_bool(value: str, *, source: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off``, any case; anything else names ``source``."""
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigError(
        f"{source}={shown(value)} is not a boolean; use one of 1, true, yes, on or 0, false, "
        "no, off"
    )


#: The example a refused number of seconds is given: the variable's own default where it has
#: one far from 300 (the plugin time limit's 10 was once told "such as 300").
_EXAMPLE_SECONDS = {PLUGIN_TIMEOUT: "10 (the default)", TIMEOUT: "1800 (the default)"}


def parse_seconds(value: object, *, source: str) -> float:
    """A positive, finite number of seconds (``"90"``, ``"1.5"`` or a number) from
    `MIN_SECONDS` to `MAX_SECONDS`."""
    if isinstance(value, bool):
        raise ConfigError(
            f"{source}={shown(value)} is not a number of seconds; use a positive number"
        )
    example = _EXAMPLE_SECONDS.get(source, "300")
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"{source}={shown(value)} is not a number of seconds; use a positive number such as "
            f"{example}"
        ) from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(
            f"{source}={shown(value)} must be a positive, finite number of seconds, such as "
            f"{example}"
        )
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ConfigError(
            f"{source}={shown(value)} is out of range; use a positive number of seconds from "
            f"{MIN_SECONDS:g} to {MAX_SECONDS:.0f} (30 days)"
        )
    return seconds


def parse_name_list(value: str, *, source: str) -> tuple[str, ...]:
    """A comma-separated list of names; spaces around items are ignored, empty items are not."""
    if not value.strip():
        return ()
    names = tuple(item.strip() for item in value.split(","))
    for name in names:
        if not name:
            raise ConfigError(
                f"{source}={shown(value)} has an empty item; use comma-separated names such "
                "as 'a,b'"
            )
        if not _NAME.match(name):
            raise ConfigError(
                f"{source}={shown(value)}: {shown(name)} is not a plugin name "
                "(letters, digits, '.', '_' and '-')"
            )
    return names


def _get(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value, or None where it is unset or blank (``export X=`` means unset)."""
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value


def read_name(env: Mapping[str, str], name: str) -> str | None:
    value = _get(env, name)
    return None if value is None else value.strip()


def read_bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = _get(env, name)
    return default if value is None else parse_bool(value, source=name)


def read_seconds(env: Mapping[str, str], name: str) -> float | None:
    value = _get(env, name)
    return None if value is None else parse_seconds(value, source=name)


def read_name_list(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """None where unset; an empty tuple where set to the empty string (meaning "none")."""
    value = env.get(name)
    return None if value is None else parse_name_list(value, source=name)


def overrides(env: Mapping[str, str]) -> dict[str, str]:
    """The ``ACCELBACKENDS_*`` variables set in ``env``, sorted by name."""
    return {key: env[key] for key in sorted(env) if key.startswith(PREFIX)}


_NVML_WORDS = frozenset({"auto", "on", "off"}) | _TRUE | _FALSE
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def parse_probe_root(value: str, *, source: str) -> Path:
    """An existing directory, given as an absolute path: the root the probes read under."""
    path = Path(value.strip())
    if not path.is_absolute() or not path.is_dir():
        raise ConfigError(
            f"{source}={shown(value)} is not valid; use the absolute path of an existing "
            "directory (a fake machine's root, e.g. accelbackends.testing.FakeTree's), or unset "
            "it to probe the real machine under /"
        )
    return path


def read_probe_root(env: Mapping[str, str]) -> Path:
    """Where detection and the CPU-affinity plan read the machine: `PROBE_ROOT`, else ``/``.

    The one seam that keeps a test suite hermetic: pointed at a tree without accelerators, no
    probe (and so no selection) sees the machine's real GPUs, in the process and its children."""
    value = _get(env, PROBE_ROOT)
    return Path("/") if value is None else parse_probe_root(value, source=PROBE_ROOT)


def _check_nvml(value: str, *, source: str) -> None:
    word = value.strip()
    if word.lower() not in _NVML_WORDS and not _MODULE.match(word):
        raise ConfigError(
            f"{source}={shown(value)} is not valid; use auto, off, or the name of a module with "
            "pynvml's functions"
        )
    if word.lower() not in _NVML_WORDS:
        # A module the probe would fail to import: the CUDA probe would only say so in its
        # reason, and the node would quietly be taken for GPU-less. Found without importing it.
        import importlib.util

        try:
            found = importlib.util.find_spec(word) is not None
        except (ImportError, ValueError):  # a parent package that is missing or broken
            found = False
        if not found:
            raise ConfigError(
                f"{source}={shown(value)}: no module of that name can be imported here; use "
                "auto (NVIDIA's pynvml where installed: pip install nvidia-ml-py), off, or the "
                "name of an installed module with pynvml's functions"
            )


def validate(env: Mapping[str, str]) -> dict[str, str]:
    """Every ``ACCELBACKENDS_*`` variable in ``env`` that its reader would refuse, with the
    error it would raise: ``info`` shows them all at once instead of the code path that happens
    to read one first. (The accelerator and backend names are checked by the selection.)"""
    checks = {
        DISABLE: parse_name_list,
        PLUGINS: parse_name_list,
        DISABLE_PLUGIN_AUTOLOAD: parse_bool,
        TIMEOUT: parse_seconds,
        RENDEZVOUS_TIMEOUT: parse_seconds,
        SHARE_DEVICES: parse_bool,
        EAGER_INIT: parse_bool,
        STANDALONE: parse_bool,
        NVML: _check_nvml,
        PROBE_ROOT: parse_probe_root,
    }
    problems: dict[str, str] = {}
    for name, check in checks.items():
        value = env.get(name) if name in (DISABLE, PLUGINS) else _get(env, name)
        if value is None or (name in (DISABLE, PLUGINS) and not value.strip()):
            continue
        try:
            check(value, source=name)
        except ConfigError as exc:
            problems[name] = str(exc)
    return problems


def unknown(env: Mapping[str, str]) -> dict[str, str]:
    """``ACCELBACKENDS_*`` variables in ``env`` that the package does not read (a typo, or a
    third-party plugin's own variable), each with a note naming the closest known one."""
    notes: dict[str, str] = {}
    for name in sorted(env):
        if name.startswith(PREFIX) and name not in KNOWN_VARIABLES:
            import difflib  # only for a name it does not know

            close = difflib.get_close_matches(name, KNOWN_VARIABLES, n=1, cutoff=0.85)
            hint = f"; did you mean {close[0]}?" if close else ""
            notes[name] = f"not read by accelbackends itself{hint}"
    return notes
