"""``accelbackends check``: prove that the ranks can talk over the chosen backend, and how fast.

Standalone it starts ``--nproc`` local ranks through :func:`accelbackends.spawn`; under a launcher
(torchrun, SLURM, MPI, plain ``env://`` variables) it joins the ranks the launcher started. Either
way every rank runs the same steps, rank 0 reports:

1. the environment: accelerator, backend and why, world and local sizes;
2. init through the full path (detect, select, bind, rendezvous, ``init_process_group``), timed;
3. correctness: each collective on float32, bfloat16 and int64 at odd and non-power-of-two
   lengths, compared with expected values every rank computes itself; per-rank verdicts are
   gathered so that rank 0 names the failing check *and* rank;
4. bandwidth: all_reduce and all_gather swept over sizes, time = the slowest rank's mean,
   algbw = bytes / time, busbw by the nccl-tests definitions.

Exit 0 when every check passed (skips allowed), 1 when one failed or a rank died, 2 for bad
input. torch is imported inside functions only: the CLI imports this module to build its parser.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import config
from .errors import AccelBackendsError, ConfigError, SpawnError

if TYPE_CHECKING:
    from .lifecycle import Context
    from .selection import Selection
    from .spec import ClusterInfo

__all__ = [
    "DTYPES",
    "LENGTHS",
    "OPS",
    "Measurement",
    "add_arguments",
    "bus_bandwidth",
    "format_size",
    "measure",
    "parse_size",
    "run",
    "synchronize",
]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_TIMEOUT = 60.0
DEFAULT_WARMUP = 2
DEFAULT_MIN_BYTES = 1 * KIB
DEFAULT_MAX_BYTES_CPU = 64 * MIB
DEFAULT_MAX_BYTES_ACCELERATOR = 1 * GIB
#: Automatic iterations aim at this much timed work per size, within the bounds below; the
#: estimate is the fastest warm-up iteration of the slowest rank.
AUTO_SECONDS_PER_SIZE = 0.1
AUTO_MIN_ITERS, AUTO_MAX_ITERS = 5, 200
#: A step that outlives ``--timeout`` by this much is stopped by the watchdog (the backend's own
#: collective timeout, which says more, gets the first chance).
WATCHDOG_GRACE = 10.0

#: Element counts of the correctness checks: odd, non-power-of-two, one above a power of two.
LENGTHS = (1, 7, 1000, 4099, 65537)
DTYPES = ("float32", "bfloat16", "int64")
#: The swept operations and their nccl-tests bus-bandwidth factor for n ranks.
OPS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
}
_REDUCTIONS = ("sum", "max", "min", "avg")
#: Unit roundoff of each floating dtype: reductions may round once per addition and once more.
_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8}
_SENTINEL = 100  # never produced by _pattern, exact in every dtype checked
_UNSUPPORTED = re.compile(
    r"not supported|unsupported|does not support|not implemented|no support", re.IGNORECASE
)

# -- sizes and flags ---------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1 << 40}
_SIZE_HINT = "use a byte count such as 4096, 64KiB, 1MiB or 1GiB (units are powers of 1024)"


def parse_size(text: str) -> int:
    """``"64KiB"``, ``"64K"``, ``"1.5MiB"`` or ``"4096"`` as a number of bytes (>= 1).

    Units are binary, as in nccl-tests: K = KiB = KB = 1024 bytes.
    """
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; {_SIZE_HINT}")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of bytes >= 1; {_SIZE_HINT}"
        )
    return int(value)


def format_size(nbytes: int) -> str:
    """``1024`` → ``1 KiB``; sizes that are not whole units keep one decimal."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes >= unit:
            value = nbytes / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{nbytes} B"


def _integer(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text) or int(text) < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid; use an integer >= {low}")
        return int(text)

    parse.__name__ = "integer"
    return parse


def _seconds(text: str) -> float:
    try:
        return config.parse_seconds(text, source="--timeout")
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid; use a positive number of seconds such as 60"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``check`` subcommand's flags."""
    parser.description = (
        "Start --nproc local ranks (or join the ranks a launcher such as torchrun started), "
        "verify the collectives and measure bandwidth. Exit 0: all checks passed; 1: a check "
        "failed or a rank died; 2: bad input."
    )
    parser.add_argument(
        "--nproc",
        type=_integer(1),
        metavar="N",
        help="local ranks to start (default: the accelerator's device count; 2 on CPU); "
        "not used under a launcher",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--min-bytes",
        type=parse_size,
        default=DEFAULT_MIN_BYTES,
        metavar="SIZE",
        help="smallest bandwidth size (default 1KiB); sizes double up to --max-bytes",
    )
    parser.add_argument(
        "--max-bytes",
        type=parse_size,
        metavar="SIZE",
        help="largest bandwidth size (default 64MiB on CPU, 1GiB on accelerators)",
    )
    parser.add_argument(
        "--iters",
        type=_integer(1),
        metavar="N",
        help=f"timed iterations per size (default: automatic, about "
        f"{AUTO_SECONDS_PER_SIZE:g} s per size, {AUTO_MIN_ITERS} to {AUTO_MAX_ITERS})",
    )
    parser.add_argument(
        "--warmup",
        type=_integer(0),
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"untimed iterations before each size (default {DEFAULT_WARMUP})",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="limit for each step, also the collective and rendezvous timeout (default: "
        f"{config.TIMEOUT} or {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw busbw against size into this file (needs matplotlib)",
    )


