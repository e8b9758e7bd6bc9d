"""The program the real-launcher tests start: ``accelbackends.init()``, one all_reduce, one line.

It prints ``LAUNCHED {json}`` with what the rank recognised (launcher, rank numbers, the
rendezvous address, port and run id, and where each came from) and the all_reduce's sum, so a
test can check every rank's view. With ``--die-in-first-attempt RANK`` that rank exits 1 before
``init()`` when torchrun's restart count is 0 (an elastic restart test); with
``--recognise-only`` it prints only what the launcher's variables say, or the error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--die-in-first-attempt", type=int, default=None)
    parser.add_argument(
        "--recognise-only",
        action="store_true",
        help="print what the launcher's variables say (or the error), without init()",
    )
    args = parser.parse_args()
    if args.recognise_only:
        import accelbackends

        try:
            found = accelbackends.Registry().cluster_environment()
        except accelbackends.ConfigError as exc:
            print(f"REFUSED {exc}", flush=True)
            return 2
        print(f"RECOGNISED {found.launcher} {found.rank} {found.node_rank}", flush=True)
        return 0
    if (
        args.die_in_first_attempt is not None
        and os.environ.get("RANK") == str(args.die_in_first_attempt)
        and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
    ):
        print("dying in the first attempt", file=sys.stderr, flush=True)
        return 1

    import torch
    import torch.distributed as dist

    import accelbackends

    with accelbackends.distributed(timeout=60, rendezvous_timeout=60) as ctx:
        cluster = accelbackends.Registry().cluster_environment()
        total = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(total)
        report = {
            "launcher": cluster.launcher,
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "local_rank": ctx.local_rank,
            "local_world_size": ctx.local_world_size,
            "node_rank": ctx.node_rank,
            "master_addr": cluster.master_addr,
            "master_port": cluster.master_port,
            "run_id": cluster.run_id,
            "sources": dict(cluster.sources),
            "sum": float(total.item()),
            "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
        }
    print("LAUNCHED " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
