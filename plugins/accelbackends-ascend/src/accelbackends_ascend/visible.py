"""``ASCEND_RT_VISIBLE_DEVICES`` and the local rank -> NPU mapping, through the plugin layer's
visible-device helpers.

The Ascend runtime shows a process only the NPUs whose logical IDs the variable lists, in
ascending order, as devices ``0 .. n-1`` (``ASCEND_RT_VISIBLE_DEVICES=2,3``: device 0 is NPU 2).
The runtime is lenient: it stops reading at the first entry it does not take (``1, 2`` with a
space gives NPU 1 only) and says nothing. Here a malformed value is an error that names the
variable, the value and the accepted form.
"""

from __future__ import annotations

from collections.abc import Mapping

from accelbackends.plugin import devices

__all__ = ["FORMS", "VARIABLE", "device_index", "parse_visible"]

VARIABLE = "ASCEND_RT_VISIBLE_DEVICES"
FORMS = "comma-separated NPU IDs in ascending order, without spaces (e.g. 0,1 or 4,5,6,7)"


def parse_visible(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """The NPU IDs ``ASCEND_RT_VISIBLE_DEVICES`` lists, or None where it is unset or blank."""
    return devices.index_list(env, VARIABLE, FORMS, entry="an NPU ID", ascending=True)


def device_index(
    local_rank: int,
    local_world_size: int,
    visible_count: int,
    visible: tuple[int, ...] | None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The device index (among the visible NPUs) that ``local_rank`` binds to.

    Local rank *i* takes visible NPU *i*; where the variable makes exactly one NPU visible, a
    launcher gave each rank its own, and that one is taken. HCCL needs an NPU per rank, so NPUs
    are never shared.
    """
    shown = (
        devices.Visible()
        if visible is None
        else devices.Visible(VARIABLE, ",".join(map(str, visible)), tuple(map(str, visible)))
    )
    return devices.device_index(
        local_rank=local_rank,
        local_world_size=local_world_size,
        count=visible_count,
        visible=shown,
        what="Ascend NPUs",
        env=env or {},
        shareable=False,
    )
