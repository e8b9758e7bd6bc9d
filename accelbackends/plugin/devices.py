"""Visible-device variables and the local rank -> device mapping, written once for every plugin.

Each vendor runtime reads a variable that restricts the devices a process sees
(``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``,
``HABANA_VISIBLE_MODULES``). The runtimes are lenient: CUDA stops reading at the first entry it
does not understand and silently hides the rest. Here a malformed value is a
[`ConfigError`][accelbackends.ConfigError] naming the variable, the value and the
accepted forms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from . import config
from .errors import ConfigError
from .text import plural

__all__ = [
    "SHARE_DEVICES",
    "Visible",
    "cuda_visible",
    "device_index",
    "habana_visible",
    "index_list",
    "rocm_visible",
    "shares_devices",
    "ze_visible",
]

#: Opt-in: let more local ranks than visible devices share them, round robin.
SHARE_DEVICES = config.SHARE_DEVICES

_INDEX = re.compile(r"\d+")
_ASCII_INDEX = re.compile(r"[0-9]+")
_GPU_UUID = re.compile(r"GPU-[0-9A-Fa-f][0-9A-Fa-f-]*")
#: ``MIG-<uuid>`` (driver R470 and later) or ``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``.
_MIG = re.compile(r"MIG-(?:[0-9A-Fa-f][0-9A-Fa-f-]*|GPU-[0-9A-Fa-f-]+/\d+/\d+)")
_ZE_ENTRY = re.compile(r"\d+(?:\.\d+)?")

_CUDA_FORMS = (
    "comma-separated GPU indices (0,1), GPU UUIDs (GPU-8f3c…) or MIG identifiers (MIG-…), "
    "one form at a time; an empty value or -1 hides every GPU"
)
_ROCM_FORMS = "comma-separated GPU indices (0,1) or GPU UUIDs (GPU-…), one form at a time"
_ZE_FORMS = "comma-separated device indices (0,1) or device.sub-device pairs (0.0,0.1)"
_HABANA_FORMS = "comma-separated module IDs (0,1,2,3)"


@dataclass(frozen=True)
class Visible:
    """What a visible-devices variable lets this process see.

    Attributes:
        variable: The variable that restricts the devices (`CUDA_VISIBLE_DEVICES` ...), or None
            where none does.
        value: The variable's value, as set.
        entries: The items as written (`("0", "2")`, `("GPU-8f3c…",)`).
        limit: How many of the entries a runtime uses at most (CUDA enumerates a single MIG
            device per process), or None for all of them.
    """

    variable: str | None = None
    value: str = ""
    entries: tuple[str, ...] = ()
    limit: int | None = None

    @property
    def restricted(self) -> bool:
        """Whether a variable restricts the devices."""
        return self.variable is not None

    def count(self, physical: int) -> int:
        """How many devices the runtime will show, given ``physical`` devices on the node."""
        if not self.restricted:
            return physical
        return len(self.entries) if self.limit is None else min(len(self.entries), self.limit)

    def describe(self) -> str:
        if not self.restricted:
            return "no visible-devices variable"
        return f"{self.variable}={self.value!r}"


def _split(
    variable: str, value: str, forms: str, *patterns: re.Pattern[str]
) -> tuple[tuple[str, ...], int]:
    """Items of a comma-separated list, all of one form; returns them and the pattern's index."""
    items = tuple(item.strip() for item in value.split(","))
    if any(not item for item in items):
        raise ConfigError(f"{variable}={value!r} has an empty item; use {forms}")
    kinds = set()
    for item in items:
        kind = next((i for i, p in enumerate(patterns) if p.fullmatch(item)), None)
        if kind is None:
            raise ConfigError(
                f"{variable}={value!r} is not valid: {item!r} is not an accepted entry; use {forms}"
            )
        kinds.add(kind)
    if len(kinds) > 1:
        raise ConfigError(f"{variable}={value!r} mixes forms; use {forms}")
    for position, item in enumerate(items):
        if item in items[:position]:
            raise ConfigError(f"{variable}={value!r} lists {item!r} twice; use {forms}")
    return items, kinds.pop()


