"""``accelbackends check``: real ranks over real Gloo, started the way a user starts them.

Misbehaving backends come from a fake third-party plugin installed for real (a ``*.dist-info``
on PYTHONPATH, see ``FAKE_COMM``): its accelerator runs on the CPU and registers backends that
delegate to Gloo but break one thing on purpose. It is test code only; the library is never
patched.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

import accelbackends
from accelbackends.cli import check
from accelbackends.plugin import torchcompat
from accelbackends.testing.cluster import clean_environment

#: Tiny sweeps keep every run to a few seconds on a 2-core machine.
QUICK = ("--min-bytes", "1KiB", "--max-bytes", "8KiB", "--iters", "2", "--warmup", "1")

FAKE_COMM = '''
"""Test code only: accelerator "fakecomm" on the CPU with backends that run over Gloo but
misbehave on purpose. partial: all_to_all is not implemented (said the way torch's backends say
it). lying: all_reduce sums are off by one on rank 1. dies: rank 1 exits in broadcast. hangs:
rank 1 sleeps in broadcast. stops: rank 1 stops itself (SIGSTOP) in the
2 KiB all_reduce of the bandwidth sweep. crashes: rank 0 dies by SIGSEGV in the send/recv ring,
and its end reaches spawn()'s parent late (tests/dying.py, on the ranks' PYTHONPATH)."""

import os
import re
import shutil
import signal
import socket
import time

import accelbackends

BACKENDS = ("partial", "lying", "dies", "hangs", "stops", "crashes")


def _register_backends():
    import torch.distributed as dist

    if BACKENDS[0] in dist.Backend.backend_list:
        return

    class OverGloo(dist.ProcessGroup):
        def __init__(self, store, rank, size, timeout, name):
            super().__init__(rank, size)
            # On GLOO_SOCKET_IFNAME's interface where it is set, as torch's own Gloo groups are
            # (the default device follows the host name: loopback on a namespaced node).
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            interface = os.environ.get("GLOO_SOCKET_IFNAME")
            options._devices = [
                dist.ProcessGroupGloo.create_device(interface=interface)
                if interface
                else dist.ProcessGroupGloo.create_default_device()
            ]
            self._gloo = dist.ProcessGroupGloo(store, rank, size, options)
            self._name = name

        def getBackendName(self):
            return self._name

        def allreduce(self, tensors, opts):
            if self._name == "stops" and self.rank() == 1 and tensors[0].numel() == 512:
                os.kill(os.getpid(), signal.SIGSTOP)  # 2 KiB: a size only the sweep uses
            work = self._gloo.allreduce(tensors, opts)
            if self._name == "lying" and self.rank() == 1 and opts.reduceOp == dist.ReduceOp.SUM:
                work.wait()
                for tensor in tensors:
                    tensor.add_(1)
            return work

        def broadcast(self, tensors, opts):
            if self.rank() == 1 and self._name == "dies":
                os.write(2, b"fakecomm: rank 1 gives up in broadcast\\n")
                os._exit(3)
            if self.rank() == 1 and self._name == "hangs":
                time.sleep(3600)
            return self._gloo.broadcast(tensors, opts)

        def allgather(self, outputs, inputs, opts):
            return self._gloo.allgather(outputs, inputs, opts)

        def all_gather_single(self, output, input, opts):
            return self._gloo._allgather_base(output, input, opts)

        def reduce_scatter(self, outputs, inputs, opts):
            return self._gloo.reduce_scatter(outputs, inputs, opts)

        def alltoall(self, outputs, inputs, opts):
            if self._name == "partial":
                raise RuntimeError("Backend partial does not support alltoall")
            return self._gloo.alltoall(outputs, inputs, opts)

        def send(self, tensors, dst, tag):
            if self._name == "crashes" and self.rank() == 0:
                from dying import die_slowly

                die_slowly()
            return self._gloo.send(tensors, dst, tag)

        def recv(self, tensors, src, tag):
            return self._gloo.recv(tensors, src, tag)

        def barrier(self, opts):
            return self._gloo.barrier(opts)

    for name in BACKENDS:
        def create(store, rank, size, timeout, name=name):
            return OverGloo(store, rank, size, timeout, name)

        dist.Backend.register_backend(name, create, devices=["cpu"])


def _options(request):
    _register_backends()
    return accelbackends.BackendOptions(request.backend, timeout=request.timeout)


def _bind(request):
    import torch

    return torch.device("cpu")


@accelbackends.hookimpl
def accelbackends_declare_accelerators():
    return [
        accelbackends.AcceleratorSpec(
            name="fakecomm",
            device_type="cpu",
            priority=5,
            backends=BACKENDS,
            default_backend="partial",
            detect=lambda probe: accelbackends.Detection(True, 1, "fake, for the check tests"),
            bind=_bind,
            backend_options=_options,
        )
    ]
'''


@pytest.fixture
def fake_comm(plugin_dist: Callable[..., Path]) -> Path:
    """The directory to put on PYTHONPATH so that the fake plugin is installed."""
    if torchcompat.release() < (2, 13):
        import torch

        pytest.skip(
            f"torch {torch.__version__} cannot run the fake backends' Python ProcessGroup "
            "subclass for every check (seen on 2.4.1: allgather without opts, 'No backend type "
            "associated with device type cpu'); 2.13 and 2.15 can"
        )
    return plugin_dist("fakecomm", FAKE_COMM)


_GLOO_PROBE = """
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
calls = {
    "all_reduce avg": lambda: dist.all_reduce(torch.ones(1), op=dist.ReduceOp.AVG),
    "reduce_scatter": lambda: dist.reduce_scatter(torch.zeros(1), [torch.ones(1)]),
    "all_to_all": lambda: dist.all_to_all([torch.zeros(1)], [torch.ones(1)]),
}
lacks = []
for name, call in calls.items():
    try:
        call()
    except RuntimeError as exc:
        if "not support" not in str(exc) and "Cannot use" not in str(exc):
            raise
        lacks.append(name)
