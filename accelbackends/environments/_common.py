"""What every environment plugin shares: strict integer readers and `Reader`, which reads
a launcher's variables, remembers which variable each field came from, and derives the
rendezvous address the same way for every launcher.

The rules that `Reader` applies everywhere:

- A ``MASTER_ADDR``/``MASTER_PORT`` the user set always wins over anything derived.
- Without one, when every rank runs on this node, ``127.0.0.1`` (no name to resolve); otherwise
  a launcher-specific derivation (Slurm's node list, LSF's rank file); without one the error
  says to set ``MASTER_ADDR`` and how.
- A derived port comes from the job's id (`port_from_id`), so every rank of a job computes
  the same one and two jobs sharing a node almost never collide; with no job id it is 29500,
  torchrun's default.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping

from ..plugin import ClusterInfo, ConfigError

# The one way an error quotes a value and the one strict integer reader; re-exported here.
from ..plugin.config import DIGITS, MAX_COUNT, blanks, parse_int, shown

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK",
    "MAX_COUNT",
    "Reader",
    "check_packed",
    "parse_int",
    "port_from_id",
    "read_int",
    "read_mpi_style",
    "read_port",
    "require",
    "shown",
]

DEFAULT_PORT = 29500
LOOPBACK = "127.0.0.1"
# Derived ports stay below Linux's ephemeral range (32768-60999 by default), so a port the kernel
# picked for some client connection never holds the one a job derives.
_PORT_BASE, _PORT_SPAN = 20000, 10000


#: The smallest value of a field that is a count of processes (a world has a rank in it).
_LOWEST = {"world_size": 1, "local_world_size": 1}


def read_int(env: Mapping[str, str], var: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """``env[var]`` as an integer from ``low`` to ``high``, or a ConfigError naming the variable
    and its value."""
    value = env.get(var)
    if value is None:
        raise ConfigError(f"{var} is not set; use an integer >= {low}")
    return parse_int(value, var, low=low, high=high)


def read_port(env: Mapping[str, str], var: str) -> int:
    value = env.get(var, "")
    match = DIGITS.match(value)
    digits = match.group(1).lstrip("0") if match else ""
    if len(digits) <= 5 and digits and int(digits) < 65536:
        return int(digits)
    if not match:
        raise ConfigError(
            f"{var}={shown(value)} is not valid; use an integer from 1 to 65535{blanks(value)}"
        )
    raise ConfigError(f"{var}={shown(value)} is not a TCP port; use 1 to 65535")


def require(env: Mapping[str, str], launcher: str, *names: str) -> None:
    """Every one of ``names`` must be set (and not blank) for ``launcher``."""
    missing = [name for name in names if not env.get(name, "").strip()]
    if missing:
        raise ConfigError(
            f"the {launcher} environment is missing {', '.join(missing)}; "
            f"{'an' if launcher[:1] in 'aeiou' else 'a'} {launcher} launch sets "
            f"{', '.join(names)}"
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
        return read_int(self.env, name, low=_LOWEST.get(field, 0))

    def read_optional(self, field: str, *names: str) -> int | None:
        name = self.first(*names)
        if name is None:
            return None
        self.sources[field] = name
        return read_int(self.env, name, low=_LOWEST.get(field, 0))

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
        derive_port: Callable[[], tuple[int, str] | None] | None = None,
        hint: str = "",
    ) -> tuple[str | None, int | None]:
        """Rank 0's address and port: the user's ``MASTER_ADDR``/``MASTER_PORT`` first.

        Args:
            derive_addr: Returns (address, how it was derived) where the launcher tells, or
                None; called only when ``MASTER_ADDR`` is not set.
            job_id: (job id, its variable) to derive the port from.
            port_var: The launcher's own port variable, used when ``MASTER_PORT`` is not set.
            derive_port: Returns (port, how it was found) where the launcher reserved or
                named one (Slurm's reserved ports, AzureML's master node); before hashing the
                job id.
            hint: How to set ``MASTER_ADDR`` under this launcher, for the error.
        """
        if _present(self.env, "MASTER_ADDR"):
            addr: str | None = self.env["MASTER_ADDR"].strip()
            self.sources["master_addr"] = "MASTER_ADDR"
        elif world_size == 1:
            return None, None
        elif world_size == local_world_size:
            # Before any derived name: a node name need not resolve (Slurm's NodeName is not
            # always a host name), and every rank is here anyway.
            addr, self.sources["master_addr"] = LOOPBACK, "loopback: all ranks on this node"
        elif derive_addr is not None and (derived := derive_addr()) is not None:
            addr, self.sources["master_addr"] = derived
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
        elif derive_port is not None and (found := derive_port()) is not None:
            port, self.sources["master_port"] = found
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
        virtual_local_rank: bool = False,
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
            virtual_local_rank=virtual_local_rank,
        )


def check_packed(r: Reader, rank: int, local_rank: int, local_world_size: int) -> None:
    """Where a launcher gives no node index, the node rank is ``rank // local world size``,
    which holds only for packed (block) placement: ranks 0..n-1 on the first node, and so on.
    A round-robin (cyclic) placement shows itself on some rank as a local rank that is not
    ``rank % local world size``; refuse there rather than give two ranks one (node, local) pair.
    """
    if rank % local_world_size != local_rank:
        raise ConfigError(
            f"{r.sources['rank']}={rank} with {r.sources['local_rank']}={local_rank} and "
            f"{r.sources['local_world_size']}={local_world_size} is not a packed placement "
            f"(rank {rank} would be local rank {rank % local_world_size} of node "
            f"{rank // local_world_size}): the ranks were placed round-robin across nodes, "
            f"and the {r.launcher} launcher does not say which node is this one; place them "
            "node by node (mpiexec -ppn N, mpirun --map-by ppr:N:node) or set NODE_RANK per node"
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
    derive_job: Callable[[int, int], tuple[str, str] | None] | None = None,
    derive_addr: Callable[[], tuple[str, str] | None] | None = None,
    derive_port: Callable[[], tuple[int, str] | None] | None = None,
    derive_node: Callable[[], tuple[int, str] | None] | None = None,
    hint: str = "",
) -> ClusterInfo:
    """The shape every MPI-style launcher shares: rank, world, local rank and size from
    variables (first present of each tuple); the node rank from a variable or, where the launcher
    gives none, ``rank // local world size`` (ranks packed node by node, the launchers' default
    mapping); the rendezvous address as `Reader.rendezvous` derives it.

    The job's identity (the port and the store keys derive from it) is the variable ``job_id``
    or, without it, what ``derive_job(world size, local world size)`` finds: (the id, how it
    was found), or None where nothing identifies the job."""
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
    if node is None and derive_node is not None and (found_node := derive_node()) is not None:
        node = r.derive("node_rank", *found_node)
    packed = node is None
    if node is None:
        node = r.derive(
            "node_rank",
            rank_value // max(1, local_world),
            f"{r.sources['rank']} // {r.sources['local_world_size']}",
        )
    r.check_counts(rank_value, world, local, local_world, node)
    if packed:
        check_packed(r, rank_value, local, local_world)
    job_var = r.first(job_id) if job_id else None
    job = (r.env[job_var].strip(), job_var) if job_var else None
    if job is None and derive_job is not None:
        job = derive_job(world, local_world)
    if job is not None:
        r.sources["run_id"] = job[1]
    addr, port = r.rendezvous(
        world,
        local_world,
        derive_addr=derive_addr,
        derive_port=derive_port,
        job_id=job,
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
        run_id=f"{r.launcher}/{job[0]}" if job else "",
    )
