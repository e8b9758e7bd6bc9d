"""A cluster's rules for accelbackends jobs, applied to every ``accelbackends.init()``.

The policy (see :mod:`.policy`) is read from the TOML file ``ACCELBACKENDS_SITEPOLICY_FILE``
names and from ``ACCELBACKENDS_SITEPOLICY_*`` variables, each time ``init()`` builds the
backend options. It is applied in the ``accelbackends_backend_options`` hook as a *wrapper*:
whatever the accelerator and other plugins decided comes back from ``yield``, and the policy has
the last word on it. The plugin imports nothing heavy and does nothing at import.
"""

from __future__ import annotations

import os
from collections.abc import Generator

from accelbackends import plugin

from .policy import (
    FILE,
    VARIABLES,
    Policy,
    load_policy,
    policy_from_environment,
    policy_from_file,
)

__all__ = [
    "FILE",
    "VARIABLES",
    "Policy",
    "SitePolicy",
    "accelbackends_backend_options",
    "load_policy",
    "policy_from_environment",
    "policy_from_file",
]

__version__ = "0.1.0"

_Options = Generator[None, plugin.BackendOptions, plugin.BackendOptions]


@plugin.hookimpl(wrapper=True)
def accelbackends_backend_options(
    accelerator: plugin.AcceleratorSpec,
    options: plugin.BackendOptions,
    cluster: plugin.ClusterInfo,
) -> _Options:
    """The site's policy on top of whatever the other implementations returned."""
    result = yield
    return load_policy(os.environ).apply(accelerator, result)


class SitePolicy:
    """A fixed :class:`Policy` as a plugin object, for registering inline (tests, notebooks)::

    accelbackends.Registry(plugins=[("site", SitePolicy(Policy(min_timeout=900)))])
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    @plugin.hookimpl(wrapper=True)
    def accelbackends_backend_options(
        self,
        accelerator: plugin.AcceleratorSpec,
        options: plugin.BackendOptions,
        cluster: plugin.ClusterInfo,
    ) -> _Options:
        result = yield
        return self.policy.apply(accelerator, result)