print(json.dumps(lacks), flush=True)
os._exit(0)  # no destroy: torch 2.4 can deadlock there
"""


@functools.cache
def _gloo_lacks() -> frozenset[str]:
    """The operations of check's list that the installed torch's Gloo does not implement,
    asked of a one-rank Gloo group in a child process (torch 2.4: all_reduce avg,
    reduce_scatter, all_to_all; none on 2.13 and 2.15)."""
    result = subprocess.run(
        [sys.executable, "-c", _GLOO_PROBE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return frozenset(json.loads(result.stdout.strip().splitlines()[-1]))


def _operation(name: str) -> str:
    """``"all_reduce avg float32"`` -> ``"all_reduce avg"``."""
    head, _, last = name.rpartition(" ")
    return head if last in check.DTYPES else name


def _report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON object --json prints (the whole of stdout must be that object)."""
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def _child_env(**extra: str) -> dict[str, str]:
    return {**clean_environment(os.environ), **extra}


# -- standalone runs ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2, 3, 4])
def test_standalone_run_with_n_ranks_passes_every_check_and_sweeps_both_ops(nproc: int) -> None:
    result = run_cli("check", "--nproc", str(nproc), "--json", *QUICK)
    assert result.returncode == 0, result.stderr
    report = _report(result)
    assert report["ok"] is True
    assert report["world_size"] == nproc
    assert (report["accelerator"], report["backend"], report["launcher"]) == (
        "cpu",
        "gloo",
        "spawn",
    )
    checks = _checks(report)
    for name, entry in checks.items():
        alone = nproc == 1 and name.startswith("send/recv ring")
        assert entry["ok"], (name, entry)
        # What Gloo lacks on this torch is counted as not supported (docs/torch-versions.md).
        assert entry["skipped"] is (alone or _operation(name) in _gloo_lacks()), (name, entry)
    for dtype in check.DTYPES:
        for op in (
            "all_reduce sum",
            "all_reduce max",
            "all_reduce min",
            "broadcast",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "send/recv ring",
        ):
            assert f"{op} {dtype}" in checks
    assert {"all_gather_object", "barrier", "all_reduce avg float32"} <= set(checks)
    assert "all_reduce avg int64" not in checks  # not defined for integers, so not claimed
    if nproc == 1:  # a one-rank collective moves nothing: no sweep, a device copy instead
        assert report["bandwidth"] == [] and report["device_copy"]["gbps"] > 0
        return
    assert report["device_copy"] is None
    swept = [(b["op"], b["bytes"]) for b in report["bandwidth"]]
    assert [s for op, s in swept if op == "all_reduce"] == [1024, 2048, 4096, 8192]
    assert len([s for op, s in swept if op == "all_gather"]) == 4


