"""What a policy does to the backend options of an accelerator."""

from __future__ import annotations

from datetime import timedelta

import pytest
from accelbackends_sitepolicy import Policy
from accelbackends_sitepolicy.policy import backends_in

import accelbackends
from accelbackends.testing import fake_accelerator

GPU = fake_accelerator("gpu", backends=("nccl", "gloo"))


def options(backend: str, seconds: float = 60, **env: str) -> accelbackends.BackendOptions:
    return accelbackends.BackendOptions(backend, timedelta(seconds=seconds), env_defaults=env)


def test_backend_strings_are_read_per_device() -> None:
    assert backends_in("cpu:gloo,cuda:nccl") == {"cpu": "gloo", "cuda": "nccl"}
    assert backends_in("gloo") == {"": "gloo"}


def test_a_shorter_timeout_is_raised_to_the_minimum_and_a_longer_one_kept() -> None:
    policy = Policy(min_timeout=900)
    assert policy.apply(GPU, options("nccl", 60)).timeout == timedelta(seconds=900)
    assert policy.apply(GPU, options("nccl", 3600)).timeout == timedelta(seconds=3600)


def test_interfaces_are_set_only_for_the_backends_the_job_uses() -> None:
    policy = Policy(nccl_socket_ifname="ib0", gloo_socket_ifname="eth0")
    both = policy.apply(GPU, options("cpu:gloo,cpu_gpu:nccl"))
    assert both.env_defaults == {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert policy.apply(GPU, options("gloo")).env_defaults == {"GLOO_SOCKET_IFNAME": "eth0"}


def test_the_site_has_the_last_word_on_variables_and_keeps_the_others() -> None:
    policy = Policy(gloo_socket_ifname="eth0", env={"NCCL_IB_HCA": "mlx5"})
    result = policy.apply(GPU, options("gloo", GLOO_SOCKET_IFNAME="lo", TORCH_X="1"))
    assert result.env_defaults == {
        "GLOO_SOCKET_IFNAME": "eth0",
        "TORCH_X": "1",
        "NCCL_IB_HCA": "mlx5",
    }


def test_an_empty_policy_changes_nothing() -> None:
    before = options("cpu:gloo,cuda:nccl", 60, A="1")
    assert Policy().apply(GPU, before) == before


def test_the_required_backend_passes_when_the_job_uses_it() -> None:
    policy = Policy(required_backend={"gpu": "nccl"})
    # The fake accelerator's device type is "cpu".
    assert policy.apply(GPU, options("cpu:nccl")).process_group_backend == "cpu:nccl"


def test_another_backend_than_the_required_one_is_refused_naming_both() -> None:
    policy = Policy(
        required_backend={"gpu": "nccl"}, sources={"required_backend.gpu": "site.toml: x"}
    )
    with pytest.raises(accelbackends.ConfigError) as error:
        policy.apply(GPU, options("gloo"))
    assert str(error.value) == (
        "site policy: accelerator 'gpu' must use backend 'nccl' on this site (site.toml: x), "
        "but this job would use 'gloo' (process-group backend 'gloo'); unset "
        "ACCELBACKENDS_BACKEND or the backend= argument, or set it to 'nccl'"
    )


def test_a_required_backend_the_accelerator_lacks_lists_the_ones_it_has() -> None:
    policy = Policy(required_backend={"gpu": "hccl"})
    with pytest.raises(accelbackends.ConfigError) as error:
        policy.apply(GPU, options("nccl"))
    assert str(error.value) == (
        "site policy: the required backend 'hccl' for accelerator 'gpu' (required_backend.gpu) "
        "is not one of its backends; use one of nccl, gloo"
    )


def test_other_accelerators_are_not_bound_by_a_requirement() -> None:
    policy = Policy(required_backend={"cuda": "nccl"})
    assert policy.apply(GPU, options("gloo")).process_group_backend == "gloo"