@dataclass(frozen=True)
class _Options:
    """The validated flags, as every rank receives them."""

    min_bytes: int
    max_bytes: int | None  # None: the default for the device type, decided on the rank
    iters: int | None  # None: automatic
    warmup: int
    timeout: float
    json: bool
    plot: str | None

    def sizes(self, device_type: str) -> list[int]:
        """The swept sizes: --min-bytes doubling while <= --max-bytes."""
        top = self.max_bytes or _default_max_bytes(device_type)
        sizes, size = [], self.min_bytes
        while size <= top:
            sizes.append(size)
            size *= 2
        return sizes


def _default_max_bytes(device_type: str) -> int:
    return DEFAULT_MAX_BYTES_CPU if device_type == "cpu" else DEFAULT_MAX_BYTES_ACCELERATOR


def _options(args: argparse.Namespace, env: Any) -> _Options:
    if args.max_bytes is not None and args.min_bytes > args.max_bytes:
        raise ConfigError(
            f"--min-bytes={format_size(args.min_bytes)} is larger than "
            f"--max-bytes={format_size(args.max_bytes)}; use --min-bytes <= --max-bytes"
        )
    timeout = args.timeout or config.read_seconds(env, config.TIMEOUT) or DEFAULT_TIMEOUT
    if args.plot is not None:
        _check_plot_target(args.plot)
    return _Options(
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        iters=args.iters,
        warmup=args.warmup,
        timeout=timeout,
        json=args.json,
        plot=args.plot,
    )


def _check_plot_target(target: str) -> None:
    path = Path(target)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"--plot={target}: unsupported file type; use a .png, .svg or .pdf path")
    if not path.parent.is_dir():
        raise ConfigError(f"--plot={target}: directory {str(path.parent)!r} does not exist")
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            f"--plot={target} needs matplotlib, which is not installed; "
            "install it with: pip install matplotlib"
        )


def _check_memory(options: _Options, device_type: str, local_ranks: int) -> None:
    """On CPU every local rank holds its buffers in this node's memory: refuse sweeps that
    cannot fit instead of letting the kernel kill a rank halfway."""
    if device_type != "cpu":
        return
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return
    top = options.max_bytes or _default_max_bytes(device_type)
    need = 2 * top * local_ranks  # all_gather holds its output and its input share
    if need > physical // 2:
        raise ConfigError(
            f"--max-bytes={format_size(top)} needs about {format_size(need)} across "
            f"{local_ranks} local ranks, more than half of this node's "
            f"{format_size(physical)}; use a smaller --max-bytes"
        )


# -- the command --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """``accelbackends check``: returns the exit code (errors are raised for the CLI to map)."""
    from .registry import default_registry
    from .selection import select

    registry = default_registry()
    options = _options(args, registry.env)
    # Validate the whole selection here, before any rank starts: a wrong override is exit 2.
    selection = select(registry=registry)
    cluster = registry.cluster_environment()
    device_type = selection.spec.device_type
    if cluster.launcher != "single":
        if args.nproc is not None:
            raise ConfigError(
                f"--nproc={args.nproc} cannot be used under {cluster.launcher}, which started "
                f"{cluster.world_size} ranks; the launcher decides how many ranks run"
            )
        _check_memory(options, device_type, cluster.local_world_size)
        return _join_launcher(options, selection, cluster)
    nproc = args.nproc or _default_nproc(selection)
    _check_memory(options, device_type, nproc)
    return _standalone(options, selection, nproc)


def _default_nproc(selection: Selection) -> int:
    if selection.spec.device_type == "cpu":
        return 2
    return max(1, selection.status.detection.device_count)


def _standalone(options: _Options, selection: Selection, nproc: int) -> int:
    from .spawn import spawn

    if not options.json:
        _say(_environment_line(selection, nproc, nproc, "spawn"))
    sys.stdout.flush()  # ranks are forked: unflushed output would be written twice
    started = time.time()
    try:
        results = spawn(
            _rank_main,
            nproc,
            args=(options, started),
            timeout=options.timeout,
            rendezvous_timeout=options.timeout,
        )
    except SpawnError as exc:
        if options.json:
            _print_json(_error_report(selection, nproc, exc))
        raise AccelBackendsError(_first_line(exc)) from exc
    return _finish(results[0], options)