@pytest.fixture(scope="module")
def two_ranks() -> dict[str, Any]:
    result = run_cli("check", "--json", *QUICK)
    assert result.returncode == 0, result.stderr
    return _report(result)


@pytest.mark.slow
def test_json_report_has_the_documented_keys_and_types(two_ranks: dict[str, Any]) -> None:
    report = two_ranks
    assert isinstance(report["ok"], bool)
    assert isinstance(report["world_size"], int) and report["world_size"] == 2
    assert isinstance(report["accelerator"], str) and isinstance(report["backend"], str)
    assert isinstance(report["init_seconds"], float) and report["init_seconds"] > 0
    for entry in report["checks"]:
        assert {"name", "ok", "skipped", "detail"} <= set(entry)
        assert isinstance(entry["name"], str) and isinstance(entry["detail"], str)
        assert isinstance(entry["ok"], bool) and isinstance(entry["skipped"], bool)
    for row in report["bandwidth"]:
        assert {"op", "bytes", "dtype", "time_us", "algbw_gbps", "busbw_gbps"} <= set(row)
        assert isinstance(row["bytes"], int) and row["dtype"] == "float32"
        assert all(isinstance(row[k], float) for k in ("time_us", "algbw_gbps", "busbw_gbps"))


@pytest.mark.slow
def test_bandwidth_follows_the_nccl_tests_definitions(two_ranks: dict[str, Any]) -> None:
    n = two_ranks["world_size"]
    for row in two_ranks["bandwidth"]:
        algbw = row["bytes"] / (row["time_us"] * 1e-6) / 1e9
        assert row["algbw_gbps"] == pytest.approx(algbw, rel=1e-3, abs=1e-6)
        factor = 2 * (n - 1) / n if row["op"] == "all_reduce" else (n - 1) / n
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, rel=1e-3, abs=1e-6)
        if row["op"] == "all_gather":  # bytes = the total output: whole float32 elements per rank
            assert row["bytes"] % (4 * n) == 0


@pytest.mark.slow
def test_text_report_shows_each_step_an_aligned_table_and_the_verdict() -> None:
    result = run_cli("check", *QUICK)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for step in (
        "[1/4] environment: cpu with gloo",
        "[2/4] init:",
        "[3/4] correctness:",
        "[4/4] bandwidth:",
    ):
        assert any(line.startswith(step) for line in lines), step
    header = next(line for line in lines if "busbw (GB/s)" in line and "size" in line)
    rows = [
        line
        for line in lines
        if line.strip().startswith(("all_reduce ", "all_gather ")) and "KiB" in line
    ]
    assert len(rows) == 8
    assert {len(row) for row in rows} == {len(header)}  # right-aligned columns end together
    assert lines[-1].startswith("verdict: PASSED")
    assert "Traceback" not in result.stderr


# -- one rank ----------------------------------------------------------------------------------

#: Counted nouns in check's text, which must be singular after a count of one.
_PLURAL_AFTER_ONE = re.compile(r"\b1 (ranks|nodes|GPUs|devices|cores|sizes|checks|links|copies)\b")


def test_one_rank_reports_a_labelled_device_copy_and_no_collective_bandwidth() -> None:
    text = run_cli("check", "--nproc", "1", *QUICK)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert not [line for line in lines if "busbw" in line or "algbw" in line]
    assert any(
        line.startswith("[4/4] bandwidth: none measured with one rank (a one-rank collective ")
        for line in lines
    )
    (copy_line,) = [line for line in lines if line.startswith("      device memory copy, read+")]
    assert "8 KiB on cpu, 2 copies after 1 warm-up" in copy_line  # --max-bytes caps the buffer
    assert "bytes read + bytes written per second" in copy_line
    assert "not a collective bandwidth" in copy_line
    (verdict,) = [line for line in lines if line.startswith("verdict:")]
    assert verdict.startswith("verdict: PASSED (")
    assert "device memory copy, read+write: " in verdict
    assert "one rank: no collective bandwidth" in verdict and "peak busbw" not in verdict
    assert "cpu with gloo, 1 rank;" in verdict and "1 of 1 node passing" in verdict
    assert _PLURAL_AFTER_ONE.findall(text.stdout) == []

    result = run_cli("check", "--nproc", "1", "--json", *QUICK)
    assert result.returncode == 0, result.stderr
    report = _report(result)
    assert report["bandwidth"] == [] and report["misses"] == []
    copied = report["device_copy"]
    assert (copied["what"], copied["device"], copied["bytes"]) == (
        "device memory copy, read+write",
        "cpu",
        8192,
    )
    assert copied["bytes_counted"] == 2 * copied["bytes"]
    assert copied["counts"].startswith("bytes read + bytes written per second")
    assert (copied["iters"], copied["warmup"]) == (2, 1)
    assert copied["gbps"] == pytest.approx(
        copied["bytes_counted"] / copied["seconds"] / 1e9, rel=1e-3
    )
    # The correctness checks still ran, every one of them.
    assert len(report["checks"]) == 31 and all(c["ok"] for c in report["checks"])


