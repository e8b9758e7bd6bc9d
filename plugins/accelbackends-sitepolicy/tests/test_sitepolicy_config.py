"""Reading the policy: the file's keys, the variables, and errors that say what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from accelbackends_sitepolicy import load_policy, policy_from_file
from accelbackends_sitepolicy.__main__ import main

import accelbackends

FULL = """
min_timeout = 900
nccl_socket_ifname = "^docker,lo"
gloo_socket_ifname = "eth0"

[required_backend]
cuda = "nccl"
npu = "hccl"

[env]
NCCL_IB_HCA = "mlx5"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_key_of_a_policy_file_is_read(tmp_path: Path) -> None:
    policy = policy_from_file(write(tmp_path, FULL))
    assert policy.min_timeout == 900.0
    assert (policy.nccl_socket_ifname, policy.gloo_socket_ifname) == ("^docker,lo", "eth0")
    assert policy.required_backend == {"cuda": "nccl", "npu": "hccl"}
    assert policy.env == {"NCCL_IB_HCA": "mlx5"}
    assert policy.source("min_timeout") == f"{tmp_path / 'site.toml'}: min_timeout"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "min_timeout = -5",
            "min_timeout = -5 is not valid; use a positive number of seconds, e.g. 900",
        ),
        (
            'min_timeout = "900"',
            "min_timeout = '900' is not valid; use a positive number of seconds, e.g. 900",
        ),
        ("min_timeout = true", "min_timeout = True is not valid"),
        (
            'nccl_socket_ifname = "eth0 eth1"',
            "nccl_socket_ifname = 'eth0 eth1' is not valid; use interface names or prefixes, "
            "comma-separated, optionally after ^ (exclude) or = (exact), e.g. ib0 or ^docker,lo",
        ),
        (
            'gloo_socket_ifname = "^lo"',
            "gloo_socket_ifname = '^lo' is not valid; use interface names, comma-separated, "
            "e.g. eth0",
        ),
        (
            "[required_backend]\ncuda = 5",
            'required_backend.cuda = 5 is not valid; use a backend name in lower case, e.g. "nccl"',
        ),
        (
            '[required_backend]\nCUDA = "nccl"',
            "required_backend = 'CUDA' is not valid; use accelerator names in lower case",
        ),
        ('required_backend = "nccl"', "required_backend = 'nccl' is not valid; use a table"),
        ("[env]\nNCCL_DEBUG = 1", 'env.NCCL_DEBUG = 1 is not valid; use a string, e.g. "1"'),
        (
            'gloo_socket_ifname = "eth0"\n[env]\nGLOO_SOCKET_IFNAME = "eth1"',
            "GLOO_SOCKET_IFNAME is given twice, as gloo_socket_ifname and as "
            "env.GLOO_SOCKET_IFNAME; keep one",
        ),
        (
            "min_timout = 900",
            "unknown key 'min_timout'; accepted keys: env, gloo_socket_ifname, min_timeout, "
            "nccl_socket_ifname, required_backend",
        ),
    ],
)
def test_a_bad_value_names_the_file_the_key_the_value_and_what_is_accepted(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(accelbackends.ConfigError) as error:
        policy_from_file(path)
    assert str(error.value).startswith(f"site policy {path}: ")
    assert expected in str(error.value)


def test_a_file_that_is_not_toml_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "min_timeout = 900\nthis is not toml\n")
    with pytest.raises(accelbackends.ConfigError) as error:
        policy_from_file(path)
    assert str(error.value).startswith(f"site policy {path} is not valid TOML: ")
    assert "line 2" in str(error.value)


def test_a_missing_file_names_the_variable_and_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    with pytest.raises(accelbackends.ConfigError) as error:
        load_policy({"ACCELBACKENDS_SITEPOLICY_FILE": str(path)})
    assert str(error.value) == (
        f"ACCELBACKENDS_SITEPOLICY_FILE={str(path)!r}: no such file; point it at the site "
        "policy (TOML)"
    )


def test_variables_win_over_the_file_key_by_key(tmp_path: Path) -> None:
    policy = load_policy(
        {
            "ACCELBACKENDS_SITEPOLICY_FILE": str(write(tmp_path, FULL)),
            "ACCELBACKENDS_SITEPOLICY_MIN_TIMEOUT": "1200.5",
            "ACCELBACKENDS_SITEPOLICY_REQUIRED_BACKEND": "cuda=gloo, xpu=xccl",
        }
    )
    assert policy.min_timeout == 1200.5
    assert policy.source("min_timeout") == "ACCELBACKENDS_SITEPOLICY_MIN_TIMEOUT"
    assert policy.required_backend == {"cuda": "gloo", "npu": "hccl", "xpu": "xccl"}
    assert policy.gloo_socket_ifname == "eth0"  # from the file, untouched


def test_variables_alone_make_a_policy() -> None:
    policy = load_policy(
        {
            "ACCELBACKENDS_SITEPOLICY_NCCL_SOCKET_IFNAME": "=ib0",
            "ACCELBACKENDS_SITEPOLICY_GLOO_SOCKET_IFNAME": "eth0,eth1",
        }
    )
    assert (policy.nccl_socket_ifname, policy.gloo_socket_ifname) == ("=ib0", "eth0,eth1")
    assert policy.min_timeout is None


def test_no_file_and_no_variable_is_an_empty_policy() -> None:
    assert load_policy({"ACCELBACKENDS_SITEPOLICY_FILE": "  "}).empty


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "ACCELBACKENDS_SITEPOLICY_MIN_TIMEOUT",
            "ten minutes",
            "ACCELBACKENDS_SITEPOLICY_MIN_TIMEOUT='ten minutes' is not valid; use a positive "
            "number of seconds, e.g. 900",
        ),
        (
            "ACCELBACKENDS_SITEPOLICY_MIN_TIMEOUT",
            "inf",
            "ACCELBACKENDS_SITEPOLICY_MIN_TIMEOUT='inf' is not valid",
        ),
        (
            "ACCELBACKENDS_SITEPOLICY_GLOO_SOCKET_IFNAME",
            "eth0;eth1",
            "ACCELBACKENDS_SITEPOLICY_GLOO_SOCKET_IFNAME='eth0;eth1' is not valid; use interface "
            "names, comma-separated, e.g. eth0",
        ),
        (
            "ACCELBACKENDS_SITEPOLICY_REQUIRED_BACKEND",
            "cuda=nccl,npu",
            "ACCELBACKENDS_SITEPOLICY_REQUIRED_BACKEND='cuda=nccl,npu' is not valid: 'npu' is "
            "not an accelerator=backend pair of lower-case names; use accelerator=backend "
            "pairs, comma-separated, e.g. cuda=nccl,npu=hccl",
        ),
    ],
)
def test_a_bad_variable_is_named_with_its_value_and_what_is_accepted(
    variable: str, value: str, expected: str
) -> None:
    with pytest.raises(accelbackends.ConfigError) as error:
        load_policy({variable: value})
    assert str(error.value).startswith(expected)


def test_the_checker_shows_a_valid_policy_and_where_each_setting_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, FULL)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"site policy ({path}):"
    assert f"  min_timeout = 900 s  ({path}: min_timeout)" in out
    assert f"  required_backend.npu = 'hccl'  ({path}: required_backend.npu)" in out


def test_the_checker_exits_2_with_the_error_for_a_bad_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(write(tmp_path, "min_timeout = 0"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accelbackends-sitepolicy: error: site policy ")
    assert "min_timeout = 0 is not valid" in err
