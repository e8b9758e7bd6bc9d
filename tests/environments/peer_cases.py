"""Other projects' own test cases for what accelbackends parses, kept as data beside our answers.

Each case names the peer and the test it comes from, what it gives (a Slurm hostlist, or a
launcher's variables), what the peer's test asserts, and what accelbackends answers: a value, or
`Refused` with the words of the error. Where the two answers differ, ``disagreement`` says why
accelbackends answers otherwise on purpose; `test_peer_cases` checks that every difference has a
reason and every reason a difference, so neither side can drift unnoticed.

The inputs are the peers' (the shapes their users met); the tables and the code are ours. Where
a peer's fixture is a partial or inconsistent set of variables, a second case gives the full set
the real launcher writes for the same rank.

Sources (read for this table, none of their code copied):

- submitit, ``submitit/slurm/test_slurm.py`` (``test_slurm_node_list``,
  ``test_slurm_node_list_online_documentation``, ``test_slurm_invalid_parse``,
  ``test_slurm_missing_node_list``): expanding ``SLURM_JOB_NODELIST``.
- Lightning, ``tests/tests_fabric/plugins/environments/``: ``test_slurm.py``
  (``test_main_address_from_slurm_node_list``, ``test_attributes_from_environment_variables``),
  ``test_lsf.py``, ``test_torchelastic.py`` and ``test_kubeflow.py``.
- torch's proposed ``torch.distributed.get_worker_info`` (pytorch/pytorch#165507,
  ``test/distributed/test_worker_info.py``): its validation of ``RANK``, ``LOCAL_RANK`` and
  ``WORLD_SIZE`` before a group exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Refused:
    """An answer that is an error (`accelbackends.ConfigError`) whose message contains
    ``says``; for a peer, an exception (``says`` is what its test matches, or its type)."""

    says: str


@dataclass(frozen=True)
class PeerCase:
    """One case of a peer's test, with accelbackends' answer beside the peer's."""

    peer: str
    given: Any
    peer_answer: Any
    ours: Any
    disagreement: str | None = None


_NO_GUESSING = (
    "a node list that is set but empty is a broken job description: accelbackends refuses it "
    "naming the variable instead of assuming a one-node job on this host"
)
_SLURM_NEVER_WRITES = (
    "Slurm never writes white space inside brackets (scontrol show hostnames refuses it too): "
    "such a value was typed by hand, and reading it one way or another would be a guess"
)

#: submitit: ``SlurmJobEnvironment.hostnames`` from ``SLURM_JOB_NODELIST`` (whole lists).
SUBMITIT_HOSTLISTS = [
    PeerCase("submitit", "compute-b24", ["compute-b24"], ["compute-b24"]),
    PeerCase(
        "submitit",
        "compute-a1,compute-b2",
        ["compute-a1", "compute-b2"],
        ["compute-a1", "compute-b2"],
    ),
    PeerCase(
        "submitit",
        "compute-b2[1,2]",
        ["compute-b21", "compute-b22"],
        ["compute-b21", "compute-b22"],
    ),
    # Zero padding is kept: 011 is "011", not "11".
    PeerCase(
        "submitit",
        "compute-b2[011,022]",
        ["compute-b2011", "compute-b2022"],
        ["compute-b2011", "compute-b2022"],
    ),
    PeerCase(
        "submitit",
        "compute-b2[1-3]",
        [f"compute-b2{n}" for n in (1, 2, 3)],
        [f"compute-b2{n}" for n in (1, 2, 3)],
    ),
    PeerCase(
        "submitit",
        "compute-b2[1-3,5,6,8]",
        [f"compute-b2{n}" for n in (1, 2, 3, 5, 6, 8)],
        [f"compute-b2{n}" for n in (1, 2, 3, 5, 6, 8)],
    ),
    PeerCase(
        "submitit",
        "compute-b2[1-3,5-6,8]",
        [f"compute-b2{n}" for n in (1, 2, 3, 5, 6, 8)],
        [f"compute-b2{n}" for n in (1, 2, 3, 5, 6, 8)],
    ),
    PeerCase(
        "submitit",
        "compute-b2[1-3,5-6,8],compute-a1",
        [*(f"compute-b2{n}" for n in (1, 2, 3, 5, 6, 8)), "compute-a1"],
        [*(f"compute-b2{n}" for n in (1, 2, 3, 5, 6, 8)), "compute-a1"],
    ),
    PeerCase(
        "submitit", "compute[042,044]", ["compute042", "compute044"], ["compute042", "compute044"]
    ),
    PeerCase(
        "submitit",
        "compute[042-043,045,048-049]",
        [f"compute0{n}" for n in (42, 43, 45, 48, 49)],
        [f"compute0{n}" for n in (42, 43, 45, 48, 49)],
    ),
    # The example of Slurm's own documentation: a bracket after a dash.
    PeerCase(
        "submitit",
        "compute-b24-[1-3,5-9],compute-b25-[1,4,8]",
        [
            *(f"compute-b24-{n}" for n in (1, 2, 3, 5, 6, 7, 8, 9)),
            "compute-b25-1",
            "compute-b25-4",
            "compute-b25-8",
        ],
        [
            *(f"compute-b24-{n}" for n in (1, 2, 3, 5, 6, 7, 8, 9)),
            "compute-b25-1",
            "compute-b25-4",
            "compute-b25-8",
        ],
    ),
    PeerCase(
        "submitit",
        "compute-b2[1-,4]",
        Refused("SlurmParseException"),
        Refused("range '1-' is not N or N-M with digits"),
    ),
    PeerCase(
        "submitit",
        "compute-b2[1,2,compute-b3]",
        Refused("SlurmParseException"),
        Refused("range 'compute-b3' is not N or N-M with digits"),
    ),
    # submitit answers [this host's name] for an empty list.
    PeerCase(
        "submitit",
        "",
        ["<this host>"],
        Refused("is not a valid hostlist (empty)"),
        disagreement=_NO_GUESSING,
    ),
]

