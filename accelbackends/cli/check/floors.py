"""Floors from the topology, as data: a thresholds file of rules keyed by device model, link kind,
GPUs per node and NIC rate, and the pick of the rule that matches what the ranks found.

The file has one rule per line; ``#`` starts a comment. A line is the rule's kind, then
``field=value`` pairs (values with spaces in double quotes):

```
device_copy model=*H200*                gbps=3840 why="0.8 x 4.8 TB/s (NVIDIA's spec)"
busbw       model=*H200* link=nvlink gpus=8 gbps=259  why="0.7 x ~370 GB/s ring"
busbw       link=nic nic_gbps=400        gbps=32   why="0.7 x 46 GB/s, one 400 Gb/s NIC"
```

``device_copy`` holds each rank's device memory copy (read+write, GB/s); ``busbw`` holds the
collectives' busbw at the largest size (every swept operation, or ``op=``); ``host_copy`` holds
each rank's copies between pinned host memory and its GPU, each way, to ``fraction=`` of the
rate of the PCIe link its GPU supports (`pcie_gbps`: generation x width, per direction), in
place of ``gbps=``. ``model`` is a
shell pattern on the device's model name (case ignored); ``link`` is ``nvlink`` or ``pcie``
(within one node) or ``nic`` (between nodes: the rule holds a job of several nodes);
``gpus`` the ranks per node; ``nic_gbps`` the slowest node's fastest InfiniBand/RoCE port, Gb/s.
A field left out matches anything. The first matching rule of each kind wins: ``--thresholds``'s
file alone, else the accelerator plugin's own file (``AcceleratorSpec.thresholds``), then the one
shipped with accelbackends (``floors.txt`` beside this module).
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...plugin.errors import ConfigError

__all__ = ["PCIE_LANE_GBPS", "SHIPPED", "FloorRule", "Topology", "match", "pcie_gbps", "read_rules"]

SHIPPED = Path(__file__).with_name("floors.txt")
KINDS = ("device_copy", "busbw", "host_copy")
LINKS = ("nvlink", "pcie", "nic")
OPS = ("all_reduce", "all_gather")
#: GB/s one PCIe lane carries each way, by generation, after its line encoding (8b/10b to Gen2,
#: 128b/130b from Gen3, FLIT mode's 242 of 256 bytes at Gen6): PCI-SIG's transfer rates of
#: 2.5, 5, 8, 16, 32 and 64 GT/s, read, not measured.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
_FIELDS = ("model", "link", "gpus", "nic_gbps", "op", "gbps", "fraction", "why")


@dataclass(frozen=True)
class FloorRule:
    """One line of a thresholds file."""

    kind: str
    gbps: float
    why: str
    where: str  # ``FILE:LINE``
    model: str | None = None
    link: str | None = None
    gpus: int | None = None
    nic_gbps: float | None = None
    op: str | None = None
    fraction: float | None = None  # host_copy: of the PCIe link's rate, in place of gbps

    def describe(self) -> str:
        """``busbw >= 259 GB/s (model=*H200*, link=nvlink, gpus=8; floors.txt:12): why``."""
        keys = [
            f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
            for name, value in (
                ("model", self.model),
                ("link", self.link),
                ("gpus", self.gpus),
                ("nic_gbps", self.nic_gbps),
                ("op", self.op),
            )
            if value is not None
        ]
        matched = ", ".join(keys) or "any node"
        if self.kind == "host_copy":
            return (
                f"host<->device copy >= {self.fraction:g} x the GPU's PCIe link rate "
                f"({matched}; {self.where}): {self.why}"
            )
        what = "device copy" if self.kind == "device_copy" else "collective bandwidth"
        return f"{what} >= {self.gbps:g} GB/s ({matched}; {self.where}): {self.why}"


@dataclass(frozen=True)
class Topology:
    """What the ranks found, that the rules match on (None: not known, matches no rule that
    asks for it)."""

    model: str | None
    link: str | None  # nvlink or pcie within a node
    gpus: int
    nodes: int
    nic_gbps: float | None

    def describe(self) -> str:
        return (
            f"model {self.model or 'unknown'}, link {self.link or 'unknown'}, {self.gpus} per "
            f"node, {self.nodes} {'node' if self.nodes == 1 else 'nodes'}, NIC "
            + (f"{self.nic_gbps:g} Gb/s" if self.nic_gbps else "unknown")
        )


def pcie_gbps(generation: int | None, width: int | None) -> float | None:
    """The rate a PCIe link of ``generation`` and ``width`` carries each way, GB/s; None where
    either is unknown."""
    if generation not in PCIE_LANE_GBPS or not width:
        return None
    return PCIE_LANE_GBPS[generation] * width


def read_rules(path: str | os.PathLike[str], what: str) -> tuple[FloorRule, ...]:
    """The rules of the file at ``path``; ``what`` names it in errors (``--thresholds``).
    Bad input is a `ConfigError` naming the file, the line and the field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what}={path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what}={path}: not a UTF-8 text file") from None
    name = Path(path).name if Path(path) == SHIPPED else str(path)
    return tuple(
        rule
        for number, line in enumerate(text.splitlines(), 1)
        if (rule := _parse_line(line, f"{name}:{number}", f"{what}={path} line {number}"))
    )


