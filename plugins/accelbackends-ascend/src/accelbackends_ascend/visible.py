"""``ASCEND_RT_VISIBLE_DEVICES`` and the local rank -> NPU mapping.

The Ascend runtime shows a process only the NPUs whose logical IDs the variable lists, in
ascending order, as devices ``0 .. n-1`` (``ASCEND_RT_VISIBLE_DEVICES=2,3``: device 0 is NPU 2).
The runtime is lenient: it stops reading at the first entry it does not take (``1, 2`` with a
space gives NPU 1 only) and says nothing. Here a malformed value is an error that names the
variable, the value and the accepted form.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import accelbackends

__all__ = ["FORMS", "VARIABLE", "device_index", "parse_visible"]

VARIABLE = "ASCEND_RT_VISIBLE_DEVICES"
FORMS = "comma-separated NPU IDs in ascending order, without spaces (e.g. 0,1 or 4,5,6,7)"
_ID = re.compile(r"[0-9]+")


def parse_visible(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """The NPU IDs ``ASCEND_RT_VISIBLE_DEVICES`` lists, or None where it is unset or blank."""
    value = env.get(VARIABLE)
    if value is None or not value.strip():
        return None
    ids: list[int] = []
    for item in value.split(","):
        if not _ID.fullmatch(item):
            raise accelbackends.ConfigError(
                f"{VARIABLE}={value!r} is not valid: {item!r} is not an NPU ID (the runtime "
                f"would silently ignore it and everything after it); use {FORMS}"
            )
        if ids and int(item) <= ids[-1]:
            raise accelbackends.ConfigError(
                f"{VARIABLE}={value!r} is not valid: {item} does not come after {ids[-1]} (the "
                f"runtime reads only IDs in ascending order); use {FORMS}"
            )
        ids.append(int(item))
    return tuple(ids)


def device_index(
    local_rank: int, local_world_size: int, visible_count: int, visible: tuple[int, ...] | None
) -> int:
    """The device index (among the visible NPUs) that ``local_rank`` binds to.

    Local rank *i* takes visible NPU *i*. Where the variable makes exactly one NPU visible, a
    launcher gave each rank its own (``ASCEND_RT_VISIBLE_DEVICES=$LOCAL_RANK``), and that one is
    taken. HCCL needs an NPU per rank, so more local ranks than visible NPUs is an error.
    """
    shown = "" if visible is None else f" ({VARIABLE}={','.join(map(str, visible))})"
    if visible_count < 1:
        raise accelbackends.ConfigError(
            f"no Ascend NPU is visible to this process{shown}; make at least one visible, or "
            "choose another accelerator with ACCELBACKENDS_ACCELERATOR"
        )
    if local_rank < visible_count and local_world_size <= visible_count:
        return local_rank
    if visible is not None and visible_count == 1:
        return 0
    raise accelbackends.ConfigError(
        f"this node runs {local_world_size} local ranks but only {visible_count} Ascend NPUs "
        f"are visible{shown}; start at most {visible_count} ranks per node or make more NPUs "
        "visible (HCCL needs an NPU per rank)"
    )
