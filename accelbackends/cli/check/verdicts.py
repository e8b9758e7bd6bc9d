"""The preflight's verdict: which nodes pass, which fail and why, from the finished report.

Pure functions of the report (no torch), the same on every rank. A node fails when a
correctness check failed on one of its ranks, or when its links are slow or carry wrong data.
A threshold or baseline miss is pinned on the node where the job has one node only; with
several, every rank took part in the collective that missed, so the miss fails the job without
naming a node and ``unpinned`` says so (as it says what else failed the job without a node to
blame: a floor at a size that was not swept, a baseline with nothing in common).

Slow is relative: a link is slow below ``--link-factor`` times the job's median for its kind
(between nodes, or within one). The median is taken over the ranks' *best* links, not over the
links: in a job of three nodes two of the three links run through a slow node, and the median
link would be a slow one. A rank's best link is slow only when the rank itself is, so the
median stays a healthy figure while fewer than half the ranks are slow.

Who is to blame: a node when every link between it and the other nodes is bad (and it has links
to at least two of them, else the two ends cannot be told apart); else a rank when every link
through it is bad (a GPU or a NIC of its own); else the link itself, which names both ends.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..text import plural, rank_list
from .sizes import format_size
from .thresholds import (
    DEFAULT_BASELINE_FRACTION,
    BaselineRow,
    Floor,
    Miss,
    below_baseline,
    below_floors,
    unmatched_floors,
)

__all__ = [
    "DEFAULT_LINK_FACTOR",
    "INTER",
    "INTRA",
    "LINE_RATE_FRACTION",
    "ONLY_NODE",
    "Culprit",
    "Limits",
    "below_line_rate",
    "empty_verdict",
    "fell_back",
    "judge",
    "judge_links",
    "miss_summary",
    "node_verdict",
]

#: A link is slow below this fraction of the job's median for its kind. Measured on the
#: project's 2-core machine (docs/check.md, "Per-node and per-link verdicts"): across 17 healthy
#: runs of four one-rank namespaced nodes the slowest link reached 0.33 to 0.82 of the median
#: (the cores are shared, so two exchanges at once slow each other); a node held to 100 Mbit/s
#: reaches about 0.01. 0.3 keeps healthy runs passing and catches a node 3x slower.
DEFAULT_LINK_FACTOR = 0.3

INTER, INTRA = "inter-node", "intra-node"
#: How the reason of a miss pinned on a one-node job's node begins.
ONLY_NODE = "the job's only node"


@dataclass(frozen=True)
class Culprit:
    """A node, a rank or a link that failed, with why."""

    kind: str  # "node", "rank", "link" or "device" (a device's own fault: `health`, `copies`)
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    reason: str

    def text(self) -> str:
        """``node n2 (rank 2): every link to the other nodes is slow: ...``."""
        where = ", ".join(dict.fromkeys(self.hosts))
        if self.kind == "device":  # names its device, node and ranks itself
            return self.reason
        if self.kind == "link":
            ends = " <-> ".join(
                f"{h} rank {r}" for h, r in zip(self.hosts, self.ranks, strict=True)
            )
            return f"link {ends}: {self.reason}"
        return f"{self.kind} {where} ({rank_list(list(self.ranks))}): {self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "hosts": list(self.hosts),
            "ranks": list(self.ranks),
            "reason": self.reason,
        }


def judge_links(links: list[dict[str, Any]], factor: float) -> list[Culprit]:
    """Mark each link ``slow`` (in place, with the ``median_gbps`` it was held to) and return
    the nodes, ranks and links to blame."""
    medians = {kind: _median_of_best(links, kind) for kind in (INTER, INTRA)}
    for link in links:
        median = medians[link["kind"]]
        link["median_gbps"] = None if median is None else round(median, 6)
        link["slow"] = bool(link["ok"] and median and link["gbps"] < factor * median)
    bad = [link for link in links if link["slow"] or not link["ok"]]
    if not bad:
        return []
    culprits: list[Culprit] = []
    explained: set[int] = set()  # indices into ``bad`` that a node or a rank accounts for
    host_of = {r: h for link in links for r, h in zip(link["ranks"], link["hosts"], strict=True)}
    for host in dict.fromkeys(h for link in links for h in link["hosts"]):
        through = [link for link in links if link["kind"] == INTER and host in link["hosts"]]
        others = {h for link in through for h in link["hosts"] if h != host}
        if len(others) >= 2 and all(link in bad for link in through):
            ranks = sorted({r for r, h in host_of.items() if h == host})
            culprits.append(
                Culprit(
                    "node",
                    (host,),
                    tuple(ranks),
                    _why(through, factor, "every link to the other nodes"),
                )
            )
            explained |= {
                i for i, link in enumerate(bad) if host in link["hosts"] and link["kind"] == INTER
            }
    blamed_hosts = {c.hosts[0] for c in culprits}
    for rank, host in sorted(host_of.items()):
        if host in blamed_hosts:
            continue
        through = [link for link in links if rank in link["ranks"]]
        partners = {r for link in through for r in link["ranks"] if r != rank}
        if len(partners) >= 2 and all(link in bad for link in through):
            culprits.append(
                Culprit("rank", (host,), (rank,), _why(through, factor, "every link through it"))
            )
            explained |= {i for i, link in enumerate(bad) if rank in link["ranks"]}
    for i, link in enumerate(bad):
        if i not in explained:
            culprits.append(
                Culprit(
                    "link",
                    tuple(link["hosts"]),
                    tuple(link["ranks"]),
                    _why([link], factor, "the link"),
                )
            )
    return culprits


def _median_of_best(links: Iterable[dict[str, Any]], kind: str) -> float | None:
    best: dict[int, float] = {}
    for link in links:
        if link["kind"] == kind and link["ok"]:
            for rank in link["ranks"]:
                best[rank] = max(best.get(rank, 0.0), link["gbps"])
    return statistics.median(best.values()) if best else None


def _why(links: Sequence[dict[str, Any]], factor: float, subject: str) -> str:
    wrong = [link for link in links if not link["ok"]]
    if wrong:
        return f"{subject}: wrong data received ({wrong[0]['detail']})"
    fastest = max(link["gbps"] for link in links)
    median = links[0]["median_gbps"]
    kind = links[0]["kind"]
    at_best = "" if len(links) == 1 else " at best"
    return (
        f"{subject} is slow: {fastest:.3g} GB/s{at_best}, below {factor:g} x the job's "
        f"{kind} median of {median:.3g} GB/s"
    )


def empty_verdict() -> dict[str, Any]:
    """The verdict's keys before a verdict (a report so far, a run that could not finish)."""
    return {
        "links": [],
        "failing_nodes": [],
        "passing_nodes": [],
        "culprits": [],
        "misses": [],
        "problems": [],
        "unpinned": [],
        "not_judged": [],
        "floors": None,
        "signatures": [],
    }