def _join_launcher(options: _Options, selection: Selection, cluster: ClusterInfo) -> int:
    from .lifecycle import distributed

    if cluster.rank == 0 and not options.json:
        _say(
            _environment_line(
                selection, cluster.world_size, cluster.local_world_size, cluster.launcher
            )
        )
    started = time.time()
    with distributed(timeout=options.timeout, rendezvous_timeout=options.timeout) as ctx:
        report = _rank_main(ctx, options, started)
    if ctx.rank != 0:
        return 0 if report["ok"] else 1
    return _finish(report, options)


def _environment_line(
    selection: Selection, world_size: int, local_world_size: int, launcher: str
) -> str:
    nodes = max(1, world_size // max(1, local_world_size))
    return (
        f"[1/4] environment: {selection.accelerator} with {selection.backend} "
        f"({selection.reason}; backend: {selection.backend_reason}); {world_size} "
        f"{_plural(world_size, 'rank')}, {local_world_size} per node on {nodes} "
        f"{_plural(nodes, 'node')}, launcher {launcher}"
    )


def _finish(report: dict[str, Any], options: _Options) -> int:
    if options.plot:
        _plot(Path(options.plot), report)
    if options.json:
        _print_json(report)
    else:
        _say(_verdict_line(report))
        if options.plot:
            _say(f"plot: busbw against size written to {options.plot}")
    return 0 if report["ok"] else 1


def _error_report(selection: Selection, nproc: int, exc: SpawnError) -> dict[str, Any]:
    return {
        "ok": False,
        "world_size": nproc,
        "accelerator": selection.accelerator,
        "backend": selection.backend,
        "init_seconds": None,
        "checks": [],
        "bandwidth": [],
        "error": _first_line(exc),
    }


def _print_json(report: dict[str, Any]) -> None:
    print(json.dumps(report, indent=2), flush=True)


def _say(line: str) -> None:
    print(line, flush=True)


def _plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# -- what every rank runs -----------------------------------------------------------------------


@dataclass
class _Result:
    """One check's verdict (per rank while running; merged over ranks for the report)."""

    name: str
    status: str  # "passed", "skipped" or "failed"
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.status != "failed",
            "skipped": self.status == "skipped",
            "detail": self.detail,
        }


@dataclass
class _Rank:
    """The state of one rank's run: its context, what it prints, and its watchdog."""

    ctx: Context
    options: _Options
    watchdog: _Watchdog
    results: list[_Result] = field(default_factory=list)
    #: Set after a check raised something other than "unsupported": the ranks may no longer
    #: agree on which collective comes next, so the remaining checks are not started.
    broken: str = ""

    @property
    def reporting(self) -> bool:
        return self.ctx.rank == 0 and not self.options.json

    def say(self, line: str) -> None:
        if self.reporting:
            _say(line)


def _rank_main(ctx: Context, options: _Options, started: float) -> dict[str, Any]:
    """One rank's whole run; returns the report (complete on every rank, printed by rank 0)."""
    watchdog = _Watchdog(ctx.rank, options.timeout + WATCHDOG_GRACE)
    rank = _Rank(ctx, options, watchdog)
    try:
        with watchdog.step("measuring the init time"):
            init_seconds = _max_over_ranks(ctx, [time.time() - started])[0]
        rank.say(
            f"[2/4] init: {ctx.world_size} {_plural(ctx.world_size, 'rank')} ready in "
            f"{init_seconds:.2f} s (detect, select, bind, rendezvous, init_process_group; "
            "slowest rank)"
        )
        checks = _correctness(rank)
        bandwidth = _bandwidth(rank)
        checks += _gather_results(rank, rank.results[len(checks) :], "bandwidth")
    finally:
        watchdog.stop()
    failed = [c for c in checks if c.status == "failed"]
    return {
        "ok": not failed,
        "world_size": ctx.world_size,
        "local_world_size": ctx.local_world_size,
        "accelerator": ctx.accelerator,
        "backend": ctx.backend,
        "reason": ctx.reason,
        "launcher": ctx.launcher,
        "init_seconds": round(init_seconds, 4),
        "timeout": options.timeout,
        "checks": [c.as_json() for c in checks],
        "bandwidth": [m.as_json() for m in bandwidth],
    }


