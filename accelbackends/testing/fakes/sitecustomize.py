"""Loaded by Python at start-up from the fake stack's directory on ``PYTHONPATH``: turns this CPU
torch into a fake XPU build when the stack asks for one. Test code only."""

from __future__ import annotations

import os

if os.environ.get("FAKESTACK_XPU_DEVICES") or os.environ.get("FAKESTACK_XCCL"):
    from accelbackends.testing.fakes.runtime import install_torch_hook

    install_torch_hook()
