"""Every private torch attribute the package touches, and every difference between the torch
releases the package supports, in one place, each with the torch versions it is known for.

torch gives no public way to ask these questions; where a release renames or drops one of
these attributes, this is the only module to change. Nothing here imports torch at import time:
each function imports it when called, so a probe that never calls them stays torch-free.

The supported releases and what differs between them are listed in the documentation's "torch
versions" page; the CI leg ``.ci/torch-versions.sh`` runs the oldest and the newest.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from .packages import TorchBuild

__all__ = [
    "GIL_FREE_DESTROY_FROM",
    "LIBUV_LISTEN_FD_FROM",
    "NCCL2_BACKENDS",
    "NCCL2_FROM",
    "NCCL2_SWITCH",
    "NCCL_BACKENDS",
    "address_in_use",
    "backend_plugins",
    "bound_device",
    "current_accelerator_device",
    "default_store",
    "destroy_process_group",
    "group_timeout",
    "is_xccl_available",
    "mark_xccl_available",
    "nccl_backend_problem",
    "nccl_binds_at_creation",
    "nccl_device_at_creation",
    "nccl_note",
    "nccl_switch_problem",
    "privateuse1_backend_name",
    "process_group_backend",
    "refused_backends",
    "register_device_module",
    "release",
    "store_on_listening_socket",
    "store_timeout",
    "unsupported_by_backend",
]

#: From torch 2.9 the libuv TCPStore server (the default since 2.4) can be built from a
#: listening socket; before, it says "The libuv TCPStore backend does not support
#: initialization with an listen fd" (seen on 2.4.1), and only the legacy server can.
LIBUV_LISTEN_FD_FROM = (2, 9)

#: Before torch 2.9 a process group is destroyed with the GIL held, while a Gloo worker thread
#: that has just finished a collective may need the GIL to free that collective's tensors
#: (the last reference, when the caller dropped its own): the destructor joins the worker and
#: the worker waits for the GIL, forever. Fixed upstream in pytorch/pytorch#154976 (mid-2025);
#: seen on 2.4.1 (a one-rank all_reduce, then destroy) and 2.6, not on 2.9.1.
GIL_FREE_DESTROY_FROM = (2, 9)
#: How long `destroy_process_group` leaves the GIL free first on those releases, in steps.
_GIL_FREE_STEPS, _GIL_FREE_STEP = 10, 0.01

#: torch 2.15 made ``"nccl"`` its torchcomms-based ``ProcessGroupNCCL2`` and added the names
#: ``nccl2`` (the same), ``nccl-lazy`` (per-peer communicators made on first use) and
#: ``nccl-legacy`` (the ``ProcessGroupNCCL`` of 2.14 and before), all through torch's own
#: ``torch.distributed.backends`` entry points.
NCCL2_FROM = (2, 15)
#: ``TORCH_DIST_USE_NCCL2=0`` makes torch 2.15's ``"nccl"`` the legacy ``ProcessGroupNCCL``;
#: torch reads it once, when ``"nccl"`` is first registered.
NCCL2_SWITCH = "TORCH_DIST_USE_NCCL2"
#: The names torch 2.15 added.
NCCL2_BACKENDS = ("nccl2", "nccl-lazy", "nccl-legacy")
#: Every NCCL backend name the cuda accelerator accepts.
NCCL_BACKENDS = ("nccl", *NCCL2_BACKENDS)

# Errors of a collective the backend cannot run, as torch words them. torch 2.4 to 2.6:
# "Cannot use ReduceOp.AVG with Gloo"; before 2.12 Gloo's all_to_all is
# "ProcessGroupGloo does not support alltoall".
_UNSUPPORTED = re.compile(
    r"not supported|unsupported|does not support|not implemented|no support|cannot use reduceop",
    re.IGNORECASE,
)


def release(version: str | None = None) -> tuple[int, int]:
    """``(major, minor)`` of ``version``, or of the installed torch (imported) when None."""
    if version is None:
        import torch

        version = str(torch.__version__)
    return TorchBuild(version).release


def backend_plugins() -> Mapping[str, Any]:
    """The third-party backends registered with ``torch.distributed``, by upper-case name.

    ``torch.distributed.Backend._plugins``: a dict of ``_BackendPlugin(creator_fn, extended_api)``
    filled by ``Backend.register_backend``; known for torch 2.4 to 2.13 (it is how torch itself
    finds a registered backend in ``new_group``). Empty where a torch has no such attribute.
    """
    import torch.distributed as dist

    plugins: Mapping[str, Any] = getattr(dist.Backend, "_plugins", {})
    return plugins


def register_device_module(device_type: str, module: Any) -> None:
    """Make ``module`` reachable as ``torch.<device_type>``, as vendor packages do on import.

    ``torch._register_device_module``: known for torch 2.4 to 2.13 (torch_npu and
    habana_frameworks call it; the testing kit's fake stacks imitate them).
    """
    import torch

    torch._register_device_module(device_type, module)


def privateuse1_backend_name() -> str:
    """The name the PrivateUse1 device is registered under (``privateuseone`` until renamed).

    ``torch._C._get_privateuse1_backend_name``: known for torch 2.1 to 2.13.
    """
    import torch

    return str(torch._C._get_privateuse1_backend_name())


def mark_xccl_available(process_group_class: Any) -> None:
    """Make ``torch.distributed.is_xccl_available()`` true, with ``process_group_class`` as the
    compiled ``ProcessGroupXCCL`` (for the testing kit's fake XPU build).

    ``torch.distributed.distributed_c10d._XCCL_AVAILABLE``: the flag the public check reads;
    known for torch 2.8 to 2.13 (xccl arrived in 2.8).
    """
    import torch.distributed.distributed_c10d as c10d

    c10d._XCCL_AVAILABLE = True
    c10d.ProcessGroupXCCL = process_group_class


def process_group_backend(group: Any, device: Any) -> Any:
    """The backend object ``group`` uses for tensors on ``device``'s type.

    ``ProcessGroup._get_backend(torch.device)``: known for torch 2.4 to 2.13.
    """
    import torch

    return group._get_backend(torch.device(device.type))


def default_store() -> Any:
    """The store the default process group was initialised with, or None where torch does not
    say.

    ``torch.distributed.distributed_c10d._get_default_store()``: known for torch 1.8 to 2.13
    (it raises where no default group exists).
    """
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None


def store_on_listening_socket(
    port: int, world_size: int, timeout: timedelta, listen_fd: int
) -> Any:
    """A ``TCPStore`` server on ``listen_fd``, a socket already listening on ``port``.

    Before torch 2.9 (`LIBUV_LISTEN_FD_FROM`) only the legacy server takes a listening socket,
    so it is asked for there (``use_libuv=False``, an argument since torch 2.2).
    """
    import torch.distributed as dist

    legacy = {} if release() >= LIBUV_LISTEN_FD_FROM else {"use_libuv": False}
    return dist.TCPStore(
        "127.0.0.1",
        port,
        world_size,
        True,
        timeout,
        wait_for_workers=False,
        master_listen_fd=listen_fd,
        **legacy,
    )


def store_timeout(seconds: float) -> timedelta:
    """``seconds`` as a ``TCPStore`` constructor's timeout.

    torch 2.4.1 turns a constructor timeout under one second into none at all (a client then
    fails at once with "timed out after 0s while trying to connect"); 2.13 and 2.15 keep
    milliseconds. Before 2.13 (the releases between were not measured) it is rounded up to
    one second.
    """
    if seconds < 1 and release() < (2, 13):
        seconds = 1.0
    return timedelta(seconds=seconds)


def address_in_use(exc: BaseException) -> bool:
    """Whether ``exc`` is a store's "address already in use" when it tried to listen.

    torch 2.6 and later raise ``DistNetworkError``; torch 2.4 a plain ``RuntimeError``; both
    say ``EADDRINUSE``.
    """
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "EADDRINUSE" in text or "address already in use" in text
    )


def unsupported_by_backend(exc: BaseException) -> bool:
    """Whether a collective's error says the backend cannot run it (not that it failed)."""
    return isinstance(exc, NotImplementedError) or bool(_UNSUPPORTED.search(str(exc)))


def is_xccl_available() -> bool:
    """``torch.distributed.is_xccl_available()``; False where torch has no such function
    (2.4; XCCL arrived in 2.8)."""
    import torch.distributed as dist

    check = getattr(dist, "is_xccl_available", None)
    return bool(check()) if check is not None else False


def current_accelerator_device(*, started_only: bool = False) -> Any:
    """The device torch's current accelerator has made current, or None where there is none.

    torch names device 0 as current on any machine with a GPU, whether or not anything chose
    it, and asking for the index starts the device runtime (a CUDA context). With
    ``started_only``, None unless this process has already started that runtime (a framework
    that made a device current has: ``torch.cuda.set_device`` does), and nothing is started.

    ``torch.accelerator`` exists from torch 2.6. On a CUDA (or XPU) build with no device or
    driver (the usual ``pip install torch`` on a CPU node), ``current_accelerator()`` still
    names the build's device type and ``current_device_index()`` raises ("Found no NVIDIA
    driver", torch 2.15); ``current_accelerator(check_available=True)`` answers None there
    instead. Where that argument is missing (torch 2.6) ``torch.accelerator.is_available()``
    is asked, and where ``current_device_index`` is (2.6) its older name
    ``current_device_idx``.
    """
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    try:
        current = accelerator.current_accelerator(check_available=True)
    except TypeError:
        current = accelerator.current_accelerator()
        if current is not None and not accelerator.is_available():
            current = None
    if current is None:
        return None
    if started_only and not _runtime_started(current.type):
        return None
    index = getattr(accelerator, "current_device_index", None) or accelerator.current_device_idx
    return torch.device(current.type, index())


def _runtime_started(device_type: str) -> bool:
    """Has this process started ``device_type``'s runtime (``torch.cuda.is_initialized()``)?
    Where the runtime cannot tell (no ``is_initialized``), it counts as started."""
    import torch

    started = getattr(getattr(torch, device_type, None), "is_initialized", None)
    return True if started is None else bool(started())


def group_timeout(group: Any) -> float | None:
    """The collective timeout ``group`` was made with, in seconds; None where torch does not
    tell.

    ``ProcessGroup.options._timeout``: torch 2.4 (gone by 2.13; the design notes say from
    2.6). Without it the backend of each device type keeps its own ``options._timeout``
    (2.4 to 2.15); the group's first device type's is read.
    """
    import torch

    try:
        return float(group.options._timeout.total_seconds())
    except AttributeError:
        pass
    try:
        device_type = group._device_types[0]
        backend = group._get_backend(torch.device(device_type))
        return float(backend.options._timeout.total_seconds())
    except Exception:
        return None


def nccl_backend_problem(backend: str, torch_version: str) -> str | None:
    """Why ``backend`` (an NCCL name) cannot be used with torch ``torch_version``, or None."""
    if backend in NCCL2_BACKENDS and release(torch_version) < NCCL2_FROM:
        return (
            f"torch {torch_version} has no {backend!r} backend (torch 2.15 added "
            f"{', '.join(NCCL2_BACKENDS)}); use 'nccl'"
        )
    return None


def refused_backends(backends: Sequence[str], torch_version: str) -> dict[str, str]:
    """The names among ``backends`` that ``init()`` refuses on torch ``torch_version``, each
    with why, worded without the name so that names refused for one reason share a line."""
    added = f"torch {NCCL2_FROM[0]}.{NCCL2_FROM[1]} added {', '.join(NCCL2_BACKENDS)}; use 'nccl'"
    return {b: added for b in backends if nccl_backend_problem(b, torch_version) is not None}


def nccl_binds_at_creation(backend: str, torch_version: str, env: Mapping[str, str]) -> bool:
    """Whether the NCCL backend ``backend`` picks its GPU when the process group is created.

    torch 2.15's ``ProcessGroupNCCL2`` (``"nccl"`` unless `NCCL2_SWITCH` is ``0``, ``"nccl2"``
    and ``"nccl-lazy"``) does; the legacy ``ProcessGroupNCCL`` (torch 2.14 and before,
    ``"nccl-legacy"``) picks it at the first collective, from the current device.
    """
    if release(torch_version) < NCCL2_FROM:
        return False
    if backend in ("nccl2", "nccl-lazy"):
        return True
    return backend == "nccl" and env.get(NCCL2_SWITCH, "").strip() != "0"


def nccl_device_at_creation(
    *, device_id: int | None, env: Mapping[str, str], rank: int, device_count: int
) -> int:
    """The GPU index torch 2.15's ``ProcessGroupNCCL2`` binds when the group is created
    (``distributed_c10d._nccl2_device``): ``device_id`` where passed, else ``LOCAL_RANK``
    modulo the visible GPUs where that variable is set, else the global rank modulo them."""
    if device_id is not None:
        return device_id
    local_rank = env.get("LOCAL_RANK")
    if local_rank is not None:
        return int(local_rank) % device_count
    return rank % device_count


def bound_device(group: Any) -> Any:
    """The device ``group`` is bound to, or None: ``ProcessGroup.bound_device_id``, set by
    ``init_process_group(device_id=...)`` (torch 2.3 and later) and, from torch 2.15, by the
    NCCL2 backend to the GPU it picked when the group was created."""
    return getattr(group, "bound_device_id", None)


def nccl_switch_problem(env: Mapping[str, str]) -> str | None:
    """What is wrong with `NCCL2_SWITCH` in ``env``, or None.

    torch 2.15 takes exactly ``0`` as "legacy NCCL" and any other value as NCCL2, so ``off``
    or ``false`` would silently keep NCCL2.
    """
    value = env.get(NCCL2_SWITCH)
    if value is None or value in ("0", "1"):
        return None
    return (
        f"{NCCL2_SWITCH}={value!r}: torch reads only '0' as off (legacy ProcessGroupNCCL) and "
        "any other value as on (ProcessGroupNCCL2); set it to 0 or 1"
    )


def nccl_note(backend: str, torch_version: str | None, env: Mapping[str, str]) -> str | None:
    """For ``info``: which NCCL implementation ``backend`` is on torch ``torch_version`` and
    when it binds its GPU; None for a backend that is not an NCCL name. Reads no torch."""
    if backend not in NCCL_BACKENDS or torch_version is None:
        return None
    problem = nccl_backend_problem(backend, torch_version)
    if problem is not None:
        return f"error: {problem}"
    if release(torch_version) < NCCL2_FROM:
        return (
            f"torch {torch_version}'s ProcessGroupNCCL, which uses the current device (set when "
            "accelbackends binds the rank)"
        )
    if nccl_binds_at_creation(backend, torch_version, env):
        implementation = "ProcessGroupNCCL2" if backend != "nccl-lazy" else "ProcessGroupNCCLLazy"
        switch = f" ({NCCL2_SWITCH}=0 for the legacy one)" if backend == "nccl" else ""
        return (
            f"torch {torch_version}'s {implementation}{switch}: binds its GPU when the group is "
            "created; accelbackends passes the GPU it bound as device_id"
        )
    return f"torch {torch_version}'s legacy ProcessGroupNCCL ({NCCL2_SWITCH}=0 or nccl-legacy)"


def destroy_process_group() -> None:
    """``torch.distributed.destroy_process_group()``, where the installed torch destroys a
    Gloo group with the GIL held (before `GIL_FREE_DESTROY_FROM`) after leaving the GIL free for
    a moment, so that a worker finishing its last collective can release it first.

    This narrows the window of torch's deadlock rather than closing it (only torch's fix can):
    a worker not scheduled within those 0.1 s still meets the destructor.
    """
    import torch.distributed as dist

    if release() < GIL_FREE_DESTROY_FROM:
        for _ in range(_GIL_FREE_STEPS):
            time.sleep(_GIL_FREE_STEP)
    dist.destroy_process_group()
