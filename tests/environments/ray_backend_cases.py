"""Ray Train's own torch-backend cases (`peer_cases.RAY_TORCH_BACKEND`) on a local Ray with
`accelbackends.integrations.ray.TorchConfig`: ``python ray_backend_cases.py OUT`` writes, for
case N, what happened to ``OUT/case<N>.json``: ``"a group of 2 in every worker"``, ``"fit
completes"``, or the error that refused it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from accelbackends import AccelBackendsError
from accelbackends.integrations.ray import TorchConfig

sys.path.insert(0, str(Path(__file__).parent))
from peer_cases import RAY_TORCH_BACKEND

OUT = Path(sys.argv[1])


def group_of(config: dict[str, str]) -> None:
    import torch.distributed as dist

    size = dist.get_world_size() if dist.is_initialized() else 0
    (Path(config["out"]) / f"group{dist.get_rank()}.json").write_text(json.dumps(size))


def nothing() -> None:
    return None


def run(index: int, given: dict[str, dict[str, str]]) -> str:
    os.environ.update(given["env"])
    try:
        try:
            torch_config = TorchConfig(**given["config"])
        except AccelBackendsError as exc:
            return f"refused: {exc}"
        out = OUT / f"case{index}"
        out.mkdir()
        checks_group = "init_method" in given["config"]
        TorchTrainer(
            group_of if checks_group else nothing,
            train_loop_config={"out": str(out)} if checks_group else None,
            torch_config=torch_config,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(
                storage_path=str(out / "ray"), failure_config=FailureConfig(max_failures=0)
            ),
        ).fit()
        if not checks_group:
            return "fit completes"
        sizes = [json.loads((out / f"group{rank}.json").read_text()) for rank in (0, 1)]
        return "a group of 2 in every worker" if sizes == [2, 2] else f"groups of {sizes}"
    finally:
        for name in given["env"]:
            os.environ.pop(name, None)


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False)
    for index, case in enumerate(RAY_TORCH_BACKEND):
        (OUT / f"case{index}.json").write_text(json.dumps(run(index, case.given)))
    ray.shutdown()


if __name__ == "__main__":
    main()
