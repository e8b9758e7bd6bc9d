"""NVIDIA (CUDA) and AMD (ROCm) GPUs: torch's ``cuda`` device, with NCCL (RCCL on ROCm).

One accelerator covers both, because a ROCm build of torch drives AMD GPUs through the ``cuda``
device type and the ``nccl`` backend name. Which vendor applies follows the installed torch
build: ``+cu…`` (or a plain PyPI wheel built with CUDA) needs NVIDIA GPUs, ``+rocm…`` needs AMD
GPUs, and a ``+cpu`` build can use neither, whatever the hardware.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..plugin import (
    AcceleratorSpec,
    BackendOptions,
    BindRequest,
    ConfigError,
    Detection,
    InitError,
    Locality,
    OptionsRequest,
    Probe,
    config,
    gloo_or,
    hookimpl,
    sysfs,
    torchcompat,
)
from ..plugin.devices import (
    SHARE_DEVICES,
    Visible,
    cuda_visible,
    device_index,
    rocm_visible,
    shares_devices,
)
from ..plugin.links import pcie_link
from ..plugin.locality import pci_locality, visible_localities
from ..plugin.packages import TorchBuild, nccl, torch_build
from ..plugin.text import plural
from ..plugin.types import DeviceLinks, PcieLink
from ._nvml import Gpu, GpuLinks, NvmlReport, query, query_links
from ._nvml import session as nvml_session

__all__ = [
    "EAGER_INIT",
    "EAGER_INIT_SAFE_FROM",
    "MULTI_RANK_GPU",
    "MULTI_RANK_GPU_FROM",
    "NVLS",
    "PRIORITY",
    "SPEC",
    "Hardware",
    "bound_gpu",
    "nvml_session",
    "eager_init",
    "exclusive_gpu_rule",
    "find_hardware",
    "nccl_options",
    "nccl_version",
    "shared_gpus",
    "shared_gpus_note",
    "shared_gpus_planned",
    "verdict",
]

#: Highest of the built-ins: the most mature collective stack. A node with an integrated Intel
#: GPU beside a discrete NVIDIA GPU trains on the NVIDIA one.
PRIORITY = 300

#: ``1`` passes ``device_id=`` to ``init_process_group`` (NCCL connects eagerly, so a broken
#: fabric fails inside ``init()``); ``0`` never does. Unset: the torch-version default below.
EAGER_INIT = config.EAGER_INIT

#: The first torch release where eager NCCL init is on by default: None while no release is
#: known to be safe. Passing ``device_id`` has been reported to hang collectives at random
#: (pytorch/pytorch#153960 on 2.6, #149119) and to slow training, and both reports are still open.
EAGER_INIT_SAFE_FROM: tuple[int, int] | None = None
#: ``init_process_group(device_id=...)`` exists from torch 2.3.
_DEVICE_ID_FROM = (2, 3)

#: torch's NCCL watchdog mode when the user chose none: 3 (SkipCleanUp) aborts the process on a
#: failed or timed-out collective without a blocking communicator clean-up. It is torch's own
#: default from 2.2 (ProcessGroupNCCL.cpp); setting it keeps that behaviour fixed across releases.
_ERROR_HANDLING_VARIABLES = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
_ERROR_HANDLING_DEFAULT = "3"

#: NCCL refuses two ranks of one communicator on one GPU from 2.5 to 2.29: each rank fails at
#: its first collective with ncclInvalidUsage, "Duplicate GPU detected : rank 0 and rank 1 both
#: on CUDA device …". NCCL 2.30 allows it where this variable is 1 (experimental,
#: NVIDIA/nccl#1716); accelbackends sets it for ranks it makes share a GPU, unless the user set it.
MULTI_RANK_GPU = "NCCL_MULTI_RANK_GPU_ENABLE"
MULTI_RANK_GPU_FROM = (2, 30)
#: NVLS forced on a shared GPU aborts NCCL 2.31.2: never set here, refused where the user forces it.
NVLS = "NCCL_NVLS_ENABLE"

_AMD_VENDOR = "0x1002"
_PCI_ADDRESS = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]"


@dataclass(frozen=True)
class Hardware:
    """The GPUs the OS exposes, and how they were found."""

    nvidia: int = 0
    #: Where the NVIDIA count came from ("via NVML (driver 550.54.15)", ...).
    nvidia_source: str = ""
    #: NVML's list, when NVML answered (UUIDs let CUDA_VISIBLE_DEVICES be checked).
    nvidia_gpus: tuple[Gpu, ...] | None = None
    #: What was looked at for NVIDIA GPUs, or why NVML did not answer.
    nvidia_note: str = ""
    amd: int = 0
    amd_note: str = ""


def _count(count: int, noun: str) -> str:
    return f"{count} {plural(count, noun)}"


def _nvidia(probe: Probe) -> tuple[int, str, tuple[Gpu, ...] | None, str]:
    report: NvmlReport = query(probe)
    if report.gpus:
        names = sorted({gpu.name for gpu in report.gpus})
        detail = ", ".join([*names, f"driver {report.driver}"] if report.driver else names)
        return len(report.gpus), f"via NVML ({detail})", report.gpus, ""
    nvml = "NVML lists none" if report.gpus is not None else report.error
    listed = sysfs.listing(probe.path("/proc/driver/nvidia/gpus"), _PCI_ADDRESS)
    if listed:
        return len(listed), "in /proc/driver/nvidia/gpus", None, nvml
    nodes = sysfs.listing(probe.path("/dev"), r"nvidia\d+")
    if nodes:
        return len(nodes), "as /dev/nvidia* device nodes", None, nvml
    return 0, "", None, f"{nvml}; no /proc/driver/nvidia/gpus or /dev/nvidia*"


def _amd(probe: Probe) -> tuple[int, str]:
    if not sysfs.exists(probe.path("/dev/kfd")):
        return 0, "no /dev/kfd"
    nodes = sysfs.listing(probe.path("/sys/class/kfd/kfd/topology/nodes"), r"\d+")
    gpus = 0
    for node in nodes:
        # CPU nodes of the KFD topology have no SIMD units.
        simd = sysfs.read_keyed(node / "properties").get("simd_count", "0")
        if simd.isdigit() and int(simd) > 0:
            gpus += 1
    if not gpus:
        return 0, "/dev/kfd exists but /sys/class/kfd lists no GPU node"
    return gpus, ""


def find_hardware(probe: Probe) -> Hardware:
    """NVIDIA GPUs (NVML, else ``/proc/driver/nvidia/gpus``, else ``/dev/nvidia*``) and AMD
    GPUs (``/dev/kfd`` and the KFD topology in ``/sys/class/kfd``)."""
    nvidia, source, gpus, note = _nvidia(probe)
    amd, amd_note = _amd(probe)
    return Hardware(nvidia, source, gpus, note, amd, amd_note)


def _named(entry: str, gpus: Sequence[Gpu]) -> int | None:
    """The index of the one GPU a CUDA_VISIBLE_DEVICES UUID entry names (a unique prefix is
    enough; a MIG entry names its parent GPU), or None."""
    if entry.startswith("MIG-"):
        migs = [
            index for index, gpu in enumerate(gpus) for uuid in gpu.mig if uuid.startswith(entry)
        ]
        if len(migs) == 1:
            return migs[0]
        found = {index for index, gpu in enumerate(gpus) if entry.startswith(f"MIG-{gpu.uuid}")}
    else:
        found = {index for index, gpu in enumerate(gpus) if gpu.uuid.startswith(entry)}
    return found.pop() if len(found) == 1 else None


def _visible_count(
    visible: Visible, physical: int, gpus: tuple[Gpu, ...] | None, runtime: str = "CUDA"
) -> tuple[int, str, str]:
    """How many GPUs the runtime will show, what in the variable hides some of them, and why
    ``init()`` will refuse the variable (or ``""``).

    The runtime reads the list up to the first entry that names no GPU and ignores the rest;
    ``init()`` refuses that where it leaves fewer GPUs than the variable lists. Two entries
    naming one GPU (``0,00``, a UUID and its prefix) leave CUDA no GPU at all
    (``cudaGetDeviceCount`` fails with error 101, as for ``0,0``)."""
    if not visible.restricted:
        return physical, "", ""
    seen: dict[int, str] = {}
    for position, entry in enumerate(visible.entries):
        if entry.isdigit():
            index: int | None = int(entry)
            missing = int(entry) >= physical
        else:
            index = None if gpus is None else _named(entry, gpus)
            missing = gpus is not None and index is None
        if missing:
            shown = min(position, visible.limit or position)
            problem = (
                f"{visible.describe()}: {entry!r} names no GPU on this node, so {runtime} "
                "ignores it and every entry after it"
            )
            refusal = ""
            if shown < visible.count(physical):
                refusal = f"{problem}; list only GPUs this node has"
            return shown, problem, refusal
        if index is not None and index in seen and visible.limit is None:
            refusal = (
                f"{visible.describe()} names GPU {index} twice ({seen[index]!r} and {entry!r}), "
                f"and then {runtime} shows no GPU at all; list each GPU once"
            )
            return 0, refusal, refusal
        if index is not None:
            seen[index] = entry
    return visible.count(physical), "", ""


def verdict(hardware: Hardware, build: TorchBuild | None, env: Mapping[str, str]) -> Detection:
    """The detection verdict from the hardware, the torch build and the environment."""
    if build is not None and not build.known:
        rocm = hardware.amd > 0 and not hardware.nvidia
    else:
        rocm = build is not None and build.hip is not None
    vendor, count = ("AMD", hardware.amd) if rocm else ("NVIDIA", hardware.nvidia)
    found = [
        f"{_count(n, f'{name} GPU')} {how}"
        for n, name, how in (
            (hardware.nvidia, "NVIDIA", hardware.nvidia_source),
            (hardware.amd, "AMD", "via /sys/class/kfd"),
        )
        if n
    ]
    if build is not None and build.known and build.cuda is None and build.hip is None:
        if not found:
            return Detection(False, 0, f"{_nothing_found(hardware)}; {build} has no GPU support")
        wanted = "ROCm" if hardware.amd and not hardware.nvidia else "CUDA"
        return Detection(
            False,
            0,
            f"{' and '.join(found)}, but {build} has no CUDA or ROCm support — install a "
            f"{wanted} build of torch",
        )
    if not count:
        if found and build is not None:
            kind, wanted = ("a ROCm", "CUDA") if rocm else ("a CUDA", "ROCm")
            return Detection(
                False,
                0,
                f"{' and '.join(found)}, but {build} is {kind} build — install a {wanted} "
                "build of torch",
            )
        return Detection(False, 0, _nothing_found(hardware))
    source = "via /sys/class/kfd" if rocm else hardware.nvidia_source
    here = f"{_count(count, f'{vendor} GPU')} {source}"
    if build is None:
        return Detection(False, 0, f"{here}, but torch is not installed — install torch")
    try:
        visible = rocm_visible(env) if rocm else cuda_visible(env)
    except ConfigError as exc:
        # Still available, with the refusal: selecting cuda is this error (in init() and in
        # info alike) rather than a silent fall back to the CPU.
        return Detection(True, count, f"{here}; init() will refuse it: {exc}", refusal=str(exc))
    shown, problem, refusal = _visible_count(
        visible, count, None if rocm else hardware.nvidia_gpus, "HIP" if rocm else "CUDA"
    )
    if refusal:
        return Detection(True, shown, f"{here}; init() will refuse it: {refusal}", refusal=refusal)
    if visible.restricted and not shown and not problem:
        hidden = _count(count, f"{vendor} GPU")
        return Detection(False, 0, f"{visible.describe()} hides all {hidden}")
    if not build.known:
        toolkit = "build not told by its metadata; init() asks torch"
    else:
        toolkit = f"ROCm {build.hip}" if rocm else f"CUDA {build.cuda}"
    reason = f"{here}; {build} ({toolkit})"
    if problem:
        reason += f"; {problem}"
    elif visible.restricted:
        reason += f"; {visible.describe()} shows {shown}"
    if hardware.nvidia_note and not rocm:
        reason += f" ({hardware.nvidia_note})"
    return Detection(shown > 0, shown, reason)


def _nothing_found(hardware: Hardware) -> str:
    return f"no NVIDIA GPU ({hardware.nvidia_note}) and no AMD GPU ({hardware.amd_note})"


def _detect(probe: Probe) -> Detection:
    packages = probe.packages
    return verdict(find_hardware(probe), torch_build(packages), probe.env)


def _locality(probe: Probe) -> list[Locality | None]:
    """Each GPU's PCI function in sysfs, in PCI order (NVML's order, and CUDA's with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or identical GPUs), then through the visible-devices
    variable."""
    build = torch_build(probe.packages)
    try:
        if build is not None and build.hip is not None:
            cards = [
                card / "device"
                for card in sysfs.listing(probe.path("/sys/class/drm"), r"card\d+")
                if (sysfs.read(card / "device" / "vendor") or "").lower() == _AMD_VENDOR
            ]
            return visible_localities([pci_locality(c) for c in cards], rocm_visible(probe.env))
        visible = cuda_visible(probe.env)
    except ConfigError:
        return []  # init() refuses the variable; there is nothing to plan
    # Fixed-width hex: plain string order is PCI order (a natural sort puts 1a before 17).
    listed = sysfs.listing(probe.path("/proc/driver/nvidia/gpus"), _PCI_ADDRESS)
    addresses = sorted(entry.name.lower() for entry in listed)
    physical = [
        pci_locality(probe.path(f"/sys/bus/pci/devices/{address}"), address)
        for address in addresses
    ]

    def by_uuid(entry: str) -> int | None:
        gpus = query(probe).gpus or ()
        found = [i for i, gpu in enumerate(gpus) if gpu.uuid.startswith(entry)]
        return found[0] if len(found) == 1 else None

    return visible_localities(physical, visible, by_uuid)


def _links(probe: Probe) -> list[DeviceLinks]:
    """Each NVIDIA GPU's links, in NVML's order: its model, NVLinks and health from NVML where
    it answers, its PCIe link and NUMA node from sysfs (NVML's PCIe figures where sysfs has
    none). Without NVML, the GPUs the driver lists in ``/proc/driver/nvidia/gpus`` with what
    sysfs shows, and the NVML facts said to be missing."""
    listed = sysfs.listing(probe.path("/proc/driver/nvidia/gpus"), _PCI_ADDRESS)
    addresses = sorted(entry.name.lower() for entry in listed)
    from_nvml, source, why = query_links(probe)
    if from_nvml is None:
        no_nvml = f"not read: {why}"
        return [
            _device_links(probe, index, address, None, no_nvml, source)
            for index, address in enumerate(addresses)
        ]
    return [
        _device_links(
            probe,
            gpu.index,
            gpu.pci or (addresses[gpu.index] if gpu.index < len(addresses) else None),
            gpu,
            "",
            source,
        )
        for gpu in from_nvml
    ]


def _device_model(
    probe: Probe,
    address: str | None,
    gpu: GpuLinks | None,
    no_nvml: str,
    source: str,
    sources: dict[str, str],
    missing: dict[str, str],
) -> str | None:
    """The GPU's model from NVML, else from the driver's information file; notes each source."""
    if gpu:
        sources["model"] = sources["nvlink"] = sources["health"] = f"NVML ({source})"
        if "nvlink" in missing:
            del sources["nvlink"]
        return gpu.name
    missing |= {"nvlink": no_nvml, "health": no_nvml}
    information = probe.path(f"/proc/driver/nvidia/gpus/{address}/information")
    model = sysfs.read_keyed(information, ":").get("Model") if address else None
    if model:
        sources["model"] = str(information)
    else:
        missing["model"] = no_nvml
    return model


def _device_links(
    probe: Probe,
    index: int,
    address: str | None,
    gpu: GpuLinks | None,
    no_nvml: str,
    source: str,
) -> DeviceLinks:
    sources: dict[str, str] = {}
    missing: dict[str, str] = dict(gpu.missing) if gpu else {}
    model = _device_model(probe, address, gpu, no_nvml, source, sources, missing)
    pcie: PcieLink | None = None
    numa = None
    if address is not None and (gpu is None or gpu.pci is None):
        sources["pci"] = str(probe.path("/proc/driver/nvidia/gpus"))
        missing.pop("pci", None)
    elif address is not None:
        sources["pci"] = f"NVML ({source})"
    if address is None:
        missing["pci"] = "not read: the GPU's PCI address is not known"
    else:
        device = probe.path(f"/sys/bus/pci/devices/{address}")
        pcie = pcie_link(device)
        locality = pci_locality(device, address)
        numa = locality.numa_node if locality else None
        if numa is not None:
            sources["numa_node"] = str(device / "numa_node")
        else:
            missing["numa_node"] = f"not read: {device / 'numa_node'} unreadable or -1"
    if pcie is None and gpu is not None and gpu.pcie != (None,) * 4:
        pcie = PcieLink(*gpu.pcie, source=f"NVML ({source})")
    if pcie is not None:
        sources["pcie"] = pcie.source
        missing.pop("pcie", None)
    else:
        missing.setdefault("pcie", f"not read: no PCIe link files for {address or 'the GPU'}")
    return DeviceLinks(
        index,
        model,
        address,
        numa,
        pcie,
        gpu.nvlinks if gpu else None,
        gpu.nvlinks_total if gpu else None,
        gpu.health if gpu else (),
        sources,
        missing,
        gpu.uuid if gpu else None,
    )


def _confirm() -> str | None:
    import torch

    kind = f"ROCm {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}"
    if not torch.cuda.is_available():
        return (
            f"torch.cuda.is_available() is False (torch {torch.__version__}, {kind}): the "
            "driver may be older than this build needs, or no GPU is visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    if torch.cuda.device_count() < 1:
        return f"torch.cuda.device_count() is 0 (torch {torch.__version__}, {kind})"
    return None


def _bind(request: BindRequest) -> Any:
    import torch

    rocm = bool(torch.version.hip)
    visible = rocm_visible(request.env) if rocm else cuda_visible(request.env)
    count = torch.cuda.device_count()
    listed = visible.count(count)
    if visible.restricted and count < listed:
        raise ConfigError(
            f"{visible.describe()} lists {listed} GPUs but "
            f"{'HIP' if rocm else 'CUDA'} shows {count}: an entry names no GPU on this node, "
            "and the runtime ignores it and every entry after it; list only GPUs this node has"
        )
    index = device_index(
        local_rank=request.local_rank,
        local_world_size=request.local_world_size,
        count=count,
        visible=visible,
        what="GPUs",
        env=request.env,
    )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def eager_init(
    env: Mapping[str, str],
    torch_version: str,
    *,
    binds_at_creation: bool = False,
    world_size: int = 2,
) -> bool:
    """Whether to pass ``device_id=`` (eager NCCL init): `EAGER_INIT` if set, else off for a
    world of one rank (no peer to connect to, and a bound one-rank group has failed with CUDA
    error 600 where a side group was split from it: deepspeedai/DeepSpeed#8248), else on where
    the backend binds its GPU when the group is created (``binds_at_creation``: torch 2.15's
    ``ProcessGroupNCCL2``, see `torchcompat.nccl_binds_at_creation`), else on from
    `EAGER_INIT_SAFE_FROM`."""
    release = TorchBuild(torch_version).release
    value = config.read_name(env, EAGER_INIT)
    if value is not None:
        wanted = config.parse_bool(value, source=EAGER_INIT)
        if wanted and release < _DEVICE_ID_FROM:
            raise ConfigError(
                f"{EAGER_INIT}={value}: torch {torch_version} has no device_id argument for "
                "init_process_group (added in 2.3); unset it or upgrade torch"
            )
        return wanted
    if world_size == 1:
        return False
    if binds_at_creation:
        return True
    return EAGER_INIT_SAFE_FROM is not None and release >= EAGER_INIT_SAFE_FROM


def _index(device: Any) -> int:
    """The index of ``device`` (a ``torch.device`` or a string such as ``"cuda:1"``)."""
    if isinstance(device, str):
        return int(device.rpartition(":")[2] or 0)
    return int(device.index or 0)


def shared_gpus_note(
    backend: str,
    *,
    local_world_size: int,
    count: int,
    env: Mapping[str, str],
    paths: Sequence[str] | None = None,
) -> str | None:
    """For ``info``: what `shared_gpus` will decide in ``init()``, from the installed NCCL wheel
    (read without importing torch), or None where the ranks will not share GPUs over NCCL.

    Raises:
        ConfigError: Where ``init()`` will refuse it.
    """
    if backend not in torchcompat.NCCL_BACKENDS:
        return None
    build = torch_build(paths)
    rocm = build is not None and build.hip is not None
    if not shared_gpus_planned(local_world_size=local_world_size, count=count, env=env, rocm=rocm):
        return None
    wheel = None if rocm else nccl(paths, build.cuda if build is not None else None)
    _, note = shared_gpus(
        ranks=local_world_size,
        gpus=count,
        version=wheel.version if wheel is not None else None,
        source=(
            f"{build}'s" if rocm else f"{wheel.name}, installed" if wheel else "no nvidia-nccl-cu*"
        ),
        env=env,
        rocm=rocm,
    )
    return note


def nccl_options(
    request: OptionsRequest,
    torch_version: str,
    device_count: int | None = None,
    *,
    nccl_version: str | None = None,
    rocm: bool = False,
    bound: tuple[str, str] | None = None,
) -> BackendOptions:
    """What ``init_process_group`` gets for NCCL with torch ``torch_version``.

    ``bound`` is the bound GPU's identity and how this rank named it (`bound_gpu`): reported
    at the rendezvous with NCCL's rule (`exclusive_gpu_rule`), so that rank 0 refuses two
    ranks that hold one GPU through different visible-devices values.

    Where the backend binds its GPU when the group is created (torch 2.15's
    ``ProcessGroupNCCL2``), the device accelbackends bound goes with it as ``device_id``;
    with `EAGER_INIT` ``=0`` the GPU torch would pick instead (from ``LOCAL_RANK``, else the
    global rank, modulo ``device_count``) must be the bound one, or this is an error.

    Where this node's ranks share its ``device_count`` GPUs (`SHARE_DEVICES`), NCCL
    ``nccl_version`` (``torch.cuda.nccl.version()``) must allow it (`shared_gpus`): refused
    here, before the rendezvous, where it does not.
    """
    problem = torchcompat.nccl_backend_problem(request.backend, torch_version)
    if problem is not None:
        raise InitError(f"backend {request.backend!r}: {problem}")
    switch = torchcompat.nccl_switch_problem(request.env)
    if switch is not None:
        raise ConfigError(switch)
    eager = _passes_device_id(request, torch_version, device_count)
    env_defaults: dict[str, str] = {}
    if device_count and shared_gpus_planned(
        local_world_size=request.cluster.local_world_size,
        count=device_count,
        env=request.env,
        rocm=rocm,
    ):
        env_defaults, _ = shared_gpus(
            ranks=request.cluster.local_world_size,
            gpus=device_count,
            version=nccl_version or "of unknown version",
            source="torch.cuda.nccl.version()",
            env=request.env,
            rocm=rocm,
        )
    rule = ""
    if bound:
        rule = exclusive_gpu_rule(
            version=nccl_version, source="torch.cuda.nccl.version()", env=request.env, rocm=rocm
        )
        if not rule and not request.env.get(MULTI_RANK_GPU, "").strip():
            # Sharing allowed (NCCL 2.30+, opted in) where the launcher may have given another
            # rank this GPU under another name: rank 0 admits that, and NCCL then needs this.
            env_defaults[MULTI_RANK_GPU] = "1"
    if not any(request.env.get(name, "").strip() for name in _ERROR_HANDLING_VARIABLES):
        env_defaults[_ERROR_HANDLING_VARIABLES[0]] = _ERROR_HANDLING_DEFAULT
    return BackendOptions(
        # Gloo serves CPU tensors beside NCCL's GPU tensors (object collectives, CPU metrics).
        f"cpu:gloo,cuda:{request.backend}",
        request.timeout,
        device_id=request.device if eager else None,
        env_defaults=env_defaults,
        device_identity=bound[0] if bound else "",
        device_shown=bound[1] if bound else "",
        exclusive_device=rule,
    )


def _passes_device_id(
    request: OptionsRequest, torch_version: str, device_count: int | None
) -> bool:
    """Whether the bound GPU goes to ``init_process_group`` as ``device_id``."""
    binds = torchcompat.nccl_binds_at_creation(request.backend, torch_version, request.env)
    eager = eager_init(
        request.env,
        torch_version,
        binds_at_creation=binds,
        world_size=request.cluster.world_size,
    )
    if binds and not eager and device_count:
        if config.read_name(request.env, EAGER_INIT) is not None:
            _refuse_another_gpu(request, torch_version, device_count)
        else:
            # A world of one, lazy by default: device_id only where it is the one way to the
            # bound GPU (torch would pick another from LOCAL_RANK or the rank).
            eager = _torch_picks(request, device_count) != _index(request.device)
    return eager


def _torch_picks(request: OptionsRequest, device_count: int) -> int:
    """The GPU torch 2.15's NCCL takes without ``device_id``."""
    return torchcompat.nccl_device_at_creation(
        device_id=None, env=request.env, rank=request.cluster.rank, device_count=device_count
    )


def _refuse_another_gpu(request: OptionsRequest, torch_version: str, device_count: int) -> None:
    bound = _index(request.device)
    picked = _torch_picks(request, device_count)
    if picked != bound:
        source = (
            f"LOCAL_RANK={request.env['LOCAL_RANK']}"
            if "LOCAL_RANK" in request.env
            else f"global rank {request.cluster.rank}"
        )
        raise InitError(
            f"{EAGER_INIT}={config.read_name(request.env, EAGER_INIT)}: torch {torch_version}'s "
            f"{request.backend!r} backend binds its GPU when the group is created and, without "
            f"device_id, would take cuda:{picked} ({source} modulo {device_count} GPUs), but "
            f"accelbackends bound local rank {request.cluster.local_rank} to cuda:{bound}; "
            f"unset {EAGER_INIT}, or set {torchcompat.NCCL2_SWITCH}=0 for the legacy NCCL "
            "backend, which uses the current device"
        )


def nccl_version(version: object) -> str:
    """``torch.cuda.nccl.version()`` as text: a tuple ``(2, 28, 9)`` (torch 1.13 and later), or
    the older integer code (``2708`` for 2.7.8; ``22809`` for 2.28.9 from NCCL 2.9 on)."""
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version[:3])
    if isinstance(version, int):
        major, rest = divmod(version, 10000 if version >= 20900 else 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return str(version)


def _release(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def shared_gpus_planned(
    *, local_world_size: int, count: int, env: Mapping[str, str], rocm: bool = False
) -> bool:
    """Whether this node's ``local_world_size`` ranks will share its ``count`` visible GPUs
    (`SHARE_DEVICES`, as binding does it)."""
    visible = rocm_visible(env) if rocm else cuda_visible(env)
    return shares_devices(local_world_size=local_world_size, count=count, visible=visible, env=env)


def shared_gpus(
    *,
    ranks: int,
    gpus: int,
    version: str | None,
    source: str,
    env: Mapping[str, str],
    rocm: bool = False,
) -> tuple[dict[str, str], str]:
    """What NCCL needs for ``ranks`` local ranks to share ``gpus`` GPUs: the variables to set
    where the user has not (`MULTI_RANK_GPU`), and a note for ``info``.

    Args:
        version: NCCL's version (``torch.cuda.nccl.version()`` in ``init()``, the installed
            wheel in ``info``), or None where it is not known.
        source: Where ``version`` came from, for messages.

    Raises:
        ConfigError: Where NCCL refuses it: before 2.30 (RCCL: every version), where the user
            set `MULTI_RANK_GPU` to 0, or forces NVLS. Raised before the rendezvous, instead of
            every rank failing at its first collective.
    """
    shared = f"{SHARE_DEVICES}=1 puts {ranks} local ranks on {_count(gpus, 'GPU')}"
    ways_out = _ways_out(f"start at most {gpus} {plural(gpus, 'rank')} per node")
    if rocm:
        raise ConfigError(
            f"{shared}, but RCCL{f' {version}' if version else ''} ({source}) allows one rank "
            f"of a communicator per GPU; {ways_out}"
        )
    if version is None:
        return {}, (
            f"{shared}: NCCL's version is not known without importing torch ({source}); init() "
            f"asks torch.cuda.nccl.version() and refuses below "
            f"{'.'.join(map(str, MULTI_RANK_GPU_FROM))}, else sets {MULTI_RANK_GPU}=1"
        )
    if _release(version) < MULTI_RANK_GPU_FROM:
        raise ConfigError(
            f"{shared}, but NCCL {version} ({source}) allows one rank of a communicator per GPU "
            '(each rank would fail at its first collective with ncclInvalidUsage, "Duplicate '
            f'GPU detected"; NCCL 2.30 added {MULTI_RANK_GPU}=1 for this); {ways_out}'
        )
    value = env.get(MULTI_RANK_GPU, "").strip()
    if value and not config.DIGITS.match(value):
        raise ConfigError(
            f"{MULTI_RANK_GPU}={config.shown(value)} is not valid: NCCL reads an integer; unset "
            f"it or set it to 1 to let {ranks} local ranks share {_count(gpus, 'GPU')}"
        )
    if value and int(value) == 0:
        raise ConfigError(
            f"{shared}, but {MULTI_RANK_GPU}=0 forbids NCCL {version} ({source}) to put more "
            f"than one rank of a communicator on a GPU; unset it, or {ways_out}"
        )
    nvls = env.get(NVLS, "").strip()
    if nvls and nvls != "0":
        raise ConfigError(
            f"{shared}, but {NVLS}={config.shown(nvls)} forces NVLS, which NCCL 2.31.2 aborts "
            f"on a shared GPU; unset {NVLS}, or {ways_out}"
        )
    defaults = {} if value else {MULTI_RANK_GPU: "1"}
    how = f"keeps {MULTI_RANK_GPU}={value} as set" if value else f"sets {MULTI_RANK_GPU}=1"
    return defaults, (
        f"{shared}: NCCL {version} ({source}) allows it (experimental); accelbackends {how} "
        f"for each rank and never sets {NVLS}"
    )


def bound_gpu(
    index: int, env: Mapping[str, str], gpus: Sequence[Gpu] | None
) -> tuple[str, str] | None:
    """The GPU that CUDA's device ``index`` is, as ``(identity, how this rank named it)``: its
    UUID (a MIG device's own), found through the visible-devices variable in NVML's list, so
    that ``0`` and ``GPU-8f3c…`` name the same GPU; None where NVML did not list the GPUs or
    the entry names none. Like `_locality`, an index counts GPUs in NVML's (PCI) order."""
    try:
        visible = cuda_visible(env)
    except ConfigError:
        return None  # init() refuses the variable
    shown = f"cuda:{index}" + (f" ({visible.describe()})" if visible.restricted else "")
    if not gpus:
        return None
    entry = visible.entries[index] if visible.restricted and index < len(visible.entries) else ""
    if not visible.restricted or entry.isdigit():
        physical = int(entry) if entry else index
        return (gpus[physical].uuid, shown) if physical < len(gpus) else None
    if entry.startswith("MIG-"):
        migs = [uuid for gpu in gpus for uuid in gpu.mig if uuid.startswith(entry)]
        return (migs[0], shown) if len(migs) == 1 else None
    found = _named(entry, gpus) if entry else None
    return None if found is None else (gpus[found].uuid, shown)


def _ways_out(fewer: str) -> str:
    """The ways out of ranks that may not share a GPU, ``fewer`` saying how many ranks."""
    return f"use {config.BACKEND}=gloo, {fewer}, or make more GPUs visible"


def exclusive_gpu_rule(
    *, version: str | None, source: str, env: Mapping[str, str], rocm: bool = False
) -> str:
    """Why two ranks of one job must not hold one GPU over NCCL (or RCCL), with the ways out;
    ``""`` where NCCL 2.30 or later may share it (`SHARE_DEVICES` set, or `MULTI_RANK_GPU` set
    to a number other than 0, and NVLS not forced)."""
    ways_out = _ways_out("start fewer ranks on this node")
    if rocm:
        shown = f"RCCL{f' {version}' if version else ''} ({source})"
        return f"{shown} allows one rank of a communicator per GPU; {ways_out}"
    if version is None:
        return (
            f"NCCL's version is not known ({source}), and NCCL before "
            f"{'.'.join(map(str, MULTI_RANK_GPU_FROM))} allows one rank of a communicator per "
            f"GPU; {ways_out}"
        )
    if _release(version) < MULTI_RANK_GPU_FROM:
        return (
            f"NCCL {version} ({source}) allows one rank of a communicator per GPU (each rank "
            'would fail at its first collective with ncclInvalidUsage, "Duplicate GPU '
            f'detected"; NCCL 2.30 added {MULTI_RANK_GPU}=1 for this); {ways_out}'
        )
    value = env.get(MULTI_RANK_GPU, "").strip()
    if value == "0" or (value and not config.DIGITS.match(value)):
        return (
            f"{MULTI_RANK_GPU}={value if value == '0' else config.shown(value)} forbids NCCL "
            f"{version} ({source}) to put "
            f"more than one rank of a communicator on a GPU; unset it, or {ways_out}"
        )
    nvls = env.get(NVLS, "").strip()
    if nvls and nvls != "0":
        return (
            f"{NVLS}={config.shown(nvls)} forces NVLS, which NCCL 2.31.2 aborts on a shared GPU; "
            f"unset it, or {ways_out}"
        )
    if value or config.read_bool(env, SHARE_DEVICES):
        return ""
    return (
        f"NCCL {version} ({source}) lets ranks share a GPU only with {MULTI_RANK_GPU}=1 "
        f"(experimental), which {SHARE_DEVICES}=1 asks for; set it, or {ways_out}"
    )


def _torch_uuid(index: int) -> str:
    """The GPU's UUID as torch reads it (torch 2.0+), where NVML did not answer."""
    import torch

    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # an older torch, or a build whose properties lack it
        return ""
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _bound(request: OptionsRequest) -> tuple[str, str] | None:
    """The bound GPU's identity: from NVML's facts without torch where NVML answers, else
    from torch."""
    index = _index(request.device)
    probe = Probe(request.env, config.read_probe_root(request.env))
    found = bound_gpu(index, request.env, query(probe).gpus)
    if found is not None:
        return found
    uuid = _torch_uuid(index)
    return (uuid, f"cuda:{index}") if uuid else None


@gloo_or
def _backend_options(request: OptionsRequest) -> BackendOptions:
    import torch
    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise InitError(
            f"torch {torch.__version__} was built without NCCL; use "
            f"{config.BACKEND}=gloo or install a CUDA or ROCm build of torch"
        )
    try:
        version: str | None = nccl_version(torch.cuda.nccl.version())
    except Exception:  # a build whose NCCL cannot tell (shared GPUs are then refused)
        version = None
    return nccl_options(
        request,
        torch.__version__,
        torch.cuda.device_count(),
        nccl_version=version,
        rocm=bool(torch.version.hip),
        bound=_bound(request),
    )


SPEC = AcceleratorSpec(
    name="cuda",
    device_type="cuda",
    priority=PRIORITY,
    # nccl2, nccl-lazy and nccl-legacy from torch 2.15 (refused by name before).
    backends=(*torchcompat.NCCL_BACKENDS, "gloo"),
    default_backend="nccl",
    detect=_detect,
    bind=_bind,
    backend_options=_backend_options,
    confirm=_confirm,
    description="NVIDIA (CUDA) and AMD (ROCm) GPUs with NCCL/RCCL",
    locality=_locality,
    links=_links,
)


@hookimpl
def accelbackends_declare_accelerators() -> Sequence[AcceleratorSpec]:
    return [SPEC]
