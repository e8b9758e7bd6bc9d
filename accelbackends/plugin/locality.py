"""Device locality from sysfs, written once for every plugin: which NUMA node and CPUs a PCI
device is attached to, and the kernel's cpulist format (``0-3,8,10-11``) they are written in.

Each accelerator plugin finds its devices' PCI functions its own way (``/proc/driver/nvidia``,
``/sys/class/drm``, ``/sys/class/accel``); from there the answer is always the same two files,
``numa_node`` and ``local_cpulist``. NVML's ``nvmlDeviceGetCpuAffinity`` reads the same
``local_cpulist``, so sysfs alone gives every vendor the same answer without loading a runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from . import sysfs
from .devices import Visible
from .types import Locality

__all__ = [
    "format_cpulist",
    "parse_cpulist",
    "pci_locality",
    "visible_localities",
    "visible_order",
]

T = TypeVar("T")


def parse_cpulist(text: str | None) -> frozenset[int] | None:
    """The CPUs of a kernel cpulist (``"0-3,8"``); None where ``text`` is None or malformed.

    An empty list (a memory-only NUMA node) is the empty set."""
    if text is None:
        return None
    cpus: set[int] = set()
    for item in text.strip().split(","):
        item = item.strip()
        if not item:
            continue
        first, dash, last = item.partition("-")
        # ``0-63:2/8`` (stride groups) is accepted by the kernel on input but never written by
        # it; treat it as unreadable rather than guess.
        if not first.isdigit() or (dash and not last.isdigit()):
            return None
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            return None
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 3, 8}`` as the kernel writes it: ``"0-3,8"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    first = 0
    while first < len(ordered):
        last = first
        while last + 1 < len(ordered) and ordered[last + 1] == ordered[last] + 1:
            last += 1
        low, high = ordered[first], ordered[last]
        parts.append(str(low) if low == high else f"{low}-{high}")
        first = last + 1
    return ",".join(parts)


def pci_locality(device: Path, source: str | None = None) -> Locality | None:
    """The NUMA node (``numa_node``; -1 means the platform does not say) and local CPUs
    (``local_cpulist``) of a PCI function's sysfs directory; None where neither is readable."""
    node_text = sysfs.read(device / "numa_node")
    node = int(node_text) if node_text is not None and node_text.isdigit() else None
    cpus = parse_cpulist(sysfs.read(device / "local_cpulist"))
    if node is None and not cpus:
        return None
    name = source or sysfs.target_name(device) or str(device)
    return Locality(node, cpus or None, name)


def visible_localities(
    physical: Sequence[Locality | None],
    visible: Visible,
    resolve: Callable[[str], int | None] | None = None,
) -> list[Locality | None]:
    """The localities of the devices a runtime shows, in its order, from those of the physical
    devices (`visible_order`)."""
    return visible_order(physical, visible, resolve)


def visible_order(
    physical: Sequence[T | None],
    visible: Visible,
    resolve: Callable[[str], int | None] | None = None,
) -> list[T | None]:
    """What a runtime shows, in its order, from what each physical device has: each entry of
    the visible-devices variable is a physical index (``"2"``, or ``"2.0"`` for a Level Zero
    sub-device), or a name that ``resolve`` turns into one (a GPU UUID); an entry that names
    nothing known shows None."""
    if not visible.restricted:
        return list(physical)
    shown: list[T | None] = []
    for entry in visible.entries[: visible.count(len(visible.entries))]:
        head = entry.split(".", 1)[0]
        index = int(head) if head.isdigit() else (resolve(entry) if resolve else None)
        shown.append(physical[index] if index is not None and index < len(physical) else None)
    return shown
