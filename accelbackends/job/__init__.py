"""Floor 4, the job: the steps of `accelbackends.init` and their neighbours, each in its file.

- `recognise`: which job this process is in (the only caller of the cluster hook).
- `worldcheck`: the recognised world compared with every other launcher's and scheduler's
  variables in the process; a world smaller than the job is an error.
- `select`: detection and the selection, with a reason for every candidate.
- `affinity`: CPU and NUMA affinity per local rank, planned from each device's locality.
- `environ`: what ``init()`` writes into the environment for the frameworks, and takes back.
- `undo`: the snapshot of ``os.environ`` that a failed or destroyed ``init()`` is undone from.
- `lifecycle`: ``init``, ``destroy`` and ``distributed``: the steps in the order they run.
- `frameworks`: what the frameworks already in this process (Accelerate, Lightning, DeepSpeed)
  think the job is, checked against the process group.
- `children`: rank processes of another world (Lightning's copies of the script) refused as
  they are started beside the group ``init()`` made.
- `attach`: a context for a process group that a framework made.
- `spawn`: N local processes, each running ``fn(ctx, ...)``.
- `relay`: each rank's stderr copied to the parent's as it comes, its last lines kept for the
  message that names a rank that died.
- `processes`: ending those processes and what they leave behind, ``/proc``, temp files.
- `failure`: when a rank's failure happened, so that the rank whose own error came first is
  the one named.

Nothing is imported here: ``import accelbackends.job.select`` must not pay for torch's path.
"""