@dataclass(frozen=True)
class Limits:
    """What the run is held to (from the flags; `options.Options` builds it)."""

    floors: tuple[Floor, ...] = ()
    baseline: tuple[BaselineRow, ...] = ()
    baseline_path: str | None = None
    baseline_fraction: float = DEFAULT_BASELINE_FRACTION
    link_factor: float = DEFAULT_LINK_FACTOR
    #: The floor rule each kind matched (``floors.match``), as `FloorRule.describe` and GB/s.
    copy_floor: tuple[str, float] | None = None
    #: Flags a run of one rank cannot judge, with why.
    not_judged: tuple[str, ...] = ()


def judge(
    report: dict[str, Any],
    options: Limits,
    culprits: Sequence[Culprit],
    failed: Sequence[str] = (),
) -> dict[str, Any]:
    """The finished report's verdict keys: the nodes (`node_verdict`), the sizes that missed
    a floor or the baseline (``misses``), and the limits they were held to (``limits``);
    ``failed`` fails the job without naming a node (a signature such as `below_line_rate`)."""
    rows = report["bandwidth"]
    misses = below_floors(rows, options.floors)
    copied = report.get("device_copy")
    if options.copy_floor and copied and copied["gbps"] < options.copy_floor[1]:
        misses.append(
            Miss(
                "device-copy",
                "device memory copy",
                copied["bytes"],
                copied["gbps"],
                options.copy_floor[1],
                options.copy_floor[0],
            )
        )
    problems = [*failed] + [
        f"{f.source} {format_size(f.nbytes or 0)}={f.gbps:g}: that size was not swept "
        f"(sizes from {format_size(rows[0]['bytes'])} to {format_size(rows[-1]['bytes'])})"
        for f in unmatched_floors(rows, options.floors)
        if rows
    ]
    compared = 0
    if options.baseline:
        found, compared = below_baseline(
            rows, options.baseline, options.baseline_fraction, options.baseline_path or "baseline"
        )
        misses += found
        if rows and not compared:
            problems.append(
                f"--baseline {options.baseline_path} has no operation and size in common with "
                "this run; run with the flags (and the number of ranks) of the baseline"
            )
    limits = {
        "min_busbw": [
            {"bytes": f.nbytes, "gbps": f.gbps, "source": f.source} for f in options.floors
        ],
        "baseline": options.baseline_path,
        "baseline_fraction": options.baseline_fraction,
        "baseline_sizes_compared": compared,
        "link_factor": options.link_factor,
        "device_copy": None
        if options.copy_floor is None
        else {"gbps": options.copy_floor[1], "source": options.copy_floor[0]},
    }
    return node_verdict(report, culprits, misses, problems) | {
        "limits": limits,
        "not_judged": list(options.not_judged),
    }