class _Watchdog:
    """Ends this rank when a step outlives its limit, so no run hangs.

    The process exits with status 1 after one line on stderr naming the rank and the step;
    spawn() and launchers then stop the other ranks.
    """

    def __init__(self, rank: int, limit: float) -> None:
        self._rank = rank
        self._limit = limit
        self._step: str | None = None
        self._deadline = math.inf
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="check-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0 and self._step is not None:
                    print(
                        f"accelbackends: error: rank {self._rank}: {self._step} did not finish "
                        f"within {self._limit:g} s (--timeout plus {WATCHDOG_GRACE:g} s); "
                        "stopping this rank",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(1)
                self._cond.wait(None if remaining == math.inf else max(remaining, 0.01))

    def step(self, name: str) -> _Armed:
        return _Armed(self, name)

    def _arm(self, name: str | None) -> None:
        with self._cond:
            self._step = name
            self._deadline = math.inf if name is None else time.monotonic() + self._limit
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


class _Armed:
    def __init__(self, watchdog: _Watchdog, name: str) -> None:
        self._watchdog, self._name = watchdog, name

    def __enter__(self) -> None:
        self._watchdog._arm(self._name)

    def __exit__(self, *exc: object) -> None:
        self._watchdog._arm(None)


def _max_over_ranks(ctx: Context, values: Sequence[float]) -> list[float]:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(list(values), dtype=torch.float64)
    if ctx.device.type != "cpu":
        # Not every device backend reduces float64; microseconds survive float32.
        tensor = tensor.to(device=ctx.device, dtype=torch.float32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(v) for v in tensor.cpu().tolist()]


def _gather_results(rank: _Rank, local: list[_Result], what: str) -> list[_Result]:
    """Every rank's verdicts, merged: a check passed only where it passed on every rank."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * rank.ctx.world_size
    with rank.watchdog.step(f"gathering the {what} results"):
        try:
            dist.all_gather_object(gathered, [(r.name, r.status, r.detail) for r in local])
        except Exception as exc:
            raise AccelBackendsError(
                f"rank {rank.ctx.rank}: gathering the {what} results from every rank failed "
                f"({type(exc).__name__}: {_first_line(exc)})"
                + (f" after {rank.broken}" if rank.broken else "")
            ) from exc
    merged: list[_Result] = []
    names = list(dict.fromkeys(name for per_rank in gathered for name, _, _ in per_rank))
    for name in names:
        by_rank = {
            r: (status, detail)
            for r, per_rank in enumerate(gathered)
            for n, status, detail in per_rank
            if n == name
        }
        merged.append(_merge(name, by_rank))
    return merged


def _merge(name: str, by_rank: dict[int, tuple[str, str]]) -> _Result:
    failed = [(r, d) for r, (s, d) in sorted(by_rank.items()) if s == "failed"]
    skipped = [(r, d) for r, (s, d) in sorted(by_rank.items()) if s == "skipped"]
    if failed:
        shown = "; ".join(f"rank {r}: {d}" for r, d in failed[:3])
        more = f"; and {len(failed) - 3} more ranks" if len(failed) > 3 else ""
        return _Result(name, "failed", shown + more)
    if skipped and len(skipped) < len(by_rank):
        ranks = ", ".join(str(r) for r, _ in skipped)
        return _Result(
            name, "failed", f"skipped on rank {ranks} ({skipped[0][1]}) but ran on the others"
        )
    if skipped:
        return _Result(name, "skipped", skipped[0][1])
    return _Result(name, "passed", next(iter(by_rank.values()))[1])


# -- correctness --------------------------------------------------------------------------------


class _Mismatch(Exception):
    """A collective returned a wrong value (not an error from the backend)."""


@dataclass(frozen=True)
class _Check:
    name: str
    row: str  # the row of the text grid
    dtype: str | None
    body: Callable[[Context, str, int], str]  # returns the passing detail, raises _Mismatch


def _checks(world_size: int) -> list[_Check]:
    checks: list[_Check] = []
    for op in _REDUCTIONS:
        for dtype in DTYPES:
            if op == "avg" and dtype == "int64":
                continue  # the mean of integers is not an integer; no backend defines it
            checks.append(
                _Check(f"all_reduce {op} {dtype}", f"all_reduce {op}", dtype, _all_reduce(op))
            )
    root = world_size - 1
    per_dtype: list[tuple[str, str, Callable[[Context, str, int], str]]] = [
        ("broadcast", f"broadcast root={root}", _broadcast),
        ("all_gather", "all_gather", _all_gather),
        ("all_gather_into_tensor", "all_gather_into_tensor", _all_gather_into_tensor),
        ("reduce_scatter", "reduce_scatter sum", _reduce_scatter),
        ("all_to_all", "all_to_all", _all_to_all),
        ("send/recv ring", "send/recv ring", _send_recv_ring),
    ]
    for name, row, body in per_dtype:
        for dtype in DTYPES:
            checks.append(_Check(f"{name} {dtype}", row, dtype, body))
    checks.append(_Check("all_gather_object", "all_gather_object", None, _all_gather_object))
    checks.append(_Check("barrier", "barrier", None, _barrier))
    return checks


def _correctness(rank: _Rank) -> list[_Result]:
    ctx = rank.ctx
    checks = _checks(ctx.world_size)
    operations = len(dict.fromkeys(c.row for c in checks))
    rank.say(
        f"[3/4] correctness: {len(checks)} checks ({operations} operations x "
        f"{', '.join(DTYPES)}) at lengths {', '.join(map(str, LENGTHS))}"
    )
    for check in checks:
        rank.results.append(_run_check(rank, check))
    merged = _gather_results(rank, rank.results, "correctness")
    if rank.reporting:
        for line in _grid(checks, merged, ctx.world_size):
            _say("      " + line)
    return merged


def _run_check(rank: _Rank, check: _Check) -> _Result:
    if rank.broken:
        return _Result(check.name, "failed", f"not run: {rank.broken}")
    with rank.watchdog.step(f"check {check.name!r}"):
        try:
            detail = check.body(rank.ctx, check.dtype or "", rank.ctx.world_size)
        except _Mismatch as exc:
            return _Result(check.name, "failed", str(exc))
        except Exception as exc:
            reason = f"{type(exc).__name__}: {_first_line(exc)}"
            if isinstance(exc, NotImplementedError) or _UNSUPPORTED.search(str(exc)):
                return _Result(check.name, "skipped", f"not supported by {rank.ctx.backend}")
            rank.broken = f"{check.name} raised {reason}"
            return _Result(check.name, "failed", f"raised {reason}")
    if detail.startswith("skipped: "):
        return _Result(check.name, "skipped", detail.removeprefix("skipped: "))
    return _Result(check.name, "passed", detail)


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _pattern(rank: int, n: int, dtype: str, salt: int) -> Any:
    """Rank ``rank``'s input as exact int64 values, known to every rank.

    Small integers in [-8, 8] are exact in bfloat16 and their sums stay exact up to 32 ranks;
    int64 adds multiples of 2**33 so that a backend that truncates to 32 bits is caught.
    """
    import torch

    i = torch.arange(n, dtype=torch.int64)
    small = (i * 7 + rank * 13 + salt * 5) % 17 - 8
    if dtype == "int64":
        return small + ((i * 3 + rank * 5 + salt) % 7 - 3) * 2**33
    return small


def _on_device(ctx: Context, values: Any, dtype: str) -> Any:
    return values.to(_torch_dtype(dtype)).to(ctx.device)


def _sentinel(ctx: Context, n: int, dtype: str) -> Any:
    import torch

    return torch.full((n,), _SENTINEL, dtype=_torch_dtype(dtype), device=ctx.device)


def _tolerance_text(dtype: str, world_size: int, reduction: bool) -> str:
    if dtype not in _ROUNDOFF or not reduction:
        return "exact"
    unit = int(-math.log2(_ROUNDOFF[dtype]))
    return f"within {world_size + 1}*2^-{unit}*sum(|x|)"


def _compare(got: Any, expected: Any, what: str, tolerance: Any = None) -> None:
    """Raise _Mismatch naming the first wrong element; ``tolerance`` is elementwise (float64)."""
    import torch

    got = got.detach().cpu()
    if got.dtype == torch.int64:
        wrong = got != expected
    else:
        diff = (got.double() - expected.double()).abs()
        wrong = diff > (tolerance if tolerance is not None else 0)
        wrong |= ~torch.isfinite(got.double())
    if bool(wrong.any()):
        index = int(wrong.nonzero()[0, 0])
        raise _Mismatch(
            f"{what}, element {index}: got {_scalar(got[index])}, expected "
            f"{_scalar(expected[index])} ({int(wrong.sum())} of {got.numel()} wrong)"
        )


def _scalar(value: Any) -> str:
    number = value.item()
    return f"{number:g}" if isinstance(number, float) else str(number)


def _all_reduce(op: str) -> Callable[[Context, str, int], str]:
    def body(ctx: Context, dtype: str, world_size: int) -> str:
        import torch
        import torch.distributed as dist

        reduce_op = getattr(dist.ReduceOp, op.upper())
        salt = _REDUCTIONS.index(op)
        for n in LENGTHS:
            tensor = _on_device(ctx, _pattern(ctx.rank, n, dtype, salt), dtype)
            dist.all_reduce(tensor, op=reduce_op)
            inputs = torch.stack([_pattern(r, n, dtype, salt) for r in range(world_size)])
            tolerance = None
            if op in ("sum", "avg"):
                expected: Any = inputs.sum(0)
                if dtype in _ROUNDOFF:
                    magnitude = inputs.abs().sum(0).double()
                    if op == "avg":
                        expected, magnitude = expected.double() / world_size, magnitude / world_size
                    tolerance = (world_size + 1) * _ROUNDOFF[dtype] * magnitude
            else:
                expected = inputs.amax(0) if op == "max" else inputs.amin(0)
            _compare(tensor, expected, f"length {n}", tolerance)
        return f"{_tolerance_text(dtype, world_size, op in ('sum', 'avg'))} at every length"

    return body


def _broadcast(ctx: Context, dtype: str, world_size: int) -> str:
    import torch.distributed as dist

    root = world_size - 1  # not 0, so that a backend that ignores the root is caught
    for n in LENGTHS:
        expected = _pattern(root, n, dtype, 4)
        tensor = _on_device(ctx, expected, dtype) if ctx.rank == root else _sentinel(ctx, n, dtype)
        dist.broadcast(tensor, src=root)
        _compare(tensor, expected, f"length {n}")
    return f"exact from root {root} at every length"


def _all_gather(ctx: Context, dtype: str, world_size: int) -> str:
    import torch.distributed as dist

    for n in LENGTHS:
        outputs = [_sentinel(ctx, n, dtype) for _ in range(world_size)]
        dist.all_gather(outputs, _on_device(ctx, _pattern(ctx.rank, n, dtype, 5), dtype))
        for source, output in enumerate(outputs):
            _compare(output, _pattern(source, n, dtype, 5), f"length {n}, from rank {source}")
    return "exact at every length"


def _gather_single() -> Any:
    import torch.distributed as dist

    # torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns).
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _all_gather_into_tensor(ctx: Context, dtype: str, world_size: int) -> str:
    import torch

    gather = _gather_single()
    for n in LENGTHS:
        output = _sentinel(ctx, n * world_size, dtype)
        gather(output, _on_device(ctx, _pattern(ctx.rank, n, dtype, 6), dtype))
        expected = torch.cat([_pattern(r, n, dtype, 6) for r in range(world_size)])
        _compare(output, expected, f"length {n} per rank")
    return "exact at every length"


def _reduce_scatter(ctx: Context, dtype: str, world_size: int) -> str:
    import torch
    import torch.distributed as dist

    for n in LENGTHS:
        inputs = [
            _on_device(ctx, _pattern(ctx.rank, n, dtype, 10 + dest), dtype)
            for dest in range(world_size)
        ]
        output = _sentinel(ctx, n, dtype)
        dist.reduce_scatter(output, inputs)
        parts = torch.stack([_pattern(r, n, dtype, 10 + ctx.rank) for r in range(world_size)])
        tolerance = None
        if dtype in _ROUNDOFF:
            tolerance = (world_size + 1) * _ROUNDOFF[dtype] * parts.abs().sum(0).double()
        _compare(output, parts.sum(0), f"length {n}", tolerance)
    return f"{_tolerance_text(dtype, world_size, True)} at every length"


def _all_to_all(ctx: Context, dtype: str, world_size: int) -> str:
    import torch.distributed as dist

    for n in LENGTHS:
        inputs = [
            _on_device(ctx, _pattern(ctx.rank, n, dtype, 20 + dest), dtype)
            for dest in range(world_size)
        ]
        outputs = [_sentinel(ctx, n, dtype) for _ in range(world_size)]
        dist.all_to_all(outputs, inputs)
        for source, output in enumerate(outputs):
            expected = _pattern(source, n, dtype, 20 + ctx.rank)
            _compare(output, expected, f"length {n}, from rank {source}")
    return "exact at every length"


def _send_recv_ring(ctx: Context, dtype: str, world_size: int) -> str:
    import torch.distributed as dist

    if world_size == 1:
        return "skipped: a ring needs at least 2 ranks"
    after, before = (ctx.rank + 1) % world_size, (ctx.rank - 1) % world_size
    for n in LENGTHS:
        received = _sentinel(ctx, n, dtype)
        sending = dist.isend(_on_device(ctx, _pattern(ctx.rank, n, dtype, 30), dtype), after)
        receiving = dist.irecv(received, before)
        for work in (sending, receiving):
            if work is not None:
                work.wait()
        _compare(received, _pattern(before, n, dtype, 30), f"length {n}, from rank {before}")
    return "exact at every length, each rank to the next"


def _object_for(rank: int) -> dict[str, Any]:
    return {"rank": rank, "text": "é∑" * (rank * 37 + 1), "values": [rank, rank / 3, None]}


def _all_gather_object(ctx: Context, dtype: str, world_size: int) -> str:
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, _object_for(ctx.rank))
    for source, value in enumerate(gathered):
        if value != _object_for(source):
            raise _Mismatch(f"the object from rank {source} arrived as {value!r:.80}")
    return "equal objects from every rank"


def _barrier(ctx: Context, dtype: str, world_size: int) -> str:
    import torch.distributed as dist

    dist.barrier()
    return "every rank passed it"


def _grid(checks: list[_Check], merged: list[_Result], world_size: int) -> list[str]:
    """The text report of the correctness step: operations x dtypes, then what did not pass."""
    status = {r.name: r for r in merged}
    word = {"passed": "ok", "skipped": "skipped", "failed": "FAILED"}
    rows: list[list[str]] = [["operation", *DTYPES]]
    for row in dict.fromkeys(c.row for c in checks):
        cells = dict.fromkeys(DTYPES, "-")
        for check in (c for c in checks if c.row == row):
            state = word[status[check.name].status]
            if check.dtype is None:
                cells = {DTYPES[0]: state} | dict.fromkeys(DTYPES[1:], "")
            else:
                cells[check.dtype] = state
        rows.append([row, *cells.values()])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append(
        "(- not defined for integers; float32 and bfloat16 sums and averages within "
        f"(ranks+1)*roundoff*sum(|x|), everything else exact; {world_size} ranks)"
    )
    for result in merged:
        if result.status != "passed":
            lines.append(f"{word[result.status]} {result.name}: {result.detail}")
    return lines


# -- bandwidth ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One size of one swept operation; ``seconds`` is the slowest rank's mean per iteration.

    ``nbytes`` follows nccl-tests: the buffer size for all_reduce, the *total output* size
    (per-rank input x ranks) for all_gather.
    """

    op: str
    nbytes: int
    dtype: str
    iters: int
    seconds: float
    world_size: int

    @property
    def algbw(self) -> float:
        """Bytes per second (algorithm bandwidth)."""
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw(self) -> float:
        """Bytes per second (bus bandwidth, nccl-tests definition)."""
        return bus_bandwidth(self.op, self.algbw, self.world_size)

    def as_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "bytes": self.nbytes,
            "dtype": self.dtype,
            "iters": self.iters,
            "time_us": round(self.seconds * 1e6, 3),
            "algbw_gbps": round(self.algbw / 1e9, 6),
            "busbw_gbps": round(self.busbw / 1e9, 6),
        }


