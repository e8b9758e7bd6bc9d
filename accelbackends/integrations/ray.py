"""Ray Train on accelbackends: `TorchConfig`, a drop-in for `ray.train.torch.TorchConfig`.

Ray Train's own torch backend makes the process group itself before the training function runs,
with its own device choice (a GPU requested: ``nccl``, else ``gloo``; an Ascend or Gaudi worker
gets no backend for its device), ``MASTER_ADDR`` set to the node's address even when every
worker is on one node, and no CPU affinity. With ``torch_config=TorchConfig()`` every worker runs
`accelbackends.init` instead: the selection with its reasons, the device binding, the backend
options and site policy, the membership proof, the rendezvous timeout and, when asked, CPU
affinity; `accelbackends.attach` inside the training function returns that context.

```python
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

import accelbackends
from accelbackends.integrations.ray import TorchConfig


def train(config):
    ctx = accelbackends.attach()  # the context init() made in this worker
    ...


TorchTrainer(
    train, torch_config=TorchConfig(), scaling_config=ScalingConfig(num_workers=4)
).fit()
```

Before any worker meets the others, Ray's resource request is compared with the selected
accelerator (`check_resources`): workers that Ray gave a GPU but that select ``cpu``, or the
reverse, fail naming both. Every worker of a one-node job meets on loopback; workers on several
nodes meet at rank 0's node address. Needs Ray Train V2 (the default of current Ray releases).

Importing this module imports Ray.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import ray
from ray.train.backend import Backend
from ray.train.torch import TorchConfig as RayTorchConfig

from ..plugin.errors import ConfigError

__all__ = ["RAY_RESOURCES", "TorchConfig", "check_resources"]

logger = logging.getLogger(__name__)

#: Ray's resource name for an accelerator → the accelbackends accelerators that it can be.
RAY_RESOURCES: Mapping[str, tuple[str, ...]] = {
    "GPU": ("cuda", "xpu"),  # NVIDIA and AMD GPUs, Intel's data-center GPUs
    "HPU": ("hpu",),  # Intel Gaudi
    "NPU": ("npu",),  # Huawei Ascend
    "TPU": ("tpu", "xla"),
    "neuron_cores": ("neuron",),  # AWS Trainium and Inferentia
}
_SHUTDOWN_TIMEOUT_S = 30.0


def check_resources(resources: Mapping[str, float], accelerator: str) -> str | None:
    """What is wrong between Ray's per-worker resource request and the selected accelerator,
    or None where they agree (or accelbackends does not know Ray's name for it)."""
    requested = {name: resources[name] for name in RAY_RESOURCES if resources.get(name, 0) > 0}
    asked = ", ".join(f"{name}: {amount:g}" for name, amount in requested.items())
    known = {name for names in RAY_RESOURCES.values() for name in names}
    if accelerator == "cpu" and requested:
        return (
            f"Ray gave each worker {{{asked}}} (ScalingConfig use_gpu / resources_per_worker), "
            "but accelbackends selected the cpu accelerator in the worker: the workers would hold "
            "devices they never use. Run `accelbackends info` on a worker node to see why no "
            "accelerator was selected, or ask Ray for no accelerator (use_gpu=False)"
        )
    if accelerator in known and not requested:
        wanted = next(name for name, names in RAY_RESOURCES.items() if accelerator in names)
        return (
            f"accelbackends selected the {accelerator} accelerator in the worker, but Ray gave "
            f"the workers no {wanted} (resources per worker: {dict(resources)}): Ray does not "
            "share its devices out among them. Ask Ray for one per worker (ScalingConfig("
            f"use_gpu=True) or resources_per_worker={{{wanted!r}: 1}}), or set "
            "ACCELBACKENDS_ACCELERATOR=cpu"
        )
    if accelerator in known and not any(accelerator in RAY_RESOURCES[n] for n in requested):
        return (
            f"Ray gave each worker {{{asked}}} but accelbackends selected the {accelerator} "
            "accelerator: set ACCELBACKENDS_ACCELERATOR to the accelerator Ray allocates, or ask "
            "Ray for the one accelbackends selects"
        )
    return None


@dataclass
class TorchConfig(RayTorchConfig):  # type: ignore[misc]
    """Ray Train's torch configuration, with `accelbackends.init` making the process group.

    Pass it as `TorchTrainer(..., torch_config=TorchConfig())`. Every field but `init_method`
    is an argument of [`init`][accelbackends.init]; None leaves it to the worker's
    `ACCELBACKENDS_*` variables.

    Attributes:
        backend: Use this communication backend (`ACCELBACKENDS_BACKEND`); None: the selected
            accelerator's default, not Ray's nccl-or-gloo.
        init_method: Only `"env"`: accelbackends makes the rendezvous itself.
        timeout_s: Collective timeout, seconds (`ACCELBACKENDS_TIMEOUT`; default 1800).
        accelerator: Use this accelerator (`ACCELBACKENDS_ACCELERATOR`).
        rendezvous_timeout_s: How long the workers wait for each other, seconds
            (`ACCELBACKENDS_RENDEZVOUS_TIMEOUT`; default 300).
        cpu_affinity: Pin each worker to CPUs near its device (`ACCELBACKENDS_CPU_AFFINITY`).
        threads: Intra-op threads per worker.
        seed: Seed Python, NumPy and torch identically in every worker.
        seed_per_rank: Add the rank to `seed`.
    """

    backend: str | None = None
    init_method: str = "env"
    timeout_s: float | None = None
    accelerator: str | None = None
    rendezvous_timeout_s: float | None = None
    cpu_affinity: str | bool | None = None
    threads: int | None = None
    seed: int | None = None
    seed_per_rank: bool = False

    def __post_init__(self) -> None:
        if self.init_method != "env":
            raise ConfigError(
                f"TorchConfig(init_method={self.init_method!r}) is not used: accelbackends "
                "makes the rendezvous itself; leave init_method out"
            )
        # TorchTrainer writes its own nccl-or-gloo choice into `backend` when it is None; the
        # user's choice is kept here so that the selected accelerator's default wins over it.
        self._requested_backend = self.backend

    @property
    def backend_cls(self) -> type[Backend]:
        return _AccelBackendsBackend

    @property
    def train_func_context(self) -> type[_TrainingThread]:
        return _TrainingThread

    def init_arguments(self) -> dict[str, Any]:
        """The keyword arguments of [`init`][accelbackends.init] that every worker passes."""
        arguments: dict[str, Any] = {
            "accelerator": self.accelerator,
            "backend": getattr(self, "_requested_backend", None),
            "timeout": self.timeout_s,
            "rendezvous_timeout": self.rendezvous_timeout_s,
            "cpu_affinity": self.cpu_affinity,
            "threads": self.threads,
            "seed": self.seed,
        }
        arguments = {key: value for key, value in arguments.items() if value is not None}
        if self.seed_per_rank:
            arguments["seed_per_rank"] = True
        return arguments

    def to_dict(self) -> dict[str, Any]:
        return {"init_method": self.init_method, **self.init_arguments()}


class _TrainingThread:
    """Ray Train runs the training function in a thread of its own. A device made current and
    a CPU mask set in the thread that ran ``init()`` are that thread's only (CUDA's current
    device and ``sched_setaffinity`` are per thread), so both are applied again here."""

    def __enter__(self) -> None:
        import torch

        from ..job.attach import attach

        context = attach()
        device = context.device
        module: Any = getattr(torch, device.type, None)
        if device.type != "cpu" and device.index is not None and hasattr(module, "set_device"):
            module.set_device(device)
        if context.cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, context.cpus)

    def __exit__(self, *exc: object) -> None:
        return None


