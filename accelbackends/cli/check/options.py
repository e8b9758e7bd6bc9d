"""The ``check`` flags: their definitions and defaults, and the validated `Options` that
every rank receives. Bad input is a `ConfigError` (exit 2)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ...plugin import config
from ...plugin.errors import ConfigError
from .bandwidth import AUTO_MAX_ITERS, AUTO_MIN_ITERS, AUTO_SECONDS_PER_SIZE, DEFAULT_WARMUP
from .sizes import GIB, KIB, MIB, format_size, parse_size

__all__ = [
    "Options",
    "add_arguments",
    "check_memory",
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
        type=_integer(1, MAX_ITERS, "or leave --iters out for the automatic count"),
        metavar="N",
        help=f"timed iterations per size (default: automatic, about {AUTO_SECONDS_PER_SIZE:g} s "
        f"per size, {AUTO_MIN_ITERS} to {AUTO_MAX_ITERS}; at most {MAX_ITERS})",
    )
    parser.add_argument(
        "--warmup",
        type=_integer(0, MAX_ITERS),
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"untimed iterations before each size (default {DEFAULT_WARMUP})",
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
        help="draw busbw against size into this .png, .svg or .pdf file (needs matplotlib)",
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
    #: Where rank 0 keeps the report so far for the parent (standalone runs; None: nowhere).
    progress: str | None = None

    def top(self, device_type: str) -> int:
        """The largest swept size: --max-bytes, else the default for the device type."""
        if self.max_bytes:
            return self.max_bytes
        return DEFAULT_MAX_BYTES_CPU if device_type == "cpu" else DEFAULT_MAX_BYTES_ACCELERATOR

    def sizes(self, device_type: str) -> list[int]:
        """The swept sizes: --min-bytes, doubling while <= --max-bytes."""
        top = self.top(device_type)
        sizes, size = [], self.min_bytes
        while size <= top:
            sizes.append(size)
            size *= 2
        return sizes


def parse_options(args: argparse.Namespace, env: Mapping[str, str]) -> Options:
    """The flags in ``args`` checked against each other, with the defaults ``env`` sets."""
    if args.max_bytes is not None and args.min_bytes > args.max_bytes:
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
    return Options(
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        iters=args.iters,
        warmup=args.warmup,
        timeout=timeout,
        rendezvous_timeout=rendezvous,
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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_ranks(nproc: int) -> None:
    """Refuse a --nproc this node cannot start: every rank is a process with its own torch."""
    cores = _cores()
    limit = max(MIN_RANKS_LIMIT, MAX_RANKS_PER_CORE * cores)
    if nproc > limit:
        raise ConfigError(
            f"--nproc={nproc} is more local ranks than this node can run: it has {cores} CPU "
            f"{'core' if cores == 1 else 'cores'} for this process, and each rank is a process "
            f"with its own torch; use --nproc {limit} or fewer (one rank per device or core is "
            "what a job runs)"
        )


def oversubscription(nproc: int, device_type: str) -> str | None:
    """A note where more CPU ranks than cores share the node, else None."""
    cores = _cores()
    if device_type != "cpu" or nproc <= cores:
        return None
    return (
        f"note: {nproc} CPU ranks on {cores} {'core' if cores == 1 else 'cores'}: the ranks take "
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
            f"{local_ranks} local ranks, more than half of this node's {format_size(physical)}; "
            "use a smaller --max-bytes or fewer ranks"
        )
