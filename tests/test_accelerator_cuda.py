"""The cuda plugin (NVIDIA and ROCm) without a GPU: probe, reasons, binding and NCCL options."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from accelbackends.accelerators import cuda, xpu
from accelbackends.accelerators._nvml import NVML
from accelbackends.plugin.errors import ConfigError, InitError
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
    error = _nvml.query(Probe({})).error
    # Past the gate: pynvml or the library answers (here: not installed or no driver to talk to).
    assert not error.startswith("no NVIDIA driver"), error
    assert "libnvidia-ml.so.1 not found" in error or "NVML (" in error, error


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
    assert options.backend == "cpu:gloo,cuda:nccl"
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
    assert cuda.SPEC.backend_options(_options("gloo")).backend == "gloo"


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