def node_verdict(
    report: dict[str, Any],
    culprits: Sequence[Culprit],
    misses: Sequence[Miss] = (),
    problems: Sequence[str] = (),
) -> dict[str, Any]:
    """The keys a scheduler reads: ``verdict``, ``failing_nodes``, ``passing_nodes``, and the
    ``culprits`` behind them (correctness failures named by host and rank first). ``misses``
    fail the job's only node where it has one, else the job without naming a node;
    ``problems`` always fail the job without naming a node; ``unpinned`` lists what failed
    the job that no node is blamed for."""
    host_of = {int(r["rank"]): str(r["host"]) for r in report["ranks"]}
    blamed = [*_wrong_results(report["checks"], host_of), *culprits]
    missed = miss_summary([m.kind for m in misses])
    unpinned = list(problems)
    hosts = sorted(set(report["hosts"]))
    if missed and len(hosts) == 1:
        ranks = tuple(sorted(r for r, h in host_of.items() if h == hosts[0]))
        blamed.append(Culprit("node", (hosts[0],), ranks, f"{ONLY_NODE}: {'; '.join(missed)}"))
    elif missed:
        unpinned[:0] = [f"{m} (a collective of every rank missed it)" for m in missed]
    failing = sorted({h for c in blamed for h in c.hosts})
    passing = sorted(set(report["hosts"]) - set(failing))
    checks_ok = all(c["ok"] for c in report["checks"])
    ok = checks_ok and not blamed and not misses and not problems and not report.get("error")
    return {
        "verdict": "PASSED" if ok else "FAILED",
        "failing_nodes": failing,
        "passing_nodes": passing,
        "culprits": [c.as_json() for c in blamed],
        "misses": [m.as_json() for m in misses],
        "problems": list(problems),
        "unpinned": unpinned,
    }


#: Under this busbw an NVLink node runs at PCIe speed: one hop fell back to PCIe
#: (NVIDIA/NVSentinel#808 reads it so; PCIe-only 8-GPU nodes reach 28-45 GB/s).
NVLINK_FALLBACK_GBPS = 100.0


