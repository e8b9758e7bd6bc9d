"""The backend-option fallbacks every accelerator plugin needs, written once.

An accelerator whose own backend (NCCL, HCCL, xccl …) also lists ``gloo`` must hand Gloo the
plain options: no device backend to import or check, no vendor environment defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .types import BackendOptions, OptionsRequest

__all__ = ["GLOO", "gloo_or", "plain_options"]

GLOO = "gloo"


def plain_options(request: OptionsRequest) -> BackendOptions:
    """The backend name and the timeout, nothing else: what torch gets when no accelerator
    callable has more to say."""
    return BackendOptions(request.backend, request.timeout)


def gloo_or(
    device_options: Callable[[OptionsRequest], BackendOptions],
) -> Callable[[OptionsRequest], BackendOptions]:
    """Wrap an accelerator's ``backend_options`` callable: where Gloo is asked for, the plain
    options; otherwise ``device_options(request)``."""

    @functools.wraps(device_options)
    def options(request: OptionsRequest) -> BackendOptions:
        if request.backend == GLOO:
            return plain_options(request)
        return device_options(request)

    return options
