"""Which job this process belongs to: the one answer that `accelbackends.init`,
`accelbackends.attach`, ``accelbackends info`` and ``accelbackends check`` all take.

It is the first answer of the cluster-environment plugins (third-party ones first, then the
built-in launchers, Lightning's own child processes among them: `accelbackends.environments`),
asked through the registry; nothing else in accelbackends asks them. ``init()`` adds one
refusal of its own (`cluster_for_init`)."""

from __future__ import annotations

from ..plugin.errors import InitError
from ..plugin.types import ClusterInfo
from ..registry.facade import Registry

__all__ = ["cluster_for_init", "recognise"]


def recognise(registry: Registry) -> ClusterInfo:
    """The launcher's view of this process (``single`` when no launcher started it).

    Raises:
        ConfigError: A launcher's variables are there but wrong or incomplete.
        PluginError: A cluster-environment plugin failed or answered nonsense.
    """
    return registry.cluster_environment()


def cluster_for_init(registry: Registry) -> ClusterInfo:
    """The launcher's view for `accelbackends.init`, which refuses Lightning's children.

    Lightning starts its processes by running the script again; one that reaches `init()`
    means the parent passed the same call before Lightning started it, made a one-rank group,
    and Lightning reuses that group: the parent would train alone.
    """
    cluster = recognise(registry)
    if cluster.launcher == "lightning":
        raise InitError(
            f"accelbackends.init() runs in a process Lightning started (LOCAL_RANK="
            f"{cluster.local_rank}, WORLD_SIZE={cluster.world_size}, no RANK): its parent "
            "called init() before Lightning started the other ranks, so the parent holds a "
            "one-rank process group that Lightning reuses, and would train alone. Pass "
            "plugins=[accelbackends.integrations.lightning.AccelBackendsEnvironment()] and call "
            "accelbackends.attach() after fabric.launch() / in the LightningModule instead, or "
            "start the ranks with a launcher (torchrun, mpirun, srun)"
        )
    return cluster
