"""Fake ``habana_frameworks.torch.hpu``. Test code only.

The device count comes from ``FAKESTACK_HPU_DEVICES``; modules are numbered from 0. Like the
real runtime, the first query acquires a module and reads ``HLS_MODULE_ID`` at that moment:
`acquired_module_id` records what it read, so a test can check that the plugin chose the
module before the runtime looked.
"""

from __future__ import annotations

import os

HABANA_VISIBLE_MODULES_VAR = "HABANA_VISIBLE_MODULES"
HLS_MODULE_ID_VAR = "HLS_MODULE_ID"

#: ``HLS_MODULE_ID`` as it was when the device was acquired; None before that.
acquired_module_id: str | None = None


def _devices() -> int:
    value = os.environ.get("FAKESTACK_HPU_DEVICES", "").strip()
    return int(value) if value.isdigit() else 0


def _acquire() -> None:
    global acquired_module_id
    if acquired_module_id is None:
        acquired_module_id = os.environ.get(HLS_MODULE_ID_VAR, "")


def is_available() -> bool:
    """Like the runtime: False when there is no device, or no module ``HLS_MODULE_ID`` names."""
    _acquire()
    module = acquired_module_id or "0"
    return _devices() > 0 and (not module.isdigit() or int(module) < _devices())


def device_count() -> int:
    _acquire()
    return _devices()


def current_device() -> int:
    return 0
