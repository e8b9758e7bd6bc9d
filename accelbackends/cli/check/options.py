"""The ``check`` flags: their definitions and defaults, and the validated `Options` that
every rank receives. Bad input is a `ConfigError` (exit 2)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ...plugin import config
from ...plugin.errors import ConfigError
from ...plugin.threads import available_cores
from ..text import plural
from .bandwidth import AUTO_MAX_ITERS, AUTO_MIN_ITERS, AUTO_SECONDS_PER_SIZE, DEFAULT_WARMUP
from .floors import SHIPPED, FloorRule, read_rules
from .sizes import GIB, KIB, MIB, format_size, parse_size
from .thresholds import (
    DEFAULT_BASELINE_FRACTION,
    BaselineRow,
    Floor,
    parse_fraction,
    parse_min_busbw,
    read_baseline,
)
from .verdicts import DEFAULT_LINK_FACTOR, Limits

__all__ = [
    "Options",
    "add_arguments",
    "check_memory",
    "check_one_rank",
    "check_ranks",
    "oversubscription",
    "parse_options",
]

DEFAULT_TIMEOUT = 60.0
MIN_RENDEZVOUS_TIMEOUT = 30.0
DEFAULT_MIN_BYTES = 1 * KIB
DEFAULT_MAX_BYTES_CPU = 64 * MIB
DEFAULT_MAX_BYTES_ACCELERATOR = 1 * GIB
#: --iters and --warmup above this are refused: 10 000 timed iterations of the largest size
#: already take minutes, and a larger count only ends in the step timeout.
MAX_ITERS = 10_000
#: Local ranks per CPU core beyond which --nproc is refused: each rank is a process with its
#: own torch, and 32 ranks on 2 cores already take minutes.
MAX_RANKS_PER_CORE = 32
MIN_RANKS_LIMIT = 64
#: ``--quick``: a fixed small budget for a Slurm prolog or a Kubernetes init container. The
#: sweep is four sizes at the top of the CPU range with a few timed calls each; the correctness
#: checks and the links run as always (fewer link rounds). Measured: 2 local CPU ranks finish
#: in 6.3 to 10.1 s on this project's 2-core machine under load, where the default run took 26 s
#: in the same minute (docs/preflight.md).
QUICK_MIN_BYTES_CPU, QUICK_MAX_BYTES_CPU = 1 * MIB, 8 * MIB
QUICK_MIN_BYTES_ACCELERATOR, QUICK_MAX_BYTES_ACCELERATOR = 32 * MIB, 256 * MIB
QUICK_ITERS, QUICK_WARMUP = 5, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``check`` subcommand's flags."""
    parser.description = (
        "Start --nproc local ranks (or join the ranks a launcher such as torchrun started), "
        "verify the collectives and measure bandwidth. Exit 0: every check passed; 1: a check "
        "failed or a rank died; 2: bad input."
    )
    parser.add_argument(
        "--nproc",
        type=_integer(1),
        metavar="N",
        help="local ranks to start (default: the accelerator's device count; 2 on CPU); "
        "not used under a launcher, which decides: under torchrun give torchrun's own "
        "--nproc-per-node N before -m accelbackends (torchrun takes a --nproc after it for "
        "its own option and stops with 'ambiguous option')",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--min-bytes",
        type=parse_size,
        metavar="SIZE",
        help="smallest bandwidth size (default 1KiB; --quick: 1MiB on CPU, 32MiB on "
        "accelerators); sizes double up to --max-bytes",
    )
    parser.add_argument(
        "--max-bytes",
        type=parse_size,
        metavar="SIZE",
        help="largest bandwidth size (default 64MiB on CPU, 1GiB on accelerators; --quick: 8MiB "
        "on CPU, 256MiB on accelerators)",
    )
    parser.add_argument(
        "--iters",
        type=_integer(1, MAX_ITERS, "or leave --iters out for the automatic count"),
        metavar="N",
        help=f"timed iterations per size (default: automatic, about {AUTO_SECONDS_PER_SIZE:g} s "
        f"per size, {AUTO_MIN_ITERS} to {AUTO_MAX_ITERS}; --quick: {QUICK_ITERS}; at most "
        f"{MAX_ITERS})",
    )
    parser.add_argument(
        "--warmup",
        type=_integer(0, MAX_ITERS),
        metavar="N",
        help=f"untimed iterations before each size (default {DEFAULT_WARMUP}; --quick: "
        f"{QUICK_WARMUP})",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="limit of each step, also the collective timeout and (at least "
        f"{MIN_RENDEZVOUS_TIMEOUT:g} s) the rendezvous timeout (default: {config.TIMEOUT}, "
        f"else {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw busbw against size into this .png, .svg or .pdf file, with the thresholds "
        "and the baseline (needs matplotlib)",
    )
    preflight = parser.add_argument_group(
        "preflight",
        "a verdict per node: exit 1 when a node, a link, a threshold or the baseline fails",
    )
    preflight.add_argument(
        "--quick",
        action="store_true",
        help="a small fixed budget for a Slurm prolog or a Kubernetes init container: four "
        "sizes, few iterations, three link rounds (flags given explicitly still win)",
    )
    preflight.add_argument(
        "--min-busbw",
        type=parse_min_busbw,
        metavar="GBPS",
        help="fail when busbw at the largest size is below GBPS (GB/s), or give SIZE=GBPS "
        "pairs such as 1MiB=5,64MiB=20 (default: the bandwidth the accelerator's plugin "
        "declares for its fabric, if any)",
    )
    preflight.add_argument(
        "--thresholds",
        metavar="FILE",
        help="floors by device model, link kind, GPUs per node and NIC rate, one rule a line "
        "(the format of the file shipped with accelbackends, docs/check.md); replaces the "
        "shipped floors and the accelerator plugin's own",
    )
    preflight.add_argument(
        "--baseline",
        metavar="FILE",
        help="an earlier `check --json` output: fail where busbw falls below "
        "--baseline-fraction of it, size by size",
    )
    preflight.add_argument(
        "--baseline-fraction",
        type=parse_fraction,
        default=DEFAULT_BASELINE_FRACTION,
        metavar="F",
        help=f"with --baseline: the fraction of its busbw each size must reach "
        f"(default {DEFAULT_BASELINE_FRACTION:g})",
    )
    preflight.add_argument(
        "--link-factor",
        type=parse_fraction,
        default=DEFAULT_LINK_FACTOR,
        metavar="F",
        help=f"a link is slow below F x the job's median for its kind (default "
        f"{DEFAULT_LINK_FACTOR:g})",
    )
    preflight.add_argument(
        "--failing-nodes",
        metavar="FILE",
        help="write the failing hosts there, one per line (for sbatch --exclude)",
    )
    preflight.add_argument(
        "--passing-nodes",
        metavar="FILE",
        help="write the passing hosts there, one per line (for sbatch --nodelist or a hostfile)",
    )


