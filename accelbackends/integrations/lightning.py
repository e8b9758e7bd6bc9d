"""Lightning (`lightning.fabric` and `lightning.pytorch`) on accelbackends' launcher
recognition: `AccelBackendsEnvironment`, a Lightning `ClusterEnvironment`.

Lightning recognises torchrun, SLURM, LSF, Kubeflow and (with `mpi4py`) MPI itself, each its
own way; under `mpirun` without `mpi4py` it sees no launcher and starts processes of its own
in every rank. With `plugins=[AccelBackendsEnvironment()]` ranks, world size, node rank and the
main address and port come from the launcher accelbackends recognises (every one it knows, and
the processes Lightning starts itself), and every rank or world size Lightning's strategy sets is
checked against the launcher and against a process group that already exists.

Importing this module imports Lightning (the `lightning` package, else `lightning_fabric`).
"""

from __future__ import annotations

import socket
from typing import Any

from ..host import workers
from ..job.recognise import recognise
from ..job.select import select
from ..plugin.errors import ConfigError, InitError
from ..plugin.types import Selection
from ..registry.facade import Registry, default_registry

try:
    from lightning.fabric.plugins.environments import ClusterEnvironment
except ImportError:  # the standalone pytorch_lightning / lightning_fabric distributions
    from lightning_fabric.plugins.environments import ClusterEnvironment

__all__ = [
    "LIGHTNING_ACCELERATORS",
    "AccelBackendsEnvironment",
    "fabric_ddp",
    "lightning_accelerator",
    "process_group_backend",
    "trainer_ddp",
]

#: accelbackends accelerator → Lightning's `accelerator=` name, where Lightning has one.
LIGHTNING_ACCELERATORS = {"cpu": "cpu", "cuda": "cuda", "mps": "mps"}


def _selection(selection: Selection | None) -> Selection:
    return selection if selection is not None else select()


def lightning_accelerator(selection: Selection | None = None) -> str:
    """Lightning's `accelerator=` name for the selected accelerator.

    Raises:
        ConfigError: Lightning has no built-in accelerator of that kind (XPU, HPU: Intel's
            and Habana's Lightning packages bring their own accelerator classes; pass those).
    """
    chosen = _selection(selection).accelerator
    if chosen not in LIGHTNING_ACCELERATORS:
        raise ConfigError(
            f"accelbackends selected accelerator {chosen!r}, which Lightning has no built-in "
            f"accelerator for (Lightning's: {', '.join(sorted(LIGHTNING_ACCELERATORS))}); "
            "pass the accelerator object of the vendor's Lightning package instead"
        )
    return LIGHTNING_ACCELERATORS[chosen]


def process_group_backend(selection: Selection | None = None) -> str:
    """The backend for the DDP strategy's `process_group_backend=` (`gloo`, `nccl`,
    `xccl`…): the selected accelerator's backend, as `init()` would use it."""
    return _selection(selection).backend


def fabric_ddp(**kwargs: Any) -> Any:
    """`lightning.fabric.strategies.DDPStrategy` with `AccelBackendsEnvironment` and
    the selected backend; `kwargs` go to the strategy."""
    from lightning.fabric.strategies import DDPStrategy

    kwargs.setdefault("cluster_environment", AccelBackendsEnvironment())
    kwargs.setdefault("process_group_backend", process_group_backend())
    return DDPStrategy(**kwargs)


def trainer_ddp(**kwargs: Any) -> Any:
    """`lightning.pytorch.strategies.DDPStrategy` with `AccelBackendsEnvironment` and
    the selected backend; `kwargs` go to the strategy."""
    from lightning.pytorch.strategies import DDPStrategy

    kwargs.setdefault("cluster_environment", AccelBackendsEnvironment())
    kwargs.setdefault("process_group_backend", process_group_backend())
    return DDPStrategy(**kwargs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _group_view() -> tuple[int, int] | None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class AccelBackendsEnvironment(ClusterEnvironment):  # type: ignore[misc]
    """A Lightning `ClusterEnvironment` whose ranks, world size, node rank and main address and
    port come from the launcher accelbackends recognises.

    Without a launcher (`python train.py`) Lightning starts the other processes itself, as it
    does by default; under torchrun, srun, mpirun, mpiexec, jsrun… the launcher's processes are
    used. Whenever Lightning's strategy sets a global rank or world size, it is compared with the
    launcher's and with an existing process group (e.g. one made by `accelbackends.init()`),
    and a difference raises `accelbackends.InitError` naming both.
    """

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__()
        self._cluster = recognise(registry or default_registry())
        self._external = self._cluster.launcher != "single"
        self._rank = self._cluster.rank
        self._world_size = self._cluster.world_size
        self._port: int | None = self._cluster.master_port
        # Lightning's DDP wrapper keeps its Gloo workers alive to the end of the process: let
        # them finish before the interpreter finalises (see `accelbackends.host.workers`).
        workers.at_exit()

    @property
    def launcher(self) -> str:
        """The launcher accelbackends recognised (`single` when there is none)."""
        return self._cluster.launcher

    @property
    def creates_processes_externally(self) -> bool:
        return self._external

    @property
    def main_address(self) -> str:
        return self._cluster.master_addr or "127.0.0.1"

    @property
    def main_port(self) -> int:
        if self._port is None:
            # Lightning starts the ranks: the port is chosen once, here, and handed to them.
            self._port = _free_port()
        return self._port

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._world_size

    def set_world_size(self, size: int) -> None:
        self._check("world size", size, self._cluster.world_size, 1)
        self._world_size = size

    def global_rank(self) -> int:
        return self._rank

    def set_global_rank(self, rank: int) -> None:
        self._check("global rank", rank, self._cluster.rank, 0)
        self._rank = rank

    def local_rank(self) -> int:
        return self._cluster.local_rank

    def node_rank(self) -> int:
        return self._cluster.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        if not self._external:
            return
        lightning_view = (num_devices * num_nodes, num_devices)
        launcher_view = (self._cluster.world_size, self._cluster.local_world_size)
        if lightning_view != launcher_view:
            raise InitError(
                f"Lightning is set up for devices={num_devices} x num_nodes={num_nodes} = "
                f"{num_devices * num_nodes} ranks, but the {self._cluster.launcher} launcher "
                f"started {self._cluster.world_size} ranks with "
                f"{self._cluster.local_world_size} on this node "
                f"({self._cluster.source('world_size')}, "
                f"{self._cluster.source('local_world_size')}); make them agree"
            )

    def _check(self, what: str, lightning: int, launcher: int, index: int) -> None:
        if self._external and lightning != launcher:
            raise InitError(
                f"Lightning's strategy sets the {what} to {lightning}, but the "
                f"{self._cluster.launcher} launcher says {launcher} "
                f"({self._cluster.source('rank' if index == 0 else 'world_size')}); "
                "check devices= and num_nodes= against the launch command"
            )
        group = _group_view()
        if group is not None and group[index] != lightning:
            raise InitError(
                f"Lightning's strategy sets the {what} to {lightning}, but the process group "
                f"that already exists has {what} {group[index]} (rank {group[0]} of {group[1]}); "
                "Lightning would reuse it and train a different job. Under `python train.py`, "
                "let Lightning start the processes and call accelbackends.attach() after "
                "fabric.launch() instead of accelbackends.init() before it"
            )
