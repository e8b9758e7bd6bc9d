"""The typed, frozen values that cross the plugin boundary.

A plugin *declares* an accelerator as an :class:`AcceleratorSpec` and the core *runs* its
callables, one accelerator at a time, guarded and attributed to the plugin. Nothing in this module
imports torch: detection must stay cheap and side-effect free.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = [
    "AcceleratorSpec",
    "AcceleratorStatus",
    "BackendOptions",
    "BindRequest",
    "Choice",
    "ClusterInfo",
    "Context",
    "Detection",
    "OptionsRequest",
    "Probe",
    "Selection",
]

_ACCELERATOR_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Probe:
    """What a fast probe may look at: a filesystem root and an environment.

    Probes read files through :meth:`path` so that tests can point them at a fake tree.
    ``packages`` are the directories where installed-package metadata is read (which torch
    build, which vendor stack); None means ``sys.path``, as for an import.
    """

    env: Mapping[str, str]
    root: Path = Path("/")
    packages: tuple[str, ...] | None = None

    def path(self, absolute: str) -> Path:
        """``absolute`` (e.g. ``"/sys/class/drm"``) under this probe's root."""
        return self.root / absolute.lstrip("/")


@dataclass(frozen=True)
class Detection:
    """The verdict of a fast probe. ``reason`` is for a human and says *why*."""

    available: bool
    device_count: int = 0
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.available, bool):
            raise TypeError(f"Detection.available must be a bool, not {self.available!r}")
        if (
            not isinstance(self.device_count, int)
            or isinstance(self.device_count, bool)
            or self.device_count < 0
        ):
            raise TypeError(
                f"Detection.device_count must be an int >= 0, not {self.device_count!r}"
            )
        if not isinstance(self.reason, str):
            raise TypeError(f"Detection.reason must be a str, not {self.reason!r}")


@dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in the job, as a cluster environment recognised it.

    ``sources`` maps each field name to the variable it came from (``"rank": "RANK"``); it is
    shown by ``info`` and used to name variables in errors. ``store_hosted`` says that a
    rendezvous store already runs at ``master_addr:master_port`` (torchrun's agent), so every
    rank connects to it as a client. ``store_socket`` is the Unix socket of a store that
    serves every rank of a single-host job instead (:func:`accelbackends.spawn` runs one): no
    TCP, no name lookups, nothing reachable from the network.
    """

    launcher: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    store_hosted: bool = False
    run_id: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)
    store_socket: str | None = None

    def source(self, field_name: str) -> str:
        return self.sources.get(field_name, field_name)

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "local_rank", "local_world_size", "node_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"{self.source(name)}={value!r} is not valid; use an integer >= 0"
                )
        for name in ("world_size", "local_world_size"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"{self.source(name)}={getattr(self, name)} is not valid; use an integer >= 1"
                )
        self._check_below("rank", "world_size")
        self._check_below("local_rank", "local_world_size")
        if self.local_world_size > self.world_size:
            raise ConfigError(
                f"{self.source('local_world_size')}={self.local_world_size} is larger than "
                f"{self.source('world_size')}={self.world_size}; a node cannot hold more ranks "
                "than the job"
            )
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ConfigError(
                f"{self.source('master_port')}={self.master_port} is not a TCP port; use 1 to 65535"
            )

    def _check_below(self, lower: str, upper: str) -> None:
        if getattr(self, lower) >= getattr(self, upper):
            raise ConfigError(
                f"{self.source(lower)}={getattr(self, lower)} must be less than "
                f"{self.source(upper)}={getattr(self, upper)}"
            )


@dataclass(frozen=True)
class BindRequest:
    """What an accelerator's ``bind`` callable is given: which local rank to bind, and how."""

    local_rank: int
    local_world_size: int
    cluster: ClusterInfo
    env: Mapping[str, str]
    #: Intra-op threads the user asked for (``init(threads=...)``), or None for the default.
    threads: int | None = None


@dataclass(frozen=True)
class OptionsRequest:
    """What an accelerator's ``backend_options`` callable is given."""

    backend: str
    device: Any
    timeout: timedelta
    cluster: ClusterInfo
    env: Mapping[str, str]


@dataclass(frozen=True)
class BackendOptions:
    """Everything handed to ``torch.distributed.init_process_group``, decided before the call.

    ``backend`` is the explicit string passed to torch (``"gloo"``, ``"cpu:gloo,cuda:nccl"``):
    never None, so torch's build-dependent default never decides. ``env_defaults`` are set in the
    process environment before the call where the user has not set them.
    """

    backend: str
    timeout: timedelta
    device_id: Any = None
    pg_options: Any = None
    env_defaults: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.backend, str) or not self.backend:
            raise TypeError(f"BackendOptions.backend must be a non-empty str, not {self.backend!r}")
        if not isinstance(self.timeout, timedelta) or self.timeout.total_seconds() <= 0:
            raise TypeError(
                f"BackendOptions.timeout must be a positive timedelta, not {self.timeout!r}"
            )


