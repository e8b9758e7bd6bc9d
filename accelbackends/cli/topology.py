"""What judges a node, as ``info`` shows it and ``check`` picks its floors by: the collective
library's version, each device's links (as its accelerator plugin reports them through
``AcceleratorSpec.links``) and the node's NICs with their rates. Read without importing torch or
a vendor stack; every fact says where it was read, and a fact that could not be read says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..plugin.errors import describe
from ..plugin.links import read_nics
from ..plugin.packages import nccl, torch_build
from ..plugin.types import AcceleratorStatus, DeviceLinks, Nic, PcieLink, Probe
from .text import aligned

__all__ = [
    "collect",
    "collective_library",
    "device_links",
    "nic_facts",
    "node_devices",
    "render",
]

_NCCL_BACKENDS = ("nccl", "nccl2", "nccl-lazy", "nccl-legacy")


def collective_library(backend: str | None, probe: Probe) -> dict[str, Any]:
    """The collective library's name and version and where it was read; ``version`` None with
    ``missing`` saying why where it cannot be read without importing torch."""
    build = torch_build(probe.packages)
    if backend in _NCCL_BACKENDS:
        if build is not None and build.hip is not None:
            return _library(
                "RCCL",
                None,
                None,
                f"not read: torch {build.version} bundles RCCL; check reports its version",
            )
        found = nccl(probe.packages, build.cuda if build else None)
        if found is not None:
            return _library("NCCL", found.version, f"installed package {found.name}")
        return _library(
            "NCCL",
            None,
            None,
            "not read: no nvidia-nccl-cu* package is installed (a torch built with NCCL "
            "statically says its version only once imported; check reports it)",
        )
    if backend == "gloo":
        return _library(
            "Gloo",
            None,
            f"part of torch {build.version}" if build else None,
            "" if build else "not read: torch is not installed",
        )
    if backend is None:
        return _library(None, None, None, "not read: no backend was selected")
    return _library(
        backend,
        None,
        None,
        f"not read: {backend}'s version is known once its stack is imported; check reports it",
    )


def _library(
    name: str | None, version: str | None, source: str | None, missing: str = ""
) -> dict[str, Any]:
    return {"name": name, "version": version, "source": source, "missing": missing or None}


def device_links(status: AcceleratorStatus, probe: Probe) -> tuple[list[DeviceLinks], str]:
    """The links the accelerator's plugin reports for its devices, and why there are none where
    it reports none (no ``links`` declared, or it failed: never raises)."""
    spec = status.spec
    if spec.links is None:
        return [], f"not read: the {status.plugin} plugin does not report its devices' links"
    try:
        found = list(spec.links(probe))
    except Exception as exc:
        return [], f"not read: plugin {status.plugin!r} failed to report links: {describe(exc)}"
    if not all(isinstance(d, DeviceLinks) for d in found):
        return [], f"not read: plugin {status.plugin!r}: links returned {found!r:.200}"
    if not found:
        return [], f"not read: the {status.plugin} plugin found no {spec.name} devices here"
    return found, ""


def device_json(device: DeviceLinks) -> dict[str, Any]:
    pcie = device.pcie
    return {
        "index": device.index,
        "model": device.model,
        "pci": device.pci,
        "numa_node": device.numa_node,
        "pcie": None
        if pcie is None
        else {
            "generation": pcie.generation,
            "width": pcie.width,
            "max_generation": pcie.max_generation,
            "max_width": pcie.max_width,
            "narrowed": pcie.narrowed,
        },
        "nvlinks": device.nvlinks,
        "nvlinks_total": device.nvlinks_total,
        "link_kind": device.link_kind,
        "uuid": device.uuid,
        "health": list(device.health),
        "sources": dict(device.sources),
        "missing": dict(device.missing),
    }


def node_devices(
    statuses: Sequence[AcceleratorStatus], selected: AcceleratorStatus | None, probe: Probe
) -> tuple[AcceleratorStatus | None, list[DeviceLinks], str]:
    """The devices whose links are shown, the accelerator they belong to, and why there are
    none: the selected accelerator's; else the first accelerator whose plugin finds devices
    with links, as on a GPU node whose torch cannot use them yet."""
    devices: list[DeviceLinks] = []
    why = "not read: no accelerator was selected"
    if selected is not None:
        devices, why = device_links(selected, probe)
    if devices:
        return selected, devices, why
    for status in statuses:
        if status is selected or status.spec.links is None:
            continue
        found, _ = device_links(status, probe)
        if found:
            return status, found, ""
    return selected, [], why


def nic_facts(probe: Probe) -> list[dict[str, Any]]:
    return [_nic_json(n) for n in read_nics(probe)]


def _nic_json(nic: Nic) -> dict[str, Any]:
    return {
        "name": nic.name,
        "kind": nic.kind,
        "gbps": nic.gbps,
        "state": nic.state,
        "up": nic.up,
        "source": nic.source,
        "missing": nic.missing or None,
    }


def collect(
    statuses: list[AcceleratorStatus],
    selected: AcceleratorStatus | None,
    backend: str | None,
    env: Mapping[str, str],
    root: Any,
) -> dict[str, Any]:
    """``info``'s ``links`` section: the collective library, the devices and their links (the
    selected accelerator's; else the first accelerator whose plugin finds devices with links, as
    on a GPU node whose torch cannot use them yet), the node's NICs."""
    probe = Probe(env=dict(env), root=root)
    shown, devices, why = node_devices(statuses, selected, probe)
    return {
        "accelerator": shown.name if shown else None,
        "collective_library": collective_library(backend, probe),
        "devices": [device_json(d) for d in devices],
        "devices_missing": None if devices else why,
        "nics": nic_facts(probe),
    }


