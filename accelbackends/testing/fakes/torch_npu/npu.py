"""Fake ``torch_npu.npu``, the module the real package registers as ``torch.npu``. Test code only.

The node has ``FAKESTACK_NPU_DEVICES`` NPUs. Like the Ascend runtime, ``ASCEND_RT_VISIBLE_DEVICES``
(read when first asked) narrows them to the listed logical IDs, which the process then sees as
devices ``0 .. n-1``; the runtime stops reading the list at the first entry it does not take.
`bound_device_id` records the node-wide ID of the device `set_device` chose, so a
test can check that the right NPU was bound.
"""

from __future__ import annotations

import os
from typing import Any

#: The node-wide device ID of the NPU `set_device` bound; None before that.
bound_device_id: int | None = None
_current = 0


def _node_devices() -> int:
    value = os.environ.get("FAKESTACK_NPU_DEVICES", "").strip()
    return int(value) if value.isdigit() else 0


def visible_ids() -> list[int]:
    """Node-wide IDs of the NPUs this process sees, as the runtime reads the variable."""
    node = _node_devices()
    value = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if value is None:
        return list(range(node))
    ids: list[int] = []
    for item in value.split(","):
        if not item.isdigit() or int(item) >= node or (ids and int(item) <= ids[-1]):
            break
        ids.append(int(item))
    return ids


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return len(visible_ids())


def set_device(device: Any) -> None:
    global bound_device_id, _current
    index = device if isinstance(device, int) else getattr(device, "index", None)
    if index is None:
        index = int(str(device).partition(":")[2] or 0)
    visible = visible_ids()
    if not 0 <= index < len(visible):
        raise RuntimeError(
            f"fake NPU: device {index} out of range ({len(visible)} visible devices)"
        )
    _current = index
    bound_device_id = visible[index]


def current_device() -> int:
    return _current
