"""Every benchmark's entry point runs with tiny settings and writes valid JSON results.

Smoke only: no figure is judged here (timings belong to ``python -m benchmarks``, run by hand
on a quiet machine), and the charts are left out unless matplotlib is importable.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import __main__ as entry
from benchmarks import _common

ROOT = Path(__file__).resolve().parents[1]

#: Benchmark -> arguments small enough for a test (a few seconds each on 2 cores).
TINY: dict[str, list[str]] = {
    "imports": ["--repeats", "1", "--warmup", "0"],
    "detection": ["--repeats", "1", "--warmup", "0", "--no-peers"],
    "discovery": ["--plugins", "3", "--repeats", "1", "--warmup", "0"],
    "init-overhead": ["--ranks", "2", "--rounds", "1"],
    "rendezvous-scale": ["--ranks", "2", "--repeats", "1", "--warmup", "0"],
    "rendezvous-stalls": ["--probes", "2", "--runs", "1", "--ranks", "2"],
    "rendezvous-sim": ["--ranks", "4", "--tcp-ranks", "4", "--repeats", "1"],
    "local-stores": ["--ranks", "2", "--repeats", "1", "--warmup", "0", "--connections", "3"],
    "cpu-affinity": ["--rounds", "1", "--steps", "2", "--size", "32", "--grad-mib", "0.01"],
}


#: One benchmark's entry point in an interpreter of its own, as ``python -m benchmarks`` runs it
#: (not in the suite's long-lived process, whose threads a benchmark's forked ranks would
#: inherit), with the charts left out.
_DRIVER = """
import argparse, importlib, sys
from benchmarks import _common
_common.chart_python = lambda: None
module = importlib.import_module(sys.argv[1])
parser = argparse.ArgumentParser()
module.add_arguments(parser)
sys.exit(module.main(parser.parse_args(sys.argv[2:])))
"""


def _run(name: str, argv: list[str], out: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, entry.BENCHMARKS[name], *argv, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=150,  # a safety net under the suite's 180 s: a tiny benchmark takes seconds
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, object] = json.loads(out.read_text())
    return result


@pytest.fixture
def no_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_common, "chart_python", lambda: None)


def test_every_benchmark_module_is_registered_and_has_an_entry_point() -> None:
    for name, module_name in entry.BENCHMARKS.items():
        module = importlib.import_module(module_name)
        assert module.__doc__, name
        assert callable(module.add_arguments) and callable(module.main), name
    assert set(TINY) <= set(entry.BENCHMARKS)


def test_help_lists_every_benchmark_and_all(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        entry.main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    for name in [*entry.BENCHMARKS, "all"]:
        assert name in shown


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
def test_benchmark_writes_json_with_its_goals(name: str, tmp_path: Path, no_charts: None) -> None:
    result = _run(name, TINY[name], tmp_path / f"{name}.json")
    assert result["benchmark"] == name
    goals = result["goals"]
    assert isinstance(goals, list) and goals
    for goal in goals:
        assert set(goal) == {"name", "measured", "target", "met", "detail"}
        assert goal["met"] in (True, False, None)
    machine = result["machine"]
    assert isinstance(machine, dict) and machine["cores"] >= 1


def test_statistics_helpers() -> None:
    assert _common.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert _common.percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    stats = _common.summary([3.0, 1.0, 2.0])
    assert stats["median"] == 2.0 and stats["max"] == 3.0 and stats["n"] == 3


def test_cold_child_reports_its_own_peak_memory_not_the_parents() -> None:
    import sys

    small = _common.run_child([sys.executable, "-c", "pass"])
    big = _common.run_child(
        [sys.executable, "-c", "b = bytearray(64 * 2**20); b[::4096] = b'x' * len(b[::4096])"]
    )
    assert big.peak_rss - small.peak_rss > 48 * 2**20
    assert small.returncode == 0 and small.seconds > 0


def test_discovery_generates_installed_plugin_distributions(tmp_path: Path) -> None:
    from importlib import metadata

    from benchmarks.discovery import generate

    generate(tmp_path, 2)
    found = metadata.entry_points(group="accelbackends")
    ours = [ep for ep in found if ep.name.startswith("benchaccel")]
    assert ours == []  # not on sys.path yet
    names = sorted(
        ep.name
        for dist in metadata.distributions(path=[str(tmp_path)])
        for ep in dist.entry_points
        if ep.group == "accelbackends"
    )
    assert names == ["benchaccel00", "benchaccel01"]


def test_chart_is_drawn_where_matplotlib_is_available(tmp_path: Path) -> None:
    if _common.chart_python() is None:
        pytest.skip("matplotlib is not installed here nor in benchmarks/.venv-peers")
    out = _common.draw(
        "lines",
        {
            "title": "t",
            "xlabel": "ranks",
            "ylabel": "s",
            "series": [
                {"label": "a", "x": [2, 4], "median": [1, 2], "low": [1, 1], "high": [2, 3]}
            ],
        },
        tmp_path / "chart.png",
    )
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_exit_aborts_runs_every_documented_way_each_round_and_twins_evenly() -> None:
    from benchmarks.exit_aborts import TWINS, WAYS, _schedule

    order = _schedule(list(WAYS), runs=10, reference_runs=4)
    for documented, twin in TWINS.items():
        assert order.count(documented) == 10
        assert order.count(twin) == 4
    assert _schedule(["distributed", "plain"], runs=3, reference_runs=3) == [
        "distributed",
        "plain",
        "plain",
        "distributed",
        "distributed",
        "plain",
    ]


@pytest.mark.slow
def test_exit_aborts_counts_a_documented_way_that_ends_cleanly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from benchmarks import exit_aborts

    monkeypatch.setattr(exit_aborts, "_LOGS", tmp_path / "logs")
    monkeypatch.setattr(exit_aborts, "__file__", str(tmp_path / "exit_aborts.py"))
    parser = argparse.ArgumentParser()
    exit_aborts.add_arguments(parser)
    args = parser.parse_args(["--ways", "distributed", "--runs", "1", "--parallel", "1"])
    assert exit_aborts.main(args) == 0
    result = json.loads((tmp_path / "results" / "exit_aborts.json").read_text())
    assert result["counts"] == {"distributed": {"clean": 1, "aborted": 0, "failed": 0}}


def test_gpu_benchmark_without_an_nvidia_gpu_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from benchmarks import gpu

    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)  # no nvidia-smi on the PATH
    parser = argparse.ArgumentParser()
    gpu.add_arguments(parser)
    assert gpu.main(parser.parse_args(["--out", str(tmp_path / "gpu.json")])) == 2
    assert "needs one" in capsys.readouterr().out
    assert not (tmp_path / "gpu.json").exists()


def test_all_leaves_out_the_gpu_benchmark() -> None:
    assert "gpu" in entry.BENCHMARKS and "gpu" in entry.NOT_IN_ALL