def bus_bandwidth(op: str, algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth: all_reduce x 2(n-1)/n, all_gather x (n-1)/n."""
    return algbw * OPS[op](world_size)


def synchronize(device: Any) -> None:
    """Wait for the device's queued work; nothing to wait for on the CPU."""
    if device.type == "cpu":
        return
    import torch

    module = getattr(torch, device.type, None)
    sync = getattr(module, "synchronize", None)
    if callable(sync):
        sync()
    elif hasattr(torch, "accelerator"):
        torch.accelerator.synchronize()


def _buffers(ctx: Context, op: str, nbytes: int, dtype: str) -> tuple[Callable[[], Any], int]:
    """The call to time and the bytes it moves (rounded to whole elements per rank)."""
    import torch
    import torch.distributed as dist

    torch_dtype = _torch_dtype(dtype)
    size = torch.tensor([], dtype=torch_dtype).element_size()
    if op == "all_reduce":
        count = max(1, nbytes // size)
        # Zeros: sums stay zero, so no denormal or infinite values slow the arithmetic down.
        buffer = torch.zeros(count, dtype=torch_dtype, device=ctx.device)
        return functools_partial(dist.all_reduce, buffer), count * size
    if op == "all_gather":
        count = max(1, nbytes // (size * ctx.world_size))
        source = torch.zeros(count, dtype=torch_dtype, device=ctx.device)
        output = torch.empty(count * ctx.world_size, dtype=torch_dtype, device=ctx.device)
        return functools_partial(_gather_single(), output, source), count * size * ctx.world_size
    raise ValueError(f"op={op!r} is not swept; use one of {', '.join(OPS)}")


def functools_partial(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    def call() -> Any:
        return fn(*args)

    return call


def measure(
    ctx: Context,
    op: str,
    nbytes: int,
    *,
    iters: int | None = None,
    warmup: int = DEFAULT_WARMUP,
    dtype: str = "float32",
) -> Measurement:
    """Time ``op`` on ``nbytes`` the way ``check`` reports it; collective: every rank calls it.

    Warm-up, a barrier, ``iters`` back-to-back calls, one device synchronisation; the time is
    the slowest rank's mean. With ``iters=None`` the count comes from the slowest rank's fastest
    warm-up iteration (at least one warm-up then runs), aiming at AUTO_SECONDS_PER_SIZE.
    """
    import torch.distributed as dist

    call, moved = _buffers(ctx, op, nbytes, dtype)
    device = ctx.device
    fastest = math.inf
    for _ in range(warmup if iters is not None else max(1, warmup)):
        begin = time.perf_counter()
        call()
        synchronize(device)
        fastest = min(fastest, time.perf_counter() - begin)
    if iters is None:
        estimate = _max_over_ranks(ctx, [fastest])[0]
        wanted = AUTO_SECONDS_PER_SIZE / max(estimate, 1e-9)
        iters = int(min(AUTO_MAX_ITERS, max(AUTO_MIN_ITERS, round(wanted))))
    dist.barrier()
    synchronize(device)
    begin = time.perf_counter()
    for _ in range(iters):
        call()
    synchronize(device)
    mean = (time.perf_counter() - begin) / iters
    slowest = _max_over_ranks(ctx, [mean])[0]
    return Measurement(op, moved, dtype, iters, slowest, ctx.world_size)


_TABLE = "{:<11} {:>9} {:>12} {:>13} {:>13} {:>6}"


def _bandwidth(rank: _Rank) -> list[Measurement]:
    ctx, options = rank.ctx, rank.options
    sizes = options.sizes(ctx.device.type)
    iterations = f"{options.iters}" if options.iters else "automatic"
    rank.say(
        f"[4/4] bandwidth: {', '.join(OPS)} on float32, {format_size(sizes[0])} to "
        f"{format_size(sizes[-1])}, {iterations} iterations after {options.warmup} warm-up; "
        "time is the slowest rank's mean, busbw as nccl-tests (GB/s = 10^9 bytes/s)"
    )
    if rank.broken:
        rank.say(f"      not run: {rank.broken}")
        rank.results.append(_Result("bandwidth", "failed", f"not run: {rank.broken}"))
        return []
    rank.say("      " + _TABLE.format("op", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "iters"))
    measurements: list[Measurement] = []
    for op in OPS:
        for nbytes in sizes:
            name = f"bandwidth {op} {format_size(nbytes)}"
            with rank.watchdog.step(name):
                try:
                    m = measure(ctx, op, nbytes, iters=options.iters, warmup=options.warmup)
                except Exception as exc:
                    reason = f"{type(exc).__name__}: {_first_line(exc)}"
                    if isinstance(exc, NotImplementedError) or _UNSUPPORTED.search(str(exc)):
                        detail = f"not supported by {ctx.backend}"
                        rank.results.append(_Result(f"bandwidth {op}", "skipped", detail))
                        rank.say(f"      {op:<11} skipped: {detail}")
                        break
                    rank.broken = f"{name} raised {reason}"
                    rank.results.append(_Result(name, "failed", f"raised {reason}"))
                    rank.say(f"      {op:<11} {format_size(nbytes):>9} FAILED on rank {ctx.rank}")
                    return measurements
            measurements.append(m)
            rank.say(
                "      "
                + _TABLE.format(
                    op,
                    format_size(m.nbytes),
                    f"{m.seconds * 1e6:.1f}",
                    f"{m.algbw / 1e9:.3f}",
                    f"{m.busbw / 1e9:.3f}",
                    m.iters,
                )
            )
    return measurements


# -- the verdict and the plot -------------------------------------------------------------------


def _verdict_line(report: dict[str, Any]) -> str:
    checks = report["checks"]
    failed = [c for c in checks if not c["ok"]]
    skipped = [c for c in checks if c["skipped"]]
    passed = len(checks) - len(failed) - len(skipped)
    counts = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    where = f"{report['accelerator']} with {report['backend']}, {report['world_size']} ranks"
    if failed:
        names = "; ".join(f"{c['name']} ({c['detail']})" for c in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        return f"verdict: FAILED ({counts}; {where}): {names}{more}"
    peak = max((b["busbw_gbps"] for b in report["bandwidth"]), default=None)
    best = "" if peak is None else f"; peak busbw {peak:.2f} GB/s"
    return f"verdict: PASSED ({counts}; {where}{best})"


def _plot(path: Path, report: dict[str, Any]) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    for op in OPS:
        rows = [b for b in report["bandwidth"] if b["op"] == op]
        if rows:
            axes.plot(
                [b["bytes"] for b in rows], [b["busbw_gbps"] for b in rows], marker="o", label=op
            )
    axes.set_xscale("log", base=2)
    ticks = sorted({b["bytes"] for b in report["bandwidth"]})
    axes.set_xticks(ticks, [format_size(t) for t in ticks], rotation=45, ha="right")
    axes.set_xlabel("size (all_gather: total output)")
    axes.set_ylabel("busbw (GB/s)")
    axes.set_title(
        f"accelbackends check: {report['accelerator']} with {report['backend']}, "
        f"{report['world_size']} ranks"
    )
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.savefig(path)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)
