"""Built-in cluster-environment plugins, one module per launcher; each is an ordinary plugin.

``BUILTIN`` lists them as (plugin name, module path) from the *first asked* to the last: the
registry registers them in reverse, because pluggy asks later registrations first. Third-party
environments are registered after all of them and so are asked before any built-in one.

The order follows one rule: **the launcher that started this process wins over one that started
an ancestor of it**, because a launcher sets its own variables last and the outer launcher's
variables are merely inherited. Launchers nest in practice like this:

1. ``torchrun`` — started by ``srun``, ``mpirun``, a Kubeflow pod or a SkyPilot ``run`` command,
   one per node; its workers inherit the outer launcher's variables but only
   ``TORCHELASTIC_RUN_ID`` and torchrun's ``RANK``/``LOCAL_RANK`` describe them.
2. ``ray`` — Ray Train's workers: Ray's own ``RAY_RAYLET_PID``/``RAY_JOB_ID`` with Ray Train's
   ``RANK``/``WORLD_SIZE``. A Ray cluster started by ``srun ray start``, ``mpirun`` or SkyPilot
   hands their variables down to every worker, where they describe Ray's daemons.
3. ``deepspeed`` — DeepSpeed's per-node launcher, started by pdsh or by hand, also under ``srun``
   or ``mpirun`` (one per node), whose variables its workers inherit; only it sets ``CROSS_RANK``.
4. ``lsf`` — ``jsrun`` also sets Open MPI's ``OMPI_COMM_WORLD_*`` for Spectrum MPI; its
   ``JSM_NAMESPACE_*`` variables exist only when ``jsrun`` started the process.
5. ``openmpi`` — ``mpirun`` inside a Slurm allocation starts its daemons with ``srun``, so every
   rank inherits a *daemon* step's ``SLURM_PROCID``/``SLURM_NTASKS``, which count nodes, not
   ranks. ``OMPI_COMM_WORLD_*`` is set only by ``mpirun``, so it wins over Slurm (and over PALS,
   which starts ``mpirun``'s daemons on Cray systems).
6. ``mvapich`` — ``MV2_COMM_WORLD_*`` is set only by MVAPICH2's own launchers (its ``mpiexec``
   is Hydra and sets ``PMI_RANK`` too, so it is asked before ``mpich``).
7. ``pals`` — HPE Cray PALS (``PALS_RANKID``); it steps aside for ``mpich`` when Hydra's
   ``PMI_RANK`` differs from ``PALS_RANKID``.
8. ``mpich`` — Hydra's ``mpiexec`` (MPICH, Intel MPI: ``PMI_RANK``).
9. ``pmix`` — PMIx launchers (``PMIX_RANK``).
   For 7 to 9 the same holds as for Open MPI inside an allocation. The other direction:
   ``srun --mpi=pmi2|pmix|cray_shasta`` starts the ranks itself and sets
   ``PMI_RANK``/``PMIX_RANK``/``PALS_RANKID`` beside its own variables; then the numbers agree
   with the step's (``SLURM_PROCID``, the step's task count) and these environments step aside
   for ``slurm``, which also knows the node list (`started_by_srun`).
10. ``skypilot`` — a SkyPilot task's ``run`` command on each node (``SKYPILOT_NODE_RANK``); an
   MPI launcher started from it (``mpirun`` over ``SKYPILOT_NODE_IPS``) is asked first.
11. ``slurm`` — a task ``srun`` started (``SLURM_STEP_ID``); an ``salloc``/``sbatch`` shell is
    not one.
12. ``kubeflow`` — the operator's ``PET_*`` variables beside ``RANK``/``WORLD_SIZE``; asked
    before ``env`` so the launcher is named and ``PET_NPROC_PER_NODE`` is checked.
13. ``lightning`` — the processes Lightning starts itself: ``LOCAL_RANK`` and ``WORLD_SIZE``
    without ``RANK``, a shape ``env`` would refuse.
14. ``env`` — hand-set ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``.
15. ``single`` — none of the above.

Whatever answers, `accelbackends.job.worldcheck` then compares its world with every other
launcher's and scheduler's variables in the process (a Slurm allocation, ``SKYPILOT_NUM_NODES``,
``PET_NNODES``, MPI sizes, ``WORLD_SIZE``): a world smaller than the job is an error.

What the plugins share:

- `variables`: the launchers' variables as data: which ones make a process look started by a
  launcher, and the ``env://`` variables that describe one rank's place in a job.
- `_common`: strict integer readers and `Reader`, which reads a launcher's variables and derives
  the rendezvous address the same way for every launcher.
- `_hostlist`: Slurm hostlists (``node[01-04,07]``).
"""

from __future__ import annotations

BUILTIN: tuple[tuple[str, str], ...] = (
    ("torchrun", "accelbackends.environments.torchrun"),
    ("ray", "accelbackends.environments.ray"),
    ("deepspeed", "accelbackends.environments.deepspeed"),
    ("lsf", "accelbackends.environments.lsf"),
    ("openmpi", "accelbackends.environments.openmpi"),
    ("mvapich", "accelbackends.environments.mvapich"),
    ("pals", "accelbackends.environments.pals"),
    ("mpich", "accelbackends.environments.mpich"),
    ("pmix", "accelbackends.environments.pmix"),
    ("skypilot", "accelbackends.environments.skypilot"),
    ("slurm", "accelbackends.environments.slurm"),
    ("kubeflow", "accelbackends.environments.kubeflow"),
    ("lightning", "accelbackends.environments.lightning"),
    ("env", "accelbackends.environments.env"),
    ("single", "accelbackends.environments.single"),
)