def _node_id() -> str:
    return str(ray.get_runtime_context().get_node_id())


def _address_and_free_port() -> tuple[str, int]:
    """Rank 0's node address and a port free there now."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = int(probe.getsockname()[1])
    return str(ray.util.get_node_ip_address()), port


def _set_job_variables(master_addr: str | None, master_port: int) -> None:
    """Ray Train's worker variables, which the ``ray`` environment reads; ``MASTER_ADDR`` only
    for workers on several nodes (one node meets on loopback)."""
    context = ray.train.get_context()
    os.environ.update(
        RANK=str(context.get_world_rank()),
        WORLD_SIZE=str(context.get_world_size()),
        LOCAL_RANK=str(context.get_local_rank()),
        LOCAL_WORLD_SIZE=str(context.get_local_world_size()),
        NODE_RANK=str(context.get_node_rank()),
        MASTER_PORT=str(master_port),
    )
    if master_addr is None:
        os.environ.pop("MASTER_ADDR", None)
    else:
        os.environ["MASTER_ADDR"] = master_addr


def _init_worker(arguments: dict[str, Any], resources: dict[str, float]) -> dict[str, Any]:
    from ..job.lifecycle import init
    from ..job.select import select

    selection = select(arguments.get("accelerator"), arguments.get("backend"))
    problem = check_resources(resources, selection.accelerator)
    if problem is not None:
        raise ConfigError(problem)
    context = init(**arguments)
    return {
        "rank": context.rank,
        "world_size": context.world_size,
        "accelerator": context.accelerator,
        "backend": context.process_group_backend,
        "master_addr": context.master_addr,
    }


def _destroy_worker() -> None:
    from ..job.lifecycle import destroy

    destroy()


class _AccelBackendsBackend(Backend):  # type: ignore[misc]
    """The backend Ray Train runs on its worker group: ``init()`` in every worker on start,
    ``destroy()`` on shutdown."""

    # As Ray's torch backend: each worker sees every device Ray gave the workers of its node,
    # and binds the one of its local rank.
    share_cuda_visible_devices: bool = True

    def on_start(self, worker_group: Any, backend_config: TorchConfig) -> None:
        from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup

        if isinstance(worker_group, V1WorkerGroup):
            raise ConfigError(
                "accelbackends.integrations.ray.TorchConfig needs Ray Train V2, where a worker "
                "knows its rank before training starts; unset RAY_TRAIN_V2_ENABLED=0"
            )
        resources = dict(worker_group.get_resources_per_worker())
        nodes = set(worker_group.execute(_node_id))
        addr, port = worker_group.execute_single(0, _address_and_free_port)
        worker_group.execute(_set_job_variables, addr if len(nodes) > 1 else None, port)
        arguments = backend_config.init_arguments()
        started = [
            worker_group.execute_single_async(i, _init_worker, arguments, resources)
            for i in range(len(worker_group))
        ]
        contexts = ray.get(started)
        logger.info(
            "accelbackends.init() made a process group of %d workers: %s with %s, rendezvous at %s",
            len(contexts),
            contexts[0]["accelerator"],
            contexts[0]["backend"],
            contexts[0]["master_addr"] or "loopback",
        )

    def on_shutdown(self, worker_group: Any, backend_config: TorchConfig) -> None:
        from ray.exceptions import GetTimeoutError

        try:
            ray.get(worker_group.execute_async(_destroy_worker), timeout=_SHUTDOWN_TIMEOUT_S)
        except GetTimeoutError:
            logger.warning(
                "accelbackends.destroy() did not finish in every worker within %s",
                timedelta(seconds=_SHUTDOWN_TIMEOUT_S),
            )