@dataclass(frozen=True)
class AcceleratorSpec:
    """An accelerator, as a plugin declares it.

    The core calls ``detect`` (cheap: no torch, no vendor runtime, never raises on purpose) for
    every declared accelerator; ``confirm``, ``bind`` and ``backend_options`` only for the one
    selected, inside :func:`accelbackends.init`.

    - ``detect(probe) -> Detection``: the fast probe.
    - ``confirm() -> str | None``: the deep check through torch just before binding; returns
      None when torch agrees, or the reason it does not.
    - ``bind(request) -> torch.device``: make this process use its device; returns the device.
    - ``backend_options(request) -> BackendOptions``: what to pass to ``init_process_group``;
      when None, the plain backend name and the timeout are used.
    """

    name: str
    device_type: str
    priority: int
    backends: tuple[str, ...]
    default_backend: str
    detect: Callable[[Probe], Detection]
    bind: Callable[[BindRequest], Any]
    backend_options: Callable[[OptionsRequest], BackendOptions] | None = None
    confirm: Callable[[], str | None] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _ACCELERATOR_NAME.match(self.name):
            raise TypeError(
                f"accelerator name {self.name!r} is not valid; use lower-case letters, digits "
                "and '_', starting with a letter"
            )
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise TypeError(f"accelerator {self.name!r}: priority must be an int")
        if (
            not isinstance(self.backends, tuple)
            or not self.backends
            or not all(isinstance(b, str) and b for b in self.backends)
        ):
            raise TypeError(
                f"accelerator {self.name!r}: backends must be a non-empty tuple of names"
            )
        if self.default_backend not in self.backends:
            raise TypeError(
                f"accelerator {self.name!r}: default backend {self.default_backend!r} "
                f"is not one of its backends {list(self.backends)}"
            )
        for attribute in ("detect", "bind"):
            if not callable(getattr(self, attribute)):
                raise TypeError(f"accelerator {self.name!r}: {attribute} must be callable")
        for attribute in ("backend_options", "confirm"):
            value = getattr(self, attribute)
            if value is not None and not callable(value):
                raise TypeError(f"accelerator {self.name!r}: {attribute} must be callable or None")


@dataclass(frozen=True)
class AcceleratorStatus:
    """A declared accelerator, who provides it, and its detection verdict."""

    spec: AcceleratorSpec
    plugin: str
    distribution: str
    version: str
    detection: Detection

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def available(self) -> bool:
        return self.detection.available


@dataclass(frozen=True)
class Choice:
    """An answer of the selection-override hook: the accelerator to use, and why."""

    accelerator: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The chosen accelerator and backend, why, and every candidate's verdict."""

    accelerator: str
    backend: str
    reason: str
    backend_reason: str
    candidates: tuple[AcceleratorStatus, ...]

    @property
    def status(self) -> AcceleratorStatus:
        return next(c for c in self.candidates if c.name == self.accelerator)

    @property
    def spec(self) -> AcceleratorSpec:
        return self.status.spec


@dataclass(frozen=True)
class Context:
    """Where this process stands in the initialised job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    device: Any
    accelerator: str
    backend: str
    #: The exact string passed to ``init_process_group`` (e.g. ``cpu:gloo,cuda:nccl``).
    process_group_backend: str
    launcher: str
    master_addr: str | None
    master_port: int | None
    timeout: float
    rendezvous_timeout: float
    seed: int | None
    threads: int | None
    reason: str
    selection: Selection = field(repr=False, compare=False)
    cluster: ClusterInfo = field(repr=False, compare=False)
    #: Wall time of the :func:`init` call that made this context: detection to process group.
    init_seconds: float = 0.0

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that reports."""
        return self.rank == 0