#: Lightning: ``SLURMEnvironment.main_address``, the first host of ``SLURM_NODELIST``.
LIGHTNING_FIRST_HOSTS = [
    PeerCase("Lightning", "127.0.0.1", "127.0.0.1", "127.0.0.1"),
    PeerCase("Lightning", "alpha", "alpha", "alpha"),
    PeerCase("Lightning", "alpha,beta,gamma", "alpha", "alpha"),
    PeerCase("Lightning", "alpha beta gamma", "alpha", "alpha"),
    PeerCase("Lightning", "1.2.3.[100-110]", "1.2.3.100", "1.2.3.100"),
    PeerCase(
        "Lightning",
        "1.2.3.[089, 100-110]",
        "1.2.3.089",
        Refused("white space inside brackets"),
        disagreement=_SLURM_NEVER_WRITES,
    ),
    PeerCase("Lightning", "host[22]", "host22", "host22"),
    PeerCase("Lightning", "host[1,5-9]", "host1", "host1"),
    # The first host as written, not the lowest number.
    PeerCase("Lightning", "host[5-9,1]", "host5", "host5"),
    PeerCase("Lightning", "alpha, host[5-9], gamma", "alpha", "alpha"),
    PeerCase("Lightning", "alpha[3,1], beta", "alpha3", "alpha3"),
]

#: The fields accelbackends' `ClusterInfo` answers, under the names the tables use.
Fields = Mapping[str, Any]

