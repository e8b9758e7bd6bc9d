"""What a node's devices and NICs are connected by, read from sysfs without a vendor runtime:
the facts ``info`` shows and ``check`` picks its floors from.

A PCI device's link is the same four files for every vendor (``current_link_speed``,
``current_link_width``, ``max_link_speed``, ``max_link_width``); a NIC's rate is
``/sys/class/infiniband/<dev>/ports/<n>/rate`` (InfiniBand and RoCE) or
``/sys/class/net/<if>/speed`` (Ethernet, Mb/s). Each fact carries where it was read; a fact that
cannot be read is said to be missing, with why, never guessed.

An accelerator plugin reports its devices' links through `AcceleratorSpec.links
<accelbackends.plugin.AcceleratorSpec>` as `DeviceLinks`, built with `pcie_link` and its own
runtime's facts (NVLink from NVML for NVIDIA GPUs). `DeviceLinks`, `PcieLink` and `Nic` are
boundary types (`accelbackends.plugin.types`).
"""

from __future__ import annotations

import re
from pathlib import Path

from . import sysfs
from .types import Nic, PcieLink, Probe

__all__ = ["pcie_generation", "pcie_link", "read_nics"]

#: PCIe transfer rate per lane (GT/s, as sysfs writes it) -> generation.
_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def pcie_generation(speed: str | None) -> int | None:
    """``"32.0 GT/s PCIe"`` (sysfs' ``current_link_speed``) -> 5; None where not a known
    rate."""
    if speed is None:
        return None
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*GT/s", speed)
    return _GENERATIONS.get(float(match.group(1))) if match else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def pcie_link(device: Path) -> PcieLink | None:
    """The PCIe link of the PCI function at ``device`` (a sysfs directory); None where none of
    its four link files can be read (not a PCIe device, or not there)."""
    link = PcieLink(
        pcie_generation(sysfs.read(device / "current_link_speed")),
        _int(sysfs.read(device / "current_link_width")),
        pcie_generation(sysfs.read(device / "max_link_speed")),
        _int(sysfs.read(device / "max_link_width")),
        str(device),
    )
    if (link.generation, link.width, link.max_generation, link.max_width) == (None,) * 4:
        return None
    return link


def read_nics(probe: Probe) -> list[Nic]:
    """The node's InfiniBand/RoCE ports and physical Ethernet interfaces with their rates.

    An Ethernet interface without a ``device`` link in sysfs is virtual (a bridge, a veth, a
    container's end) and is left out, as is ``lo``; an interface that belongs to an InfiniBand
    device (IPoIB, a RoCE port's netdev) is listed once, as that device's port."""
    found: list[Nic] = []
    ib_root = probe.path("/sys/class/infiniband")
    ib_netdevs: set[str] = set()
    for device in sysfs.listing(ib_root, r"[^.].*"):
        for port in sysfs.listing(device / "ports", r"\d+"):
            rate_file = port / "rate"
            rate = sysfs.read(rate_file)
            match = _RATE.match(rate or "")
            layer = (sysfs.read(port / "link_layer") or "").lower()
            state = sysfs.read(port / "state")
            found.append(
                Nic(
                    f"{device.name}/{port.name}",
                    "roce" if layer == "ethernet" else "infiniband",
                    float(match.group(1)) if match else None,
                    state.split(":", 1)[-1].strip() if state else None,
                    str(rate_file),
                    "" if match else f"{rate_file}: {'unreadable' if rate is None else repr(rate)}",
                )
            )
        for netdev in sysfs.listing(device / "device" / "net", r"[^.].*"):
            ib_netdevs.add(netdev.name)
    for interface in sysfs.listing(probe.path("/sys/class/net"), r"[^.].*"):
        if interface.name == "lo" or interface.name in ib_netdevs:
            continue
        if not sysfs.exists(interface / "device"):
            continue
        speed_file = interface / "speed"
        speed = sysfs.read(speed_file)
        mbps = int(speed) if speed is not None and speed.isdigit() else None
        state = sysfs.read(interface / "operstate")
        missing = ""
        if mbps is None:
            missing = f"{speed_file}: {'unreadable' if speed is None else repr(speed)}"
            if (state or "").lower() != "up":
                missing += f" (the interface is {state or 'in an unknown state'})"
        found.append(
            Nic(
                interface.name,
                "ethernet",
                None if mbps is None else mbps / 1000,
                state,
                str(speed_file),
                missing,
            )
        )
    return found
