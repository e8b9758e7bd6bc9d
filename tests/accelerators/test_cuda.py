"""The cuda plugin (NVIDIA and ROCm) without a GPU: probe, reasons, binding and NCCL options."""

from __future__ import annotations

import dataclasses
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from accelbackends import Registry, select
from accelbackends.accelerators import cuda, xpu
from accelbackends.accelerators._nvml import NVML
from accelbackends.plugin.errors import ConfigError, InitError, SelectionError, first_line
from accelbackends.plugin.packages import Installed, TorchBuild
from accelbackends.plugin.types import (
    AcceleratorStatus,
    BindRequest,
    ClusterInfo,
    Detection,
    OptionsRequest,
)
from accelbackends.registry import defaults
from accelbackends.testing import FakeGpu, FakeStack, FakeTree, nvml

UUID_A = "GPU-11111111-2222-3333-4444-555555555555"
UUID_B = "GPU-99999999-8888-7777-6666-555555555555"
MIG_A = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
FAKE_NVML = {NVML: nvml.MODULE}


@pytest.fixture(autouse=True)
def _fresh_fake_nvml() -> Iterator[None]:
    nvml.reset()
    yield
    nvml.reset()


def torch_site(tmp_path: Path, version: str) -> tuple[str, ...]:
    """Package metadata in which the installed torch is ``version``."""
    stack = FakeStack(tmp_path / f"site-{version}").installed("torch", version, "torch")
    return (str(stack.directory),)


def detect(tree: FakeTree, env: dict[str, str], packages: tuple[str, ...]) -> Detection:
    return cuda.SPEC.detect(tree.probe(env, packages))