def test_one_rank_under_a_launcher_measures_the_device_copy_too() -> None:
    result = run_cli("check", "--json", *QUICK, env={"RANK": "0", "WORLD_SIZE": "1"})
    assert result.returncode == 0, result.stderr
    report = _report(result)
    assert (report["launcher"], report["world_size"], report["bandwidth"]) == ("env", 1, [])
    assert report["device_copy"]["bytes"] == 8192


@pytest.mark.parametrize("flag", ["--min-busbw", "--baseline"])
def test_one_rank_does_not_judge_flags_of_a_collective_bandwidth_and_says_so(
    flag: str, tmp_path: Path
) -> None:
    # A prolog shared by 1-GPU and 8-GPU nodes passes --min-busbw to both: the 1-GPU node must
    # not fail (and be drained) for a bandwidth it cannot have.
    baseline = tmp_path / "baseline.json"
    row = {"op": "all_reduce", "bytes": 1024, "busbw_gbps": 1.0}
    baseline.write_text(json.dumps({"world_size": 2, "bandwidth": [row]}))
    value = str(baseline) if flag == "--baseline" else "5"
    result = run_cli("check", "--nproc", "1", *QUICK, flag, value)
    assert result.returncode == 0, result.stderr
    assert f"not judged: {flag}: one rank has no collective bandwidth" in result.stdout


def test_one_rank_check_refuses_only_plot_and_passes_two_ranks() -> None:
    from accelbackends.cli.check.options import check_one_rank
    from accelbackends.cli.check.thresholds import Floor
    from accelbackends.plugin.errors import ConfigError

    options = _options(min_busbw=(Floor(None, 5.0, "--min-busbw"),), plot="a.svg")
    with pytest.raises(ConfigError, match=r"^--plot needs a collective bandwidth"):
        check_one_rank(options, 1)
    assert check_one_rank(options, 2) is options  # two ranks measure one: nothing changes
    judged = check_one_rank(_options(min_busbw=(Floor(None, 5.0, "--min-busbw"),)), 1)
    assert judged.min_busbw == ()
    assert judged.not_judged == ("--min-busbw: one rank has no collective bandwidth",)


def _options(**fields: Any) -> Any:
    from accelbackends.cli.check.options import Options

    base = {
        "min_bytes": 0,
        "max_bytes": None,
        "iters": None,
        "warmup": 2,
        "timeout": 60.0,
        "rendezvous_timeout": None,
        "json": False,
        "plot": None,
    }
    return Options(**(base | fields))


def test_a_one_rank_report_is_refused_as_a_baseline(tmp_path: Path) -> None:
    baseline = tmp_path / "one.json"
    baseline.write_text(json.dumps({"world_size": 1, "bandwidth": [], "device_copy": {}}))
    result = run_cli("check", "--baseline", str(baseline))
    assert result.returncode == 2
    assert f"--baseline={baseline} is a run of 1 rank, which measures no collective" in (
        result.stderr
    )


def test_measure_copy_counts_the_bytes_read_and_written_on_the_device() -> None:
    import torch

    from accelbackends.cli.check.devicecopy import copy_size, measure_copy

    measured = measure_copy(torch.device("cpu"), 1 << 20, iters=3, warmup=1)
    assert (measured.device, measured.nbytes, measured.iters, measured.warmup) == (
        "cpu",
        1 << 20,
        3,
        1,
    )
    assert measured.seconds > 0 and measured.counted == 2 << 20
    assert measured.rate == pytest.approx((2 << 20) / measured.seconds)
    assert measured.as_json()["what"] == "device memory copy, read+write"
    assert (copy_size("cuda"), copy_size("cpu"), copy_size("cuda", quick=True)) == (
        256 << 20,
        64 << 20,
        128 << 20,
    )
    assert copy_size("cpu", quick=True) == 32 << 20 and copy_size("cpu", cap=4096) == 4096
    with pytest.raises(ValueError, match="use nbytes >= 1, iters >= 1 and warmup >= 0"):
        measure_copy(torch.device("cpu"), 0)