def _integer(low: int, high: int | None = None, otherwise: str = "") -> Callable[[str], int]:
    def integer(text: str) -> int:
        number = int(text) if re.fullmatch(r"\s*[+-]?\d+\s*", text) else None
        if number is None or number < low or (high is not None and number > high):
            accepted = (
                f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
            )
            hint = f", {otherwise}" if otherwise else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not valid; use {accepted}{hint}")
        return number

    return integer


def _seconds(text: str) -> float:
    try:
        return config.parse_seconds(text, source="--timeout")
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"{config.shown(text)} is not valid; use a positive number of seconds from "
            f"{config.MIN_SECONDS:g} to {config.MAX_SECONDS:.0f} (30 days), such as 60"
        ) from None


@dataclass(frozen=True)
class Options:
    """The validated flags, as every rank receives them."""

    min_bytes: int
    max_bytes: int | None  # None: the default for the device type
    iters: int | None  # None: automatic
    warmup: int
    timeout: float
    #: None: ACCELBACKENDS_RENDEZVOUS_TIMEOUT decides (read by init()).
    rendezvous_timeout: float | None
    json: bool
    plot: str | None
    quick: bool = False
    #: The busbw floors: --min-busbw, else the plugin's declared fabric bandwidth.
    min_busbw: tuple[Floor, ...] = ()
    baseline: tuple[BaselineRow, ...] = ()
    baseline_path: str | None = None
    baseline_fraction: float = DEFAULT_BASELINE_FRACTION
    link_factor: float = DEFAULT_LINK_FACTOR
    failing_nodes: str | None = None
    passing_nodes: str | None = None
    #: The floor rules, first match wins (--thresholds, else the plugin's and the shipped ones).
    rules: tuple[FloorRule, ...] = ()
    rules_from: str = ""
    #: Flags given that a run of one rank cannot judge (it has no collective bandwidth).
    not_judged: tuple[str, ...] = ()
    #: Where rank 0 keeps the report so far for the parent (standalone runs; None: nowhere).
    progress: str | None = None

    def limits(self) -> Limits:
        """What the verdict holds the run to."""
        return Limits(
            self.min_busbw,
            self.baseline,
            self.baseline_path,
            self.baseline_fraction,
            self.link_factor,
            not_judged=self.not_judged,
        )

    def top(self, device_type: str) -> int:
        """The largest swept size: --max-bytes, else the default for the device type."""
        if self.max_bytes:
            return self.max_bytes
        cpu = device_type == "cpu"
        if self.quick:
            return QUICK_MAX_BYTES_CPU if cpu else QUICK_MAX_BYTES_ACCELERATOR
        return DEFAULT_MAX_BYTES_CPU if cpu else DEFAULT_MAX_BYTES_ACCELERATOR

    def bottom(self, device_type: str) -> int:
        """The smallest swept size: --min-bytes, else the default (for ``--quick`` too)."""
        if self.min_bytes:
            return min(self.min_bytes, self.top(device_type))
        if self.quick:
            low = QUICK_MIN_BYTES_CPU if device_type == "cpu" else QUICK_MIN_BYTES_ACCELERATOR
            return min(low, self.top(device_type))
        return min(DEFAULT_MIN_BYTES, self.top(device_type))

    def sizes(self, device_type: str) -> list[int]:
        """The swept sizes: --min-bytes, doubling while <= --max-bytes."""
        top = self.top(device_type)
        sizes, size = [], self.bottom(device_type)
        while size <= top:
            sizes.append(size)
            size *= 2
        return sizes


