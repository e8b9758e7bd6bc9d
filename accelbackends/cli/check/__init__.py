"""``accelbackends check``: prove that the ranks can talk over the chosen backend, and how fast.

Standalone it starts ``--nproc`` local ranks through `accelbackends.spawn`; under a launcher
(torchrun, SLURM, MPI, plain ``env://`` variables) it joins the ranks the launcher started. Either
way every rank runs the same four steps and rank 0 reports them:

1. the environment: accelerator, backend and why, world and local sizes;
2. init through the full path (detect, select, bind, rendezvous, ``init_process_group``), timed;
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

Where things are: `command` runs the command, `options` holds its flags,
`rank` is one rank's run, `session` the ranks' own traffic and agreement
(`agree` the maximum over the ranks that the session and the sweep both ask for),
`correctness` and `sweep` steps 3 and 4, `collectives` and `bandwidth`
what those steps check and measure (`devicecopy` what one rank measures alone), `report` what
the user reads.
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