def cuda_visible(env: Mapping[str, str], variable: str = "CUDA_VISIBLE_DEVICES") -> Visible:
    """``CUDA_VISIBLE_DEVICES`` as the CUDA runtime reads it, strictly.

    ``""`` and ``-1`` hide every GPU (the runtime reads -1 as an invalid first entry), and so
    does Slurm's ``NoDevFiles`` (set for a job step that was given no GPU).
    """
    value = env.get(variable)
    if value is None:
        return Visible()
    if value.strip() in ("", "-1", "NoDevFiles"):
        return Visible(variable, value, ())
    items, kind = _split(variable, value, _CUDA_FORMS, _INDEX, _GPU_UUID, _MIG)
    # A CUDA process enumerates only the first MIG device it is given (NVIDIA MIG user guide,
    # "CUDA device enumeration"); more ranks need one MIG device each, per process.
    return Visible(variable, value, items, limit=1 if kind == 2 else None)


def rocm_visible(env: Mapping[str, str]) -> Visible:
    """The GPUs a ROCm process sees: ``ROCR_VISIBLE_DEVICES`` is applied first, then
    ``HIP_VISIBLE_DEVICES`` (or, where that is unset, ``CUDA_VISIBLE_DEVICES``, which HIP also
    honours) selects among the GPUs ROCr left visible."""
    rocr = env.get("ROCR_VISIBLE_DEVICES")
    rocr_items: tuple[str, ...] | None = None
    if rocr is not None and rocr.strip():
        rocr_items, _ = _split("ROCR_VISIBLE_DEVICES", rocr, _ROCM_FORMS, _INDEX, _GPU_UUID)
    hip_variable = next(
        (v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if env.get(v) is not None),
        None,
    )
    if hip_variable is None:
        if rocr_items is None:
            return Visible()
        return Visible("ROCR_VISIBLE_DEVICES", rocr or "", rocr_items)
    hip = env[hip_variable]
    if hip.strip() in ("", "-1"):
        return Visible(hip_variable, hip, ())
    items, _ = _split(hip_variable, hip, _ROCM_FORMS, _INDEX, _GPU_UUID)
    if rocr_items is not None and len(items) > len(rocr_items):
        raise ConfigError(
            f"{hip_variable}={hip!r} selects {len(items)} GPUs, but ROCR_VISIBLE_DEVICES={rocr!r} "
            f"leaves only {len(rocr_items)} visible; {hip_variable} indexes the GPUs that "
            "ROCR_VISIBLE_DEVICES left, so list at most that many"
        )
    return Visible(hip_variable, hip, items)


def ze_visible(env: Mapping[str, str]) -> Visible:
    """``ZE_AFFINITY_MASK`` (Level Zero). Blank counts as unset."""
    value = env.get("ZE_AFFINITY_MASK")
    if value is None or not value.strip():
        return Visible()
    items, _ = _split("ZE_AFFINITY_MASK", value, _ZE_FORMS, _ZE_ENTRY)
    return Visible("ZE_AFFINITY_MASK", value, items)


def habana_visible(env: Mapping[str, str]) -> Visible:
    """``HABANA_VISIBLE_MODULES``: the module IDs this node's ranks may acquire. Blank counts
    as unset."""
    value = env.get("HABANA_VISIBLE_MODULES")
    if value is None or not value.strip():
        return Visible()
    items, _ = _split("HABANA_VISIBLE_MODULES", value, _HABANA_FORMS, _INDEX)
    return Visible("HABANA_VISIBLE_MODULES", value, items)