# -- under a launcher ---------------------------------------------------------------------------


def _torchrun_check(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 2 -m accelbackends check ARGS``."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    return subprocess.run(
        [*torchrun, "2", "-m", "accelbackends", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_under_torchrun_rank_zero_prints_the_only_report() -> None:
    result = _torchrun_check("--json", *QUICK, env=_child_env())
    assert result.returncode == 0, result.stderr
    report = _report(result)  # one object: the other rank printed nothing
    assert (report["launcher"], report["world_size"], report["ok"]) == ("torchrun", 2, True)


@pytest.mark.slow
def test_under_torchrun_a_dead_rank_still_gives_one_json_object_with_the_passed_checks(
    fake_comm: Path,
) -> None:
    env = _child_env(ACCELBACKENDS_BACKEND="dies", PYTHONPATH=str(fake_comm))
    result = _torchrun_check("--json", "--timeout", "10", *QUICK, env=env)
    assert result.returncode != 0
    assert result.stdout.strip(), result.stderr
    report = _report(result)  # exactly one object, rank 0's, though rank 1 died
    assert report["ok"] is False and report["error"]
    assert report["launcher"] == "torchrun" and [r["rank"] for r in report["ranks"]] == [0, 1]


def test_nproc_under_a_launcher_is_bad_input() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "1"}
    result = run_cli("check", "--nproc", "2", *QUICK, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "accelbackends: error: --nproc=2 cannot be used under env, which started 1 rank; "
        "the launcher decides how many ranks run"
    ]


# -- bad input -----------------------------------------------------------------------------------


def test_forcing_a_backend_the_accelerator_lacks_exits_2_with_one_line() -> None:
    result = run_cli("check", env={"ACCELBACKENDS_BACKEND": "nccl"})
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "accelbackends: error: ACCELBACKENDS_BACKEND=nccl is not supported by accelerator "
        "'cpu'; it supports: gloo"
    ]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--nproc", "-1"], ["argument --nproc", "'-1'", "integer >= 1"]),
        (["--nproc", "two"], ["argument --nproc", "'two'", "integer >= 1"]),
        (["--iters", "0"], ["argument --iters", "'0'", "integer from 1 to 10000"]),
        (["--iters", "100000000"], ["argument --iters", "'100000000'", "leave --iters out"]),
        (["--warmup", "-2"], ["argument --warmup", "'-2'", "integer from 0 to 10000"]),
        (["--max-bytes", "12XB"], ["argument --max-bytes", "'12XB'", "64KiB"]),
        (["--min-bytes", "0"], ["argument --min-bytes", "'0'", "bytes >= 1"]),
        (["--timeout", "soon"], ["argument --timeout", "'soon'", "positive number of seconds"]),
        (
            ["--min-bytes", "2MiB", "--max-bytes", "1MiB"],
            ["--min-bytes=2 MiB", "--max-bytes=1 MiB", "--min-bytes <= --max-bytes"],
        ),
        (["--plot", "busbw.jpg"], ["--plot=busbw.jpg", ".png, .svg or .pdf"]),
        (["--min-busbw", "fast"], ["argument --min-busbw", "'fast'", "SIZE=GBPS"]),
        (["--baseline-fraction", "1.5"], ["argument --baseline-fraction", "'1.5'", "at most 1"]),
        (["--link-factor", "0"], ["argument --link-factor", "'0'", "greater than 0"]),
        (
            ["--failing-nodes", "/nonexistent/dir/f"],
            ["--failing-nodes=/nonexistent/dir/f", "does not exist"],
        ),
        (
            ["--baseline", "/nonexistent/b.json"],
            ["--baseline=/nonexistent/b.json", "cannot read it"],
        ),
    ],
)
def test_bad_flag_exits_2_naming_the_flag_the_value_and_what_is_accepted(
    flags: list[str], expected: list[str]
) -> None:
    result = run_cli("check", *flags)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for part in expected:
        assert part in lines[0]


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is not None,
    reason="matplotlib is installed here",
)
def test_plot_without_matplotlib_exits_2_saying_how_to_install_it(tmp_path: Path) -> None:
    result = run_cli("check", "--plot", str(tmp_path / "busbw.png"))
    assert result.returncode == 2
    assert "needs matplotlib" in result.stderr and "pip install matplotlib" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed (it is optional)",
)
def test_plot_writes_the_image(tmp_path: Path) -> None:
    target = tmp_path / "busbw.png"
    result = run_cli("check", "--plot", str(target), *QUICK)
    assert result.returncode == 0, result.stderr
    assert target.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("64KiB", 65536),
        ("64k", 65536),
        ("64 KB", 65536),
        ("1MiB", 1 << 20),
        ("1.5MiB", 3 << 19),
        ("1GiB", 1 << 30),
        ("2b", 2),
    ],
)
def test_sizes_accept_integers_and_binary_units(text: str, expected: int) -> None:
    assert check.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "0", "0.5", "1.2KiB0", "64 XB", "KiB"])
