"""Fake ``intel_extension_for_pytorch``. Test code only.

Like IPEX for the CPU, it provides no device: installing it must never make the XPU
accelerator available.
"""

from __future__ import annotations

__version__ = "2.6.0+cpu"