#: Lightning's SLURM fixture: SLURM_* of a task, but no SLURM_STEP_ID (so no srun step), a
#: node id (3) past its two-host node list, and rank 1 on node 3 with 10 tasks per node.
_LIGHTNING_SLURM = {
    "SLURM_NODELIST": "1.1.1.1, 1.1.1.2",
    "SLURM_JOB_ID": "0001234",
    "SLURM_NTASKS": "20",
    "SLURM_NTASKS_PER_NODE": "10",
    "SLURM_LOCALID": "2",
    "SLURM_PROCID": "1",
    "SLURM_NODEID": "3",
    "SLURM_JOB_NAME": "JOB",
}
#: What `sbatch -N 2 --ntasks-per-node 10` then `srun python train.py` sets for task 12 (node 1,
#: local 2) on the same two hosts: the step's own variables beside the job's.
_SRUN_2x10 = {
    "SLURM_JOB_ID": "1234",
    "SLURM_JOB_NAME": "JOB",
    "SLURM_JOB_NODELIST": "1.1.1.[1-2]",
    "SLURM_NODELIST": "1.1.1.[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "20",
    "SLURM_NTASKS_PER_NODE": "10",
    "SLURM_TASKS_PER_NODE": "10(x2)",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "1.1.1.[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "20",
    "SLURM_STEP_TASKS_PER_NODE": "10(x2)",
    "SLURM_PROCID": "12",
    "SLURM_LOCALID": "2",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "1.1.1.2",
}
#: Lightning's TorchElastic fixture: no LOCAL_WORLD_SIZE and no TORCHELASTIC_RUN_ID, which
#: torchrun always sets; rank 1 with local rank 2 on node 3 cannot be one torchrun job.
_LIGHTNING_TORCHELASTIC = {
    "MASTER_ADDR": "1.2.3.4",
    "MASTER_PORT": "500",
    "WORLD_SIZE": "20",
    "RANK": "1",
    "LOCAL_RANK": "2",
    "GROUP_RANK": "3",
}
#: `torchrun --nnodes 5 --nproc-per-node 4 ...` on node 3, worker 2 (torch 2.13's
#: local_elastic_agent): rank 3 * 4 + 2 = 14 of 20.
_TORCHRUN_5x4 = {
    "TORCHELASTIC_RUN_ID": "lightning-peer",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "False",
    "RANK": "14",
    "WORLD_SIZE": "20",
    "LOCAL_RANK": "2",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "3",
    "GROUP_WORLD_SIZE": "5",
    "ROLE_RANK": "14",
    "ROLE_WORLD_SIZE": "20",
    "ROLE_NAME": "default",
    "MASTER_ADDR": "1.2.3.4",
    "MASTER_PORT": "500",
}
#: Lightning's Kubeflow fixture: KUBERNETES_PORT and the env:// variables of a PyTorchJob pod.
_LIGHTNING_KUBEFLOW = {
    "KUBERNETES_PORT": "tcp://127.0.0.1:443",
    "MASTER_ADDR": "1.2.3.4",
    "MASTER_PORT": "500",
    "WORLD_SIZE": "20",
    "RANK": "1",
}
#: What the training operator's PyTorchJob controller sets in worker pod 0 (rank 1) of a job
#: of one master and 19 workers, beside what Kubernetes sets in every pod.
_PYTORCHJOB_WORKER_0 = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_PORT": "tcp://10.96.0.1:443",
    "HOSTNAME": "peer-worker-0",
    "PYTHONUNBUFFERED": "1",
    "MASTER_ADDR": "peer-master-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "20",
    "RANK": "1",
}


def lsf_rankfile(directory: Path) -> str:
    """Lightning's LSF fixture's rank file (a launch host, then one line per rank), written in
    ``directory``; returns its path."""
    path = directory / "lsb_djob_rankfile"
    path.write_text("batch\n10.10.10.0\n10.10.10.1\n10.10.10.2\n10.10.10.3\n")
    return str(path)


#: Lightning's LSF fixture, with ``{rankfile}`` standing for `lsf_rankfile`'s path: jsrun's
#: JSM_NAMESPACE_* without JSM_NAMESPACE_LOCAL_SIZE, which jsrun always sets.
_LIGHTNING_LSF = {
    "LSB_DJOB_RANKFILE": "{rankfile}",
    "LSB_JOBID": "1234",
    "JSM_NAMESPACE_SIZE": "4",
    "JSM_NAMESPACE_RANK": "3",
    "JSM_NAMESPACE_LOCAL_RANK": "1",
}
#: `jsrun -n 4 -a 1 ...` over the fixture's four hosts (one rank a host), rank 3: what jsrun
#: sets, JSM_NAMESPACE_LOCAL_SIZE included.
_JSRUN_4x1 = {
    **_LIGHTNING_LSF,
    "JSM_NAMESPACE_LOCAL_RANK": "0",
    "JSM_NAMESPACE_LOCAL_SIZE": "1",
    "LSB_HOSTS": "batch 10.10.10.0 10.10.10.1 10.10.10.2 10.10.10.3",
    "LSB_MCPU_HOSTS": "batch 1 10.10.10.0 1 10.10.10.1 1 10.10.10.2 1 10.10.10.3 1",
}

_CONSISTENT = (
    "the fixture is not one rank's variables of a real launch (see its comment): accelbackends "
    "refuses an incomplete or contradictory set naming what is missing; the case after it, "
    "with the variables the launcher really sets, gets the peer's answer"
)