def test_sizes_reject_what_is_not_a_whole_positive_byte_count(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="64KiB"):
        check.parse_size(text)


def test_bus_bandwidth_factors_are_those_of_nccl_tests() -> None:
    assert check.bus_bandwidth("all_reduce", 8.0, 4) == pytest.approx(8.0 * 2 * 3 / 4)
    assert check.bus_bandwidth("all_gather", 8.0, 4) == pytest.approx(8.0 * 3 / 4)
    assert check.bus_bandwidth("all_reduce", 8.0, 1) == 0.0


def test_building_the_parser_and_importing_check_do_not_import_torch() -> None:
    code = (
        "import sys, accelbackends.cli.main as cli; cli._parser(); import accelbackends.cli.check; "
        "sys.exit('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], env=_child_env(), check=False)
    assert result.returncode == 0


# -- misbehaving backends (the fake plugin) -------------------------------------------------------


@pytest.mark.slow
def test_operation_the_backend_does_not_support_is_skipped_not_passed(fake_comm: Path) -> None:
    result = run_cli("check", "--json", *QUICK, pythonpath=fake_comm)
    assert result.returncode == 0, result.stderr
    report = _report(result)
    assert (report["accelerator"], report["backend"], report["ok"]) == ("fakecomm", "partial", True)
    checks = _checks(report)
    for dtype in check.DTYPES:
        skipped = checks[f"all_to_all {dtype}"]
        assert (skipped["ok"], skipped["skipped"]) == (True, True)
        assert skipped["detail"].startswith("not supported by partial")
        assert checks[f"all_gather {dtype}"]["skipped"] is False
    assert sum(c["skipped"] for c in report["checks"]) == 3


@pytest.mark.slow
def test_wrong_values_on_one_rank_fail_naming_the_check_and_the_rank(fake_comm: Path) -> None:
    result = run_cli("check", *QUICK, pythonpath=fake_comm, env={"ACCELBACKENDS_BACKEND": "lying"})
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    verdict = next(line for line in lines if line.startswith("verdict: "))
    assert verdict.startswith("verdict: FAILED: all_reduce sum float32 on rank 1, ")
    # The one host is the failing node; the failed checks are not repeated as culprit lines.
    assert lines[lines.index(verdict) + 1 :] == [
        f"failing nodes (1 of 1): {socket.gethostname()}",
        "passing nodes (0 of 1): -",
    ]
    assert "3 failed" in verdict  # the sums in each dtype; max, min and the rest still pass
    assert "FAILED all_reduce sum (float32, bfloat16): rank 1: length 1, element 0" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_rank_that_dies_ends_the_run_on_every_rank_with_exit_1_naming_it(
    fake_comm: Path,
) -> None:
    # run_cli's own limit is the hang guard.
    result = run_cli(
        "check", "--json", *QUICK, pythonpath=fake_comm, env={"ACCELBACKENDS_BACKEND": "dies"}
    )
    assert result.returncode == 1
    # What the rank wrote on stderr reaches the user once, as it was written; then the error.
    said, line = result.stderr.strip().splitlines()
    assert said == "fakecomm: rank 1 gives up in broadcast"
    # The death first, with its exit status and its last words; the survivor's lost contact
    # as its consequence.
    death = (
        "rank 1 of 2 exited with code 3 without reporting a result; its last stderr lines: "
        "fakecomm: rank 1 gives up in broadcast"
    )
    assert line.startswith(f"accelbackends: error: {death}; rank 0 lost contact with the "), line
    assert line.endswith(" — a consequence of rank 1's death"), line
    report = _report(result)  # still exactly one JSON object, saying what happened
    assert report["ok"] is False and report["error"] == line.removeprefix("accelbackends: error: ")
    pid = next(r["pid"] for r in report["ranks"] if r["rank"] == 1)
    assert report["culprits"] == [
        {
            "kind": "rank",
            "hosts": [socket.gethostname()],
            "ranks": [1],
            "reason": f"exited with code 3 without reporting a result (pid {pid}); its last "
            "stderr lines: fakecomm: rank 1 gives up in broadcast",
        }
    ]
    assert report["failing_nodes"] == [socket.gethostname()]


#: Where tests/dying.py is, for the ranks that import it.
_TESTS = str(Path(__file__).parents[2])


@pytest.mark.slow
@pytest.mark.parametrize("json_report", [True, False], ids=["json", "text"])
def test_rank_killed_by_a_signal_whose_end_comes_late_is_named_first_not_its_survivor(
    fake_comm: Path, json_report: bool
) -> None:
    """Rank 0 dies by SIGSEGV in the send/recv ring and its end reaches the parent seconds
    after rank 1 reported losing contact (as a CUDA rank's does on a GPU node): the parent
    waits for that end instead of naming the survivor."""
    result = run_cli(
        "check",
        *(("--json",) if json_report else ()),
        *QUICK,
        pythonpath=fake_comm,
        env={"ACCELBACKENDS_BACKEND": "crashes", "PYTHONPATH": _TESTS},
    )
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    death = "rank 0 of 2 was killed by SIGSEGV without reporting a result"
    assert line.startswith(f"accelbackends: error: {death}; rank 1 lost contact "), line
    assert "send/recv ring" in line and line.endswith("a consequence of rank 0's death"), line
    if json_report:
        report = _report(result)
        assert report["error"] == line.removeprefix("accelbackends: error: ")
        (culprit,) = report["culprits"]
        assert (culprit["kind"], culprit["ranks"]) == ("rank", [0])
        assert culprit["reason"].startswith("was killed by SIGSEGV without reporting a result")


@pytest.mark.slow
def test_rank_that_stops_answering_is_named_and_the_passed_checks_stay_in_the_json(
    fake_comm: Path,
) -> None:
    result = run_cli(
        "check",
        "--json",
        "--timeout",
        "8",
        *QUICK,
        pythonpath=fake_comm,
        env={"ACCELBACKENDS_BACKEND": "stops"},
        timeout=120,
    )
    assert result.returncode == 1
    report = _report(result)
    assert report["ok"] is False
    assert report["error"].startswith("rank 1 (silent for ")
    assert "stopped answering" in report["error"]
    assert result.stderr.strip().splitlines()[-1] == f"accelbackends: error: {report['error']}"
    # The checks before the stop are still reported, as are who ran where.
    checks = _checks(report)
    assert checks["all_reduce sum float32"]["ok"] is True and len(checks) > 20
    assert [b["bytes"] for b in report["bandwidth"]] == [1024]
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["hosts"] and report["versions"]["accelbackends"] == accelbackends.__version__


@pytest.mark.slow
def test_rank_that_hangs_is_stopped_by_the_timeout(fake_comm: Path) -> None:
    result = run_cli(
        "check",
        "--timeout",
        "2",
        *QUICK,
        pythonpath=fake_comm,
        env={"ACCELBACKENDS_BACKEND": "hangs"},
        timeout=60,
    )
    assert result.returncode == 1
    assert "rank 1: check 'broadcast float32' did not finish within 4 s" in result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "accelbackends: error: rank 1 of 2 exited with code 1 without reporting a result"
        )
    )


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_exits_130() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "accelbackends", "check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(),
        start_new_session=True,
    )
    assert process.stdout is not None
    for line in process.stdout:  # interrupt once the ranks are running collectives
        if line.startswith("[3/4]"):
            break
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130
    assert stderr.strip().splitlines() == ["accelbackends: interrupted"]
    assert _group_is_gone(process.pid)


