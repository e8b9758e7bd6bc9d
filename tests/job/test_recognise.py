"""One answer to "which job is this process in": ``accelbackends info`` and ``init()`` agree.

Both go through `accelbackends.job.recognise`; each test below runs both on the same
environment and compares what they concluded, launcher by launcher, Lightning's own child
processes included (``info`` used to report ``missing RANK`` where ``init()`` saw Lightning).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from accelbackends import ConfigError, InitError, Registry
from accelbackends.cli import info
from accelbackends.job import lifecycle
from accelbackends.plugin import ClusterInfo
from accelbackends.plugin.errors import first_line
from accelbackends.testing import LAUNCHERS, clean_environment, launcher_env

_LIGHTNING_NODE_0 = {
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29511",
}
#: Every launcher shape the fake launchers make, and the shapes Lightning gives its children.
SHAPES: dict[str, dict[str, str]] = {
    **{
        f"{name}-rank-3-of-4": launcher_env(name, rank=3, world_size=4, local_world_size=2)
        for name in LAUNCHERS
    },
    "no-launcher": {},
    "lightning-child-node-0": _LIGHTNING_NODE_0,
    "lightning-child-node-1": {
        **_LIGHTNING_NODE_0,
        "WORLD_SIZE": "4",
        "NODE_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    },
}
#: Shapes that are wrong: both must refuse them with the same message.
BAD_SHAPES: dict[str, dict[str, str]] = {
    "rank-without-world-size": {"RANK": "0"},
    "lightning-child-node-1-without-local-world-size": {**_LIGHTNING_NODE_0, "NODE_RANK": "1"},
}


class _Recognised(Exception):
    """Stops ``init()`` right after it recognised the job, before any store or group."""

    def __init__(self, cluster: ClusterInfo) -> None:
        super().__init__(cluster.launcher)
        self.cluster = cluster


def _registry(shape: dict[str, str]) -> Registry:
    env = {**clean_environment(os.environ), **shape, "ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return Registry(env=env)


def _info_cluster(shape: dict[str, str]) -> dict[str, Any]:
    report = info.collect(_registry(shape))
    cluster: dict[str, Any] = report["cluster"]
    return cluster


def _init_outcome(shape: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The cluster ``init()`` went on with, or the error it stopped with."""

    def stop(cluster: ClusterInfo, join_s: float) -> None:
        raise _Recognised(cluster)

    monkeypatch.setattr(lifecycle, "host_early", stop)
    try:
        lifecycle.init(registry=_registry(shape))
    except _Recognised as recognised:
        return recognised.cluster
    except (ConfigError, InitError) as exc:
        return exc
    raise AssertionError("init() went past the recognition it was stopped at")


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_info_reports_the_launcher_init_recognises(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = _info_cluster(SHAPES[shape])
    outcome = _init_outcome(SHAPES[shape], monkeypatch)
    assert shown["error"] is None, shown["error"]
    if isinstance(outcome, InitError):
        # init() refuses to run in a process Lightning started, and says it is one.
        assert shown["launcher"] == "lightning"
        assert "a process Lightning started" in str(outcome)
        return
    assert isinstance(outcome, ClusterInfo), outcome
    fields = ("launcher", "rank", "world_size", "local_rank", "local_world_size", "node_rank")
    assert {key: shown[key] for key in fields} == {key: getattr(outcome, key) for key in fields}
    assert shown["sources"] == dict(outcome.sources)


@pytest.mark.parametrize("shape", sorted(BAD_SHAPES))
def test_info_and_init_refuse_a_wrong_launcher_environment_with_the_same_message(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = _info_cluster(BAD_SHAPES[shape])
    outcome = _init_outcome(BAD_SHAPES[shape], monkeypatch)
    assert isinstance(outcome, ConfigError), outcome
    assert shown["launcher"] is None
    assert shown["error"] == first_line(outcome)


def test_a_process_lightning_started_is_recognised_as_lightning_by_info() -> None:
    shown = _info_cluster(SHAPES["lightning-child-node-1"])
    assert (shown["launcher"], shown["rank"], shown["world_size"]) == ("lightning", 3, 4)
    assert shown["sources"]["rank"] == "NODE_RANK * local world size + LOCAL_RANK"
