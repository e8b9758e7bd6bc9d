"""Visible-device variables and the local rank -> device mapping shared by the plugins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelbackends.plugin.devices import (
    SHARE_DEVICES,
    Visible,
    cuda_visible,
    device_index,
    habana_visible,
    rocm_visible,
    ze_visible,
)
from accelbackends.plugin.errors import ConfigError

UUID_A = "GPU-8f3c5a1e-0d2b-4c7e-9a11-000000000001"
UUID_B = "GPU-8f3c5a1e-0d2b-4c7e-9a11-000000000002"
MIG = "MIG-4f8a2b3c-1d2e-5f6a-7b8c-9d0e1f2a3b4c"


def test_cuda_unset_restricts_nothing() -> None:
    visible = cuda_visible({})
    assert not visible.restricted
    assert visible.count(4) == 4


@pytest.mark.parametrize(
    ("value", "entries"),
    [
        ("0,1,3", ("0", "1", "3")),
        (" 2 , 0 ", ("2", "0")),
        (f"{UUID_A},{UUID_B}", (UUID_A, UUID_B)),
        ("GPU-8f3c", ("GPU-8f3c",)),
    ],
)
def test_cuda_indices_and_gpu_uuids_are_read_in_order(value: str, entries: tuple[str]) -> None:
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": value})
    assert visible.entries == entries
    assert visible.count(8) == len(entries)


@pytest.mark.parametrize("value", [MIG, "MIG-GPU-8f3c5a1e-0d2b/1/0", f"{MIG},MIG-1234abcd"])
def test_cuda_mig_identifiers_show_one_device_per_process(value: str) -> None:
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": value})
    assert visible.restricted
    assert visible.count(8) == 1


@pytest.mark.parametrize("value", ["", "  ", "-1", "NoDevFiles"])
def test_cuda_empty_minus_one_and_nodevfiles_hide_every_gpu(value: str) -> None:
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": value})
    assert visible.restricted
    assert visible.count(8) == 0


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("0,gpu1", "'gpu1' is not an accepted entry"),
        ("0,,1", "has an empty item"),
        ("0,1,0", "lists '0' twice"),
        (f"0,{UUID_A}", "mixes forms"),
        ("1.5", "'1.5' is not an accepted entry"),
    ],
)
def test_cuda_malformed_value_names_variable_value_and_accepted_forms(
    value: str, complaint: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        cuda_visible({"CUDA_VISIBLE_DEVICES": value})
    message = str(caught.value)
    assert f"CUDA_VISIBLE_DEVICES={value!r}" in message
    assert complaint in message
    assert "GPU indices" in message and "GPU UUIDs" in message and "MIG" in message


def test_rocm_hip_selects_among_the_gpus_rocr_left_visible() -> None:
    visible = rocm_visible({"ROCR_VISIBLE_DEVICES": "0,2,3", "HIP_VISIBLE_DEVICES": "1,2"})
    assert (visible.variable, visible.entries) == ("HIP_VISIBLE_DEVICES", ("1", "2"))


def test_rocm_hip_listing_more_gpus_than_rocr_leaves_is_an_error() -> None:
    with pytest.raises(ConfigError, match="selects 3 GPUs, but ROCR_VISIBLE_DEVICES='0,1'"):
        rocm_visible({"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1,2"})


def test_rocm_honours_rocr_alone_and_cuda_visible_devices_when_hip_is_unset() -> None:
    assert rocm_visible({"ROCR_VISIBLE_DEVICES": "GPU-1a,GPU-2b"}).count(8) == 2
    visible = rocm_visible({"CUDA_VISIBLE_DEVICES": "3"})
    assert (visible.variable, visible.entries) == ("CUDA_VISIBLE_DEVICES", ("3",))


def test_ze_affinity_mask_accepts_devices_and_sub_devices() -> None:
    assert ze_visible({"ZE_AFFINITY_MASK": "0.0,0.1,1"}).entries == ("0.0", "0.1", "1")
    assert not ze_visible({"ZE_AFFINITY_MASK": " "}).restricted


def test_ze_affinity_mask_malformed_names_the_forms() -> None:
    with pytest.raises(ConfigError, match=r"ZE_AFFINITY_MASK='0\.a'.*device\.sub-device pairs"):
        ze_visible({"ZE_AFFINITY_MASK": "0.a"})


def test_habana_visible_modules_are_module_ids() -> None:
    assert habana_visible({"HABANA_VISIBLE_MODULES": "4,5,6,7"}).entries == ("4", "5", "6", "7")
    with pytest.raises(ConfigError, match=r"HABANA_VISIBLE_MODULES='all'.*module IDs"):
        habana_visible({"HABANA_VISIBLE_MODULES": "all"})


def _index(local_rank: int, local_world_size: int, count: int, **kwargs: object) -> int:
    options: dict[str, object] = {"visible": Visible(), "what": "GPUs", "env": {}, **kwargs}
    return device_index(
        local_rank=local_rank,
        local_world_size=local_world_size,
        count=count,
        **options,  # type: ignore[arg-type]
    )


def test_local_rank_takes_the_visible_device_of_the_same_index() -> None:
    assert [_index(rank, 4, 8) for rank in range(4)] == [0, 1, 2, 3]


def test_more_local_ranks_than_devices_names_both_numbers_and_the_opt_in() -> None:
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(ConfigError) as caught:
        _index(3, 4, 2, visible=visible)
    message = str(caught.value)
    assert "4 local ranks but only 2 GPUs are visible" in message
    assert "CUDA_VISIBLE_DEVICES='0,1'" in message
    assert f"{SHARE_DEVICES}=1" in message


def test_sharing_opt_in_assigns_devices_round_robin() -> None:
    env = {SHARE_DEVICES: "1"}
    assert [_index(rank, 5, 2, env=env) for rank in range(5)] == [0, 1, 0, 1, 0]


def test_sharing_variable_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match=f"{SHARE_DEVICES}='sure' is not a boolean"):
        _index(2, 4, 2, env={SHARE_DEVICES: "sure"})


def test_one_device_made_visible_per_rank_by_the_launcher_is_taken_by_each_rank() -> None:
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": "5"})
    assert _index(3, 4, 1, visible=visible) == 0


def test_unshareable_devices_refuse_the_opt_in_and_say_why() -> None:
    visible = habana_visible({"HABANA_VISIBLE_MODULES": "2"})
    with pytest.raises(ConfigError, match="cannot be shared between processes"):
        _index(
            1,
            2,
            1,
            visible=visible,
            what="Gaudi modules",
            env={SHARE_DEVICES: "1"},
            one_per_rank_ok=False,
            shareable=False,
        )


def test_no_visible_device_names_the_variable() -> None:
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(ConfigError, match=r"no GPUs are visible.*CUDA_VISIBLE_DEVICES=''"):
        _index(0, 1, 0, visible=visible)


@given(
    indices=st.lists(st.integers(0, 63), min_size=1, max_size=8, unique=True),
    local_world_size=st.integers(1, 16),
)
def test_sharing_always_yields_a_visible_device(indices: list[int], local_world_size: int) -> None:
    value = ",".join(map(str, indices))
    visible = cuda_visible({"CUDA_VISIBLE_DEVICES": value})
    assert visible.entries == tuple(map(str, indices))
    for rank in range(local_world_size):
        index = _index(rank, local_world_size, len(indices), env={SHARE_DEVICES: "yes"})
        assert 0 <= index < len(indices)