def parse_options(args: argparse.Namespace, env: Mapping[str, str]) -> Options:
    """The flags in ``args`` checked against each other, with the defaults ``env`` sets."""
    if args.max_bytes is not None and args.min_bytes and args.min_bytes > args.max_bytes:
        raise ConfigError(
            f"--min-bytes={format_size(args.min_bytes)} is larger than "
            f"--max-bytes={format_size(args.max_bytes)}; use --min-bytes <= --max-bytes"
        )
    timeout = args.timeout or config.read_seconds(env, config.TIMEOUT) or DEFAULT_TIMEOUT
    # Ranks may start slowly on a busy node: joining gets at least MIN_RENDEZVOUS_TIMEOUT,
    # unless the rendezvous variable sets its own limit.
    rendezvous: float | None = max(timeout, MIN_RENDEZVOUS_TIMEOUT)
    if config.read_seconds(env, config.RENDEZVOUS_TIMEOUT) is not None:
        rendezvous = None
    if args.plot is not None:
        _check_plot_target(args.plot)
    for flag, target in (
        ("--failing-nodes", args.failing_nodes),
        ("--passing-nodes", args.passing_nodes),
    ):
        if target is not None:
            _check_output_target(flag, target)
    quick = args.quick
    warmup = args.warmup if args.warmup is not None else QUICK_WARMUP if quick else DEFAULT_WARMUP
    return Options(
        min_bytes=args.min_bytes or 0,
        max_bytes=args.max_bytes,
        iters=args.iters or (QUICK_ITERS if quick else None),
        warmup=warmup,
        timeout=timeout,
        rendezvous_timeout=rendezvous,
        json=args.json,
        plot=args.plot,
        quick=quick,
        min_busbw=args.min_busbw or (),
        baseline=read_baseline(args.baseline) if args.baseline else (),
        baseline_path=args.baseline,
        baseline_fraction=args.baseline_fraction,
        link_factor=args.link_factor,
        failing_nodes=args.failing_nodes,
        passing_nodes=args.passing_nodes,
        rules=read_rules(args.thresholds, "--thresholds") if args.thresholds else (),
        rules_from=f"--thresholds {args.thresholds}" if args.thresholds else "",
    )