def fell_back(report: dict[str, Any], floors: dict[str, Any]) -> str | None:
    """The named signature "NVLink fell back to PCIe": an NVLink node's floor missed, with the
    largest size's busbw under `NVLINK_FALLBACK_GBPS`."""
    busbw = floors.get("busbw")
    if not busbw or busbw.get("link") != "nvlink":
        return None
    low = [m for m in report["misses"] if m["kind"] == "min-busbw"]
    if low and all(m["busbw_gbps"] < NVLINK_FALLBACK_GBPS for m in low):
        worst = min(m["busbw_gbps"] for m in low)
        return (
            f"NVLink fell back to PCIe: busbw {worst:.3g} GB/s on an NVLink node, under the "
            f"{NVLINK_FALLBACK_GBPS:g} GB/s that PCIe-only nodes top out near"
        )
    return None


#: Under this fraction of the slowest node's NIC line rate, a job of several nodes is "below
#: the NIC's line rate": nccl-tests over one 400 Gb/s NIC reach 46-48 GB/s busbw, 0.92-0.96 of
#: its 50 GB/s (read, not measured here), so under half is a fault, not noise.
LINE_RATE_FRACTION = 0.5


def below_line_rate(report: dict[str, Any], floors: dict[str, Any]) -> str | None:
    """The named signature "below the NIC's line rate": a job of several nodes whose best busbw
    at the largest size is under `LINE_RATE_FRACTION` of what the slowest node's fastest
    InfiniBand/RoCE port carries (``floors["nic_gbps"]``, Gb/s, as ``info`` reads it)."""
    nic = floors.get("nic_gbps")
    rows = report["bandwidth"]
    if len(set(report["hosts"])) < 2 or not nic or not rows:
        return None
    largest = {op: max(r["bytes"] for r in rows if r["op"] == op) for op in {r["op"] for r in rows}}
    best = max(r["busbw_gbps"] for r in rows if r["bytes"] == largest[r["op"]])
    line = nic / 8  # Gb/s to GB/s
    if best >= LINE_RATE_FRACTION * line:
        return None
    return (
        f"below the NIC's line rate: busbw {best:.3g} GB/s at the largest size, under "
        f"{LINE_RATE_FRACTION:g} x the {nic:g} Gb/s ({line:.3g} GB/s) of the slowest node's NIC"
    )


def miss_summary(kinds: Sequence[str]) -> list[str]:
    """``["2 sizes below the --min-busbw floor", "8 sizes below the baseline"]`` for the kinds
    of the misses (`thresholds.Miss.kind`), in that order."""
    summary = []
    for kind, limit in (("min-busbw", "the busbw floor"), ("baseline", "the baseline")):
        count = sum(1 for k in kinds if k == kind)
        if count:
            summary.append(f"{count} {plural(count, 'size')} below {limit}")
    if "device-copy" in kinds:
        summary.append("device memory copy below its floor")
    return summary


def _wrong_results(checks: Sequence[dict[str, Any]], host_of: dict[int, str]) -> list[Culprit]:
    """A failed correctness check names its ranks; group them by host. A check every rank
    failed is the backend's, not a node's (all hosts would be named, which is the truth)."""
    by_host: dict[str, tuple[set[int], list[str]]] = {}
    for check in checks:
        if check["ok"] or check["detail"].startswith("not run"):
            continue
        for rank in check["ranks"]:
            host = host_of.get(rank)
            if host is None:
                continue
            ranks, names = by_host.setdefault(host, (set(), []))
            ranks.add(rank)
            if check["name"] not in names:
                names.append(check["name"])
    culprits = []
    for host, (ranks, names) in by_host.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        culprits.append(
            Culprit(
                "rank",
                (host,),
                tuple(sorted(ranks)),
                f"wrong or failed {plural(len(names), 'collective')}: {shown}",
            )
        )
    return culprits
