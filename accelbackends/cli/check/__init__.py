"""``accelbackends check``: prove that the ranks can talk over the chosen backend, and how fast.

Standalone it starts ``--nproc`` local ranks through `accelbackends.spawn`; under a launcher
(torchrun, SLURM, MPI, plain ``env://`` variables) it joins the ranks the launcher started. Either
way every rank runs the same four steps and rank 0 reports them:

1. the environment: accelerator, backend and why, world and local sizes;
2. init through the full path (detect, select, bind, rendezvous, ``init_process_group``), timed;
   then the node's floors and its devices' health, and each rank's own copies (device memory,
   host<->device over its PCIe link), each judged before the collectives;
3. correctness: each collective on float32, bfloat16 and int64 at odd and non-power-of-two
   lengths, compared with values every rank computes itself; the per-rank verdicts are gathered
   so that rank 0 names the failing check *and* rank;
4. bandwidth: all_reduce and all_gather swept over sizes; time is the slowest rank's mean,
   algbw = bytes / time, busbw by the nccl-tests definitions. With one rank, whose collectives
   move no data, a device memory copy (read+write) instead, never called a bandwidth of the
   collectives.

Exit 0 when every check passed (skips allowed), 1 when one failed or a rank died, 2 for bad
input. torch is imported inside functions only: the CLI imports this package to build its
parser, and ``accelbackends info`` must not pay for torch.

Where things are:

- `command`: the command itself: validate the flags and the selection, start or join the ranks.
- `options`: the flags, their defaults, and the validated `Options`.
- `sizes`: byte sizes as ``check`` reads and writes them (binary units, as in nccl-tests).
- `rank`: one rank's whole run, steps 2 to 4 under the watchdog, then the report.
- `watchdog`: ends a rank whose step outlives its limit, so that no run hangs.
- `heartbeat`: which rank stopped answering, from a counter each rank bumps in the store.
- `session`: the control group that carries the run's own traffic, and the ranks' agreement.
- `agree`: the maximum over the ranks that the session and the sweep both ask for.
- `compat`: the torch calls whose spelling depends on the torch version or the device type.
- `correctness`: step 3, every check on every rank.
- `collectives`: what step 3 checks: each collective on inputs every rank computes itself.
- `results`: a check's verdict, one per rank, merged over the ranks for the report.
- `sweep`: step 4, all_reduce and all_gather swept over sizes.
- `bandwidth`: what step 4 measures: one operation's timing at one size, and its bandwidths.
- `links`: step 4's second part: every node's links, measured one pair at a time.
- `devicecopy`: what one rank measures alone: a memory copy on its device.
- `copies`: each rank's own copies before the collectives, judged against their floors.
- `health`: the devices' faults, named by the rank that uses each device.
- `thresholds`: what the sweep must reach (``--min-busbw``, a fabric's expected bandwidth,
  ``--baseline``).
- `floors`: floors from the topology, as data: the rules file (``floors.txt``) and its matching.
- `progress`: what rank 0 has found so far, kept so that the report survives a later failure.
- `report`: what the user reads: the environment line, the correctness grid, the tables.
- `verdicts`: the preflight's verdict: which nodes pass, which fail and why.
"""

from __future__ import annotations

from .bandwidth import OPS, Measurement, bus_bandwidth, measure
from .collectives import DTYPES, LENGTHS
from .command import run
from .compat import synchronize
from .devicecopy import CopyMeasurement, measure_copy
from .options import add_arguments
from .sizes import GIB, KIB, MIB, format_size, parse_size

__all__ = [
    "DTYPES",
    "GIB",
    "KIB",
    "LENGTHS",
    "MIB",
    "OPS",
    "CopyMeasurement",
    "Measurement",
    "add_arguments",
    "bus_bandwidth",
    "format_size",
    "measure",
    "measure_copy",
    "parse_size",
    "run",
    "synchronize",
]
