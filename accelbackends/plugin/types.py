"""The typed, frozen values that cross the plugin boundary.

A plugin *declares* an accelerator as an `AcceleratorSpec` and the core *runs* its
callables, one accelerator at a time, guarded and attributed to the plugin. Nothing in this module
imports torch: detection must stay cheap and side-effect free.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
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
    "DeviceLinks",
    "Locality",
    "MAX_NAME_LENGTH",
    "Nic",
    "OptionsRequest",
    "PcieLink",
    "Probe",
    "Selection",
]

_ACCELERATOR_NAME = re.compile(r"\A[a-z][a-z0-9_]*\Z")
#: The longest accelerator, device type or backend name a plugin may declare: names are shown
#: in every table of ``info`` and in errors, and a plugin could otherwise declare a megabyte.
MAX_NAME_LENGTH = 64


def _shown_name(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_NAME_LENGTH + 2 else f"{text[:MAX_NAME_LENGTH]}\u2026"


@dataclass(frozen=True)
class Probe:
    """What a fast probe may look at: a filesystem root and an environment.

    Probes read files through [`path`][accelbackends.Probe.path] so that tests can point them at
    a fake tree.

    Attributes:
        env: The process environment (injected in tests).
        root: The filesystem root that files are read under (`/`, or a fake tree in tests).
        packages: The directories where installed-package metadata is read (which torch build,
            which vendor stack); None means `sys.path`, as for an import.
    """

    env: Mapping[str, str]
    root: Path = Path("/")
    packages: tuple[str, ...] | None = None

    def path(self, absolute: str) -> Path:
        """`absolute` (e.g. `"/sys/class/drm"`) under this probe's root."""
        return self.root / absolute.lstrip("/")


@dataclass(frozen=True)
class Detection:
    """The verdict of a fast probe.

    Attributes:
        available: Whether the accelerator can be used on this machine.
        device_count: How many devices of it this process can see (0 when unavailable).
        reason: For a human: *why* it is available or not (`"2 GPUs visible"`,
            `"no /dev/nvidia* device nodes"`).
        refusal: Why `init()` will refuse the accelerator although its devices are here (a
            visible-devices variable it cannot honour: `"CUDA_VISIBLE_DEVICES='0,0' lists '0'
            twice; …"`), or `""`. Such an accelerator stays available, so that selecting it is
            this error rather than a silent fall back to another accelerator; `select()`
            raises it where the accelerator is chosen, and `info` shows it.
    """

    available: bool
    device_count: int = 0
    reason: str = ""
    refusal: str = ""

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
        if not isinstance(self.refusal, str):
            raise TypeError(f"Detection.refusal must be a str, not {self.refusal!r}")
        if self.refusal and not self.available:
            raise TypeError(
                "Detection.refusal is for an available accelerator that init() will refuse; "
                "an unavailable one says why in its reason"
            )


@dataclass(frozen=True)
class Locality:
    """Where a device sits: its NUMA node and the CPUs local to it, as the OS reports them.

    Attributes:
        numa_node: The device's NUMA node, or None where the OS does not say (it reads -1 on a
            single-node machine).
        cpus: The CPUs local to the device, or None where the OS does not say.
        source: What was read, for `info` (`/sys/bus/pci/devices/0000:17:00.0`).
    """

    numa_node: int | None = None
    cpus: frozenset[int] | None = None
    source: str = ""


@dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in the job, as a cluster environment recognised it.

    Attributes:
        launcher: The cluster environment that recognised the job (`"torchrun"`, `"slurm"`,
            `"env"`, `"single"` ...).
        rank: This process's rank in the job.
        world_size: The number of ranks in the job.
        local_rank: This process's rank on its node.
        local_world_size: The number of ranks on this node.
        node_rank: This node's index in the job.
        master_addr: The host of the rendezvous store (rank 0's host), or None for one rank.
        master_port: The TCP port of the rendezvous store, or None for one rank.
        store_hosted: A rendezvous store already runs at `master_addr:master_port`
            (torchrun's agent), so every rank connects to it as a client.
        run_id: The job's identifier where the launcher gives one (used to derive a port).
        sources: Each field name mapped to the variable it came from (`"rank": "RANK"`); shown
            by `info` and used to name variables in errors.
        store_socket: The path of the single-host store file: every rank of a job on one host
            meets through a `torch.distributed.FileStore` on this file instead of over TCP
            ([`spawn`][accelbackends.spawn] sets it, in a directory only its user may enter):
            no port, no name lookups, nothing reachable from the network. (The name is older
            than the file: it was a Unix socket until accelbackends' own store was retired.)
        virtual_local_rank: The launcher gives every worker ``LOCAL_RANK=0`` and makes one
            device visible to each (torchrun's ``--virtual-local-rank``, torch 2.15): `local_rank`
            is then the worker's real index on its node, derived from the other variables, and
            the frameworks keep being told ``LOCAL_RANK=0`` (`local_rank_variable`).
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
    virtual_local_rank: bool = False

    @property
    def local_rank_variable(self) -> int:
        """What ``LOCAL_RANK`` says in this process: `local_rank`, except 0 where the launcher
        gives every worker a virtual local rank."""
        return 0 if self.virtual_local_rank else self.local_rank

    def source(self, field_name: str) -> str:
        """The variable that `field_name` came from, or the field name where none is recorded."""
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
    """What an accelerator's `bind` callable is given: which local rank to bind, and how.

    Attributes:
        local_rank: This process's rank on its node: the index of the device to bind.
        local_world_size: The number of ranks on this node.
        cluster: The whole cluster description.
        env: The process environment.
        threads: Intra-op threads the user asked for (`init(threads=...)`), or None for the
            default.
        cpus: The CPUs this process was pinned to by `ACCELBACKENDS_CPU_AFFINITY`, or None.
    """

    local_rank: int
    local_world_size: int
    cluster: ClusterInfo
    env: Mapping[str, str]
    threads: int | None = None
    cpus: frozenset[int] | None = None


@dataclass(frozen=True)
class OptionsRequest:
    """What an accelerator's `backend_options` callable is given.

    Attributes:
        backend: The selected backend (`"gloo"`, `"nccl"` ...).
        device: The `torch.device` that `bind` returned.
        timeout: The collective timeout.
        cluster: The cluster description.
        env: The process environment.
    """

    backend: str
    device: Any
    timeout: timedelta
    cluster: ClusterInfo
    env: Mapping[str, str]


#: Why `BackendOptions.backend` is renamed, for the warning its old name gives.
_BACKEND_RENAMED = (
    "BackendOptions.backend is renamed BackendOptions.process_group_backend (the process group's "
    "string, 'cpu:gloo,cuda:nccl'; 'backend' elsewhere is one backend's name, 'nccl'); the old "
    "name goes in 0.3"
)


@dataclass(frozen=True, init=False)
class BackendOptions:
    """Everything handed to `torch.distributed.init_process_group`, decided before the call.

    Attributes:
        process_group_backend: The explicit string passed to torch (`"gloo"`,
            `"cpu:gloo,cuda:nccl"`): never None, so torch's build-dependent default never
            decides. Given first, by position, or by this name; ``backend=`` is its old name,
            accepted with a ``DeprecationWarning`` until 0.3 (and so is reading ``.backend``).
        timeout: The collective timeout.
        device_id: Passed as `init_process_group(device_id=...)` (NCCL's eager connection), or
            None.
        pg_options: The backend's options object (`pg_options=`), or None.
        env_defaults: Variables set in the process environment before the call, where the user
            has not set them.
        device_identity: The bound device's identity on its host, the same whatever name the
            rank gave it (a GPU's UUID), or `""` where it is not known. Each rank reports it at
            the rendezvous.
        device_shown: How this rank named that device, for messages
            (`"cuda:0 (CUDA_VISIBLE_DEVICES='0')"`).
        exclusive_device: Why two ranks of the job must not hold one device over this
            backend, with the ways out (NCCL's rule and version), or `""` where they may. Rank 0
            refuses, before `init_process_group`, a job where two ranks on one host report the
            same `device_identity` and one of them says this.
    """

    process_group_backend: str
    timeout: timedelta
    device_id: Any = None
    pg_options: Any = None
    env_defaults: Mapping[str, str] = field(default_factory=dict)
    device_identity: str = ""
    device_shown: str = ""
    exclusive_device: str = ""

    def __init__(
        self,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        device_id: Any = None,
        pg_options: Any = None,
        env_defaults: Mapping[str, str] | None = None,
        device_identity: str = "",
        device_shown: str = "",
        exclusive_device: str = "",
        *,
        backend: str | None = None,
    ) -> None:
        if backend is not None:
            # dataclasses.replace(options, backend=...) passes every field with the change:
            # there the old name is the change asked for; anywhere else both names disagree.
            caller, level = sys._getframe(1), 2
            while caller.f_back is not None and caller.f_globals.get("__name__") == "dataclasses":
                caller, level = caller.f_back, level + 1  # the warning names replace()'s caller
            replacing = level > 2
            if process_group_backend is not None and not replacing:
                raise TypeError(
                    f"BackendOptions got process_group_backend={process_group_backend!r} and its "
                    f"old name backend={backend!r}; give process_group_backend alone"
                )
            warnings.warn(_BACKEND_RENAMED, DeprecationWarning, stacklevel=level)
            process_group_backend = backend
        for name, value in (
            ("process_group_backend", process_group_backend),
            ("timeout", timeout),
            ("device_id", device_id),
            ("pg_options", pg_options),
            ("env_defaults", {} if env_defaults is None else env_defaults),
            ("device_identity", device_identity),
            ("device_shown", device_shown),
            ("exclusive_device", exclusive_device),
        ):
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        if not isinstance(self.process_group_backend, str) or not self.process_group_backend:
            raise TypeError(
                "BackendOptions.process_group_backend must be a non-empty str, not "
                f"{self.process_group_backend!r}"
            )
        if not isinstance(self.timeout, timedelta) or self.timeout.total_seconds() <= 0:
            raise TypeError(
                f"BackendOptions.timeout must be a positive timedelta, not {self.timeout!r}"
            )

    @property
    def backend(self) -> str:
        """The old name of `process_group_backend`, until 0.3 (it warns)."""
        warnings.warn(_BACKEND_RENAMED, DeprecationWarning, stacklevel=2)
        return self.process_group_backend


@dataclass(frozen=True)
class PcieLink:
    """A PCI device's link: the generation and width it trained at, and the most it supports.

    Attributes:
        generation: The current generation (1-6). GPUs lower it at idle to save power, so a
            low generation alone is not a fault; a narrow width is.
        width: The current width in lanes (x16 is 16).
        max_generation: The most the device and its slot support.
        max_width: The widest link the device supports.
        source: What was read (a sysfs directory, or ``NVML``).
    """

    generation: int | None
    width: int | None
    max_generation: int | None
    max_width: int | None
    source: str = ""

    def text(self) -> str:
        """``Gen5 x16 (max Gen5 x16)``; ``?`` for what could not be read."""
        top = _gen_width(self.max_generation, self.max_width)
        return f"{_gen_width(self.generation, self.width)} (max {top})"

    @property
    def narrowed(self) -> bool:
        """Whether the link trained narrower than the device supports (a fault: a loose card,
        a bad riser, a slot wired for fewer lanes)."""
        return self.width is not None and self.max_width is not None and self.width < self.max_width


def _gen_width(generation: int | None, width: int | None) -> str:
    gen = "Gen?" if generation is None else f"Gen{generation}"
    return f"{gen} x{'?' if width is None else width}"


@dataclass(frozen=True)
class DeviceLinks:
    """One device's links as its plugin reads them (cheap: no torch, no device context).

    Attributes:
        index: The device's index in its runtime's physical order (NVML's for NVIDIA GPUs).
        model: Its product name (``NVIDIA H200``), or None where unknown; floors match on it.
        pci: Its PCI address, or None.
        numa_node: Its NUMA node, or None where the platform does not say.
        pcie: Its PCIe link, or None where unreadable.
        nvlinks: The device-to-device links that are up (NVLink, Infinity Fabric...), or None
            where unknown; 0 where the device has such links and none is up.
        nvlinks_total: How many such links the device has (0: none; None: unknown).
        health: Problems the runtime reports (``ECC: 2 uncorrected errors``), each a short text.
        sources: For each fact, where it was read (``{"pcie": "/sys/bus/pci/devices/..."}``).
        missing: For each fact that could not be read, why.
        uuid: Its UUID (``GPU-8f3c…``), or None where unknown: what a visible-devices variable
            may name it by, so that ``check`` finds which rank uses it.
    """

    index: int
    model: str | None = None
    pci: str | None = None
    numa_node: int | None = None
    pcie: PcieLink | None = None
    nvlinks: int | None = None
    nvlinks_total: int | None = None
    health: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)
    uuid: str | None = None

    @property
    def link_kind(self) -> str | None:
        """``nvlink`` where any device-to-device link is up, ``pcie`` where the device has none
        up, None where unknown."""
        if self.nvlinks is None:
            return None
        return "nvlink" if self.nvlinks > 0 else "pcie"


@dataclass(frozen=True)
class Nic:
    """A network port and its rate.

    Attributes:
        name: ``mlx5_0/1`` (an InfiniBand/RoCE device and port) or ``eth0``.
        kind: ``infiniband``, ``roce`` or ``ethernet``.
        gbps: Its rate in Gb/s (10^9 bits/s), or None where unreadable (a port that is down).
        state: ``ACTIVE``, ``DOWN``, ``up``... as sysfs says it, or None.
        source: The file the rate was read from.
        missing: Why the rate is not known, where it is not.
    """

    name: str
    kind: str
    gbps: float | None
    state: str | None
    source: str
    missing: str = ""

    @property
    def up(self) -> bool:
        return (self.state or "").upper() in ("ACTIVE", "UP", "4: ACTIVE")


@dataclass(frozen=True)
class AcceleratorSpec:
    """An accelerator, as a plugin declares it.

    The core calls `detect` (cheap: no torch, no vendor runtime, never raises on purpose) for
    every declared accelerator; `confirm`, `bind` and `backend_options` only for the one
    selected, inside [`init`][accelbackends.init].

    Attributes:
        name: The accelerator's name (lower-case letters, digits and `_`, starting with a
            letter), as `ACCELBACKENDS_ACCELERATOR` and `info` spell it.
        device_type: torch's device type (`"cuda"`, `"xpu"`, `"cpu"` ...).
        priority: Higher wins when several accelerators are available; ties are broken by name.
        backends: The communication backends it supports; `ACCELBACKENDS_BACKEND` must name one.
        default_backend: The backend used when none is requested; one of `backends`.
        detect: `detect(probe) -> Detection`: the fast probe.
        bind: `bind(request) -> torch.device`: make this process use its device; returns the
            device.
        backend_options: `backend_options(request) -> BackendOptions`: what to pass to
            `init_process_group`; when None, the plain backend name and the timeout are used.
        confirm: `confirm() -> str | None`: the deep check through torch just before binding;
            returns None when torch agrees, or the reason it does not.
        description: One line for humans, shown by `info`.
        locality: `locality(probe) -> Sequence[Locality | None]`, optional and cheap like
            `detect`: one entry per device the runtime will show, in its order (after the
            visible-devices variable), None for a device whose locality is unknown. CPU affinity
            (`ACCELBACKENDS_CPU_AFFINITY`) pins each local rank near its device from it.
        expected_busbw_gbps: Optional: the bus bandwidth, in GB/s (10^9 bytes/s), that a healthy
            node reaches on this accelerator's fabric at `accelbackends check`'s largest size
            (nccl-tests' busbw). `info` shows it; `check` fails below it unless `--min-busbw`
            says otherwise. Declare it only where the fabric is fixed by the hardware.
        links: `links(probe) -> Sequence[DeviceLinks]`, optional and cheap like `detect`: each
            physical device's model and links (PCIe, NVLink or the vendor's own), NUMA node and
            health signals (`accelbackends.plugin.links`). `info` shows them; `check` picks its
            floors by them and fails a device whose link trained narrow or whose runtime
            reports a health problem.
        thresholds: Optional: a thresholds file (the format of `check --thresholds`, see
            docs/check.md) with this accelerator's floors by device model and link kind; its
            rules are tried before the ones shipped with accelbackends.
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
    locality: Callable[[Probe], Sequence[Locality | None]] | None = None
    expected_busbw_gbps: float | None = None
    links: Callable[[Probe], Sequence[DeviceLinks]] | None = None
    thresholds: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if (
            not isinstance(self.name, str)
            or not _ACCELERATOR_NAME.match(self.name)
            or len(self.name) > MAX_NAME_LENGTH
        ):
            length = (
                f" ({len(self.name)} characters; at most {MAX_NAME_LENGTH})"
                if isinstance(self.name, str) and len(self.name) > MAX_NAME_LENGTH
                else ""
            )
            raise TypeError(
                f"accelerator name {_shown_name(self.name)} is not valid{length}; use at most "
                f"{MAX_NAME_LENGTH} lower-case letters, digits and '_', starting with a letter"
            )
        too_long = [
            n
            for n in (
                self.device_type,
                *(self.backends if isinstance(self.backends, tuple) else ()),
            )
            if isinstance(n, str) and len(n) > MAX_NAME_LENGTH
        ]
        if too_long:
            raise TypeError(
                f"accelerator {self.name!r}: the name {_shown_name(too_long[0])} is "
                f"{len(too_long[0])} characters long; device types and backends have at most "
                f"{MAX_NAME_LENGTH}"
            )
        expected = self.expected_busbw_gbps
        if expected is not None and (
            not isinstance(expected, (int, float)) or isinstance(expected, bool) or not expected > 0
        ):
            raise TypeError(
                f"accelerator {self.name!r}: expected_busbw_gbps must be a positive number of "
                f"GB/s or None, not {expected!r}"
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
        if self.thresholds is not None and not isinstance(self.thresholds, (str, os.PathLike)):
            raise TypeError(
                f"accelerator {self.name!r}: thresholds must be the path of a thresholds file "
                f"or None, not {self.thresholds!r}"
            )
        for attribute in ("backend_options", "confirm", "locality", "links"):
            value = getattr(self, attribute)
            if value is not None and not callable(value):
                raise TypeError(f"accelerator {self.name!r}: {attribute} must be callable or None")


@dataclass(frozen=True)
class AcceleratorStatus:
    """A declared accelerator, who provides it, and its detection verdict.

    Attributes:
        spec: The accelerator as its plugin declared it.
        plugin: The name of the plugin that declared it.
        distribution: The installed package that provides the plugin (`"accelbackends"` for the
            built-ins).
        version: That package's version.
        detection: The fast probe's verdict.
    """

    spec: AcceleratorSpec
    plugin: str
    distribution: str
    version: str
    detection: Detection

    @property
    def name(self) -> str:
        """The accelerator's name (`spec.name`)."""
        return self.spec.name

    @property
    def available(self) -> bool:
        """Whether the fast probe found it usable (`detection.available`)."""
        return self.detection.available


@dataclass(frozen=True)
class Choice:
    """An answer of the selection-override hook: the accelerator to use, and why.

    Attributes:
        accelerator: The name of an *available* candidate.
        reason: Why, for a human; shown by `info` and in `Context.reason`.
    """

    accelerator: str
    reason: str


@dataclass(frozen=True)
class Selection:
    """The chosen accelerator and backend, why, and every candidate's verdict.

    Attributes:
        accelerator: The chosen accelerator's name.
        backend: The chosen communication backend.
        reason: Why this accelerator (an argument, a variable, a plugin's policy, the priority).
        backend_reason: Why this backend.
        candidates: Every declared accelerator with its verdict, sorted by name.
        process_group_backend: The process group's string the user gave instead of a backend
            name (`"cpu:gloo,cuda:nccl"`, what `torch.distributed.get_backend()` prints), passed
            to `init_process_group` as given; None where a backend name was given, and the
            accelerator's backend options make the string.
    """

    accelerator: str
    backend: str
    reason: str
    backend_reason: str
    candidates: tuple[AcceleratorStatus, ...]
    process_group_backend: str | None = None

    @property
    def status(self) -> AcceleratorStatus:
        """The chosen accelerator's entry among the candidates."""
        return next(c for c in self.candidates if c.name == self.accelerator)

    @property
    def spec(self) -> AcceleratorSpec:
        """The chosen accelerator's declaration."""
        return self.status.spec


@dataclass(frozen=True)
class Context:
    """Where this process stands in the initialised job, returned by
    [`init`][accelbackends.init] and given to the function that [`spawn`][accelbackends.spawn]
    runs.

    Attributes:
        rank: This process's rank in the job (0 to `world_size - 1`).
        world_size: The number of ranks in the job.
        local_rank: This process's rank on its node.
        local_world_size: The number of ranks on this node.
        node_rank: This node's index in the job.
        device: The `torch.device` this rank is bound to (`cuda:1`, `cpu` ...).
        accelerator: The selected accelerator's name.
        backend: The communication backend (`"gloo"`, `"nccl"` ...).
        process_group_backend: The exact string passed to `init_process_group` (e.g.
            `cpu:gloo,cuda:nccl`).
        launcher: The cluster environment that recognised the job (`"torchrun"`, `"slurm"`,
            `"spawn"`, `"single"` ...).
        master_addr: The rendezvous host, or None where there is none (one rank, or a Unix
            socket under [`spawn`][accelbackends.spawn]).
        master_port: The rendezvous port, or None.
        timeout: The collective timeout, in seconds.
        rendezvous_timeout: How long the ranks waited at most for each other to join, in seconds.
        seed: The `seed=` passed to `init` (before `seed_per_rank` adds the rank), or None.
        threads: The `threads=` passed to `init`, or None when the default applied.
        reason: Why this accelerator was chosen.
        selection: The full selection, with every candidate's verdict.
        cluster: The cluster description, with the variable each field came from.
        init_seconds: Wall time of the [`init`][accelbackends.init] call that made this
            context: detection to process group.
        cpu_affinity: The CPU affinity mode (`off`, `numa`, `exclusive`, `auto`).
        cpus: The CPUs this rank was pinned to, or None when it was not pinned.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    device: Any
    accelerator: str
    backend: str
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
    init_seconds: float = 0.0
    cpu_affinity: str = "off"
    cpus: frozenset[int] | None = None

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that reports."""
        return self.rank == 0