def _parse_line(line: str, where: str, context: str) -> FloorRule | None:
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        raise ConfigError(f"{context}: {exc}; quote a value with spaces in double quotes") from None
    if not words:
        return None
    kind, *pairs = words
    if kind not in KINDS:
        raise ConfigError(f"{context}: kind {kind!r} is not known; use one of {', '.join(KINDS)}")
    fields: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in _FIELDS:
            raise ConfigError(
                f"{context}: field {key!r} is not known; use field=value with the fields "
                f"{', '.join(_FIELDS)}"
            )
        fields[key] = _value(key, value, context)
    _fields_of(kind, fields, context)
    return FloorRule(
        kind,
        fields.pop("gbps", 0.0),
        fields.pop("why", "") or "no reason given",
        where,
        **fields,
    )


def _fields_of(kind: str, fields: dict[str, Any], context: str) -> None:
    """Refuse the fields ``kind`` has no use for, and ask for the floor it needs."""
    needed = "fraction" if kind == "host_copy" else "gbps"
    if needed not in fields:
        example = "fraction=0.6" if kind == "host_copy" else "gbps=NUMBER"
        raise ConfigError(f"{context}: field {needed} is missing; give the floor as {example}")
    foreign = {"link", "nic_gbps", "op"} | ({"gbps"} if kind == "host_copy" else {"fraction"})
    if kind != "busbw" and foreign & fields.keys():
        raise ConfigError(
            f"{context}: field {sorted(foreign & fields.keys())[0]} does not apply to {kind}; "
            f"use model (and gpus) and {needed}"
        )
    if kind == "busbw" and "fraction" in fields:
        raise ConfigError(f"{context}: field fraction does not apply to busbw; use gbps")


def _value(key: str, value: str, context: str) -> Any:
    if key == "fraction":
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not 0 < number <= 1:
            raise ConfigError(
                f"{context}: field fraction: {value!r} is not valid; use a number greater "
                "than 0 and at most 1"
            )
        return number
    if key in ("gbps", "nic_gbps"):
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0:
            raise ConfigError(
                f"{context}: field {key}: {value!r} is not valid; use a positive number"
            )
        return number
    if key == "gpus":
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{context}: field gpus: {value!r} is not valid; use an integer >= 1")
        return int(value)
    if key == "link" and value not in LINKS:
        raise ConfigError(
            f"{context}: field link: {value!r} is not valid; use one of {', '.join(LINKS)}"
        )
    if key == "op" and value not in OPS:
        raise ConfigError(
            f"{context}: field op: {value!r} is not valid; use one of {', '.join(OPS)}"
        )
    if not value:
        raise ConfigError(f"{context}: field {key} is empty; give a value or leave it out")
    return value


def match(rules: Sequence[FloorRule], kind: str, topology: Topology) -> FloorRule | None:
    """The first rule of ``kind`` that ``topology`` matches: a ``link=nic`` busbw rule holds
    jobs of several nodes, any other busbw rule jobs of one node."""
    for rule in rules:
        if rule.kind != kind:
            continue
        if rule.model is not None and not (
            topology.model and fnmatch.fnmatch(topology.model.lower(), rule.model.lower())
        ):
            continue
        if rule.gpus is not None and rule.gpus != topology.gpus:
            continue
        if kind == "busbw":
            if (rule.link == "nic") != (topology.nodes > 1):
                continue
            if rule.link in ("nvlink", "pcie") and rule.link != topology.link:
                continue
            if rule.nic_gbps is not None and topology.nic_gbps != rule.nic_gbps:
                continue
        return rule
    return None
