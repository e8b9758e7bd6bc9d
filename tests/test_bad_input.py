"""Bad input, as a table: every case must fail with the package's own error (exit code 2 on the
command line, one line, no traceback) whose message names the input, the bad value and what
would be accepted. Nothing may be left initialised."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import torch.distributed as dist

import accelbackends
from accelbackends import ConfigError, Registry
from accelbackends.plugin import devices as _devices

Cli = Callable[..., subprocess.CompletedProcess[str]]
_MASTER = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}

#: (variables, what the message must contain) — read by ``accelbackends info``.
VARIABLE_CASES: list[tuple[dict[str, str], tuple[str, ...]]] = [
    (
        {"ACCELBACKENDS_ACCELERATOR": "tpu"},
        ("ACCELBACKENDS_ACCELERATOR=tpu", "known accelerators: cpu"),
    ),
    ({"ACCELBACKENDS_ACCELERATOR": "hpu"}, ("ACCELBACKENDS_ACCELERATOR=hpu", "not available")),
    (
        {"ACCELBACKENDS_ACCELERATOR": "CPU"},
        ("ACCELBACKENDS_ACCELERATOR=CPU", "known accelerators: cpu"),
    ),
    ({"ACCELBACKENDS_BACKEND": "nccl"}, ("ACCELBACKENDS_BACKEND=nccl", "it supports: gloo")),
    ({"ACCELBACKENDS_BACKEND": "mpi"}, ("ACCELBACKENDS_BACKEND=mpi", "it supports: gloo")),
    (
        {"ACCELBACKENDS_DISABLE": "cpu"},
        ("ACCELBACKENDS_DISABLE", "'cpu' cannot be disabled", "blockable plugins:"),
    ),
    ({"ACCELBACKENDS_DISABLE": "nosuch"}, ("ACCELBACKENDS_DISABLE", "'nosuch'", "known plugins:")),
    (
        {"ACCELBACKENDS_DISABLE": "cuda,,hpu"},
        ("ACCELBACKENDS_DISABLE='cuda,,hpu'", "empty item", "'a,b'"),
    ),
    (
        {"ACCELBACKENDS_DISABLE": "cu da"},
        ("ACCELBACKENDS_DISABLE='cu da'", "not a plugin name", "letters, digits"),
    ),
    ({"ACCELBACKENDS_PLUGINS": "ghost"}, ("ACCELBACKENDS_PLUGINS", "'ghost'", "installed:")),
    ({"ACCELBACKENDS_PLUGINS": "a,,b"}, ("ACCELBACKENDS_PLUGINS='a,,b'", "empty item")),
    (
        {"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "maybe"},
        ("ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD='maybe'", "1, true, yes, on"),
    ),
    (
        {"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "2"},
        ("ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD='2'", "0, false, no, off"),
    ),
    ({"RANK": "x", "WORLD_SIZE": "2", **_MASTER}, ("RANK='x'", "integer >= 0")),
    ({"RANK": "-1", "WORLD_SIZE": "2", **_MASTER}, ("RANK='-1'", "integer >= 0")),
    ({"RANK": "2", "WORLD_SIZE": "2", **_MASTER}, ("RANK=2", "less than WORLD_SIZE=2")),
    # One range for what is no integer and what is too small ('abc' was told ">= 0", then 0
    # was refused with ">= 1").
    ({"RANK": "0", "WORLD_SIZE": "0"}, ("WORLD_SIZE='0'", "integer from 1 to")),
    ({"RANK": "0", "WORLD_SIZE": "abc"}, ("WORLD_SIZE='abc'", "integer >= 1")),
    ({"RANK": "0"}, ("missing WORLD_SIZE", "RANK, WORLD_SIZE")),
    ({"RANK": "0", "WORLD_SIZE": "2"}, ("missing MASTER_ADDR, MASTER_PORT",)),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"},
        ("MASTER_PORT='70000'", "1 to 65535"),
    ),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"},
        ("MASTER_PORT='http'", "integer"),
    ),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", **_MASTER},
        ("LOCAL_RANK=2", "less than LOCAL_WORLD_SIZE=2"),
    ),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3", **_MASTER},
        ("LOCAL_WORLD_SIZE=3", "WORLD_SIZE=2"),
    ),
    (
        {"TORCHELASTIC_RUN_ID": "r", "RANK": "0", "WORLD_SIZE": "1"},
        ("torchrun", "missing LOCAL_RANK"),
    ),
    (
        {
            "OMPI_COMM_WORLD_RANK": "4",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        },
        ("OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"),
    ),
    (
        {"OMPI_COMM_WORLD_RANK": "one", "OMPI_COMM_WORLD_SIZE": "4"},
        ("OMPI_COMM_WORLD_RANK='one'", "integer >= 0"),
    ),
    ({"PMI_RANK": "z", "PMI_SIZE": "2"}, ("PMI_RANK='z'", "integer >= 0")),
    (
        {
            "SLURM_PROCID": "x1",
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0",
            "SLURM_STEP_ID": "0",
            "SLURM_JOB_ID": "7",
            "SLURM_JOB_NODELIST": "n1",
        },
        ("SLURM_PROCID='x1'", "integer >= 0"),
    ),
    (
        {
            "SLURM_PROCID": "3",
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0",
            "SLURM_STEP_ID": "0",
            "SLURM_JOB_ID": "7",
            "SLURM_JOB_NODELIST": "n1",
            "SLURM_STEP_TASKS_PER_NODE": "2",
        },
        ("SLURM_PROCID=3", "SLURM_NTASKS=2"),
    ),
]


def _ids(cases: list[tuple[Any, ...]]) -> list[str]:
    return [next(iter(case[0])) + "-" + str(i) for i, case in enumerate(cases)]


@pytest.mark.parametrize(("env", "fragments"), VARIABLE_CASES, ids=_ids(VARIABLE_CASES))
def test_bad_variable_exits_2_with_one_line_naming_it(
    cli: Cli, env: dict[str, str], fragments: tuple[str, ...]
) -> None:
    result = cli("info", env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert "versions: python" in result.stdout  # info still diagnoses: the whole report
    assert len(lines) == 1 and lines[0].startswith("accelbackends: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


#: (variables, what the message must contain) — read by ``init()`` only.
INIT_VARIABLE_CASES: list[tuple[dict[str, str], tuple[str, ...]]] = [
    ({"ACCELBACKENDS_TIMEOUT": "-1"}, ("ACCELBACKENDS_TIMEOUT='-1'", "positive")),
    ({"ACCELBACKENDS_TIMEOUT": "soon"}, ("ACCELBACKENDS_TIMEOUT='soon'", "positive number")),
    ({"ACCELBACKENDS_TIMEOUT": "inf"}, ("ACCELBACKENDS_TIMEOUT='inf'", "finite")),
    ({"ACCELBACKENDS_TIMEOUT": "1e300"}, ("ACCELBACKENDS_TIMEOUT='1e300'", "out of range")),
    ({"ACCELBACKENDS_TIMEOUT": "1e14"}, ("ACCELBACKENDS_TIMEOUT='1e14'", "30 days")),
    (
        {"ACCELBACKENDS_RENDEZVOUS_TIMEOUT": "1e-9"},
        ("ACCELBACKENDS_RENDEZVOUS_TIMEOUT='1e-9'", "from 0.001"),
    ),
    (
        {"ACCELBACKENDS_RENDEZVOUS_TIMEOUT": "0"},
        ("ACCELBACKENDS_RENDEZVOUS_TIMEOUT='0'", "positive"),
    ),
    (
        {"ACCELBACKENDS_RENDEZVOUS_TIMEOUT": "10s"},
        ("ACCELBACKENDS_RENDEZVOUS_TIMEOUT='10s'", "such as 300"),
    ),
    (
        {"ACCELBACKENDS_PLUGIN_TIMEOUT": "0"},
        ("ACCELBACKENDS_PLUGIN_TIMEOUT='0'", "such as 10 (the default)"),
    ),
]


@pytest.mark.parametrize(("env", "fragments"), INIT_VARIABLE_CASES, ids=_ids(INIT_VARIABLE_CASES))
def test_bad_variable_read_by_init_is_a_config_error_and_nothing_is_initialised(
    env: dict[str, str], fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        accelbackends.init(registry=Registry(env=env))
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert not dist.is_initialized() and not accelbackends.is_initialized()


#: (keyword arguments of init(), what the message must contain)
ARGUMENT_CASES: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    ({"timeout": 0}, ("timeout=0", "positive")),
    ({"timeout": "1h"}, ("timeout='1h'", "positive number")),
    ({"rendezvous_timeout": -3}, ("rendezvous_timeout=-3", "positive")),
    ({"seed": -1}, ("seed=-1", "0 to 4294967295")),
    ({"seed": 2**32}, ("seed=4294967296", "0 to 4294967295")),
    ({"seed": "42"}, ("seed='42'", "integer")),
    ({"threads": 0}, ("threads=0", "integer >= 1")),
    ({"threads": True}, ("threads=True", "integer >= 1")),
    ({"accelerator": ""}, ("accelerator=''", "such as 'cpu'")),
    ({"accelerator": "gpu"}, ("accelerator='gpu'", "known accelerators: cpu")),
    ({"backend": "nccl"}, ("backend='nccl'", "it supports: gloo")),
    ({"cluster": "single"}, ("cluster='single'", "ClusterInfo")),
]


@pytest.mark.parametrize(("kwargs", "fragments"), ARGUMENT_CASES, ids=_ids(ARGUMENT_CASES))
def test_bad_init_argument_is_a_config_error_and_nothing_is_initialised(
    kwargs: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        accelbackends.init(**kwargs)
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert not dist.is_initialized() and not accelbackends.is_initialized()


#: (parser, variables, what the message must contain) — the visible-device variables.
DEVICE_CASES: list[tuple[Callable[..., object], dict[str, str], tuple[str, ...]]] = [
    (
        _devices.cuda_visible,
        {"CUDA_VISIBLE_DEVICES": "0,GPU-8f3c"},
        ("CUDA_VISIBLE_DEVICES='0,GPU-8f3c'", "mixes forms", "GPU UUIDs"),
    ),
    (
        _devices.cuda_visible,
        {"CUDA_VISIBLE_DEVICES": "a,b"},
        ("CUDA_VISIBLE_DEVICES='a,b'", "'a' is not an accepted entry", "GPU indices"),
    ),
    (
        _devices.rocm_visible,
        {"HIP_VISIBLE_DEVICES": "x"},
        ("HIP_VISIBLE_DEVICES='x'", "GPU indices"),
    ),
    (
        _devices.ze_visible,
        {"ZE_AFFINITY_MASK": "0.x"},
        ("ZE_AFFINITY_MASK='0.x'", "device.sub-device"),
    ),
    (
        _devices.habana_visible,
        {"HABANA_VISIBLE_MODULES": "0,0"},
        ("HABANA_VISIBLE_MODULES='0,0'", "twice", "module IDs"),
    ),
]


@pytest.mark.parametrize(
    ("parse", "env", "fragments"),
    DEVICE_CASES,
    ids=[next(iter(case[1])) + f"-{i}" for i, case in enumerate(DEVICE_CASES)],
)
def test_malformed_visible_devices_name_the_variable_and_the_accepted_forms(
    parse: Callable[..., object], env: dict[str, str], fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(env)
    for fragment in fragments:
        assert fragment in str(caught.value)


FLAG_CASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("info", "--jsn"), ("unrecognized arguments: --jsn",)),
    (("inf",), ("'inf' is not a command; did you mean 'info'?",)),
    (("info", "--json=yes"), ("--json",)),
    (("check", "--nproc", "0"), ("'0' is not valid; use an integer >= 1",)),
]


@pytest.mark.parametrize(
    ("args", "fragments"), FLAG_CASES, ids=["-".join(case[0]) for case in FLAG_CASES]
)
def test_bad_flags_exit_2_with_one_line(
    cli: Cli, args: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error_lines) == 1
    for fragment in fragments:
        assert fragment in error_lines[0]


def test_the_table_covers_at_least_forty_cases() -> None:
    total = (
        len(VARIABLE_CASES)
        + len(INIT_VARIABLE_CASES)
        + len(ARGUMENT_CASES)
        + len(DEVICE_CASES)
        + len(FLAG_CASES)
    )
    assert total >= 40
