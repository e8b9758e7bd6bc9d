"""The cuda plugin on real GPUs: detection, binding and NCCL across every visible GPU.

Runs only where torch sees a CUDA (or ROCm) GPU; elsewhere each test is skipped with the reason.
Every multi-process test starts real ranks the way torchrun does.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import torch

from accelbackends import Registry
from accelbackends.accelerators import _nvml
from accelbackends.plugin import torchcompat
from accelbackends.plugin.types import Probe
from accelbackends.testing import launch_ranks
from accelbackends.testing.rank_program import parse

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"needs a CUDA or ROCm GPU; torch {torch.__version__} sees none here",
    ),
]


def gpus() -> int:
    return int(torch.cuda.device_count())


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELBACKENDS_")}
    env["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    env.update(extra)
    return env


def run(nprocs: int, *extra: str, **env: str) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "accelbackends.testing.rank_program", "--root", "/", *extra]
    results = launch_ranks(argv, nprocs, env=_env(**env), timeout=300)
    return [parse(result.stdout) | {"stderr": result.stderr[-3000:]} for result in results]


def test_detection_agrees_with_torch() -> None:
    status = {s.name: s for s in Registry(env=_env()).detect()}["cuda"]
    assert status.available, status.detection.reason
    assert status.detection.device_count == gpus()


@pytest.mark.skipif(bool(torch.version.hip), reason="NVML is NVIDIA's")
def test_nvml_lists_the_gpus_torch_sees_without_a_cuda_context() -> None:
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        pytest.skip("CUDA_VISIBLE_DEVICES hides GPUs from torch but not from NVML")
    report = _nvml.query(Probe(env={}))
    assert report.gpus is not None, report.error
    assert len(report.gpus) == gpus()
    assert all(gpu.uuid.startswith("GPU-") for gpu in report.gpus)


def test_nccl_across_every_visible_gpu_binds_local_rank_to_its_gpu() -> None:
    n = gpus()
    reports = run(n)
    total = float(n * (n + 1) // 2)
    for rank, report in enumerate(reports):
        assert "error" not in report, report
        assert report["accelerator"] == "cuda"
        assert report["process_group_backend"] == "cpu:gloo,cuda:nccl"
        assert report["device"] == f"cuda:{rank}"
        assert report["on_device"] is True
        assert (report["cpu_sum"], report["device_sum"]) == (total, total)
        assert report["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"


def test_eager_init_passes_device_id_and_still_communicates() -> None:
    n = gpus()
    for report in run(n, ACCELBACKENDS_EAGER_INIT="1"):
        assert "error" not in report, report
        assert report["device_sum"] == float(n * (n + 1) // 2)


_NCCL2 = pytest.mark.skipif(
    torchcompat.release() < torchcompat.NCCL2_FROM,
    reason=f"torch {torch.__version__}'s NCCL binds no GPU when the group is created (2.15 does)",
)


@_NCCL2
@pytest.mark.parametrize("eager", ["", "0"])
def test_torch_2_15_nccl_is_bound_to_the_gpu_accelbackends_bound(eager: str) -> None:
    """torch 2.15's ProcessGroupNCCL2 picks its GPU when the group is created: with device_id
    (the default) and without it (ACCELBACKENDS_EAGER_INIT=0, torch then reads LOCAL_RANK), it
    must be the one each rank was bound to, also with the visible GPUs listed in reverse."""
    n = gpus()
    reverse = ",".join(str(i) for i in reversed(range(n)))
    env = {"ACCELBACKENDS_EAGER_INIT": eager} if eager else {}
    for visible in ({}, {"CUDA_VISIBLE_DEVICES": reverse}):
        for rank, report in enumerate(run(n, **env, **visible)):
            assert "error" not in report, report
            assert report["device"] == f"cuda:{rank}"
            assert report["bound_device"] == report["device"], report
            assert report["device_sum"] == float(n * (n + 1) // 2)


def test_a_world_of_one_inits_lazily_and_makes_side_groups_on_its_gpu() -> None:
    """A one-rank job gets no device_id (deepspeedai/DeepSpeed#8248: CUDA error 600 where a
    side group was split from a bound one-rank group) and side groups still work."""
    (report,) = run(1, "--side-groups")
    assert "error" not in report, report
    assert report["device"] == "cuda:0" and report["device_sum"] == 1.0
    assert report["side_groups"] == {"alone": 1.0, "all": 1.0}, report


@pytest.mark.parametrize("eager", ["1", ""])
def test_side_groups_made_after_an_eager_init_communicate(eager: str) -> None:
    """new_group after a bound world group (ACCELBACKENDS_EAGER_INIT=1; on torch 2.15 the
    default) is split from it with ncclCommSplit: a group of rank 0 alone and one of every
    rank, made by every rank, all-reduce on each member's GPU (NVIDIA-NeMo/RL#3189 hung
    where only the members made the group)."""
    if not eager and torchcompat.release() < torchcompat.NCCL2_FROM:
        pytest.skip(f"torch {torch.__version__} binds the world group only with EAGER_INIT=1")
    n = gpus()
    env = {"ACCELBACKENDS_EAGER_INIT": eager} if eager else {}
    for rank, report in enumerate(run(n, "--side-groups", **env)):
        assert "error" not in report, report
        assert report["bound_device"] == report["device"], report
        alone = 1.0 if rank == 0 else None
        assert report["side_groups"] == {"alone": alone, "all": float(n * (n + 1) // 2)}


def test_one_gpu_made_visible_is_cuda_0_for_the_process() -> None:
    last = str(gpus() - 1)
    (report,) = run(1, CUDA_VISIBLE_DEVICES=last)
    assert "error" not in report, report
    assert report["device"] == "cuda:0"
    assert report["env"]["CUDA_VISIBLE_DEVICES"] == last


def test_gloo_override_communicates_gpu_tensors() -> None:
    n = gpus()
    for report in run(n, ACCELBACKENDS_BACKEND="gloo"):
        assert "error" not in report, report
        assert report["process_group_backend"] == "gloo"
        assert report["device_sum"] == float(n * (n + 1) // 2)


def test_more_ranks_than_gpus_fails_naming_both_numbers_and_sharing_opts_in() -> None:
    n = gpus()
    for report in run(n + 1):
        assert report["error"]["type"] == "ConfigError"
        visible = "1 GPU is visible" if n == 1 else f"{n} GPUs are visible"
        assert f"{n + 1} local ranks but only {visible}" in report["error"]["message"]
    shared = run(n + 1, ACCELBACKENDS_SHARE_DEVICES="1", ACCELBACKENDS_BACKEND="gloo")
    assert [r.get("device") for r in shared] == [f"cuda:{i % n}" for i in range(n + 1)]


def _nccl_version() -> str:
    from accelbackends.accelerators import cuda

    return cuda.nccl_version(torch.cuda.nccl.version())


_ONE_GPU = pytest.mark.skipif(
    torch.cuda.device_count() >= 2,
    reason="ranks share a GPU only where there are more ranks than GPUs: this node has "
    f"{torch.cuda.device_count()} GPUs, and one made visible per rank counts as one GPU each",
)


@_ONE_GPU
@pytest.mark.skipif(bool(torch.version.hip), reason="RCCL: the rule below is NCCL's")
def test_two_ranks_sharing_one_gpu_over_nccl_follow_ncclss_version() -> None:
    """Below NCCL 2.30 both ranks refuse before the rendezvous, naming NCCL's version; from
    2.30 NCCL_MULTI_RANK_GPU_ENABLE=1 is set and the collectives run on the shared GPU."""
    version = _nccl_version()
    reports = run(2, ACCELBACKENDS_SHARE_DEVICES="1")
    if tuple(int(part) for part in version.split(".")[:2]) < (2, 30):
        for report in reports:
            assert report["error"]["type"] == "ConfigError", report
            message = report["error"]["message"]
            assert f"NCCL {version} (torch.cuda.nccl.version()) allows one rank" in message
            assert "ACCELBACKENDS_BACKEND=gloo" in message
        return
    for report in reports:
        assert "error" not in report, report
        assert report["device"] == "cuda:0"
        assert report["env"]["NCCL_MULTI_RANK_GPU_ENABLE"] == "1"
        assert report["device_sum"] == 3.0
    for report in run(2, ACCELBACKENDS_SHARE_DEVICES="1", NCCL_MULTI_RANK_GPU_ENABLE="0"):
        assert "NCCL_MULTI_RANK_GPU_ENABLE=0 forbids" in report["error"]["message"], report


def test_a_gpu_listed_twice_is_refused_alike_by_info_and_init() -> None:
    """CUDA_VISIBLE_DEVICES=0,0 leaves CUDA no GPU (cudaGetDeviceCount fails with error 101):
    info shows cuda refused and selects nothing, and init() fails with the same message."""
    import json
    import subprocess

    twice = "lists '0' twice"
    env = _env(CUDA_VISIBLE_DEVICES="0,0")
    info = subprocess.run(
        [sys.executable, "-m", "accelbackends", "info", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert info.returncode == 2, info.stderr
    report = json.loads(info.stdout)
    (entry,) = [a for a in report["accelerators"] if a["name"] == "cuda"]
    assert twice in entry["refusal"]
    assert report["selected"]["accelerator"] is None
    assert twice in report["selected"]["error"]
    (rank,) = run(1, CUDA_VISIBLE_DEVICES="0,0")
    assert rank["error"]["type"] == "ConfigError", rank
    assert twice in rank["error"]["message"]


def test_the_process_group_string_as_backend_runs_nccl() -> None:
    n = gpus()
    for rank, report in enumerate(run(n, ACCELBACKENDS_BACKEND="cpu:gloo,cuda:nccl")):
        assert "error" not in report, report
        assert report["backend"] == "nccl"
        assert report["process_group_backend"] == "cpu:gloo,cuda:nccl"
        assert report["device"] == f"cuda:{rank}"
        assert (report["cpu_sum"], report["device_sum"]) == (n * (n + 1) / 2,) * 2


def test_check_with_gpu_tensors_over_gloo_on_one_shared_gpu_passes() -> None:
    # Two ranks on GPU 0 over Gloo: its send/recv takes host tensors only (a GPU tensor aborted
    # rank 0 with "writev ... Bad address"), so check skips that ring and says why.
    import json as _json
    import subprocess

    env = _env(ACCELBACKENDS_SHARE_DEVICES="1", ACCELBACKENDS_BACKEND="gloo")
    env["CUDA_VISIBLE_DEVICES"] = "0"
    done = subprocess.run(
        [sys.executable, "-m", "accelbackends", "check", "--nproc", "2", "--quick", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    report = _json.loads(done.stdout)
    assert done.returncode == 0, (report.get("error"), done.stderr[-2000:])
    ring = [c for c in report["checks"] if c["name"].startswith("send/recv ring")]
    assert ring and all("host tensors only" in c["detail"] for c in ring), ring


def _program(name: str, **env: str) -> dict[str, Any]:
    import json as _json
    import re
    import subprocess
    from pathlib import Path

    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("gpu_programs.py")), name],
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=300,
        check=False,
    )
    found = re.findall(r"^RESULT (.*)$", done.stdout, re.M)
    assert done.returncode == 0 and found, done.stdout[-2000:] + done.stderr[-4000:]
    return dict(_json.loads(found[-1]))


def _needs(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here (pip install -e '.[frameworks]')")


def test_one_rank_check_measures_the_device_copy_and_no_collective_bandwidth() -> None:
    import json as _json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "accelbackends", "check", "--nproc", "1", "--quick", "--json"],
        capture_output=True,
        text=True,
        env=_env(CUDA_VISIBLE_DEVICES="0"),
        timeout=300,
        check=False,
    )
    report = _json.loads(done.stdout)
    assert done.returncode == 0, (report.get("error"), done.stderr[-2000:])
    assert report["bandwidth"] == [] and report["device_copy"]["device"] == "cuda:0"
    # A copy moves real bytes: far above nothing, below what any HBM can do (10 TB/s).
    assert 10 < report["device_copy"]["gbps"] < 10_000, report["device_copy"]


def test_spawn_on_one_gpu_binds_cuda_0_and_communicates() -> None:
    assert _program("spawn", CUDA_VISIBLE_DEVICES="0")["returned"] == ["cuda:0 4"]


def test_a_rank_that_dies_on_the_gpu_is_named_first_with_its_signal() -> None:
    error = _program(
        "spawn-dies",
        CUDA_VISIBLE_DEVICES="0",
        ACCELBACKENDS_SHARE_DEVICES="1",
        ACCELBACKENDS_BACKEND="gloo",
    )["error"]
    assert error.startswith("rank 0 of 2 was killed by SIGSEGV"), error


def test_lightning_trains_on_the_gpu_through_the_environment_plugin() -> None:
    _needs("lightning")
    found = _program("lightning", CUDA_VISIBLE_DEVICES="0")
    assert (found["device"], found["world_size"]) == ("cuda:0", 1), found
    assert found["backend"] == "nccl", found


def test_accelerate_after_init_trains_on_the_gpu_accelbackends_bound() -> None:
    _needs("accelerate")
    found = _program("accelerate", CUDA_VISIBLE_DEVICES="0")
    assert found["device"] == found["ctx_device"] == found["parameters"] == "cuda:0", found
