"""Plugins for tests: plugin objects built inline, a fake accelerator, installed distributions.

A plugin under test does not have to be installed to be tested: register it inline in a fresh
registry. Where the entry-point path itself is under test (loading by name, blocking, the
allow-list, a child process that must find the plugin), `install_distribution` writes the
``*.dist-info`` that ``pip install`` would, with its entry points, into a directory:

```python
spec = fake_accelerator("myaccel", priority=50)
registry = accelbackends.Registry(env={}, plugins=[("mine", InlinePlugin(spec))])
```

Nothing here imports torch; a fake accelerator's ``bind`` imports it when it runs.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..plugin import hookspecs
from ..plugin.types import AcceleratorSpec, BindRequest, Detection, Probe

__all__ = ["HOOKS", "InlinePlugin", "fake_accelerator", "install_distribution"]

#: The names of every hook a plugin may implement.
HOOKS: tuple[str, ...] = tuple(
    sorted(name for name in vars(hookspecs) if name.startswith(hookspecs.PROJECT + "_"))
)
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_DISTRIBUTION = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def fake_accelerator(
    name: str,
    *,
    priority: int = 10,
    available: bool = True,
    devices: int = 1,
    backends: tuple[str, ...] = ("gloo",),
    reason: str = "",
    description: str = "",
    refusal: str = "",
) -> AcceleratorSpec:
    """An accelerator whose probe answers as told and whose device is the CPU.

    Its default backend is the first of ``backends``; with the default ``("gloo",)`` a real
    process group comes up in [`accelbackends.init`][accelbackends.init], so policy hooks can be
    tested end to end without any hardware.
    """

    verdict = Detection(
        available,
        devices if available else 0,
        reason or (f"{devices} fake device(s)" if available else "no fake device"),
        refusal,
    )

    def detect(probe: Probe) -> Detection:
        return verdict

    def bind(request: BindRequest) -> Any:
        import torch

        return torch.device("cpu")

    return AcceleratorSpec(
        name=name,
        device_type="cpu",
        priority=priority,
        backends=backends,
        default_backend=backends[0] if backends else "",
        detect=detect,
        bind=bind,
        description=description or f"fake accelerator {name!r} (testing kit)",
    )


class InlinePlugin:
    """A plugin object made of parts: accelerators to declare, and hook implementations.

    Args:
        accelerators: Specs returned from ``accelbackends_declare_accelerators``.
        hooks: Hook implementations by hook name (``accelbackends_backend_options=fn``). A
            function already marked with `accelbackends.hookimpl` keeps its marker (e.g.
            ``wrapper=True``); an unmarked one is marked as a plain implementation.

    Register it inline: ``Registry(plugins=[("name", InlinePlugin(...))])`` or
    ``registry.register(InlinePlugin(...), "name")``.
    """

    def __init__(self, *accelerators: AcceleratorSpec, **hooks: Callable[..., Any]) -> None:
        for spec in accelerators:
            if not isinstance(spec, AcceleratorSpec):
                raise TypeError(
                    f"InlinePlugin accelerators must be AcceleratorSpec values, not {spec!r}"
                )
        declare = hookspecs.PROJECT + "_declare_accelerators"
        for hook, function in hooks.items():
            if hook not in HOOKS:
                raise TypeError(f"InlinePlugin: {hook!r} is not a hook; hooks: {', '.join(HOOKS)}")
            if hook == declare and accelerators:
                raise TypeError(
                    f"InlinePlugin: pass accelerators as arguments or {declare}=, not both"
                )
            if not callable(function):
                raise TypeError(f"InlinePlugin: {hook} must be callable, not {function!r}")
            setattr(self, hook, _marked(function))
        self.accelerators = tuple(accelerators)
        if accelerators:
            setattr(self, declare, _marked(self._declare))

    def _declare(self) -> list[AcceleratorSpec]:
        return list(self.accelerators)

    def __repr__(self) -> str:
        names = [spec.name for spec in self.accelerators]
        hooks = sorted(name for name in HOOKS if name in vars(self))
        return f"InlinePlugin(accelerators={names}, hooks={hooks})"


def _marked(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as a hook implementation, without changing the caller's function object."""
    marker = hookspecs.PROJECT + "_impl"
    if getattr(function, marker, None) is not None:
        return function

    # A plain def, not a lambda: pluggy reads the argument names through __wrapped__.
    @functools.wraps(function)
    def implementation(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    if hasattr(implementation, marker):  # copied from the original by functools.wraps
        delattr(implementation, marker)
    return hookspecs.hookimpl(implementation)


def install_distribution(
    site: str | os.PathLike[str],
    name: str,
    module: str,
    *,
    source: str | None = None,
    distribution: str | None = None,
    version: str = "1.0",
    group: str = hookspecs.PROJECT,
) -> Path:
    """Install a plugin distribution into ``site`` the way ``pip`` leaves it on disk.

    Writes ``<distribution>-<version>.dist-info`` with ``METADATA`` and an ``entry_points.txt``
    that maps ``name`` to ``module`` in ``group`` (the ``accelbackends`` entry-point group by
    default) and, when ``source`` is given, the module itself as ``<module>.py``. Put ``site``
    on ``sys.path`` (or ``PYTHONPATH`` for a child process) and the registry finds the plugin.

    Args:
        name: The entry point's name: the plugin's name in ``info``,
            ``ACCELBACKENDS_DISABLE`` and ``ACCELBACKENDS_PLUGINS``.
        module: The importable module the entry point names, e.g. ``accelbackends_myaccel``.
        distribution: The distribution name; ``accelbackends-<name>`` by default.

    Returns:
        ``site``, as a path.
    """
    site = Path(site)
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", name):
        raise ValueError(
            f"name={name!r} is not an entry-point name; use letters, digits, '.', '_' and '-'"
        )
    if not _MODULE.match(module):
        raise ValueError(
            f"module={module!r} is not an importable module name; use dotted identifiers such "
            "as accelbackends_myaccel"
        )
    distribution = distribution or f"accelbackends-{name}"
    if not _DISTRIBUTION.match(distribution):
        raise ValueError(
            f"distribution={distribution!r} is not a distribution name; use letters, digits, "
            "'.', '_' and '-'"
        )
    site.mkdir(parents=True, exist_ok=True)
    if source is not None:
        if "." in module:
            raise ValueError(
                f"module={module!r}: with source=, give a top-level module name (no dots)"
            )
        (site / f"{module}.py").write_text(source, encoding="utf-8")
    stem = f"{re.sub(r'[-_.]+', '_', distribution)}-{version}"
    info = site / f"{stem}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n", encoding="utf-8")
    importlib.invalidate_caches()
    return site