#: Lightning's environment fixtures and the real launches beside them: (variables, the peer's
#: answer, ours as fields or `Refused`).
LIGHTNING_ENVIRONMENTS = [
    PeerCase(
        "Lightning SLURMEnvironment",
        _LIGHTNING_SLURM,
        dict(world_size=20, rank=1, local_rank=2, node_rank=3, master_addr="1.1.1.1"),
        dict(launcher="single", world_size=1, rank=0),
        disagreement="without SLURM_STEP_ID the process is not an srun task (it is the batch "
        "script, or a shell of salloc): accelbackends runs it as one process instead of taking "
        "the allocation's task count as its world, which would wait for 19 ranks never started",
    ),
    PeerCase(
        "Lightning SLURMEnvironment, as srun sets it",
        _SRUN_2x10,
        dict(world_size=20, rank=12, local_rank=2, node_rank=1, master_addr="1.1.1.1"),
        dict(
            launcher="slurm",
            world_size=20,
            rank=12,
            local_rank=2,
            local_world_size=10,
            node_rank=1,
            master_addr="1.1.1.1",
        ),
    ),
    PeerCase(
        "Lightning TorchElasticEnvironment",
        _LIGHTNING_TORCHELASTIC,
        dict(
            world_size=20, rank=1, local_rank=2, node_rank=3, master_addr="1.2.3.4", master_port=500
        ),
        Refused("LOCAL_WORLD_SIZE is not set"),
        disagreement=_CONSISTENT,
    ),
    PeerCase(
        "Lightning TorchElasticEnvironment, as torchrun sets it",
        _TORCHRUN_5x4,
        dict(
            world_size=20,
            rank=14,
            local_rank=2,
            node_rank=3,
            master_addr="1.2.3.4",
            master_port=500,
        ),
        dict(
            launcher="torchrun",
            world_size=20,
            rank=14,
            local_rank=2,
            local_world_size=4,
            node_rank=3,
            master_addr="1.2.3.4",
            master_port=500,
        ),
    ),
    # Lightning's local_rank 0 and node_rank = rank: one rank per pod, as here.
    PeerCase(
        "Lightning KubeflowEnvironment",
        _LIGHTNING_KUBEFLOW,
        dict(
            world_size=20, rank=1, local_rank=0, node_rank=1, master_addr="1.2.3.4", master_port=500
        ),
        dict(
            world_size=20, rank=1, local_rank=0, node_rank=1, master_addr="1.2.3.4", master_port=500
        ),
    ),
    PeerCase(
        "Lightning KubeflowEnvironment, as a PyTorchJob worker pod gets it",
        _PYTORCHJOB_WORKER_0,
        dict(
            world_size=20,
            rank=1,
            local_rank=0,
            node_rank=1,
            master_addr="peer-master-0",
            master_port=23456,
        ),
        dict(
            world_size=20,
            rank=1,
            local_rank=0,
            node_rank=1,
            master_addr="peer-master-0",
            master_port=23456,
        ),
    ),
    PeerCase(
        "Lightning LSFEnvironment",
        _LIGHTNING_LSF,
        dict(world_size=4, rank=3, local_rank=1, node_rank=2, master_addr="10.10.10.0"),
        Refused("sets no JSM_NAMESPACE_LOCAL_SIZE"),
        disagreement=_CONSISTENT,
    ),
]

#: The same LSF job as jsrun really sets it: kept apart because Lightning derives the node rank
#: from this host's name in the rank file, which the table's answers do not depend on.
JSRUN_ENVIRONMENT = PeerCase(
    "Lightning LSFEnvironment, as jsrun sets it",
    _JSRUN_4x1,
    dict(world_size=4, rank=3, local_rank=0, master_addr="10.10.10.0"),
    dict(
        launcher="lsf",
        world_size=4,
        rank=3,
        local_rank=0,
        local_world_size=1,
        master_addr="10.10.10.0",
    ),
)

_MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}

