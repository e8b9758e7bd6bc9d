"""What every environment plugin shares: strict integer readers and `Reader`, which reads
a launcher's variables, remembers which variable each field came from, and derives the
rendezvous address the same way for every launcher.

The rules that `Reader` applies everywhere:

- A ``MASTER_ADDR``/``MASTER_PORT`` the user set always wins over anything derived.
- Without one, a launcher-specific derivation is used (Slurm's node list, LSF's rank file);
  when every rank runs on this node, ``127.0.0.1`` is enough; otherwise the error says to set
  ``MASTER_ADDR`` and how.
- A derived port comes from the job's id (`port_from_id`), so every rank of a job computes
  the same one and two jobs sharing a node almost never collide; with no job id it is 29500,
  torchrun's default.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping

from ..plugin import ClusterInfo, ConfigError

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK",
    "Reader",
    "port_from_id",
    "read_int",
    "read_mpi_style",
    "read_port",
    "require",
]

# ASCII digits only: ``int()`` would also take "٣" or "३", which no launcher writes.
_INT = re.compile(r"^\s*\+?[0-9]+\s*$", re.ASCII)
DEFAULT_PORT = 29500
LOOPBACK = "127.0.0.1"
# Derived ports stay below Linux's ephemeral range (32768-60999 by default), so a port the kernel
# picked for some client connection never holds the one a job derives.
_PORT_BASE, _PORT_SPAN = 20000, 10000


def read_int(env: Mapping[str, str], var: str) -> int:
    """``env[var]`` as an integer >= 0, or a ConfigError naming the variable and its value."""
    value = env.get(var)
    if value is None:
        raise ConfigError(f"{var} is not set; use an integer >= 0")
    if not _INT.match(value):
        raise ConfigError(f"{var}={value!r} is not valid; use an integer >= 0")
    return int(value)


def read_port(env: Mapping[str, str], var: str) -> int:
    port = read_int(env, var)
    if not 0 < port < 65536:
        raise ConfigError(f"{var}={env[var]!r} is not a TCP port; use 1 to 65535")
    return port


def require(env: Mapping[str, str], launcher: str, *names: str) -> None:
    """Every one of ``names`` must be set (and not blank) for ``launcher``."""
    missing = [name for name in names if not env.get(name, "").strip()]
    if missing:
        raise ConfigError(
            f"the {launcher} environment is missing {', '.join(missing)}; "
            f"a {launcher} launch sets {', '.join(names)}"
        )


def port_from_id(job_id: str) -> int:
    """A port in 20000-29999 that every rank of the job ``job_id`` derives identically.

    CRC-32, not ``hash()``: Python salts string hashes per process.
    """
    return _PORT_BASE + zlib.crc32(job_id.encode()) % _PORT_SPAN


def _present(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip())


class Reader:
    """Reads one launcher's variables into a `ClusterInfo`, recording each field's source.

    The recorded sources are what ``accelbackends info`` shows beside each field and what
    `ClusterInfo` names in its consistency errors (``SLURM_LOCALID=3 must be less than
    SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]=2``).
    """

    def __init__(self, env: Mapping[str, str], launcher: str) -> None:
        self.env = env
        self.launcher = launcher
        self.sources: dict[str, str] = {}

    def first(self, *names: str) -> str | None:
        """The first of ``names`` that is set and not blank."""
        return next((name for name in names if _present(self.env, name)), None)

    def read(self, field: str, *names: str, missing: str = "") -> int:
        """The first of ``names`` that is set, as an int; ``missing`` explains its absence."""
        name = self.first(*names)
        if name is None:
            listed = " or ".join(names)
            hint = f"; {missing}" if missing else ""
            raise ConfigError(f"the {self.launcher} environment sets no {listed} ({field}){hint}")
        self.sources[field] = name
        return read_int(self.env, name)

    def read_optional(self, field: str, *names: str) -> int | None:
        name = self.first(*names)
        if name is None:
            return None
        self.sources[field] = name
        return read_int(self.env, name)

    def derive(self, field: str, value: int, how: str) -> int:
        self.sources[field] = how
        return value

    def check_product(
        self, world_size: int, nodes: int, nodes_var: str, per_node: int, per_node_var: str
    ) -> None:
        """World size must equal nodes * ranks per node where the launcher says both."""
        if world_size != nodes * per_node:
            raise ConfigError(
                f"{self.sources['world_size']}={world_size} does not match "
                f"{nodes_var}={nodes} * {per_node_var}={per_node} = {nodes * per_node}; "
                "the launcher's variables contradict each other (were some set by hand?)"
            )

    def check_counts(
        self, rank: int, world_size: int, local_rank: int, local_world_size: int, node_rank: int
    ) -> None:
        """Validate the counts before the rendezvous address is derived, so that a rank beyond
        the world size is reported as such, not as a missing ``MASTER_ADDR``."""
        ClusterInfo(
            launcher=self.launcher,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            node_rank=node_rank,
            sources=dict(self.sources),
        )

    def rendezvous(
        self,
        world_size: int,
        local_world_size: int,
        *,
        derive_addr: Callable[[], tuple[str, str] | None] | None = None,
        job_id: tuple[str, str] | None = None,
        port_var: str | None = None,
        hint: str = "",
    ) -> tuple[str | None, int | None]:
        """Rank 0's address and port: the user's ``MASTER_ADDR``/``MASTER_PORT`` first.

        Args:
            derive_addr: Returns (address, how it was derived) where the launcher tells, or
                None; called only when ``MASTER_ADDR`` is not set.
            job_id: (job id, its variable) to derive the port from.
            port_var: The launcher's own port variable, used when ``MASTER_PORT`` is not set.
            hint: How to set ``MASTER_ADDR`` under this launcher, for the error.
        """
        if _present(self.env, "MASTER_ADDR"):
            addr: str | None = self.env["MASTER_ADDR"].strip()
            self.sources["master_addr"] = "MASTER_ADDR"
        elif world_size == 1:
            return None, None
        elif derive_addr is not None and (derived := derive_addr()) is not None:
            addr, self.sources["master_addr"] = derived
        elif world_size == local_world_size:
            addr, self.sources["master_addr"] = LOOPBACK, "loopback: all ranks on this node"
        else:
            raise ConfigError(
                f"the {self.launcher} launcher does not say where rank 0 runs, and its "
                f"{world_size} ranks ({self.sources['world_size']}) span more than one node "
                f"({self.sources['local_world_size']}={local_world_size}); set MASTER_ADDR to "
                f"rank 0's host name or address{hint}; MASTER_PORT is optional"
            )
        if (name := self.first("MASTER_PORT", *([port_var] if port_var else []))) is not None:
            port = read_port(self.env, name)
            self.sources["master_port"] = name
        elif job_id is not None:
            port = port_from_id(job_id[0])
            self.sources["master_port"] = f"{job_id[1]} (hashed into 20000-29999)"
        else:
            port, self.sources["master_port"] = DEFAULT_PORT, f"default {DEFAULT_PORT}"
        return addr, port

    def cluster(
        self,
        *,
        rank: int,
        world_size: int,
        local_rank: int,
        local_world_size: int,
        node_rank: int,
        master_addr: str | None,
        master_port: int | None,
        run_id: str = "",
        store_hosted: bool = False,
    ) -> ClusterInfo:
        """The ClusterInfo, validated (rank below world size, …) with this reader's sources."""
        return ClusterInfo(
            launcher=self.launcher,
            store_hosted=store_hosted,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            node_rank=node_rank,
            master_addr=master_addr,
            master_port=master_port,
            run_id=run_id,
            sources=dict(self.sources),
        )


