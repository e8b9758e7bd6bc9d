"""What every benchmark shares: statistics, cold-process timing with peak memory, goals, tables,
JSON results and charts.

Charts are drawn by :mod:`benchmarks._charts` with matplotlib, which is not a project dependency:
it runs in whichever interpreter has it, this one or the peers' virtual environment
(:mod:`benchmarks.peers`), and is skipped with a note where neither has.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linearly interpolated between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, median, p95, min, max and mean of ``values``."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p95": percentile(values, 95),
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def ms(seconds: float) -> str:
    """Seconds as a short human figure: ``23.4 ms`` or ``1.42 s``."""
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


# -- cold processes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChildRun:
    """One finished child process: wall time, peak resident memory and exit status."""

    seconds: float
    peak_rss: int  # bytes
    returncode: int


# Linux carries a process's peak-RSS mark across exec, so a child forked straight from this
# (large) benchmark process would report at least this process's size. A bare ``python -S``
# (about 8 MiB, less than any Python program measured here) forks the child instead and reports
# its wall time and ``wait4`` rusage; the child's output goes to /dev/null.
_TRAMPOLINE = """\
import os, sys, time
devnull = os.open(os.devnull, os.O_WRONLY)
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(devnull, 1)
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def run_child(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 300.0
) -> ChildRun:
    """Run ``argv`` as a fresh process; its wall time and peak RSS (Linux ``ru_maxrss``, KiB)."""
    done = subprocess.run(
        [sys.executable, "-S", "-c", _TRAMPOLINE, *argv],
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )
    try:
        seconds, maxrss, returncode = done.stdout.split()
    except ValueError:
        raise RuntimeError(f"{' '.join(argv)}: no measurement:\n{done.stderr[-2000:]}") from None
    if int(returncode) != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {returncode}:\n{done.stderr[-2000:]}")
    return ChildRun(float(seconds), int(maxrss) * 1024, int(returncode))


def interleaved(
    commands: Mapping[str, Sequence[str]],
    *,
    repeats: int,
    warmup: int = 1,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, list[ChildRun]]:
    """Run every command ``warmup + repeats`` times in rounds, the order rotating each round,
    so that drift in the machine's load hits every command alike; warm-up rounds are dropped."""
    names = list(commands)
    runs: dict[str, list[ChildRun]] = {name: [] for name in names}
    for round_index in range(warmup + repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            run = run_child(commands[name], env=env)
            if round_index >= warmup:
                runs[name].append(run)
        if progress:
            kind = "warm-up" if round_index < warmup else f"{round_index - warmup + 1}/{repeats}"
            progress(f"  round {kind} done")
    return runs


def compile_package() -> None:
    """Write the bytecode of accelbackends (and of these benchmarks) before anything is measured,
    as ``pip install`` does for an installed package. In an editable checkout under
    ``PYTHONDONTWRITEBYTECODE=1`` (common in containers and CI images) nothing else writes it,
    and every measured process would compile the package's ~100 modules again: ``info --json``
    160 ms instead of 90 ms, a one-rank ``init()`` 110 ms instead of 55 ms on 2 cores, a cost
    no installed package pays. ``py_compile`` writes whatever the variable says."""
    import compileall

    compileall.compile_dir(str(ROOT / "accelbackends"), quiet=1)
    # Not its subfolders: the peers' environment lives there.
    compileall.compile_dir(str(HERE), maxlevels=0, quiet=1)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the variables that would change what is measured;
    ``ACCELBACKENDS_PROBE_ROOT`` stays (the machine a test suite set up: no accelerator)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if (not key.startswith("ACCELBACKENDS_") or key == "ACCELBACKENDS_PROBE_ROOT")
        and key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
        and not key.startswith("PYTHONPROFILE")
    }
    env.update(extra)
    return env


# -- goals, tables and results ------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """One goal of the issue: what was measured against what was wanted."""

    name: str
    measured: str
    target: str
    met: bool | None  # None: reported only, nothing to judge
    detail: str = ""

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: "reported"}[self.met]


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain-text table with left-aligned columns."""
    body = [list(map(str, row)) for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in body)) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(line.rstrip() for line in lines)


def goals_table(goals: Sequence[Goal]) -> str:
    return table(
        ["goal", "measured", "target", "verdict"],
        [[g.name, g.measured, g.target, g.verdict] for g in goals],
    )


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def load_average() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (math.nan, math.nan, math.nan)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """What the figures depend on: cores, load, interpreter and torch versions."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": cores,
        "cpu": cpu,
        "load_average": [round(x, 2) for x in load_average()],
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": _installed("torch"),
        "accelbackends": _installed("accelbackends"),
    }


def rank_counts(text: str) -> list[int]:
    """``--ranks`` values: comma-separated rank counts, each at least 2."""
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(v < 2 for v in values):
        raise argparse.ArgumentTypeError("give comma-separated rank counts >= 2, e.g. 2,4,8")
    return values


def add_common_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """``--quick`` and ``--out``, which every benchmark takes (``all`` relies on both)."""
    parser.add_argument(
        "--quick", action="store_true", help="fewer repeats: a smoke run, not figures to quote"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / f"{name}.json",
        help=f"where to write the JSON results (default benchmarks/results/{name}.json)",
    )


def write_results(
    path: Path, benchmark: str, goals: Sequence[Goal], started: float, **data: Any
) -> dict[str, Any]:
    """Write one benchmark's results as JSON (with the machine and its load) and return them."""
    result = {
        "benchmark": benchmark,
        "goals": [asdict(g) for g in goals],
        "seconds": round(time.monotonic() - started, 1),
        "machine": machine(),
        **data,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def report(benchmark: str, goals: Sequence[Goal], path: Path) -> None:
    if goals:
        print()
        print(goals_table(goals))
    print(f"{benchmark}: results written to {_shown(path)}", flush=True)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def say(text: str) -> None:
    print(text, flush=True)


# -- charts -------------------------------------------------------------------------------------


def chart_python() -> str | None:
    """An interpreter that can import matplotlib: this one, else the peers' environment's."""
    from .peers import venv_python

    candidates = [sys.executable]
    peers = venv_python()
    if peers is not None:
        candidates.append(str(peers))
    for python in candidates:
        probe = subprocess.run(
            [python, "-c", "import matplotlib"], capture_output=True, cwd=ROOT, check=False
        )
        if probe.returncode == 0:
            return python
    return None


def draw(kind: str, spec: Mapping[str, Any], out: Path) -> Path | None:
    """Draw a chart of ``kind`` (see :mod:`benchmarks._charts`) into ``out``; None if no
    interpreter here has matplotlib (the numbers are in the JSON regardless)."""
    python = chart_python()
    if python is None:
        say(f"  chart {out.name} skipped: matplotlib is not installed (python -m benchmarks peers)")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"kind": kind, **spec}, handle)
    try:
        done = subprocess.run(
            [python, "-m", "benchmarks._charts", handle.name, str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "MPLBACKEND": "Agg"},
            check=False,
        )
    finally:
        os.unlink(handle.name)
    if done.returncode != 0:
        say(f"  chart {out.name} failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    say(f"  chart written to {_shown(out)}")
    return out