def test_nothing_found_says_what_was_looked_at(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root")
    result = detect(tree, {NVML: "off"}, torch_site(tmp_path, "2.13.0+cpu"))
    assert not result.available
    assert "no NVIDIA GPU" in result.reason and "no AMD GPU (no /dev/kfd)" in result.reason
    assert "no /proc/driver/nvidia/gpus or /dev/nvidia*" in result.reason
    assert "torch 2.13.0+cpu has no GPU support" in result.reason


def test_gpus_with_a_cpu_torch_say_to_install_a_cuda_build(tmp_path: Path) -> None:
    nvml.configure([FakeGpu(UUID_A), FakeGpu(UUID_B)])
    tree = FakeTree(tmp_path / "root")
    result = detect(tree, FAKE_NVML, torch_site(tmp_path, "2.13.0+cpu"))
    assert not result.available
    assert result.reason.startswith("2 NVIDIA GPUs via NVML (NVIDIA H100 80GB HBM3")
    assert "but torch 2.13.0+cpu has no CUDA or ROCm support — install a CUDA build of torch" in (
        result.reason
    )


def test_nvml_gpus_with_a_cuda_torch_are_available(tmp_path: Path) -> None:
    nvml.configure([FakeGpu(UUID_A), FakeGpu(UUID_B)], driver="560.35.03")
    tree = FakeTree(tmp_path / "root")
    result = detect(tree, FAKE_NVML, torch_site(tmp_path, "2.13.0+cu126"))
    assert result.available
    assert result.device_count == 2
    assert "driver 560.35.03" in result.reason
    assert "torch 2.13.0+cu126 (CUDA 12.6)" in result.reason


def test_without_nvml_the_proc_listing_counts_the_gpus(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").nvidia(4)
    result = detect(tree, {NVML: "off"}, torch_site(tmp_path, "2.13.0+cu126"))
    assert (result.available, result.device_count) == (True, 4)
    assert "4 NVIDIA GPUs in /proc/driver/nvidia/gpus" in result.reason
    assert f"NVML is turned off by {NVML}=off" in result.reason


def test_without_proc_the_device_nodes_count_the_gpus(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").nvidia(2, proc=False)
    result = detect(tree, {NVML: "off"}, torch_site(tmp_path, "2.13.0+cu126"))
    assert (result.available, result.device_count) == (True, 2)
    assert "as /dev/nvidia* device nodes" in result.reason


def test_real_nvml_is_not_asked_for_a_fake_root(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").nvidia(1)
    result = detect(tree, {}, torch_site(tmp_path, "2.13.0+cu126"))
    assert result.available
    assert "NVML not asked for a probe root other than /" in result.reason


def test_without_an_nvidia_driver_auto_loads_neither_pynvml_nor_ctypes(tmp_path: Path) -> None:
    # In a fresh process: the question is what the probe imports.
    code = (
        "import sys; from accelbackends.accelerators import _nvml; "
        "from accelbackends.plugin import Probe; "
        "_nvml.DRIVER_SIGNS = (sys.argv[1],); r = _nvml.query(Probe({})); "
        "print(r.error); print('pynvml' in sys.modules, 'ctypes' in sys.modules)"
    )
    missing = str(tmp_path / "no-nvidiactl")
    done = subprocess.run(
        [sys.executable, "-c", code, missing], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [f"no NVIDIA driver: no {missing}", "False False"]


def test_where_the_driver_shows_itself_auto_asks_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelbackends.accelerators import _nvml
    from accelbackends.plugin import Probe

    sign = tmp_path / "nvidiactl"
    sign.touch()
    monkeypatch.setattr(_nvml, "DRIVER_SIGNS", (str(sign),))
    report = _nvml.query(Probe({}))
    # Past the gate: pynvml or the library answers: with the GPUs on a GPU node, else with why
    # not (not installed, or no driver to talk to).
    assert not report.error.startswith("no NVIDIA driver"), report.error
    if report.gpus is None:
        assert "libnvidia-ml.so.1 not found" in report.error or "NVML (" in report.error, (
            report.error
        )


def test_nvml_failure_is_reported_beside_the_gpus_the_driver_lists(tmp_path: Path) -> None:
    nvml.configure([FakeGpu(UUID_A)], failure="Driver/library version mismatch")
    tree = FakeTree(tmp_path / "root").nvidia(1)
    result = detect(tree, FAKE_NVML, torch_site(tmp_path, "2.13.0+cu126"))
    assert result.available
    assert "Driver/library version mismatch" in result.reason


def test_nvml_setting_that_is_not_a_module_name_is_explained(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root")
    result = detect(tree, {NVML: "my nvml"}, torch_site(tmp_path, "2.13.0+cu126"))
    assert not result.available
    assert f"{NVML}='my nvml' is not valid; use auto, off, or the name of a module" in (
        result.reason
    )


def test_empty_cuda_visible_devices_hides_every_gpu(tmp_path: Path) -> None:
    nvml.configure([FakeGpu(UUID_A), FakeGpu(UUID_B)])
    env = {**FAKE_NVML, "CUDA_VISIBLE_DEVICES": ""}
    result = detect(FakeTree(tmp_path / "root"), env, torch_site(tmp_path, "2.13.0+cu126"))
    assert not result.available
    assert result.reason == "CUDA_VISIBLE_DEVICES='' hides all 2 NVIDIA GPUs"


@pytest.mark.parametrize(
    ("value", "shown"),
    [("1", 1), (f"{UUID_B},{UUID_A}", 2), ("GPU-1111", 1), (MIG_A, 1)],
)
def test_cuda_visible_devices_decides_how_many_gpus_are_shown(
    tmp_path: Path, value: str, shown: int
) -> None:
    nvml.configure([FakeGpu(UUID_A, mig=(MIG_A,)), FakeGpu(UUID_B)])
    env = {**FAKE_NVML, "CUDA_VISIBLE_DEVICES": value}
    result = detect(FakeTree(tmp_path / "root"), env, torch_site(tmp_path, "2.13.0+cu126"))
    assert (result.available, result.device_count) == (True, shown)
    assert f"CUDA_VISIBLE_DEVICES={value!r} shows {shown}" in result.reason


def test_an_entry_naming_no_gpu_hides_it_and_the_rest_as_cuda_does(tmp_path: Path) -> None:
    nvml.configure([FakeGpu(UUID_A), FakeGpu(UUID_B)])
    env = {**FAKE_NVML, "CUDA_VISIBLE_DEVICES": f"{UUID_A},GPU-dead,{UUID_B}"}
    result = detect(FakeTree(tmp_path / "root"), env, torch_site(tmp_path, "2.13.0+cu126"))
    assert (result.available, result.device_count) == (True, 1)
    assert "'GPU-dead' names no GPU on this node" in result.reason


def test_malformed_cuda_visible_devices_stays_available_so_init_refuses_it(
    tmp_path: Path,
) -> None:
    tree = FakeTree(tmp_path / "root").nvidia(2)
    env = {NVML: "off", "CUDA_VISIBLE_DEVICES": "0,one"}
    result = detect(tree, env, torch_site(tmp_path, "2.13.0+cu126"))
    assert result.available
    assert "CUDA_VISIBLE_DEVICES='0,one' is not valid" in result.reason
    assert "init() will refuse it" in result.reason


def test_amd_gpus_with_a_rocm_torch_are_available(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").amd(2)
    env = {NVML: "off", "ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "1"}
    result = detect(tree, env, torch_site(tmp_path, "2.5.1+rocm6.2"))
    assert (result.available, result.device_count) == (True, 1)
    assert "2 AMD GPUs via /sys/class/kfd; torch 2.5.1+rocm6.2 (ROCm 6.2)" in result.reason


def test_vendor_and_torch_build_that_do_not_match_say_which_build_to_install(
    tmp_path: Path,
) -> None:
    amd = detect(
        FakeTree(tmp_path / "amd").amd(1), {NVML: "off"}, torch_site(tmp_path, "2.13.0+cu126")
    )
    assert not amd.available
    assert "is a CUDA build — install a ROCm build of torch" in amd.reason
    nvidia = detect(
        FakeTree(tmp_path / "nv").nvidia(1), {NVML: "off"}, torch_site(tmp_path, "2.5.1+rocm6.2")
    )
    assert "is a ROCm build — install a CUDA build of torch" in nvidia.reason


def test_kfd_without_gpu_nodes_is_not_an_amd_gpu(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").write("/dev/kfd")
    result = detect(tree, {NVML: "off"}, torch_site(tmp_path, "2.5.1+rocm6.2"))
    assert not result.available
    assert "/dev/kfd exists but /sys/class/kfd lists no GPU node" in result.reason


def test_gpus_without_torch_say_torch_is_missing(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").nvidia(1)
    result = detect(tree, {NVML: "off"}, (str(tmp_path / "empty"),))
    assert not result.available
    assert "but torch is not installed" in result.reason


def test_integrated_intel_gpu_beside_nvidia_gpu_selects_cuda(tmp_path: Path) -> None:
    # A torch whose metadata does not tell its build: both plugins pass the torch check, so
    # the priority decides.
    nvml.configure([FakeGpu(UUID_A)])
    tree = FakeTree(tmp_path / "root").intel_gpu(integrated=True, driver="i915")
    probe = tree.probe(FAKE_NVML, torch_site(tmp_path, "2.13.0"))
    specs = [cuda.SPEC, xpu.make_spec(probe.packages)]
    candidates = [AcceleratorStatus(s, s.name, "", "", s.detect(probe)) for s in specs]
    assert all(c.available for c in candidates)
    choice = defaults.accelbackends_select_accelerator(candidates, {})
    assert choice is not None
    assert choice.accelerator == "cuda"
    assert "cuda 300, xpu 100" in choice.reason


# -- binding and options -------------------------------------------------------------------


def _cluster(local_rank: int = 0, local_world_size: int = 1) -> ClusterInfo:
    return ClusterInfo(
        launcher="test",
        rank=local_rank,
        world_size=local_world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
    )


def _options(backend: str = "nccl", env: dict[str, str] | None = None) -> OptionsRequest:
    return OptionsRequest(backend, "cuda:1", timedelta(seconds=60), _cluster(), env or {})


def test_binding_refuses_a_malformed_cuda_visible_devices() -> None:
    request = BindRequest(0, 1, _cluster(), {"CUDA_VISIBLE_DEVICES": "first"})
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES='first' is not valid"):
        cuda.SPEC.bind(request)


def test_binding_without_a_visible_gpu_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch shows no GPU (injected: on a GPU node the real torch would show one).
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    request = BindRequest(0, 1, _cluster(), {"CUDA_VISIBLE_DEVICES": "0"})
    with pytest.raises(
        ConfigError, match=r"CUDA_VISIBLE_DEVICES='0' lists 1 GPUs but CUDA shows 0"
    ):
        cuda.SPEC.bind(request)


def test_deep_check_on_a_cpu_torch_says_torch_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch sees no GPU (injected, as on this CPU build; a GPU node's torch would see one).
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda.SPEC.confirm is not None
    disagreement = cuda.SPEC.confirm()
    assert disagreement is not None
    assert disagreement.startswith("torch.cuda.is_available() is False")


def test_nccl_is_composed_with_gloo_and_sets_error_handling_only_if_unset() -> None:
    options = cuda.nccl_options(_options(), "2.13.0+cu126")
    assert options.process_group_backend == "cpu:gloo,cuda:nccl"
    assert options.device_id is None
    assert options.env_defaults == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}
    for variable in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"):
        assert cuda.nccl_options(_options(env={variable: "1"}), "2.13.0").env_defaults == {}


def test_eager_init_is_off_by_default_and_switched_by_the_variable() -> None:
    assert cuda.EAGER_INIT_SAFE_FROM is None
    assert not cuda.eager_init({}, "2.13.0+cu126")
    eager = cuda.nccl_options(_options(env={cuda.EAGER_INIT: "1"}), "2.13.0+cu126")
    assert eager.device_id == "cuda:1"
    assert not cuda.eager_init({cuda.EAGER_INIT: "off"}, "2.13.0")


def test_eager_init_on_a_torch_without_device_id_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"torch 2\.2\.1 has no device_id argument"):
        cuda.eager_init({cuda.EAGER_INIT: "1"}, "2.2.1")
    with pytest.raises(ConfigError, match=f"{cuda.EAGER_INIT}='maybe' is not a boolean"):
        cuda.eager_init({cuda.EAGER_INIT: "maybe"}, "2.13.0")


def test_gloo_override_uses_plain_gloo() -> None:
    assert "gloo" in cuda.SPEC.backends
    assert cuda.SPEC.backend_options is not None
    assert cuda.SPEC.backend_options(_options("gloo")).process_group_backend == "gloo"


def test_nccl_on_a_torch_without_nccl_says_how_to_fall_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A torch without NCCL (the CPU build), whichever torch runs the suite: the CUDA builds on
    # the public index have it compiled in, also where no GPU is present.
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    assert cuda.SPEC.backend_options is not None
    with pytest.raises(InitError, match="built without NCCL; use ACCELBACKENDS_BACKEND=gloo"):
        cuda.SPEC.backend_options(_options())


# -- ranks sharing a GPU over NCCL -----------------------------------------------------------

SHARE = {"ACCELBACKENDS_SHARE_DEVICES": "1"}


def _shared_options(env: dict[str, str], ranks: int = 2) -> OptionsRequest:
    return OptionsRequest(
        "nccl", "cuda:0", timedelta(seconds=60), _cluster(0, ranks), {**SHARE, **env}
    )


def test_ranks_sharing_a_gpu_below_nccl_2_30_are_refused_with_the_ways_out() -> None:
    with pytest.raises(ConfigError) as refused:
        cuda.nccl_options(_shared_options({}), "2.11.0+cu130", 1, nccl_version="2.28.9")
    message = str(refused.value)
    assert "ACCELBACKENDS_SHARE_DEVICES=1 puts 2 local ranks on 1 GPU" in message
    assert "NCCL 2.28.9 (torch.cuda.nccl.version()) allows one rank of a communicator per GPU" in (
        message
    )
    assert '"Duplicate GPU detected"' in message and "NCCL_MULTI_RANK_GPU_ENABLE=1" in message
    assert "use ACCELBACKENDS_BACKEND=gloo, start at most 1 rank per node, or make more GPUs" in (
        message
    )


def test_ranks_sharing_a_gpu_from_nccl_2_30_get_multi_rank_gpu_and_never_nvls() -> None:
    options = cuda.nccl_options(_shared_options({}), "2.15.0+cu130", 1, nccl_version="2.30.7")
    assert options.env_defaults == {
        cuda.MULTI_RANK_GPU: "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }
    assert cuda.NVLS not in options.env_defaults
    # A value the user set is kept, not overwritten.
    kept = cuda.nccl_options(
        _shared_options({cuda.MULTI_RANK_GPU: "1"}), "2.15.0", 1, nccl_version="2.30.7"
    )
    assert cuda.MULTI_RANK_GPU not in kept.env_defaults


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({cuda.MULTI_RANK_GPU: "0"}, "NCCL_MULTI_RANK_GPU_ENABLE=0 forbids NCCL 2.30.7"),
        ({cuda.MULTI_RANK_GPU: "yes"}, "NCCL_MULTI_RANK_GPU_ENABLE='yes' is not valid"),
        ({cuda.NVLS: "1"}, "NCCL_NVLS_ENABLE='1' forces NVLS, which NCCL 2.31.2 aborts"),
    ],
)
def test_a_users_nccl_variable_that_forbids_sharing_is_respected_and_refused(
    env: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        cuda.nccl_options(_shared_options(env), "2.15.0+cu130", 1, nccl_version="2.30.7")


def test_rccl_refuses_ranks_sharing_a_gpu_whatever_its_version() -> None:
    with pytest.raises(ConfigError, match=r"but RCCL 2\.30\.1 .* allows one rank"):
        cuda.nccl_options(_shared_options({}), "2.9.1+rocm6.4", 1, nccl_version="2.30.1", rocm=True)


def test_ranks_with_a_gpu_each_or_over_gloo_are_not_sharing() -> None:
    # One GPU per rank: nothing shared, whatever NCCL's version.
    own = cuda.nccl_options(_shared_options({}), "2.11.0", 2, nccl_version="2.28.9")
    assert cuda.MULTI_RANK_GPU not in own.env_defaults
    # The launcher gives each rank its own GPU (srun --gpus-per-task=1): not sharing either.
    per_rank = _shared_options({"CUDA_VISIBLE_DEVICES": "3"})
    assert cuda.nccl_options(per_rank, "2.11.0", 1, nccl_version="2.28.9").process_group_backend
    assert cuda.SPEC.backend_options is not None
    assert (
        cuda.SPEC.backend_options(
            dataclasses.replace(_shared_options({}), backend="gloo")
        ).process_group_backend
        == "gloo"
    )


def test_the_plugin_asks_torch_for_ncclss_version_before_the_rendezvous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plugin's own options callable, with torch's answers injected: the refusal comes from
    torch.cuda.nccl.version(), in the options step that runs before the rendezvous."""
    import torch
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 28, 9))
    assert cuda.SPEC.backend_options is not None
    with pytest.raises(ConfigError, match=r"NCCL 2\.28\.9 \(torch\.cuda\.nccl\.version\(\)\)"):
        cuda.SPEC.backend_options(_shared_options({}))
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 30, 7))
    options = cuda.SPEC.backend_options(_shared_options({}))
    assert options.env_defaults[cuda.MULTI_RANK_GPU] == "1"


def test_ncclss_version_codes_read_as_text() -> None:
    assert cuda.nccl_version((2, 28, 9)) == "2.28.9"
    assert cuda.nccl_version(2708) == "2.7.8"
    assert cuda.nccl_version(22809) == "2.28.9"


def test_torchs_nccl_error_keeps_ncclss_last_error_line() -> None:
    error = RuntimeError(
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, invalid "
        "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "Last error:\n"
        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60\n"
    )
    line = first_line(error)
    assert "\n" not in line
    assert line.startswith("NCCL error in: ")
    assert "ncclInvalidUsage: This usually reflects invalid usage of NCCL library; " in line
    assert line.endswith(
        "Last error: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"
    )
    assert first_line(RuntimeError("first\nsecond")) == "first"


# -- info and select() say what init() will do ---------------------------------------------


@pytest.fixture
def cuda_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeTree:
    """One NVIDIA GPU (fake NVML) and torch 2.11.0+cu130 with nvidia-nccl-cu13 2.28.9, as the
    package metadata would say: the readers are replaced, the plugin's code is the real one."""
    nvml.configure([FakeGpu(UUID_A)])
    build = TorchBuild("2.11.0+cu130", cuda="13.0")
    monkeypatch.setattr(cuda, "torch_build", lambda paths=None: build)
    monkeypatch.setattr(
        cuda, "nccl", lambda paths=None, version=None: Installed("nvidia-nccl-cu13", "2.28.9")
    )
    return FakeTree(tmp_path / "root")


def _info(tree: FakeTree, **env: str) -> dict[str, Any]:
    from accelbackends.cli.info import collect

    return collect(Registry(env={**FAKE_NVML, **env}, root=tree.root))


TWO_RANKS = {
    "RANK": "0",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29555",
    "GROUP_RANK": "0",
    "TORCHELASTIC_RUN_ID": "test",
}


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        ("0,0", "CUDA_VISIBLE_DEVICES='0,0' lists '0' twice"),
        ("0,00", "CUDA_VISIBLE_DEVICES='0,00' names GPU 0 twice ('0' and '00')"),
        (f"{UUID_A},GPU-1111", "names GPU 0 twice"),
        ("0,5", "'5' names no GPU on this node, so CUDA ignores it and every entry after it"),
        ("0,one", "CUDA_VISIBLE_DEVICES='0,one' is not valid"),
    ],
)
def test_info_shows_cuda_refused_where_init_refuses_the_visible_devices(
    cuda_node: FakeTree, value: str, refusal: str
) -> None:
    report = _info(cuda_node, CUDA_VISIBLE_DEVICES=value)
    (entry,) = [a for a in report["accelerators"] if a["name"] == "cuda"]
    assert refusal in entry["refusal"]
    assert "init() will refuse it" in entry["reason"]
    # Not selected silently, and not a fall back to the CPU either: the same error as init().
    assert report["selected"]["accelerator"] is None
    assert refusal in report["selected"]["error"]
    assert report["error_kind"] == "bad input"
    from accelbackends.cli.info import render

    rows = [line.split()[:2] for line in render(report).splitlines()]
    assert ["cuda", "refused"] in rows
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        select(
            registry=Registry(env={**FAKE_NVML, "CUDA_VISIBLE_DEVICES": value}, root=cuda_node.root)
        )


def test_info_with_a_gpu_each_selects_cuda_without_refusal(cuda_node: FakeTree) -> None:
    report = _info(cuda_node, CUDA_VISIBLE_DEVICES="0")
    (entry,) = [a for a in report["accelerators"] if a["name"] == "cuda"]
    assert entry["refusal"] is None and entry["available"]
    assert report["selected"]["accelerator"] == "cuda"
    assert report["shared_gpus"] is None


def test_info_says_init_refuses_ranks_sharing_a_gpu_below_nccl_2_30(cuda_node: FakeTree) -> None:
    report = _info(cuda_node, **TWO_RANKS, **SHARE)
    assert report["selected"]["backend"] == "nccl"
    shared = report["shared_gpus"]
    assert "NCCL 2.28.9 (nvidia-nccl-cu13, installed) allows one rank" in shared["error"]
    assert shared["error"] in report["errors"] and report["error_kind"] == "bad input"


def test_info_says_init_sets_multi_rank_gpu_from_nccl_2_30(
    cuda_node: FakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cuda, "nccl", lambda paths=None, version=None: Installed("nvidia-nccl-cu13", "2.30.7")
    )
    report = _info(cuda_node, **TWO_RANKS, **SHARE)
    shared = report["shared_gpus"]
    assert shared["error"] is None
    assert "NCCL 2.30.7 (nvidia-nccl-cu13, installed) allows it (experimental)" in shared["note"]
    assert (
        "sets NCCL_MULTI_RANK_GPU_ENABLE=1 for each rank and never sets NCCL_NVLS"
        in (shared["note"])
    )
    refused = _info(cuda_node, **TWO_RANKS, **SHARE, NCCL_MULTI_RANK_GPU_ENABLE="0")
    assert "NCCL_MULTI_RANK_GPU_ENABLE=0 forbids" in refused["shared_gpus"]["error"]


def test_info_without_an_nccl_wheel_says_init_asks_torch(
    cuda_node: FakeTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda, "nccl", lambda paths=None, version=None: None)
    shared = _info(cuda_node, **TWO_RANKS, **SHARE)["shared_gpus"]
    assert shared["error"] is None
    assert "init() asks torch.cuda.nccl.version() and refuses below 2.30" in shared["note"]


# -- the process group's string as the backend ---------------------------------------------


def test_the_process_group_string_selects_its_backend_for_cuda(cuda_node: FakeTree) -> None:
    env = {**FAKE_NVML, "ACCELBACKENDS_BACKEND": "cpu:gloo,cuda:nccl"}
    selection = select(registry=Registry(env=env, root=cuda_node.root))
    assert (selection.accelerator, selection.backend) == ("cuda", "nccl")
    assert selection.process_group_backend == "cpu:gloo,cuda:nccl"


def test_a_process_group_string_for_another_device_names_the_backend_to_give(
    cuda_node: FakeTree,
) -> None:
    env = {**FAKE_NVML, "ACCELBACKENDS_BACKEND": "cpu:gloo,xpu:xccl"}
    with pytest.raises(SelectionError) as refused:
        select(registry=Registry(env=env, root=cuda_node.root))
    assert str(refused.value).startswith(
        "ACCELBACKENDS_BACKEND=cpu:gloo,xpu:xccl names device xpu but the selected accelerator "
        "is 'cuda' (device cuda); give 'nccl'"
    )


@pytest.mark.parametrize(
    ("visible", "index", "expected"),
    [
        (None, 1, (UUID_B, "cuda:1")),
        ("1", 0, (UUID_B, "cuda:0 (CUDA_VISIBLE_DEVICES='1')")),
        (UUID_B[:12], 0, (UUID_B, f"cuda:0 (CUDA_VISIBLE_DEVICES={UUID_B[:12]!r})")),
        (MIG_A, 0, (MIG_A, f"cuda:0 (CUDA_VISIBLE_DEVICES={MIG_A!r})")),
        ("7", 0, None),  # names no GPU here: init() refuses it
    ],
)
def test_the_bound_gpu_is_one_identity_whatever_name_the_rank_gave_it(
    visible: str | None, index: int, expected: tuple[str, str] | None
) -> None:
    gpus = (cuda.Gpu("H100", UUID_A, (MIG_A,)), cuda.Gpu("H100", UUID_B))
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert cuda.bound_gpu(index, env, gpus) == expected
    assert cuda.bound_gpu(index, env, None) is None  # NCCL's facts unknown: torch is asked


def test_ncclss_rule_on_one_gpu_for_two_ranks_follows_its_version_and_the_opt_in() -> None:
    below = cuda.exclusive_gpu_rule(version="2.28.9", source="torch", env=SHARE)
    assert below.startswith("NCCL 2.28.9 (torch) allows one rank of a communicator per GPU")
    assert below.endswith(
        "use ACCELBACKENDS_BACKEND=gloo, start fewer ranks on this node, or make more GPUs visible"
    )
    assert cuda.exclusive_gpu_rule(version="2.30.7", source="torch", env=SHARE) == ""
    unasked = cuda.exclusive_gpu_rule(version="2.30.7", source="torch", env={})
    assert "only with NCCL_MULTI_RANK_GPU_ENABLE=1" in unasked and "ACCELBACKENDS_SHARE" in unasked
    assert "RCCL" in cuda.exclusive_gpu_rule(version=None, source="torch", env=SHARE, rocm=True)
    # The user's own NCCL variables decide where set.
    users = {cuda.MULTI_RANK_GPU: "1"}
    assert cuda.exclusive_gpu_rule(version="2.30.7", source="torch", env=users) == ""
    forbidden = {**SHARE, cuda.MULTI_RANK_GPU: "0"}
    assert "NCCL_MULTI_RANK_GPU_ENABLE=0 forbids NCCL 2.30.7" in cuda.exclusive_gpu_rule(
        version="2.30.7", source="torch", env=forbidden
    )
    nvls = {**SHARE, cuda.NVLS: "1"}
    assert "forces NVLS" in cuda.exclusive_gpu_rule(version="2.30.7", source="torch", env=nvls)


def test_a_gpu_the_launcher_may_have_given_another_rank_gets_multi_rank_gpu_where_allowed() -> None:
    # One GPU visible per rank (not shared by accelbackends' own plan), NCCL 2.30, opted in:
    # rank 0 admits two ranks on it, and NCCL needs the variable for that.
    request = _shared_options({"CUDA_VISIBLE_DEVICES": "0"})
    bound = (UUID_A, "cuda:0")
    options = cuda.nccl_options(request, "2.15.0", 1, nccl_version="2.30.7", bound=bound)
    assert options.env_defaults.get(cuda.MULTI_RANK_GPU) == "1"
    assert (options.device_identity, options.exclusive_device) == (UUID_A, "")
    below = cuda.nccl_options(request, "2.11.0", 1, nccl_version="2.28.9", bound=bound)
    assert cuda.MULTI_RANK_GPU not in below.env_defaults
    assert below.exclusive_device.startswith("NCCL 2.28.9 (torch.cuda.nccl.version()) allows one")


#: A rank of a job on one node whose launcher gives each rank its own CUDA_VISIBLE_DEVICES
#: (argv[1], comma-separated by rank), with torch's NCCL at version argv[2]. This machine has no
#: GPU: the cuda plugin's own options are made (the bound GPU found in the fake NVML's list,
#: NCCL's rule), then the process group is made over Gloo on the CPU.
_ONE_GPU_EACH = """
import dataclasses, json, os, sys
import torch, torch.distributed as dist
import accelbackends
from accelbackends.accelerators import cuda
from accelbackends.accelerators._nvml import query
from accelbackends.plugin import Detection, Probe, config
from accelbackends.testing import InlinePlugin

os.environ["CUDA_VISIBLE_DEVICES"] = sys.argv[1].split(",")[int(os.environ["RANK"])]


def options(request):
    gpus = query(Probe(request.env, config.read_probe_root(request.env))).gpus
    made = cuda.nccl_options(
        request, torch.__version__, 1, nccl_version=sys.argv[2],
        bound=cuda.bound_gpu(0, request.env, gpus),
    )
    # Gloo on the CPU: no device_id (torch 2.15 would have the GPU bound at creation).
    return dataclasses.replace(made, process_group_backend="gloo", device_id=None)


spec = dataclasses.replace(
    cuda.SPEC, name="onegpu", priority=1000, confirm=None, backend_options=options,
    detect=lambda probe: Detection(True, 1, "the launcher's one GPU"),
    bind=lambda request: torch.device("cpu"),
)
registry = accelbackends.Registry(plugins=[("onegpu", InlinePlugin(spec))])
try:
    with accelbackends.distributed(registry=registry, timeout=30, rendezvous_timeout=30) as ctx:
        dist.all_reduce(torch.ones(1))
        print(json.dumps({"ok": ctx.backend}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def _one_gpu_each(tmp_path: Path, visible: str, version: str, env: dict[str, str]) -> list[Any]:
    import json
    import os

    from accelbackends.testing import launch_ranks

    program = tmp_path / "one_gpu_each.py"
    program.write_text(_ONE_GPU_EACH, encoding="utf-8")
    gpus = [FakeGpu(UUID_A, pci="00000000:18:00.0"), FakeGpu(UUID_B, pci="00000000:3B:00.0")]
    # GROUP_WORLD_SIZE as torchrun sets it: one node.
    base = {**os.environ, **nvml.environment(gpus), "GROUP_WORLD_SIZE": "1", **env}
    results = launch_ranks([sys.executable, str(program), visible, version], 2, env=base)
    for result in results:
        assert result.returncode == 0, result.stderr
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]


@pytest.mark.parametrize("visible", ["0,0", f"0,{UUID_A}"], ids=["same-index", "index-and-uuid"])
def test_two_ranks_given_one_gpu_by_their_launcher_are_refused_before_the_group_below_nccl_2_30(
    tmp_path: Path, visible: str
) -> None:
    reports = _one_gpu_each(tmp_path, visible, "2.28.9", {})
    second = visible.split(",")[1]
    for report in reports:  # rank 0 refuses; rank 1 reads rank 0's verdict
        assert report["error"] == "RendezvousError", report
        assert report["message"].startswith("rank 0: ranks 0 and 1 of the rendezvous at "), report
        assert (
            f" hold the same device on host {socket.gethostname()}, {UUID_A} "
            f"(rank 0: cuda:0 (CUDA_VISIBLE_DEVICES='0'); rank 1: cuda:0 "
            f"(CUDA_VISIBLE_DEVICES={second!r})), but NCCL 2.28.9 (torch.cuda.nccl.version()) "
            "allows one rank of a communicator per GPU"
        ) in report["message"], report
        assert report["message"].endswith(
            "use ACCELBACKENDS_BACKEND=gloo, start fewer ranks on this node, or make more GPUs "
            "visible"
        ), report


def test_two_ranks_on_two_gpus_or_sharing_one_from_nccl_2_30_when_asked_meet(
    tmp_path: Path,
) -> None:
    # Each its own GPU: nothing to refuse, whatever NCCL's version.
    assert _one_gpu_each(tmp_path, f"0,{UUID_B}", "2.28.9", {}) == [{"ok": "nccl"}] * 2
    # One GPU, NCCL 2.30 and the opt-in: allowed, as NCCL then allows it.
    assert _one_gpu_each(tmp_path, "0,0", "2.30.7", SHARE) == [{"ok": "nccl"}] * 2