#: torch's proposed get_worker_info, before a group exists: (variables, its answer as
#: rank/local_rank/world_size or an error, ours). Its cases set no MASTER_ADDR/MASTER_PORT
#: (it makes no group); accelbackends needs them for a world of more than one, so they are
#: added where the case is about something else.
WORKER_INFO = [
    PeerCase(
        "torch get_worker_info",
        {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", **_MASTER},
        dict(rank=3, local_rank=1, world_size=8),
        dict(rank=3, local_rank=1, world_size=8, local_world_size=2, node_rank=1),
    ),
    PeerCase(
        "torch get_worker_info, LOCAL_WORLD_SIZE missing",
        {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", **_MASTER},
        dict(rank=3, local_rank=1, world_size=8),
        Refused("LOCAL_WORLD_SIZE is not set"),
        disagreement="RANK 3 with LOCAL_RANK 1 spans several nodes, and the node's rank count "
        "decides device binding and CPU affinity: accelbackends asks for LOCAL_WORLD_SIZE "
        "rather than guess it (torch's helper needs no count)",
    ),
    PeerCase(
        "torch get_worker_info, LOCAL_RANK missing",
        {"RANK": "4", "WORLD_SIZE": "8", **_MASTER},
        dict(rank=4, local_rank=4, world_size=8),
        dict(rank=4, local_rank=0, local_world_size=1, world_size=8, node_rank=4),
        disagreement="env:// without LOCAL_RANK is one rank per node (a Kubeflow pod, a "
        "hand-set job): its local rank is 0; torch's helper takes the global rank (with a "
        "warning), which on eight nodes of one GPU would ask for cuda:4",
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "not-a-number", "WORLD_SIZE": "2", **_MASTER},
        Refused("ValueError"),
        Refused("RANK='not-a-number' is not valid; use an integer >= 0"),
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "0", "LOCAL_RANK": "not-an-int", "WORLD_SIZE": "1"},
        Refused("ValueError"),
        Refused("LOCAL_RANK='not-an-int' is not valid; use an integer >= 0"),
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "0", "WORLD_SIZE": "not-a-number"},
        Refused("ValueError"),
        Refused("WORLD_SIZE='not-a-number' is not valid; use an integer >= 1"),
    ),
    # is_distributed False: a world of one.
    PeerCase(
        "torch get_worker_info",
        {"RANK": "0", "WORLD_SIZE": "1"},
        dict(rank=0, world_size=1),
        dict(rank=0, world_size=1),
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "2"},
        dict(rank=2, world_size="the caller's fallback"),
        Refused("missing WORLD_SIZE"),
        disagreement="a RANK without WORLD_SIZE is half a launch: accelbackends names the "
        "missing variable instead of taking a world size from elsewhere",
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "-2", "WORLD_SIZE": "1"},
        Refused("rank must be non-negative"),
        Refused("RANK='-2' is not valid; use an integer >= 0"),
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "0", "WORLD_SIZE": "0"},
        Refused("world_size must be at least 1"),
        Refused("WORLD_SIZE='0' is out of range; use an integer from 1"),
    ),
    PeerCase(
        "torch get_worker_info",
        {"RANK": "5", "WORLD_SIZE": "5", **_MASTER},
        Refused("rank (5) must be less than"),
        Refused("RANK=5 must be less than WORLD_SIZE=5"),
    ),
]

#: Ray Train's ``python/ray/train/v2/tests/test_torch_backend.py`` (Ray 2.5x, Train V2), run
#: with `accelbackends.integrations.ray.TorchConfig` in place of Ray's: (the TorchConfig's
#: arguments and the driver's variables, what Ray's test asserts, what ours does).
#: ``ray_backend_cases.py`` runs them in one local Ray session.
RAY_TORCH_BACKEND = [
    PeerCase(
        "Ray test_torch_start_shutdown",
        {"config": {"init_method": "env"}, "env": {}},
        "a group of 2 in every worker",
        "a group of 2 in every worker",
    ),
    PeerCase(
        "Ray test_torch_start_shutdown",
        {"config": {"init_method": "tcp"}, "env": {}},
        "a group of 2 in every worker",
        Refused("TorchConfig(init_method='tcp') is not used"),
        disagreement="accelbackends makes the rendezvous itself (its store, the membership "
        "proof, its timeouts): a tcp:// init_method would be ignored, so it is refused when "
        "the TorchConfig is made, naming the argument",
    ),
    # Ray's shutdown timeout of the process group, 0 included: training still completes.
    PeerCase(
        "Ray test_torch_process_group_shutdown_timeout",
        {"config": {}, "env": {"TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S": "5"}},
        "fit completes",
        "fit completes",
    ),
    PeerCase(
        "Ray test_torch_process_group_shutdown_timeout",
        {"config": {}, "env": {"TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S": "0"}},
        "fit completes",
        "fit completes",
    ),
]