def render(section: Mapping[str, Any]) -> list[str]:
    """The ``links`` section as ``info``'s text lines."""
    library = section["collective_library"]
    lines = ["links:"]
    if library["version"]:
        lines.append(
            f"  collective library: {library['name']} {library['version']} "
            f"(from {library['source']})"
        )
    elif library["source"]:
        lines.append(f"  collective library: {library['name']} ({library['source']})")
    else:
        lines.append(f"  collective library: {library['name'] or '-'}: {library['missing']}")
    devices = section["devices"]
    if not devices:
        lines.append(f"  devices: {section['devices_missing']}")
    else:
        rows = [["device", "model", "pci", "numa", "pcie", "nvlink", "health"]]
        for d in devices:
            pcie = d["pcie"]
            rows.append(
                [
                    f"{section['accelerator']}:{d['index']}",
                    d["model"] or "?",
                    d["pci"] or "?",
                    "?" if d["numa_node"] is None else str(d["numa_node"]),
                    "?" if pcie is None else _pcie_text(pcie),
                    "?" if d["nvlinks"] is None else _nvlink_text(d),
                    "; ".join(d["health"]) or ("?" if "health" in d["missing"] else "ok"),
                ]
            )
        lines += aligned(rows, "  ")
        lines += [f"  {line}" for line in _said(devices, "sources", "from ")]
        lines += [f"  {line}" for line in _said(devices, "missing", "")]
    nics = section["nics"]
    if not nics:
        lines.append("  nics: none found in /sys/class/infiniband or /sys/class/net")
    for nic in nics:
        rate = f"{nic['gbps']:g} Gb/s" if nic["gbps"] is not None else nic["missing"]
        lines.append(
            f"  nic {nic['name']}: {nic['kind']}, {rate}, {nic['state'] or 'state unknown'} "
            f"(from {nic['source']})"
        )
    return lines


def _pcie_text(pcie: Mapping[str, Any]) -> str:
    link = PcieLink(pcie["generation"], pcie["width"], pcie["max_generation"], pcie["max_width"])
    return link.text() + (" NARROW" if link.narrowed else "")


def _nvlink_text(device: Mapping[str, Any]) -> str:
    if not device["nvlinks_total"]:
        return "none"
    return f"{device['nvlinks']} of {device['nvlinks_total']} up"


def _said(devices: list[dict[str, Any]], key: str, word: str) -> list[str]:
    """One line per fact: where it was read (or why not), the device's own PCI address written
    ``<pci>`` so that eight GPUs read from eight directories make one line."""
    by_fact: dict[str, list[str]] = {}
    for d in devices:
        for fact, text in d[key].items():
            shown = re.sub(re.escape(d["pci"]), "<pci>", text) if d["pci"] else text
            if shown not in by_fact.setdefault(fact, []):
                by_fact[fact].append(shown)
    return [f"{fact}: {word}{' | '.join(texts)}" for fact, texts in by_fact.items()]