def index_list(
    env: Mapping[str, str],
    variable: str,
    forms: str,
    *,
    entry: str = "a device index",
    ascending: bool = False,
) -> tuple[int, ...] | None:
    """The integer IDs ``variable`` lists, or None where it is unset or blank.

    Stricter than `cuda_visible`'s forms: no spaces, because a vendor runtime that stops
    at the first entry it does not take (Ascend's) would silently drop the rest. With
    ``ascending``, each ID must come after the one before it, as such runtimes read only IDs in
    ascending order.

    Args:
        forms: The accepted forms, for messages (``"comma-separated NPU IDs ..."``).
        entry: One item, for messages (``"an NPU ID"``).
    """
    value = env.get(variable)
    if value is None or not value.strip():
        return None
    ids: list[int] = []
    for item in value.split(","):
        if not _ASCII_INDEX.fullmatch(item):
            raise ConfigError(
                f"{variable}={value!r} is not valid: {item!r} is not {entry} (the runtime "
                f"would silently ignore it and everything after it); use {forms}"
            )
        if ascending and ids and int(item) <= ids[-1]:
            raise ConfigError(
                f"{variable}={value!r} is not valid: {item} does not come after {ids[-1]} (the "
                f"runtime reads only IDs in ascending order); use {forms}"
            )
        ids.append(int(item))
    return tuple(ids)


def shares_devices(
    *,
    local_world_size: int,
    count: int,
    visible: Visible,
    env: Mapping[str, str],
    one_per_rank_ok: bool = True,
) -> bool:
    """Whether `device_index` puts more than one of this node's ``local_world_size`` ranks on one
    of the ``count`` visible devices: more ranks than devices, with `SHARE_DEVICES` set, and not
    the one-device-per-rank case a launcher sets up (see `device_index`). The same answer on
    every local rank, so a backend that cannot share a device refuses on all of them."""
    if count < 1 or local_world_size <= count:
        return False
    if one_per_rank_ok and visible.restricted and count == 1:
        return False
    return config.read_bool(env, SHARE_DEVICES)


def device_index(
    *,
    local_rank: int,
    local_world_size: int,
    count: int,
    visible: Visible,
    what: str,
    env: Mapping[str, str],
    one_per_rank_ok: bool = True,
    shareable: bool = True,
) -> int:
    """The index (among the visible devices) that ``local_rank`` binds to.

    Local rank *i* takes visible device *i*. More local ranks than visible devices is a
    [`ConfigError`][accelbackends.ConfigError] naming both numbers, unless `SHARE_DEVICES` is set
    (then ranks share devices round robin) or, with ``one_per_rank_ok``, the variable makes exactly
    one device visible: launchers that give each rank its own device (``srun --gpus-per-task=1``,
    ``ZE_AFFINITY_MASK=$LOCAL_RANK``) set it per process, so each rank takes that one.

    Args:
        what: The devices, plural, for messages (``"GPUs"``, ``"Gaudi modules"``).
        shareable: False where a device belongs to one process only (a Gaudi module is
            acquired exclusively), so `SHARE_DEVICES` cannot help.
    """
    if count < 1:
        raise ConfigError(
            f"no {what} are visible to this process ({visible.describe()}); make at least one "
            "visible, or choose another accelerator with "
            f"{config.ACCELERATOR}"
        )
    if local_rank < count and local_world_size <= count:
        return local_rank
    if one_per_rank_ok and visible.restricted and count == 1:
        return 0
    if shareable and config.read_bool(env, SHARE_DEVICES):
        return local_rank % count
    source = f" ({visible.describe()})" if visible.restricted else ""
    share = (
        f", or set {SHARE_DEVICES}=1 to let ranks share {what} round robin"
        if shareable
        else f"; {what} cannot be shared between processes"
    )
    # `what` is plural ("GPUs", "Gaudi modules"): one device is "1 GPU is visible".
    only = f"{count} {what[:-1]} is" if count == 1 and what.endswith("s") else f"{count} {what} are"
    raise ConfigError(
        f"this node runs {local_world_size} local ranks but only {only} visible{source}; start at "
        f"most {count} {plural(count, 'rank')} per node or make more {what} visible{share}"
    )
