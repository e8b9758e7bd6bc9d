"""The framework views `attach()` compares with the group (job/frameworks.py) and the refusal of
a Lightning rank of another world (job/children.py), without the frameworks: their state is faked
where `sys.modules` would hold it."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from accelbackends import InitError
from accelbackends.job import children, frameworks
from accelbackends.plugin.types import Context
from accelbackends.testing.cluster import clean_environment


def _fake_accelerate(monkeypatch: pytest.MonkeyPatch, **shared: object) -> None:
    state = types.ModuleType("accelerate.state")
    state.PartialState = type("PartialState", (), {"_shared_state": dict(shared)})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "accelerate.state", state)


def test_accelerate_running_undistributed_in_a_group_of_two_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind = types.SimpleNamespace(value="NO")
    _fake_accelerate(monkeypatch, num_processes=1, process_index=0, distributed_type=kind)
    with pytest.raises(InitError) as caught:
        frameworks.check_views(1, 2, "gloo")
    assert "sees process 0 of 1 (distributed_type=NO)" in str(caught.value)
    assert "the process group is rank 1 of 2 (gloo)" in str(caught.value)


def test_accelerate_agreeing_with_the_group_or_not_set_up_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind = types.SimpleNamespace(value="MULTI_CPU")
    _fake_accelerate(monkeypatch, num_processes=2, process_index=1, distributed_type=kind)
    frameworks.check_views(1, 2, "gloo")
    _fake_accelerate(monkeypatch)  # imported, but no Accelerator made yet
    assert frameworks.views() == ()


def test_a_framework_not_imported_is_not_imported_to_be_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("accelerate.state", "deepspeed.comm.comm"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert frameworks.views() == ()
    assert "accelerate.state" not in sys.modules and "deepspeed.comm.comm" not in sys.modules


def _context(world_size: int) -> Context:
    # What children.problem reads of the context init() made.
    view = types.SimpleNamespace(rank=0, world_size=world_size, launcher="single")
    return view  # type: ignore[return-value]


LIGHTNING_CHILD = {
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "NODE_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29400",
}


def test_a_lightning_rank_of_another_world_is_named_with_both_worlds() -> None:
    problem = children.problem(LIGHTNING_CHILD, _context(1))
    assert problem is not None
    assert "rank 1 of a world of 2" in problem and "a process group of 1" in problem


def test_other_children_are_left_alone() -> None:
    assert children.problem(LIGHTNING_CHILD, _context(2)) is None  # the same world
    assert children.problem({"PATH": "/bin"}, _context(1)) is None  # not a rank at all
    torchrun_rank = {**LIGHTNING_CHILD, "RANK": "1"}
    assert children.problem(torchrun_rank, _context(1)) is None  # not Lightning's shape


#: A script that made a one-rank group, then does what Lightning's launcher does under
#: ``python train.py``: rewrites WORLD_SIZE and starts rank 1 (``refuse``), or only rewrites it.
_LIGHTNING_PARENT = """
import os, subprocess, sys
import accelbackends
accelbackends.init()
os.environ["WORLD_SIZE"] = "2"
if sys.argv[1] == "start-rank-1":
    child = {**os.environ, "LOCAL_RANK": "1", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": "29400"}
    subprocess.Popen([sys.executable, "-c", "pass"], env=child)
print("TRAINED ALONE")
"""


@pytest.mark.parametrize("what", ["start-rank-1", "rewrite-only"])
def test_a_refused_lightning_rank_is_said_once_and_a_rewritten_world_at_exit(what: str) -> None:
    """Before: the refusal of rank 1 ended the process, then the exit check said the same
    disagreement again (WORLD_SIZE=2, the group: 1): two InitErrors for one mistake."""
    env = {
        key: value
        for key, value in clean_environment(os.environ).items()
        if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    }
    result = subprocess.run(
        [sys.executable, "-c", _LIGHTNING_PARENT, what],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.count("InitError:") == 1, result.stderr[-3000:]
    if what == "start-rank-1":
        assert "Lightning is starting rank 1 of a world of 2" in result.stderr
        assert "TRAINED ALONE" not in result.stdout
    else:  # nothing refused on the way: the exit check is the one that says it
        assert "disagrees with this process's environment: WORLD_SIZE=2" in result.stderr
