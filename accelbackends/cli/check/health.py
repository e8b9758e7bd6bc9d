"""The devices' own health, before the collectives, named by the rank that uses each device.

Each rank finds the physical device it uses: its device ordinal (``cuda:1``) read through the
visible-devices variable its runtime honours (``CUDA_VISIBLE_DEVICES=3,5`` makes ``cuda:1``
physical GPU 5; an entry may be a GPU UUID, matched against the UUID the plugin read). One rank
per node lists its devices' faults (a PCIe link trained narrower than its maximum, NVML's
health signals). A fault on a device a rank uses names that rank and that device; a fault on a
device no rank of the run uses is said so and blamed on no rank, but still fails its node: the
next job there may use it. Pure functions of what the ranks gathered, but `rank_device`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...plugin.devices import Visible, cuda_visible, habana_visible, rocm_visible, ze_visible
from ...plugin.locality import visible_order
from ...plugin.types import DeviceLinks
from ..text import rank_list
from .verdicts import Culprit

__all__ = ["device_faults", "health_culprits", "rank_device"]

#: The visible-devices variable each built-in accelerator's runtime honours.
_VISIBLE: dict[str, Callable[[Mapping[str, str]], Visible]] = {
    "cuda": cuda_visible,
    "rocm": rocm_visible,
    "xpu": ze_visible,
    "hpu": habana_visible,
}


def rank_device(
    runtime: str,
    ordinal: int | None,
    devices: Sequence[DeviceLinks],
    env: Mapping[str, str],
) -> tuple[int | None, str]:
    """The physical index (``DeviceLinks.index``) of the device a rank uses, or None with why:
    ``runtime`` names the visible-devices rule (``cuda``, ``rocm``, ``xpu``, ``hpu``; another
    is not mapped), ``ordinal`` is the rank's device index in its runtime's order (None: the
    rank uses no device of ``devices``, as a CPU rank)."""
    if ordinal is None:
        return None, "uses no device (a CPU rank)"
    rule = _VISIBLE.get(runtime)
    if rule is None:
        return None, f"not mapped: accelbackends does not know {runtime}'s visible-devices rule"
    try:
        visible = rule(env)
    except Exception as exc:  # init() refused the variable already; this is a second look
        return None, f"not mapped: {exc}"

    def by_uuid(entry: str) -> int | None:
        found = [i for i, d in enumerate(devices) if d.uuid and d.uuid.startswith(entry)]
        return found[0] if len(found) == 1 else None

    shown = visible_order(list(devices), visible, by_uuid)
    if ordinal >= len(shown) or shown[ordinal] is None:
        return None, f"not mapped: {visible.describe()} shows no device {ordinal} that is listed"
    device = shown[ordinal]
    assert device is not None
    return device.index, ""


def device_faults(devices: Sequence[DeviceLinks]) -> list[tuple[int, str]]:
    """Each device's faults as (physical index, fault): a PCIe link narrower than its maximum,
    then what the runtime reports (ECC, pages or rows waiting for a reset, throttling)."""
    faults = [
        (d.index, f"PCIe Gen{d.pcie.generation} x{d.pcie.width}, expected x{d.pcie.max_width}")
        for d in devices
        if d.pcie is not None and d.pcie.narrowed
    ]
    faults += [(d.index, problem) for d in devices for problem in d.health]
    return sorted(faults, key=lambda fault: fault[0])


def health_culprits(facts: Sequence[Mapping[str, Any]]) -> list[Culprit]:
    """The devices to blame, from every rank's facts: ``host``, ``rank``, ``gpu`` (the
    physical index it uses, or None) and ``faults`` (`device_faults`, from one rank a node).
    Each culprit is a ``device``: its hosts the device's node, its ranks those that use it."""
    users: dict[tuple[str, int], list[int]] = {}
    for fact in facts:
        if fact["gpu"] is not None:
            users.setdefault((fact["host"], fact["gpu"]), []).append(fact["rank"])
    culprits = []
    for fact in facts:
        for index, fault in fact["faults"]:
            ranks = sorted(users.get((fact["host"], index), []))
            who = rank_list(ranks) if ranks else "used by no rank of this run"
            culprits.append(
                Culprit(
                    "device",
                    (fact["host"],),
                    tuple(ranks),
                    f"GPU {index} on {fact['host']} ({who}): {fault}",
                )
            )
    return culprits
