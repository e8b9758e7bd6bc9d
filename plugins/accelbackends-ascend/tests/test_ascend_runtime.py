"""Binding, backend options and the hccl name clash: unit checks, then real ranks."""

from __future__ import annotations

import json
import sys
from collections import namedtuple
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from accelbackends_ascend import hccl_owner
from accelbackends_ascend.visible import device_index, parse_visible
from ascend_machine import SOURCE, ascend_node

import accelbackends
from accelbackends.testing import FakeStack, FakeTree
from accelbackends.testing.pytest_plugin import DistributionInstaller, RankReport, RankRunner

_Plugin = namedtuple("_Plugin", ["creator_fn", "extended_api"])
RANK_PROGRAM = str(Path(__file__).with_name("ascend_rank.py"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", (0,)), ("4,5,6,7", (4, 5, 6, 7)), ("", None), ("  ", None)],
)
def test_visible_devices_are_read_as_ascending_npu_ids(
    value: str, expected: tuple[int, ...] | None
) -> None:
    assert parse_visible({"ASCEND_RT_VISIBLE_DEVICES": value}) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1, 2", "' 2' is not an NPU ID"),
        ("0,npu1", "'npu1' is not an NPU ID"),
        ("0,,1", "'' is not an NPU ID"),
        ("3,1", "1 does not come after 3"),
        ("2,2", "2 does not come after 2"),
    ],
)
def test_malformed_visible_devices_name_the_variable_the_entry_and_the_form(
    value: str, problem: str
) -> None:
    with pytest.raises(accelbackends.ConfigError) as error:
        parse_visible({"ASCEND_RT_VISIBLE_DEVICES": value})
    message = str(error.value)
    assert message.startswith(f"ASCEND_RT_VISIBLE_DEVICES={value!r} is not valid: ")
    assert problem in message
    assert message.endswith(
        "use comma-separated NPU IDs in ascending order, without spaces (e.g. 0,1 or 4,5,6,7)"
    )


def test_each_local_rank_takes_its_own_visible_npu() -> None:
    assert [device_index(rank, 4, 8, None) for rank in range(4)] == [0, 1, 2, 3]


def test_a_rank_given_exactly_one_npu_takes_it() -> None:
    assert device_index(3, 4, 1, (5,)) == 0


def test_more_local_ranks_than_visible_npus_names_both_numbers() -> None:
    with pytest.raises(accelbackends.ConfigError) as error:
        device_index(2, 4, 2, (0, 1))
    assert str(error.value) == (
        "this node runs 4 local ranks but only 2 Ascend NPUs are visible "
        "(ASCEND_RT_VISIBLE_DEVICES='0,1'); start at most 2 ranks per node or make more Ascend "
        "NPUs visible; Ascend NPUs cannot be shared between processes"
    )


def test_no_visible_npu_says_how_to_choose_another_accelerator() -> None:
    with pytest.raises(accelbackends.ConfigError) as error:
        device_index(0, 1, 0, None)
    assert str(error.value).startswith("no Ascend NPUs are visible to this process")
    assert str(error.value).endswith("choose another accelerator with ACCELBACKENDS_ACCELERATOR")


def _creator(module: str) -> Callable[..., Any]:
    def create(*args: Any) -> None:
        return None

    create.__module__ = module
    return create


def test_torch_npus_own_hccl_is_accepted() -> None:
    plugins = {"HCCL": _Plugin(_creator("torch_npu"), False)}
    assert hccl_owner(plugins, {"hccl": ["npu"]}) is None


def test_habanas_hccl_is_refused_naming_habana_and_the_fix() -> None:
    plugins = {"HCCL": _Plugin(_creator("habana_frameworks.torch.distributed.hccl"), True)}
    problem = hccl_owner(plugins, {"hccl": ["hpu"]})
    assert problem is not None
    assert problem.startswith(
        "the backend name 'hccl' is registered by Habana's habana_frameworks (devices ['hpu']), "
        "not by torch_npu"
    )
    assert "do not import habana_frameworks.torch.distributed.hccl in an Ascend job" in problem


def test_no_hccl_at_all_is_refused() -> None:
    assert "no backend named 'hccl' is registered" in (hccl_owner({}, {}) or "")


def test_gloo_needs_no_torch_npu() -> None:
    import accelbackends_ascend

    assert accelbackends_ascend.SPEC.backend_options is not None
    request = accelbackends.OptionsRequest(
        "gloo", None, timedelta(seconds=60), accelbackends.ClusterInfo("single"), {}
    )
    options = accelbackends_ascend.SPEC.backend_options(request)
    assert (options.process_group_backend, options.timeout) == ("gloo", timedelta(seconds=60))
    assert "torch_npu" not in sys.modules


# -- real ranks ------------------------------------------------------------------------------


def _reports(results: list[RankReport]) -> list[dict[str, Any]]:
    return [json.loads(result.stdout.strip().splitlines()[-1]) for result in results]


@pytest.fixture
def ascend_ranks(
    accelbackends_tree: FakeTree,
    accelbackends_install: DistributionInstaller,
    accelbackends_ranks: RankRunner,
) -> Callable[..., list[dict[str, Any]]]:
    """Two ranks on a fake node with four NPUs, the plugin loaded through an entry point."""
    ascend_node(accelbackends_tree, 4)
    # Its own entry-point name, allow-listed: an installed copy of the plugin stays out.
    site = accelbackends_install("ascend_under_test", "accelbackends_ascend")

    def run(stack: FakeStack, *modules: str, **env: str) -> list[dict[str, Any]]:
        results = accelbackends_ranks(
            2,
            argv=[sys.executable, RANK_PROGRAM, str(accelbackends_tree.root), *modules],
            stack=stack,
            pythonpath=[site, SOURCE],
            env={"ACCELBACKENDS_PLUGINS": "ascend_under_test", **env},
            timeout=90,
        )
        return _reports(results)

    return run


@pytest.mark.slow
def test_ranks_bind_their_visible_npus_and_all_reduce_over_hccl(
    ascend_ranks: Callable[..., list[dict[str, Any]]], accelbackends_stack: FakeStack
) -> None:
    reports = ascend_ranks(
        accelbackends_stack.torch_npu(devices=4), ASCEND_RT_VISIBLE_DEVICES="2,3"
    )
    for rank, report in enumerate(reports):
        assert report == {
            "rank": rank,
            "accelerator": "npu",
            "backend": "hccl",
            "process_group_backend": "cpu:gloo,npu:hccl",
            "device": f"npu:{rank}",
            "current_device": rank,
            "bound_device_id": 2 + rank,  # visible device i is NPU ASCEND_RT_VISIBLE_DEVICES[i]
            "cpu_sum": 3.0,
            "npu_sum": 3.0,
        }


@pytest.mark.slow
def test_hccl_taken_over_by_habana_fails_init_naming_habana(
    ascend_ranks: Callable[..., list[dict[str, Any]]], accelbackends_stack: FakeStack
) -> None:
    stack = accelbackends_stack.torch_npu(devices=4).habana(devices=2)
    # torch_npu's hccl first, then Habana's module re-registers the name.
    reports = ascend_ranks(stack, "torch_npu", "habana_frameworks.torch.distributed.hccl")
    for report in reports:
        assert report["error"]["type"] == "InitError"
        assert (
            "registered by Habana's habana_frameworks (devices ['hpu'])"
            in (report["error"]["message"])
        )