def with_rules(options: Options, plugin: str, declared: str | os.PathLike[str] | None) -> Options:
    """The options with the floor rules: --thresholds alone where given, else the accelerator
    plugin's own file (its rules first) and the shipped one."""
    if options.rules_from:
        return options
    rules = read_rules(SHIPPED, "the shipped thresholds")
    where = f"the shipped {SHIPPED.name}"
    if declared is not None:
        rules = read_rules(declared, f"the {plugin} plugin's thresholds") + rules
        where = f"the {plugin} plugin's {declared} and {where}"
    return dataclasses.replace(options, rules=rules, rules_from=where)


def _check_output_target(flag: str, target: str) -> None:
    folder = Path(target).parent
    if not folder.is_dir():
        raise ConfigError(f"{flag}={target}: directory {str(folder)!r} does not exist")
    if Path(target).is_dir():
        raise ConfigError(f"{flag}={target} is a directory; give a file path to write")


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


def check_one_rank(options: Options, world_size: int) -> Options:
    """With one rank, which measures no collective bandwidth (a one-rank collective moves no
    data; ``check`` measures a device memory copy instead): ``--plot`` is refused (there is
    nothing to draw); ``--min-busbw`` and ``--baseline`` are not judged, and the verdict and the
    JSON say so: a Slurm prolog shared by 1-GPU and 8-GPU nodes must not drain the 1-GPU ones."""
    if world_size != 1:
        return options
    if options.plot:
        raise ConfigError(
            "--plot needs a collective bandwidth, and a run of 1 rank measures none (a one-rank "
            "collective moves no data; check measures a device memory copy instead); run 2 "
            "ranks or more, or leave --plot out"
        )
    given = [
        flag
        for flag, value in (("--min-busbw", options.min_busbw), ("--baseline", options.baseline))
        if value
    ]
    notes = tuple(f"{flag}: one rank has no collective bandwidth" for flag in given)
    return dataclasses.replace(options, not_judged=notes, min_busbw=(), baseline=())


def check_ranks(nproc: int) -> None:
    """Refuse a --nproc this node cannot start: every rank is a process with its own torch."""
    cores = available_cores()
    limit = max(MIN_RANKS_LIMIT, MAX_RANKS_PER_CORE * cores)
    if nproc > limit:
        raise ConfigError(
            f"--nproc={nproc} is more local ranks than this node can run: it has {cores} CPU "
            f"{plural(cores, 'core')} for this process, and each rank is a process "
            f"with its own torch; use --nproc {limit} or fewer (one rank per device or core is "
            "what a job runs)"
        )


def oversubscription(nproc: int, device_type: str) -> str | None:
    """A note where more CPU ranks than cores share the node, else None."""
    cores = available_cores()
    if device_type != "cpu" or nproc <= cores:
        return None
    return (
        f"note: {nproc} CPU ranks on {cores} {plural(cores, 'core')}: the ranks take "
        "turns on the cores, so the check takes longer (minutes for 16 ranks per core) and its "
        f"bandwidth measures the crowding, not the node; --nproc {cores} or fewer avoids it"
    )


def check_memory(options: Options, device_type: str, local_ranks: int) -> None:
    """On CPU every local rank keeps its buffers in this node's memory: refuse a sweep that
    cannot fit rather than have the kernel kill a rank halfway through."""
    if device_type != "cpu":
        return
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return
    top = options.top(device_type)
    need = 2 * top * local_ranks  # all_gather holds its output and its share of the input
    if need > physical // 2:
        raise ConfigError(
            f"--max-bytes={format_size(top)} needs about {format_size(need)} across "
            f"{local_ranks} local {plural(local_ranks, 'rank')}, more than half of this node's "
            f"{format_size(physical)}; "
            "use a smaller --max-bytes or fewer ranks"
        )
