"""Fake ``habana_frameworks.torch``: registers the ``hpu`` device module with torch, as the real
bridge does. Importing it acquires no device. Test code only."""

from __future__ import annotations

import torch

from accelbackends.plugin.torchcompat import register_device_module

from . import hpu

if not hasattr(torch, "hpu"):
    register_device_module("hpu", hpu)

__all__ = ["hpu"]