def _group_is_gone(group: int, limit: float = 60) -> bool:
    """Whether every process of ``group`` has exited; the ranks are reaped by their parent
    before it exits, so this is a hang guard, not a race: it waits at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while True:
        left = subprocess.run(["pgrep", "-g", str(group)], capture_output=True, text=True)
        if left.stdout == "" or time.monotonic() > deadline:
            return left.stdout == ""
        time.sleep(0.1)


def _env_ranks(site: Path, backend: str, *args: str) -> list[subprocess.Popen[str]]:
    """Two plain env:// ranks of ``accelbackends check`` (RANK, WORLD_SIZE, MASTER_*), started
    here as a user's launcher would; this process is their parent, not check's."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    ranks = []
    for rank in range(2):
        env = _child_env(
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            ACCELBACKENDS_BACKEND=backend,
            PYTHONPATH=os.pathsep.join([str(site), _TESTS]),
        )
        ranks.append(
            subprocess.Popen(
                [sys.executable, "-m", "accelbackends", "check", *args, *QUICK],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return ranks


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "dead", "how"), [("dies", 1, 3), ("crashes", 0, -signal.SIGSEGV)]
)
def test_env_rank_that_lost_contact_names_the_peer_whose_process_ended_on_its_host(
    fake_comm: Path, backend: str, dead: int, how: int
) -> None:
    """No parent of the dead rank is check's: the survivor says which peer's process has
    ended, by pid, and leaves the exit status to the launcher (it has no way to know it)."""
    ranks = _env_ranks(fake_comm, backend, "--json")
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    survivor = 1 - dead
    assert ranks[dead].returncode == how
    assert ranks[survivor].returncode == 1
    line = outputs[survivor][1].strip().splitlines()[-1]
    pid = ranks[dead].pid
    # Its sockets closed in its exit: seen while it ends (a core dump, a teardown) or after.
    state = "has ended" if f"pid {pid} on this host) has ended" in line else "is ending"
    assert line.startswith(
        f"accelbackends: error: rank {dead} (pid {pid} on this host) {state}; its launcher "
        f"has its exit status; rank {survivor} lost contact with the other ranks while "
    ), line
    assert line.endswith(f" — a consequence of rank {dead} ending"), line
    assert "exit code" not in line and "SIGSEGV" not in line  # not known to the survivor
    if survivor == 0:  # rank 0 reports: its JSON holds the peer as the culprit
        report = json.loads(outputs[0][0])
        assert report["culprits"] == [
            {
                "kind": "rank",
                "hosts": [socket.gethostname()],
                "ranks": [dead],
                "reason": f"{state} (pid {pid} on this host); its launcher has its exit status",
            }
        ]
        assert report["failing_nodes"] == [socket.gethostname()]


