"""Ray Train for real: a local Ray (``ray.init(num_cpus=2)``), `TorchTrainer` with
`accelbackends.integrations.ray.TorchConfig`. Skipped where Ray is not installed
(``.ci/engines.sh`` installs ``ray[train]`` and runs this file)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelbackends.testing.cluster import clean_environment

HERE = Path(__file__).parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


Run = tuple[list[dict[str, Any]], list[dict[str, Any]], str, Path]


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One Ray session running the trainers of ``ray_train.py``: (each rank's report, what
    attach() said under Ray's own TorchConfig, the error of the trainer whose GPU request
    disagrees with the selection, the folder the trainers wrote to)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'ray[train]'; .ci/engines.sh does)")
    out = tmp_path_factory.mktemp("ray")
    done = subprocess.run(
        [sys.executable, str(HERE / "ray_train.py"), str(out)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=360,
        env={
            **clean_environment(os.environ),
            "PYTHONUNBUFFERED": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            # The workers import accelbackends from this tree, as the driver does.
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        },
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    attached = [json.loads(p.read_text()) for p in sorted(out.glob("attached*.json"))]
    return reports, attached, (out / "error.txt").read_text(), out


def test_two_ray_train_workers_train_on_the_group_accelbackends_made(
    ray_run: Run,
) -> None:
    reports, _, _, _ = ray_run
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:
        assert (report["world_size"], report["group_world_size"]) == (2, 2)
        assert report["env_world_size"] == "2"
        assert (report["launcher"], report["accelerator"]) == ("ray", "cpu")
        assert "gloo" in report["backend"]
        # Both workers on one node: loopback, not the node's address Ray's own backend uses.
        assert report["master_addr"] == "127.0.0.1"
        assert report["rendezvous_timeout"] == 60.0
        assert report["reason"]
        assert report["thread"].startswith("TrainingThread")  # attach() in Ray's own thread
        # CPU affinity as asked, applied again in the training thread (masks are per thread).
        assert report["cpu_affinity"] != "off"
        assert report["context_cpus"] and report["cpus"] == report["context_cpus"]
    # Different starting weights and data per rank: only DDP's all-reduce makes them equal.
    assert reports[0]["weights"] == reports[1]["weights"]


def test_a_ray_gpu_request_beside_a_cpu_selection_fails_naming_both(
    ray_run: Run,
) -> None:
    _, _, error, _ = ray_run
    assert "ConfigError" in error, error
    assert "Ray gave each worker {GPU: 1}" in error
    assert "accelbackends selected the cpu accelerator" in error


def test_the_readmes_seeded_with_block_runs_in_a_worker_torch_config_initialised(
    ray_run: Run,
) -> None:
    readme = [json.loads(p.read_text()) for p in sorted(ray_run[3].glob("readme*.json"))]
    assert [(r["rank"], r["seed"]) for r in readme] == [(0, 0), (1, 0)]
    assert readme[0]["draw"] == readme[1]["draw"]  # seed=0 applied in both workers
    assert readme[0]["grad"] == readme[1]["grad"] == [1.0] * 4  # 0 + 1 over the worker group
    # The block used the group TorchConfig made and left its teardown to Ray.
    assert all(r["group_alive_after_block"] for r in readme)


def test_attach_under_rays_own_torch_config_names_the_ray_launcher(ray_run: Run) -> None:
    _, attached, _, _ = ray_run
    assert [(a["launcher"], a["rank"], a["world_size"]) for a in attached] == [
        ("ray", 0, 2),
        ("ray", 1, 2),
    ]


@pytest.mark.parametrize(
    "resources, accelerator, named",
    [
        ({"CPU": 1, "GPU": 1}, "cpu", "Ray gave each worker {GPU: 1}"),
        ({"CPU": 1}, "cuda", "Ray gave the workers no GPU"),
        ({"CPU": 1, "GPU": 1}, "hpu", "selected the hpu accelerator"),
    ],
)
def test_rays_resource_request_against_the_selection_names_both(
    resources: dict[str, float], accelerator: str, named: str
) -> None:
    ray_module = pytest.importorskip(
        "accelbackends.integrations.ray", reason="ray is not installed"
    )
    problem = ray_module.check_resources(resources, accelerator)
    assert problem is not None and named in problem


@pytest.mark.parametrize(
    "resources, accelerator",
    [
        ({"CPU": 1}, "cpu"),
        ({"GPU": 1}, "cuda"),
        ({"GPU": 1}, "xpu"),
        ({"HPU": 1}, "hpu"),
        ({"CPU": 1}, "someones_accelerator"),
    ],
)
def test_rays_resource_request_that_matches_the_selection_passes(
    resources: dict[str, float], accelerator: str
) -> None:
    ray_module = pytest.importorskip(
        "accelbackends.integrations.ray", reason="ray is not installed"
    )
    assert ray_module.check_resources(resources, accelerator) is None