def read_mpi_style(
    reader: Reader,
    *,
    rank: tuple[str, ...],
    world_size: tuple[str, ...],
    local_rank: tuple[str, ...],
    local_world_size: tuple[str, ...],
    node_rank: tuple[str, ...] = (),
    missing_world: str = "",
    missing_local: str = "",
    job_id: str | None = None,
    derive_addr: Callable[[], tuple[str, str] | None] | None = None,
    hint: str = "",
) -> ClusterInfo:
    """The shape every MPI-style launcher shares: rank, world, local rank and size from
    variables (first present of each tuple); the node rank from a variable or, where the launcher
    gives none, ``rank // local world size`` (ranks packed node by node, the launchers' default
    mapping); the rendezvous address as `Reader.rendezvous` derives it."""
    r = reader
    rank_value = r.read("rank", *rank)
    world = r.read("world_size", *world_size, missing=missing_world)
    if world == 1 and r.first(*local_rank, *local_world_size) is None:
        local = r.derive("local_rank", 0, "one rank in the job")
        local_world = r.derive("local_world_size", 1, "one rank in the job")
    else:
        local_world = r.read("local_world_size", *local_world_size, missing=missing_local)
        found = r.read_optional("local_rank", *local_rank)
        if found is not None:
            local = found
        elif local_world == 1:
            local = r.derive("local_rank", 0, f"{r.sources['local_world_size']}=1")
        else:
            local = r.read("local_rank", *local_rank, missing=missing_local)
    node = r.read_optional("node_rank", *node_rank)
    if node is None:
        node = r.derive(
            "node_rank",
            rank_value // max(1, local_world),
            f"{r.sources['rank']} // {r.sources['local_world_size']}",
        )
    r.check_counts(rank_value, world, local, local_world, node)
    job = r.first(job_id) if job_id else None
    addr, port = r.rendezvous(
        world,
        local_world,
        derive_addr=derive_addr,
        job_id=(r.env[job], job) if job else None,
        hint=hint,
    )
    return r.cluster(
        rank=rank_value,
        world_size=world,
        local_rank=local,
        local_world_size=local_world,
        node_rank=node,
        master_addr=addr,
        master_port=port,
        run_id=f"{r.launcher}/{r.env[job]}" if job else "",
    )
