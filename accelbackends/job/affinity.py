"""CPU and NUMA affinity per local rank: planned from each device's locality, applied by init().

Opt-in (``ACCELBACKENDS_CPU_AFFINITY`` or ``init(cpu_affinity=...)``), off by default. The plan
reads what the kernel exposes, under the probe root so that tests run on fake trees:

- the CPUs this process may use: its affinity mask (``sched_getaffinity``, or
  ``Cpus_allowed_list`` in ``/proc/self/status`` of a fake tree), narrowed by its cgroup's cpuset;
- SMT siblings (``/sys/devices/system/cpu/cpu*/topology/thread_siblings_list``): the CPUs of one
  physical core, kept together;
- NUMA nodes (``/sys/devices/system/node/node*/cpulist``);
- each device's locality, declared by its accelerator plugin (``AcceleratorSpec.locality``).

Modes: ``numa`` gives each rank every allowed CPU of its device's NUMA node (ranks on one node
share them); ``exclusive`` splits those CPUs between the node's ranks, whole cores first, so no
two local ranks share a CPU; ``auto`` (``1``/``true``/``on``) is ``exclusive`` where every rank
can have a CPU of its own, else ``numa``. CPU ranks have no device: they are spread over the NUMA
nodes in blocks and split each node's cores.

Everything up to `pinned` is pure and imports no torch; ``info`` shows the plan.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..plugin import config, sysfs
from ..plugin.errors import AccelBackendsWarning, ConfigError, describe
from ..plugin.locality import format_cpulist, parse_cpulist
from ..plugin.text import plural
from ..plugin.threads import intra_op_threads
from ..plugin.types import AcceleratorStatus, BindRequest, ClusterInfo, Locality, Probe

if TYPE_CHECKING:
    from ..registry.facade import Registry

__all__ = [
    "AUTO",
    "CPU_AFFINITY",
    "EXCLUSIVE",
    "MODES",
    "NUMA",
    "OFF",
    "Plan",
    "RankPlan",
    "Topology",
    "allowed_cpus",
    "collect",
    "parse_mode",
    "plan",
    "plan_for",
    "pinned",
    "read_topology",
    "resolve_mode",
    "split",
]

CPU_AFFINITY = config.CPU_AFFINITY
OFF, NUMA, EXCLUSIVE, AUTO = "off", "numa", "exclusive", "auto"
MODES = (OFF, NUMA, EXCLUSIVE, AUTO)
_OFF_WORDS = frozenset({"off", "0", "false", "no"})
_AUTO_WORDS = frozenset({"auto", "on", "1", "true", "yes"})
_ACCEPTED = (
    "off (the default; also 0, false, no), numa (the device's NUMA node), exclusive (cores of "
    "its own per local rank), or on (also 1, true, yes, auto: exclusive where there are enough "
    "cores, else numa)"
)

#: What `allowed_cpus` found before `pinned` narrowed this process, and what it set:
#: a second init() in the same process plans from the CPUs the first one started with.
_pinned_from: tuple[frozenset[int], frozenset[int]] | None = None


def parse_mode(value: object, *, source: str) -> str:
    """One of `MODES` from a setting (a string, or a bool for the argument)."""
    if isinstance(value, bool):
        return AUTO if value else OFF
    word = value.strip().lower() if isinstance(value, str) else None
    if word is None or not word:
        if word == "" and source == CPU_AFFINITY:
            return OFF  # ``export ACCELBACKENDS_CPU_AFFINITY=`` counts as unset
        raise ConfigError(f"{source}={value!r} is not valid; use {_ACCEPTED}")
    if word in _OFF_WORDS:
        return OFF
    if word in _AUTO_WORDS:
        return AUTO
    if word in (NUMA, EXCLUSIVE):
        return word
    raise ConfigError(f"{source}={value!r} is not valid; use {_ACCEPTED}")


def resolve_mode(argument: object, env: Mapping[str, str]) -> str:
    """The mode from ``init(cpu_affinity=...)`` when given, else from the variable."""
    if argument is not None:
        return parse_mode(argument, source="cpu_affinity")
    value = env.get(CPU_AFFINITY)
    return OFF if value is None else parse_mode(value, source=CPU_AFFINITY)


# -- what the kernel exposes --------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """The CPUs of this machine as far as this process is concerned."""

    online: frozenset[int]
    #: The CPUs this process may run on, and what said so.
    allowed: frozenset[int]
    allowed_from: str
    #: Physical cores as groups of SMT siblings (a CPU alone where the topology does not say).
    cores: tuple[frozenset[int], ...]
    #: NUMA node -> its CPUs; empty where the machine shows no node.
    nodes: Mapping[int, frozenset[int]] = field(default_factory=dict)

    @property
    def smt(self) -> bool:
        return any(len(core) > 1 for core in self.cores)

    def node_of(self, cpus: frozenset[int]) -> int | None:
        """The NUMA node holding all of ``cpus``, or None."""
        return next((n for n, node in sorted(self.nodes.items()) if cpus and cpus <= node), None)


def _cgroup_cpuset(probe: Probe) -> tuple[frozenset[int] | None, str]:
    """The effective cpuset of this process's cgroup (v2, else v1), and the file it came from."""
    for line in (sysfs.read(probe.path("/proc/self/cgroup")) or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            candidates = [f"/sys/fs/cgroup{path.rstrip('/')}/cpuset.cpus.effective"]
        elif "cpuset" in controllers.split(","):
            base = f"/sys/fs/cgroup/cpuset{path.rstrip('/')}"
            candidates = [f"{base}/cpuset.effective_cpus", f"{base}/cpuset.cpus"]
        else:
            continue
        for candidate in candidates:
            cpus = parse_cpulist(sysfs.read(probe.path(candidate)))
            if cpus:
                return cpus, candidate
    return None, ""


def _own_process(probe: Probe) -> bool:
    """Does the probe see this process itself: the real root, or a tree whose ``/proc/self``
    is this process's (``FakeTree.host_cpus``, a test suite's hermetic root)?"""
    if probe.root == Path("/"):
        return True
    try:
        return probe.path("/proc/self").resolve() == Path("/proc/self").resolve()
    except OSError:
        return False


def allowed_cpus(probe: Probe, online: frozenset[int] | None = None) -> tuple[frozenset[int], str]:
    """The CPUs this process may use and what said so: its affinity mask (the scheduler's or
    a launcher's narrowing included), intersected with its cgroup's cpuset.

    On the real root (or a tree linking this process's ``/proc/self``) the mask is
    ``os.sched_getaffinity``; under a fake root it is
    ``Cpus_allowed_list`` of the tree's ``/proc/self/status`` (else every online CPU)."""
    mask: frozenset[int] | None = None
    source = ""
    if _own_process(probe) and hasattr(os, "sched_getaffinity"):
        mask, source = frozenset(os.sched_getaffinity(0)), "the affinity mask"
        if _pinned_from is not None and mask == _pinned_from[1]:
            mask, source = _pinned_from[0], "the affinity mask before init() pinned it"
    if mask is None:
        status = sysfs.read_keyed(probe.path("/proc/self/status"), ":")
        mask = parse_cpulist(status.get("Cpus_allowed_list"))
        source = "Cpus_allowed_list in /proc/self/status"
    if not mask:
        mask, source = online or frozenset(range(os.cpu_count() or 1)), "every online CPU"
    cpuset, where = _cgroup_cpuset(probe)
    if cpuset and not mask <= cpuset and mask & cpuset:
        mask, source = mask & cpuset, f"{source} and the cgroup cpuset ({where})"
    return mask, source


def read_topology(probe: Probe, allowed: frozenset[int] | None = None) -> Topology:
    """CPUs, SMT siblings and NUMA nodes under the probe's root; ``allowed`` injects the
    process's allowed CPUs (otherwise `allowed_cpus`)."""
    cpu_dir = probe.path("/sys/devices/system/cpu")
    online = parse_cpulist(sysfs.read(cpu_dir / "online")) or frozenset(
        int(entry.name[3:]) for entry in sysfs.listing(cpu_dir, r"cpu\d+")
    )
    source = "given"
    if allowed is None:
        allowed, source = allowed_cpus(probe, online)
    online = online or allowed
    cores: dict[frozenset[int], None] = {}
    for cpu in sorted(online):
        siblings = parse_cpulist(sysfs.read(cpu_dir / f"cpu{cpu}/topology/thread_siblings_list"))
        group = (siblings or frozenset()) & online or frozenset({cpu})
        cores.setdefault(group | {cpu}, None)
    nodes: dict[int, frozenset[int]] = {}
    for node in sysfs.listing(probe.path("/sys/devices/system/node"), r"node\d+"):
        cpus = parse_cpulist(sysfs.read(node / "cpulist"))
        if cpus:
            nodes[int(node.name[4:])] = cpus
    return Topology(online, allowed, source, tuple(cores), nodes)


# -- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankPlan:
    """One local rank: its device, the device's NUMA node, and the CPUs it is pinned to."""

    local_rank: int
    device: str
    numa_node: int | None
    cpus: frozenset[int]
    #: Where the device's locality came from, or why there is none.
    locality: str = ""


@dataclass(frozen=True)
class Plan:
    """CPU affinity for every local rank of this node, and what the planner had to give up."""

    mode: str
    accelerator: str
    ranks: tuple[RankPlan, ...]
    topology: Topology
    notes: tuple[str, ...] = ()


def split(
    pool: frozenset[int], cores: Sequence[frozenset[int]], parts: int
) -> tuple[list[frozenset[int]], str] | None:
    """``pool`` in ``parts`` disjoint, contiguous, near-equal shares: whole cores (SMT siblings
    together) where there are enough of them, else single CPUs (with a note saying siblings
    were split); None where ``pool`` has fewer CPUs than ``parts``."""
    units = sorted((core & pool for core in cores if core & pool), key=min)
    covered = frozenset().union(*units) if units else frozenset()
    units += [frozenset({cpu}) for cpu in sorted(pool - covered)]
    note = ""
    if len(units) < parts:
        if len(pool) < parts:
            return None
        units = [frozenset({cpu}) for cpu in sorted(pool)]
        note = "fewer cores than ranks: SMT siblings are split between ranks"
    shares = [
        frozenset().union(*units[len(units) * i // parts : len(units) * (i + 1) // parts])
        for i in range(parts)
    ]
    return shares, note


def _mode_label(mode: str) -> str:
    return f"{CPU_AFFINITY}={mode}"


def plan(
    mode: str,
    topology: Topology,
    local_world_size: int,
    *,
    accelerator: str = "cpu",
    device_type: str = "cpu",
    localities: Sequence[Locality | None] | None = None,
) -> Plan:
    """Which CPUs each of ``local_world_size`` ranks gets in ``mode`` (``off`` plans as
    ``auto``, for ``info``'s preview).

    ``localities`` are the devices' as the accelerator declared them (None: it declares none;
    a CPU accelerator has no device). Raises `ConfigError` when ``exclusive`` cannot
    give every rank a CPU of its own.
    """
    notes: list[str] = []
    if device_type != "cpu" and not any(localities or ()):
        notes.append(
            f"the {accelerator} devices report no locality"
            + ("" if localities is None else " (their NUMA node is not in sysfs)")
            + ": ranks are not placed near their devices"
        )
    ranks = _near_cpus(topology, local_world_size, device_type, localities, notes)
    if mode != NUMA:
        _share_out(mode, ranks, topology, notes)
    return Plan(mode, accelerator, tuple(ranks), topology, tuple(notes))


def _near_cpus(
    topology: Topology,
    local_world_size: int,
    device_type: str,
    localities: Sequence[Locality | None] | None,
    notes: list[str],
) -> list[RankPlan]:
    """Each local rank's plan with the CPUs near its device (a CPU rank: its share of the NUMA
    nodes), which ranks may share; what had to be given up is added to ``notes``."""
    allowed = topology.allowed
    nodes = {n: cpus & allowed for n, cpus in sorted(topology.nodes.items()) if cpus & allowed}
    ranks: list[RankPlan] = []
    for rank in range(local_world_size):
        if device_type == "cpu":
            node = list(nodes)[rank * len(nodes) // local_world_size] if nodes else None
            near = nodes[node] if node is not None else allowed
            ranks.append(RankPlan(rank, "cpu", node, near, "CPU rank: no device"))
            continue
        index = rank % len(localities) if localities else None
        device = f"{device_type}:{rank if index is None else index}"
        found = localities[index] if localities and index is not None else None
        if found is None:
            ranks.append(RankPlan(rank, device, None, allowed, "no locality reported"))
            continue
        local = found.cpus
        if not local and found.numa_node is not None:
            local = topology.nodes.get(found.numa_node)
        near = (local or allowed) & allowed
        if not near:
            notes.append(
                f"{device}: its local CPUs {format_cpulist(local or ())} are outside the CPUs "
                f"this process may use ({format_cpulist(allowed)}); it gets CPUs from all of them"
            )
            near = allowed
        node = found.numa_node if found.numa_node is not None else topology.node_of(near)
        ranks.append(RankPlan(rank, device, node, near, found.source))
    return ranks


def _share_out(mode: str, ranks: list[RankPlan], topology: Topology, notes: list[str]) -> None:
    """Replace the near CPUs of ``ranks`` with exclusive shares of them where there are enough
    (else raise in ``exclusive``; in another mode they share them, with a note)."""
    # Exclusive shares, one group of ranks per set of near CPUs; the narrowest sets first, so
    # that ranks whose device has no locality take what the others leave.
    groups: dict[frozenset[int], list[int]] = {}
    for entry in ranks:
        groups.setdefault(entry.cpus, []).append(entry.local_rank)
    taken: set[int] = set()
    for near, members in sorted(groups.items(), key=lambda item: (len(item[0]), min(item[0]))):
        pool = near - taken
        if not pool:
            pool = near
            notes.append(
                f"local {plural(len(members), 'rank')} {', '.join(map(str, members))} "
                f"{'has' if len(members) == 1 else 'have'} no CPUs left that other ranks do "
                f"not use, and share {format_cpulist(near)} with them"
            )
        shares = split(pool, topology.cores, len(members))
        if shares is None:
            problem = (
                f"{len(members)} local ranks would share {len(pool)} CPUs ({format_cpulist(pool)})"
            )
            if mode == EXCLUSIVE:
                raise ConfigError(
                    f"{_mode_label(mode)}: {problem}, but each needs a CPU of its own; use "
                    f"{_mode_label(NUMA)}, or start fewer ranks per node"
                )
            notes.append(f"{problem}: they share them (numa), as exclusive cores cannot be had")
            continue
        parts, note = shares
        if note and note not in notes:
            notes.append(note)
        for member, share in zip(members, parts, strict=True):
            ranks[member] = replace(ranks[member], cpus=share)
        taken |= pool


def _localities(
    status: AcceleratorStatus, probe: Probe
) -> tuple[Sequence[Locality | None] | None, str]:
    """The selected accelerator's device localities, guarded like a probe: a plugin that
    raises or returns nonsense has declared nothing, and the note says why."""
    spec = status.spec
    if spec.locality is None:
        return None, ""
    try:
        found = list(spec.locality(probe))
    except Exception as exc:
        return None, f"plugin {status.plugin!r} failed to report device locality: {describe(exc)}"
    if not all(item is None or isinstance(item, Locality) for item in found):
        return None, f"plugin {status.plugin!r}: locality returned {found!r}, not Locality values"
    return found, ""


def plan_for(
    registry: Registry,
    status: AcceleratorStatus,
    local_world_size: int,
    mode: str,
    *,
    allowed: frozenset[int] | None = None,
) -> Plan:
    """The plan for ``status``'s accelerator on the machine under ``registry``'s root."""
    probe = Probe(env=registry.env, root=registry.root)
    localities, problem = _localities(status, probe)
    result = plan(
        mode,
        read_topology(probe, allowed),
        local_world_size,
        accelerator=status.name,
        device_type=status.spec.device_type,
        localities=localities,
    )
    return replace(result, notes=(problem, *result.notes)) if problem else result


# -- applying it --------------------------------------------------------------------------------


@contextlib.contextmanager
def pinned(
    mode: str,
    registry: Registry,
    status: AcceleratorStatus,
    cluster: ClusterInfo,
    threads: int | None,
) -> Iterator[frozenset[int] | None]:
    """Pin this process to its local rank's CPUs for the body (init()'s device binding and
    process group); yields them, or None when ``mode`` is off. Also sets torch's intra-op
    threads to their number unless ``threads=`` or ``OMP_NUM_THREADS`` says otherwise.

    Gloo's and the intra-op pool's threads start after this and inherit the mask. If the body
    raises, the mask and the thread count are put back as they were."""
    global _pinned_from
    if mode == OFF:
        yield None
        return
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError(
            f"{_mode_label(mode)}: this platform has no os.sched_setaffinity (Linux only); "
            "leave CPU affinity off here"
        )
    import torch

    result = plan_for(registry, status, cluster.local_world_size, mode)
    cpus = result.ranks[cluster.local_rank].cpus
    for note in result.notes:
        warnings.warn(f"{_mode_label(mode)}: {note}", AccelBackendsWarning, stacklevel=4)
    before_mask, before_threads, before_pinned = (
        frozenset(os.sched_getaffinity(0)),
        torch.get_num_threads(),
        _pinned_from,
    )
    os.sched_setaffinity(0, cpus)
    _pinned_from = (result.topology.allowed, cpus)
    request = BindRequest(
        cluster.local_rank, cluster.local_world_size, cluster, registry.env, threads, cpus
    )
    wanted, _ = intra_op_threads(request)
    if wanted is not None:
        torch.set_num_threads(wanted)
    try:
        yield cpus
    except BaseException:
        os.sched_setaffinity(0, before_mask)
        torch.set_num_threads(before_threads)
        _pinned_from = before_pinned
        raise


# -- what info shows ----------------------------------------------------------------------------


def collect(registry: Registry, status: AcceleratorStatus, cluster: ClusterInfo) -> dict[str, Any]:
    """The plan as plain data for ``info --json``: for this node's local ranks (the launcher's
    count, else one rank per device, or one CPU rank)."""
    mode = resolve_mode(None, registry.env)  # a bad value is bad input: info exits 2
    ranks = cluster.local_world_size
    if cluster.launcher == "single" and status.spec.device_type != "cpu":
        ranks = max(1, status.detection.device_count)
    report: dict[str, Any] = {
        "mode": mode,
        "applied": mode != OFF,
        "planned_as": AUTO if mode == OFF else mode,
        "accelerator": status.name,
        "local_world_size": ranks,
        "error": None,
    }
    try:
        result = plan_for(registry, status, ranks, report["planned_as"])
    except ConfigError as exc:
        report["error"] = str(exc)
        return report
    topology = result.topology
    report.update(
        allowed=format_cpulist(topology.allowed),
        allowed_from=topology.allowed_from,
        smt=topology.smt,
        numa_nodes={str(n): format_cpulist(cpus) for n, cpus in topology.nodes.items()},
        ranks=[
            {
                "local_rank": r.local_rank,
                "device": r.device,
                "numa_node": r.numa_node,
                "cpus": format_cpulist(r.cpus),
                "cpu_count": len(r.cpus),
                "locality": r.locality,
            }
            for r in result.ranks
        ],
        notes=list(result.notes),
    )
    return report