def test_send_recv_ring_over_gloo_skips_gpu_tensors_naming_why() -> None:
    # Gloo's point-to-point path aborts the process on a GPU tensor; its collectives do not.
    import types

    import torch

    from accelbackends.cli.check import collectives

    ctx = types.SimpleNamespace(world_size=2, rank=0, backend="gloo", device=torch.device("meta"))
    said = collectives._send_recv_ring(ctx, "float32", None)  # type: ignore[arg-type]
    assert said == "skipped: Gloo sends and receives host tensors only, not meta ones"


def _unshare_can_mount() -> str | None:
    """Why a private tmpfs cannot be mounted here (None where it can)."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"no user+mount namespace with tmpfs here: {probe.stderr.strip()}"
    return None


@pytest.mark.parametrize("free_inodes", [1, 2])
def test_check_with_a_full_tmpdir_names_tmpdir_the_folder_and_the_fix(
    tmp_path: Path, free_inodes: int
) -> None:
    """Before: with TMPDIR on a tmpfs with one inode left (enough for Python's test of the
    folder and check's progress file, not for spawn's folder), ``check`` ended in a traceback,
    ``OSError: [Errno 28] No space left on device``; with two left, "rank 1 of 2 raised
    DistStoreError: No space left on device" (the store file). A tmpfs in a private user and
    mount namespace (``unshare -rm``): nothing is mounted on the machine itself."""
    if (why := _unshare_can_mount()) is not None:
        pytest.skip(why)
    full = tmp_path / "full"
    full.mkdir()
    # nr_inodes counts the root folder: one more than the inodes left free.
    script = (
        f"mount -t tmpfs -o size=1m,nr_inodes={free_inodes + 1} tmpfs {full} && "
        f'exec "$0" -m accelbackends check --nproc 2 ' + " ".join(QUICK)
    )
    env = {**clean_environment(os.environ), "TMPDIR": str(full)}
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("accelbackends: error: cannot create "), error
    assert f"in the temp folder {full} (TMPDIR={str(full)!r}): No space left on device" in error
    assert error.endswith("or set TMPDIR to a folder of this user's with room"), error
