"""Step 4, second part: every node's links, measured one pair at a time.

The whole-group sweep says how fast the job is, not which node holds it back: a collective runs
at the pace of its slowest link. Here ranks exchange a buffer in pairs (both directions at once,
``isend`` and ``irecv``), in rounds where no rank is in two pairs, so each pair's figure is its
own link's:

- **within a node**, the node's ranks pair up in a round-robin (every pair of local ranks by
  the end, up to `MAX_ROUNDS` rounds), every node at once;
- **between nodes**, the nodes pair up in a round-robin too, local rank j of one node with local
  rank j of the other (the rail a multi-NIC node gives each device), one round per pairing of
  nodes, up to `MAX_ROUNDS` rounds: every pair of nodes in a job of up to 16 nodes, and in a
  larger one links from every node to 15 others, enough to tell a slow node from a slow link.

Each rank checks what it received against its partner's pattern, so a link that corrupts data
fails too. `verdicts` judges the figures against the job's median.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...plugin.threads import available_cores
from ..text import plural
from .agree import max_over_ranks
from .compat import point_to_point_problem, synchronize
from .session import RAISED, UNSUPPORTED, Session
from .sizes import MIB, format_size
from .verdicts import INTER, INTRA, Culprit, judge_links

if TYPE_CHECKING:
    from ...plugin.types import Context

__all__ = ["MAX_ROUNDS", "link_bytes", "measure_links", "plan"]

#: Rounds per kind of link; a round costs about `LINK_SECONDS`.
MAX_ROUNDS = 15
QUICK_ROUNDS = 3
#: Timed exchanges per round aim at this long, within the bounds below.
LINK_SECONDS = 0.1
QUICK_LINK_SECONDS = 0.03
MIN_ITERS, MAX_ITERS = 5, 100
#: The buffer each rank sends its partner: large enough to be bandwidth- rather than
#: latency-bound on the link (4 MiB reaches Gloo's plateau on this project's machine).
LINK_BYTES_CPU = 4 * MIB
LINK_BYTES_ACCELERATOR = 64 * MIB

#: One round: (kind, lower rank, higher rank) for every pair that exchanges at once.
Round = list[tuple[str, int, int]]


def link_bytes(device_type: str, quick: bool) -> int:
    """The buffer size of each exchange (a quarter of it in ``--quick``)."""
    size = LINK_BYTES_CPU if device_type == "cpu" else LINK_BYTES_ACCELERATOR
    return size // 4 if quick else size


def plan(hosts: Sequence[str], max_rounds: int = MAX_ROUNDS) -> list[Round]:
    """The rounds for ranks whose hosts are ``hosts`` (by rank): within nodes, then between."""
    nodes: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        nodes.setdefault(host, []).append(rank)
    rounds: list[Round] = []
    per_node = [_round_robin(ranks)[:max_rounds] for ranks in nodes.values()]
    for index in range(max((len(r) for r in per_node), default=0)):
        pairs = [(INTRA, a, b) for r in per_node if index < len(r) for a, b in r[index]]
        if pairs:
            rounds.append(pairs)
    for pairing in _round_robin(list(nodes))[:max_rounds]:
        between: Round = []
        for x, y in pairing:
            for j in range(min(len(nodes[x]), len(nodes[y]))):
                a, b = sorted((nodes[x][j], nodes[y][j]))
                between.append((INTER, a, b))
        if between:
            rounds.append(between)
    return rounds


def _round_robin(items: list[Any]) -> list[list[tuple[Any, Any]]]:
    """The circle method: rounds of disjoint pairs, every pair exactly once (a bye when odd)."""
    circle: list[Any] = [*items, None] if len(items) % 2 else list(items)
    rounds = []
    for _ in range(len(circle) - 1):
        half = len(circle) // 2
        pairs = [(circle[i], circle[-1 - i]) for i in range(half)]
        rounds.append([p for p in pairs if p[0] is not None and p[1] is not None])
        circle = [circle[0], circle[-1], *circle[1:-1]]
    return rounds


def measure_links(
    session: Session, hosts: Sequence[str]
) -> tuple[list[dict[str, Any]], list[Culprit], str]:
    """Every round on every rank; returns the links (the same on every rank), the culprits
    `verdicts` found among them, and why no link was measured (or "")."""
    ctx, options = session.ctx, session.options
    rounds = plan(hosts, QUICK_ROUNDS if options.quick else MAX_ROUNDS)
    nbytes = link_bytes(ctx.device.type, options.quick)
    if not rounds:
        return [], [], "one rank: no link to measure"
    problem = point_to_point_problem(ctx.backend, ctx.device)
    if problem:
        return [], [], f"not measured: {problem}"
    count = sum(len(r) for r in rounds)
    session.say(
        f"      links: {count} point-to-point {plural(count, 'exchange')} of {format_size(nbytes)} "
        f"each way in {len(rounds)} {plural(len(rounds), 'round')} (pairs within a node, then "
        f"local rank j to local rank j between nodes); slow: below {options.link_factor:g} x the "
        "job's median for the kind (of each rank's best link)"
    )
    factor = options.link_factor
    crowding = _crowding(ctx)
    if crowding:
        # Ranks taking turns on the cores: a link's speed is whose turn it was, not the link's
        # (16 ranks on 2 cores failed a healthy node in 3 of 3 runs under load). Correctness
        # is still judged; speed is not.
        factor = 0.0
        session.say(f"      link speeds not judged: {crowding}")
    if session.stopped:
        return [], [], f"not run: {session.stopped}"
    mine, why_not = _run_rounds(session, rounds, nbytes, "link round")
    if why_not:
        return [], [], why_not
    gathered = session.gather_objects(mine, "link timings")
    links = _links(rounds, gathered, hosts, nbytes)
    judge_links(links, factor)
    # A link found slow is measured once more, alone with its partner, and keeps its better
    # figure: on shared cores a pair can be unlucky for a whole round, a slow link stays slow.
    suspects = [link for link in links if link["slow"]]
    if suspects and not session.stopped:
        again = _disjoint([(link["kind"], *link["ranks"]) for link in suspects])
        session.say(
            f"      {len(suspects)} slow {plural(len(suspects), 'link')} measured again in "
            f"{len(again)} {plural(len(again), 'round')}"
        )
        mine, why_not = _run_rounds(session, again, nbytes, "link retest round", quick=False)
        if not why_not:
            gathered = session.gather_objects(mine, "link retest timings")
            better = {tuple(link["ranks"]): link for link in _links(again, gathered, hosts, nbytes)}
            for link in suspects:
                retest = better.get(tuple(link["ranks"]))
                if retest is not None and (retest["gbps"] > link["gbps"] or not retest["ok"]):
                    link.update(retest)
    return links, judge_links(links, factor), ""


def _crowding(ctx: Context) -> str:
    """Why link speeds on this node say nothing about its links (more CPU ranks than cores,
    so they take turns), or ""."""
    if ctx.device.type != "cpu":
        return ""
    # Ranks pinned to CPUs of their own (ctx.cpus) see only those: count the node's instead.
    cores = (os.cpu_count() or 1) if ctx.cpus else available_cores()
    if ctx.local_world_size <= cores:
        return ""
    return (
        f"{ctx.local_world_size} CPU ranks share {cores} {plural(cores, 'core')} on this node, "
        "so a link's speed measures whose turn it was"
    )


def _run_rounds(
    session: Session, rounds: list[Round], nbytes: int, what: str, *, quick: bool | None = None
) -> tuple[list[tuple[int, int, float, float, int, str]], str]:
    """This rank's part of ``rounds``: per round with a partner, (round, partner, fastest,
    mean, iterations, what was wrong); or why the backend cannot do it. A retest takes the
    full budget per round (``quick=False``) even in ``--quick``."""
    ctx, options = session.ctx, session.options
    quick = options.quick if quick is None else quick
    mine: list[tuple[int, int, float, float, int, str]] = []
    for index, pairs in enumerate(rounds):
        partner = _partner(ctx.rank, pairs)
        name = f"{what} {index + 1} of {len(rounds)}"
        call = functools.partial(_exchange, ctx, partner, nbytes, session.control, quick)
        attempt = session.attempt(call, step=name, what=name)
        if attempt.outcome == UNSUPPORTED:
            return [], f"not supported by {ctx.backend} ({attempt.error})"
        if attempt.outcome == RAISED and partner is not None:
            mine.append((index, partner, math.nan, math.nan, 0, f"raised {attempt.error}"))
        elif attempt.value is not None and partner is not None:
            mine.append((index, partner, *attempt.value))
        if not attempt.go_on:
            break
    return mine, ""


def _disjoint(pairs: list[tuple[str, int, int]]) -> list[Round]:
    """``pairs`` in rounds where no rank is in two pairs (first fit)."""
    rounds: list[Round] = []
    for pair in pairs:
        for existing in rounds:
            if not {pair[1], pair[2]} & {r for p in existing for r in p[1:]}:
                existing.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds


def _partner(rank: int, pairs: Round) -> int | None:
    for _, a, b in pairs:
        if rank in (a, b):
            return b if rank == a else a
    return None


def _exchange(
    ctx: Context, partner: int | None, nbytes: int, control: Any, quick: bool
) -> tuple[float, float, int, str]:
    """One round on this rank: warm-up, the iterations every rank agreed on, then the check of
    what arrived. A rank without a partner this round only takes part in the agreement."""
    import torch
    import torch.distributed as dist

    count = max(1, nbytes // 4)
    send = torch.full((count,), float(ctx.rank + 1), device=ctx.device)
    received = torch.zeros(count, device=ctx.device)

    def once() -> None:
        if partner is not None:
            for request in (dist.isend(send, partner), dist.irecv(received, partner)):
                request.wait()

    begin = time.perf_counter()
    once()
    synchronize(ctx.device)
    estimate = max_over_ranks(ctx, control, [time.perf_counter() - begin])[0]
    target = QUICK_LINK_SECONDS if quick else LINK_SECONDS
    iters = min(MAX_ITERS, max(MIN_ITERS, round(target / max(estimate, 1e-9))))
    max_over_ranks(ctx, control, [0.0])  # every pair starts together
    # Each exchange timed on its own, the fastest kept: load from other processes (shared cores,
    # a neighbour's traffic) only ever slows an exchange down, while a slow link slows every one
    # of them. The mean over all of them is kept beside it.
    fastest, began = math.inf, time.perf_counter()
    for _ in range(iters):
        begin = time.perf_counter()
        once()
        synchronize(ctx.device)
        fastest = min(fastest, time.perf_counter() - begin)
    mean = (time.perf_counter() - began) / iters
    wrong = ""
    if partner is not None:
        bad = int((received != float(partner + 1)).sum().item())
        if bad:
            first = float(received[(received != float(partner + 1)).nonzero()[0, 0]].item())
            wrong = (
                f"rank {ctx.rank} received {first:g} from rank {partner}, expected "
                f"{partner + 1} ({bad} of {count} elements wrong)"
            )
    return fastest, mean, iters, wrong


def _links(
    rounds: list[Round],
    gathered: Sequence[Sequence[tuple[int, int, float, float, int, str]]],
    hosts: Sequence[str],
    nbytes: int,
) -> list[dict[str, Any]]:
    """One entry per measured pair: the slower end's time, and either end's complaint."""
    by_end = {(rank, entry[0]): entry for rank, per in enumerate(gathered) for entry in per}
    links = []
    for index, pairs in enumerate(rounds):
        for kind, a, b in pairs:
            found = [by_end.get((r, index)) for r in (a, b)]
            ends = [e for e in found if e is not None]
            if len(ends) < 2:
                continue  # the run stopped before this round
            fastest = max(e[2] for e in ends)
            mean = max(e[3] for e in ends)
            details = [e[5] for e in ends if e[5]]
            failed = math.isnan(fastest)
            links.append(
                {
                    "kind": kind,
                    "ranks": [a, b],
                    "hosts": [hosts[a], hosts[b]],
                    "bytes": nbytes,
                    "iters": min(e[4] for e in ends),
                    "time_us": None if failed else round(fastest * 1e6, 3),
                    "gbps": 0.0 if failed else round(nbytes / fastest / 1e9, 6),
                    "mean_gbps": 0.0 if failed else round(nbytes / mean / 1e9, 6),
                    "ok": not details and not failed,
                    "detail": "; ".join(details),
                }
            )
    return links
