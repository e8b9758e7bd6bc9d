"""The differences between the torch releases the package supports (2.4 to 2.15), as
`plugin.torchcompat` handles them, and what torch 2.15's NCCL would bind on the paths that need
no GPU.

The version-dependent answers are asserted for named versions; the ones that ask the installed
torch run on whichever torch the suite runs under (the CI leg `.ci/torch-versions.sh` runs them
on the oldest and the newest supported torch, CUDA builds on a node without a GPU).
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

import accelbackends
from accelbackends import ClusterInfo, InitError, Registry
from accelbackends.accelerators import cuda
from accelbackends.job import lifecycle
from accelbackends.plugin import OptionsRequest, torchcompat
from accelbackends.rendezvous.store import Rendezvous, host_loopback_store
from accelbackends.testing import FakeStack, launch_ranks
from accelbackends.testing.cluster import clean_environment
from accelbackends.testing.rank_program import parse

TORCH = str(torch.__version__)


def _cluster(rank: int = 0, local_rank: int = 0, world_size: int = 1) -> ClusterInfo:
    return ClusterInfo(
        launcher="test",
        rank=rank,
        world_size=max(world_size, rank + 1),
        local_rank=local_rank,
        local_world_size=max(local_rank + 1, 1),
    )


def _request(
    backend: str = "nccl",
    env: dict[str, str] | None = None,
    device: str = "cuda:1",
    cluster: ClusterInfo | None = None,
) -> OptionsRequest:
    return OptionsRequest(
        backend, device, timedelta(seconds=60), cluster or _cluster(1, 1, 2), env or {}
    )


# -- torch 2.15's NCCL: the GPU it binds when the group is created ---------------------------


def test_nccl2_binds_device_id_else_local_rank_else_global_rank_modulo_the_gpus() -> None:
    # distributed_c10d._nccl2_device in torch 2.15.0.
    pick = torchcompat.nccl_device_at_creation
    assert pick(device_id=3, env={"LOCAL_RANK": "1"}, rank=5, device_count=4) == 3
    assert pick(device_id=None, env={"LOCAL_RANK": "5"}, rank=0, device_count=4) == 1
    assert pick(device_id=None, env={}, rank=6, device_count=4) == 2


@pytest.mark.parametrize(
    ("backend", "version", "env", "binds"),
    [
        ("nccl", "2.15.0+cu132", {}, True),
        ("nccl2", "2.15.0", {}, True),
        ("nccl-lazy", "2.15.0", {}, True),
        ("nccl-legacy", "2.15.0", {}, False),
        ("nccl", "2.15.0", {"TORCH_DIST_USE_NCCL2": "0"}, False),
        ("nccl", "2.14.1+cu128", {}, False),
        ("nccl", "2.4.1+cu121", {}, False),
    ],
)
def test_which_nccl_binds_its_gpu_when_the_group_is_created(
    backend: str, version: str, env: dict[str, str], binds: bool
) -> None:
    assert torchcompat.nccl_binds_at_creation(backend, version, env) is binds


def test_torch_2_15_nccl_gets_the_bound_gpu_as_device_id() -> None:
    options = cuda.nccl_options(_request(), "2.15.0+cu132", device_count=2)
    assert options.process_group_backend == "cpu:gloo,cuda:nccl"
    assert options.device_id == "cuda:1"
    lazy = cuda.nccl_options(_request("nccl-lazy"), "2.15.0+cu132", device_count=2)
    assert (lazy.process_group_backend, lazy.device_id) == ("cpu:gloo,cuda:nccl-lazy", "cuda:1")


def test_legacy_nccl_keeps_lazy_init_on_every_torch() -> None:
    for version, backend, env in [
        ("2.13.0+cu126", "nccl", {}),
        ("2.15.0+cu132", "nccl-legacy", {}),
        ("2.15.0+cu132", "nccl", {"TORCH_DIST_USE_NCCL2": "0"}),
    ]:
        options = cuda.nccl_options(_request(backend, env), version, device_count=2)
        assert options.device_id is None, (version, backend, env)
        assert options.process_group_backend == f"cpu:gloo,cuda:{backend}"


def test_eager_init_off_on_torch_2_15_is_allowed_where_torch_picks_the_same_gpu() -> None:
    env = {cuda.EAGER_INIT: "0", "LOCAL_RANK": "1"}
    options = cuda.nccl_options(_request(env=env), "2.15.0+cu132", device_count=2)
    assert options.device_id is None


def test_eager_init_off_on_torch_2_15_refuses_when_torch_would_pick_another_gpu() -> None:
    # srun/mpirun set no LOCAL_RANK: torch 2.15 would take global rank 2 % 2 GPUs = cuda:0,
    # while local rank 1 was bound to cuda:1.
    request = _request(env={cuda.EAGER_INIT: "0"}, cluster=_cluster(rank=2, local_rank=1))
    with pytest.raises(InitError) as caught:
        cuda.nccl_options(request, "2.15.0+cu132", device_count=2)
    message = str(caught.value)
    assert "would take cuda:0 (global rank 2 modulo 2 GPUs)" in message
    assert "bound local rank 1 to cuda:1" in message
    assert "TORCH_DIST_USE_NCCL2=0" in message and cuda.EAGER_INIT in message


def test_a_world_of_one_on_torch_2_15_gets_no_device_id_where_torch_picks_the_bound_gpu() -> None:
    """Before: device_id went to init_process_group at world size 1 too, where eager init has
    no peer to connect to and has failed with CUDA error 600 (deepspeedai/DeepSpeed#8248)."""
    alone = _cluster(rank=0, local_rank=0, world_size=1)
    options = cuda.nccl_options(
        _request(device="cuda:0", cluster=alone), "2.15.0+cu132", device_count=2
    )
    assert options.device_id is None
    # ACCELBACKENDS_EAGER_INIT=1 still asks for it; a world of two still gets it by default.
    eager = _request(env={cuda.EAGER_INIT: "1"}, device="cuda:0", cluster=alone)
    assert cuda.nccl_options(eager, "2.15.0+cu132", device_count=2).device_id == "cuda:0"
    assert cuda.nccl_options(_request(), "2.15.0+cu132", device_count=2).device_id == "cuda:1"


def test_a_world_of_one_keeps_device_id_where_torch_would_pick_another_gpu() -> None:
    # LOCAL_RANK=1 left by the caller, the rank bound to cuda:0: without device_id torch 2.15
    # would take cuda:1, so device_id is the one way to the bound GPU (not a refusal, since
    # nobody asked for lazy init).
    alone = _cluster(rank=0, local_rank=0, world_size=1)
    request = _request(env={"LOCAL_RANK": "1"}, device="cuda:0", cluster=alone)
    assert cuda.nccl_options(request, "2.15.0+cu132", device_count=2).device_id == "cuda:0"


@pytest.mark.parametrize("backend", torchcompat.NCCL2_BACKENDS)
def test_torch_2_15_backend_names_are_refused_by_name_on_older_torch(backend: str) -> None:
    with pytest.raises(InitError, match=rf"torch 2\.13\.0\+cu126 has no '{backend}' backend"):
        cuda.nccl_options(_request(backend), "2.13.0+cu126", device_count=2)


def test_the_torch_2_15_nccl_names_are_valid_backends_of_the_cuda_accelerator() -> None:
    assert set(torchcompat.NCCL_BACKENDS) <= set(cuda.SPEC.backends)
    assert cuda.SPEC.default_backend == "nccl"


def test_local_rank_is_in_the_environment_when_init_process_group_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a launcher that sets RANK/WORLD_SIZE but no LOCAL_RANK, torch 2.15's NCCL would
    fall back to the global rank: init() exports LOCAL_RANK before the group is created, and a
    failed init() takes it back."""
    seen: dict[str, str | None] = {}

    def fake_meet(cluster: ClusterInfo, **_: Any) -> Rendezvous:
        store = dist.HashStore()
        return Rendezvous(store, store)

    def fake_init_process_group(**_: Any) -> None:
        seen["LOCAL_RANK"] = os.environ.get("LOCAL_RANK")
        raise RuntimeError("stopped here by the test")

    monkeypatch.setattr(lifecycle, "meet", fake_meet)
    monkeypatch.setattr(dist, "init_process_group", fake_init_process_group)
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
        "ACCELBACKENDS_ACCELERATOR": "cpu",
    }
    with pytest.raises(InitError, match="stopped here by the test"):
        accelbackends.init(registry=Registry(env=env))
    local_rank = Registry(env=env).cluster_environment().local_rank
    assert seen == {"LOCAL_RANK": str(local_rank)}
    assert "LOCAL_RANK" not in os.environ


def test_side_groups_made_by_every_rank_after_init_communicate_on_the_installed_torch() -> None:
    """new_group after init(): a group of rank 0 alone and one of every rank, each made by
    every rank as torch requires where the world group is bound (on a GPU: split from it with
    ncclCommSplit, tests/gpu), all-reduce on Gloo with the installed torch (2.4 to 2.15)."""
    argv = [sys.executable, "-m", "accelbackends.testing.rank_program", "--side-groups"]
    env = {
        **clean_environment(os.environ),
        "ACCELBACKENDS_ACCELERATOR": "cpu",
        "ACCELBACKENDS_DISABLE": "cuda,hpu,xpu",
    }
    results = launch_ranks(argv, 2, env=env, timeout=120)
    reports = [parse(result.stdout) for result in results]
    assert [r.get("side_groups") for r in reports] == [
        {"alone": 1.0, "all": 3.0},
        {"alone": None, "all": 3.0},
    ], [(r, result.stderr[-2000:]) for r, result in zip(reports, results, strict=True)]


# -- differences between torch 2.4 and 2.15 ---------------------------------------------------


def test_gloo_refusing_avg_on_old_torch_counts_as_unsupported_not_as_a_failure() -> None:
    # torch 2.4 to 2.6; Gloo's all_to_all before 2.12.
    assert torchcompat.unsupported_by_backend(RuntimeError("Cannot use ReduceOp.AVG with Gloo"))
    assert torchcompat.unsupported_by_backend(
        RuntimeError("ProcessGroupGloo does not support alltoall")
    )
    assert torchcompat.unsupported_by_backend(NotImplementedError("x"))
    assert not torchcompat.unsupported_by_backend(RuntimeError("Connection reset by peer"))


def test_a_busy_port_is_recognised_as_torch_2_4_and_2_15_word_it() -> None:
    said_by_2_4 = RuntimeError(
        "The server socket has failed to listen on any local network address. useIpv6: 0, "
        "code: -98, name: EADDRINUSE, message: address already in use"
    )
    assert torchcompat.address_in_use(said_by_2_4)
    assert not torchcompat.address_in_use(RuntimeError("Connection refused"))
    assert not torchcompat.address_in_use(ValueError("EADDRINUSE"))


def test_a_busy_port_is_recognised_on_the_installed_torch() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError) as caught:
            dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=5))
    assert torchcompat.address_in_use(caught.value), str(caught.value)


def test_sub_second_store_timeouts_are_whole_seconds_on_torch_before_2_13(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torchcompat, "release", lambda version=None: (2, 4))
    assert torchcompat.store_timeout(0.3) == timedelta(seconds=1)
    assert torchcompat.store_timeout(2.5) == timedelta(seconds=2.5)
    monkeypatch.setattr(torchcompat, "release", lambda version=None: (2, 15))
    assert torchcompat.store_timeout(0.3) == timedelta(seconds=0.3)


def test_a_loopback_store_on_a_listening_socket_works_on_the_installed_torch() -> None:
    # torch 2.4 to 2.8 need the legacy server for this (the libuv one refuses the socket).
    store, port = host_loopback_store(1, 10)
    client = dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=10))
    client.set("key", "value")
    assert store.get("key") == b"value"


def test_xccl_availability_is_false_not_an_error_where_torch_has_no_xccl() -> None:
    expected = bool(getattr(dist, "is_xccl_available", lambda: False)())
    assert torchcompat.is_xccl_available() is expected


def test_group_timeout_is_read_on_the_installed_torch() -> None:
    # ProcessGroup.options exists up to 2.13; later only each backend's options.
    store = dist.HashStore()
    dist.init_process_group(
        "gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=77)
    )
    try:
        group = dist.distributed_c10d._get_default_group()
        assert torchcompat.group_timeout(group) == 77.0
    finally:
        dist.destroy_process_group()


def test_no_current_accelerator_device_where_torch_sees_no_device() -> None:
    """On a CUDA build of torch with no GPU or driver (the usual `pip install torch` on a CPU
    node) torch.accelerator still names cuda, and current_device_index() raises."""
    if torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()):
        pytest.skip(f"torch {TORCH} sees a device here; the test is for a node without one")
    assert torchcompat.current_accelerator_device() is None


def test_attach_on_a_torch_that_sees_no_device_describes_the_cpu_group() -> None:
    if torch.cuda.is_available():
        pytest.skip(f"torch {TORCH} sees a GPU here; the test is for a node without one")
    store = dist.HashStore()
    dist.init_process_group(
        "gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=50)
    )
    try:
        registry = Registry(env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"})
        ctx = accelbackends.attach(registry=registry)
    finally:
        dist.destroy_process_group()
    assert str(ctx.device) == "cpu"
    assert ctx.timeout == 50.0


def test_the_fake_xpu_torch_keeps_torchs_backend_entry_points(tmp_path: Any) -> None:
    """From torch 2.14 gloo, nccl and xccl are registered through the torch distribution's
    entry points; the fake XPU build's metadata, which shadows torch's, must carry them."""
    from importlib import metadata

    real = metadata.distribution("torch").read_text("entry_points.txt") or ""
    FakeStack(tmp_path / "site").xpu_torch()
    written = list((tmp_path / "site").glob("torch-*.dist-info"))
    assert len(written) == 1
    carried = (written[0] / "entry_points.txt").read_text() if real else ""
    assert carried == real


# -- what info and validation say about torch 2.15's NCCL -------------------------------------


def test_info_names_the_nccl_implementation_of_the_installed_torch() -> None:
    env: dict[str, str] = {}
    assert "ProcessGroupNCCL2 (TORCH_DIST_USE_NCCL2=0 for the legacy one): binds its GPU" in (
        torchcompat.nccl_note("nccl", "2.15.0+cu132", env) or ""
    )
    assert "legacy ProcessGroupNCCL" in (
        torchcompat.nccl_note("nccl", "2.15.0", {"TORCH_DIST_USE_NCCL2": "0"}) or ""
    )
    assert "ProcessGroupNCCLLazy" in (torchcompat.nccl_note("nccl-lazy", "2.15.0", env) or "")
    assert "uses the current device" in (torchcompat.nccl_note("nccl", "2.13.0", env) or "")
    assert (torchcompat.nccl_note("nccl2", "2.13.0", env) or "").startswith(
        "error: torch 2.13.0 has no 'nccl2' backend"
    )
    assert torchcompat.nccl_note("gloo", "2.15.0", env) is None


@pytest.mark.parametrize("value", ["off", "false", ""])
def test_a_nccl2_switch_torch_would_read_as_on_is_refused(value: str) -> None:
    problem = torchcompat.nccl_switch_problem({"TORCH_DIST_USE_NCCL2": value})
    assert problem is not None and "torch reads only '0' as off" in problem
    with pytest.raises(accelbackends.ConfigError, match=f"TORCH_DIST_USE_NCCL2='{value}'"):
        cuda.nccl_options(_request(env={"TORCH_DIST_USE_NCCL2": value}), "2.15.0", device_count=2)
    for fine in ("0", "1"):
        assert torchcompat.nccl_switch_problem({"TORCH_DIST_USE_NCCL2": fine}) is None


def test_info_refuses_a_nccl2_switch_torch_would_misread(cli: Any) -> None:
    result = cli("info", env={"TORCH_DIST_USE_NCCL2": "off"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "TORCH_DIST_USE_NCCL2='off': torch reads only '0' as off" in result.stderr
