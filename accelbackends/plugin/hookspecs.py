"""The hooks a plugin may implement: the plugin author's reference.

Mark implementations with `accelbackends.hookimpl` and make them importable through an
entry point in the `accelbackends` group:

```toml
[project.entry-points.accelbackends]
myaccel = "myaccel_plugin"
```

Declaring accelerators is data ([`AcceleratorSpec`][accelbackends.AcceleratorSpec]): the core
runs their callables itself. The other hooks are policy and events. No hook may import torch or a
vendor runtime at module level of the plugin; detection must stay cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

from .types import AcceleratorSpec, AcceleratorStatus, BackendOptions, Choice, ClusterInfo

if TYPE_CHECKING:
    from .types import Context

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "accelbackends"
hookspec = pluggy.HookspecMarker(PROJECT)
#: The marker for hook implementations: `@accelbackends.hookimpl`.
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def accelbackends_declare_accelerators() -> Sequence[AcceleratorSpec]:
    """Declare the accelerators this plugin provides.

    Called once per plugin, right after the plugin is loaded. Must be cheap: build and return
    specs, do not probe hardware here (the core calls each spec's `detect` later, guarded and
    cached).

    Returns:
        A sequence of [`AcceleratorSpec`][accelbackends.AcceleratorSpec]. A plugin that returns
            anything else, or declares a name another plugin already declared, is recorded as
            failed and not used.
    """
    raise NotImplementedError  # pragma: no cover - specification only


@hookspec(firstresult=True)
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    """Recognise the launcher that started this process.

    Called when [`accelbackends.init`][accelbackends.init] or `accelbackends info` needs the
    cluster environment. Return None when `env` does not look like your launcher; raise
    [`ConfigError`][accelbackends.ConfigError] naming the variable when it does but a value is
    wrong. Third-party implementations are asked before the built-in ones; the built-in
    `single` environment (one process, no network) answers last.

    Stops at first non-None result.

    Args:
        env: The process environment (injected in tests).

    Returns:
        A [`ClusterInfo`][accelbackends.ClusterInfo], or None.
    """
    raise NotImplementedError  # pragma: no cover


@hookspec(firstresult=True)
def accelbackends_select_accelerator(
    candidates: Sequence[AcceleratorStatus], env: Mapping[str, str]
) -> Choice | None:
    """Override the automatic choice of accelerator.

    Called by [`accelbackends.select`][accelbackends.select] when neither an argument nor
    `ACCELBACKENDS_ACCELERATOR` names the accelerator. The built-in default answers last: the
    highest priority among the available candidates, ties broken by name.

    Stops at first non-None result.

    Args:
        candidates: Every declared accelerator with its detection verdict, sorted by name.
        env: The process environment.

    Returns:
        A [`Choice`][accelbackends.Choice] naming an *available* candidate and the reason, or
            None to let the next implementation decide.
    """
    raise NotImplementedError  # pragma: no cover


@hookspec(firstresult=True)
def accelbackends_backend_options(
    accelerator: AcceleratorSpec, options: BackendOptions, cluster: ClusterInfo
) -> BackendOptions | None:
    """Adjust what is passed to `torch.distributed.init_process_group`.

    Called by [`accelbackends.init`][accelbackends.init] after the device is bound, with the
    options the accelerator produced. The built-in default answers last with `options`
    unchanged. A site-policy plugin that must have the last word implements this as a wrapper
    (`@hookimpl(wrapper=True)`), takes the result of `yield` and returns its adjusted copy
    (`dataclasses.replace(result, ...)`).

    A [`ConfigError`][accelbackends.ConfigError] raised here (say, a malformed policy file)
    reaches the user as bad input; any other exception becomes a
    [`PluginError`][accelbackends.PluginError] naming the plugin.

    Stops at first non-None result.

    Args:
        accelerator: The selected accelerator's declaration.
        options: The options so far: the accelerator's own, as adjusted by the implementations
            called before this one.
        cluster: The cluster description.

    Returns:
        A [`BackendOptions`][accelbackends.BackendOptions], or None to leave it to the next.
    """
    raise NotImplementedError  # pragma: no cover


@hookspec
def accelbackends_post_init(context: Context) -> None:
    """The process group is up.

    Called on every rank at the end of a successful [`accelbackends.init`][accelbackends.init],
    with the context it returns (not on the second, idempotent call). Use it for logging,
    metrics or per-rank set-up. An exception here is reported naming the plugin, and `init`
    fails after tearing the process group down.

    Args:
        context: What `init` returns: rank, device, backend and why.
    """
    raise NotImplementedError  # pragma: no cover
