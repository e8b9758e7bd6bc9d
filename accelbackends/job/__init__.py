"""Floor 4, the job: the steps of `accelbackends.init` and their neighbours, each in its file.

- `recognise`: which job this process is in (the only caller of the cluster hook).
- `select`: detection and the selection, with a reason for every candidate.
- `affinity`: CPU and NUMA affinity per local rank, planned from each device's locality.
- `environ`: what ``init()`` writes into the environment for the frameworks, and takes back.
- `undo`: the snapshot of ``os.environ`` that a failed or destroyed ``init()`` is undone from.
- `lifecycle`: ``init``, ``destroy`` and ``distributed``: the steps in the order they run.
- `attach`: a context for a process group that a framework made.
- `spawn`: N local processes, each running ``fn(ctx, ...)``.
- `processes`: ending those processes and what they leave behind, ``/proc``, temp files.

Nothing is imported here: ``import accelbackends.job.select`` must not pay for torch's path.
"""
