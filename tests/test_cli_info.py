"""``accelbackends info``: the report, as text and JSON, through a real child process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import accelbackends

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_info_json_has_the_documented_keys(cli: Cli) -> None:
    result = cli("info", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {
        "plugins",
        "accelerators",
        "selected",
        "cluster",
        "cpu_affinity",
        "overrides",
        "versions",
    }
    assert report["selected"]["accelerator"] == "cpu"
    assert report["selected"]["backend"] == "gloo"
    assert report["selected"]["reason"]
    cpu = next(a for a in report["accelerators"] if a["name"] == "cpu")
    assert set(cpu) >= {
        "name",
        "plugin",
        "available",
        "device_count",
        "priority",
        "backends",
        "default_backend",
        "reason",
    }
    assert cpu["available"] is True and cpu["backends"] == ["gloo"]
    assert set(report["cluster"]) >= {
        "launcher",
        "rank",
        "world_size",
        "local_rank",
        "local_world_size",
        "node_rank",
        "master_addr",
        "master_port",
    }
    assert report["cluster"]["launcher"] == "single"
    assert report["overrides"] == {}
    assert report["versions"]["accelbackends"] == accelbackends.__version__
    assert report["versions"]["torch"].startswith("2.")
    # Built-ins are hidden by default, as pytest and llm do.
    assert all(not p["builtin"] for p in report["plugins"])


def test_info_all_lists_the_builtin_plugins(cli: Cli) -> None:
    plugins = json.loads(cli("info", "--json", "--all").stdout)["plugins"]
    names = {p["name"] for p in plugins}
    assert {"cpu", "torchrun", "env", "single", "defaults"} <= names
    assert {p["status"] for p in plugins} == {"active"}
    assert set(plugins[0]) >= {"name", "distribution", "version", "status", "error"}


def test_info_text_explains_the_choice_and_the_cluster(cli: Cli) -> None:
    result = cli("info", env={"ACCELBACKENDS_TIMEOUT": "60"})
    assert result.returncode == 0
    text = result.stdout
    assert "selected: cpu with gloo" in text
    assert "why: the only available accelerator" in text
    assert "cluster: single" in text
    assert "ACCELBACKENDS_TIMEOUT=60" in text


def test_info_shows_where_each_cluster_field_came_from(cli: Cli) -> None:
    env = {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    report = json.loads(cli("info", "--json", env=env).stdout)
    assert report["cluster"]["launcher"] == "env"
    assert report["cluster"]["rank"] == 1 and report["cluster"]["node_rank"] == 0
    assert report["cluster"]["sources"]["local_world_size"] == "LOCAL_WORLD_SIZE"
    assert "from RANK" in cli("info", env=env).stdout


def test_info_lists_a_failed_plugin_with_its_error_and_still_works(
    cli: Cli, plugin_dist: Callable[..., Path]
) -> None:
    site = plugin_dist("broken", "raise ImportError('vendor runtime missing')\n")
    result = cli("info", "--json", pythonpath=site)
    assert result.returncode == 0
    broken = next(p for p in json.loads(result.stdout)["plugins"] if p["name"] == "broken")
    assert broken["status"] == "failed"
    assert "vendor runtime missing" in broken["error"]
    assert "was not loaded" in result.stderr  # the warning


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ACCELBACKENDS_ACCELERATOR": "hpux"},
            "ACCELBACKENDS_ACCELERATOR=hpux is not a known accelerator; known accelerators: cpu",
        ),
        (
            {"ACCELBACKENDS_BACKEND": "nccl"},
            "ACCELBACKENDS_BACKEND=nccl is not supported by accelerator 'cpu'; it supports: gloo",
        ),
        ({"ACCELBACKENDS_DISABLE": "cpu"}, "plugin 'cpu' cannot be disabled"),
        (
            {"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "sure"},
            "ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD='sure' is not a boolean",
        ),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not valid"),
    ],
)
def test_bad_override_exits_2_with_one_line_and_no_traceback(
    cli: Cli, env: dict[str, str], message: str
) -> None:
    result = cli("info", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("accelbackends: error: ")
    assert message in lines[0]


def test_bad_flag_exits_2_naming_it(cli: Cli) -> None:
    result = cli("info", "--jsn")
    assert result.returncode == 2
    assert "unrecognized arguments: --jsn" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_command_exits_2(cli: Cli) -> None:
    assert cli().returncode == 2


def test_version_flag(cli: Cli) -> None:
    result = cli("--version")
    assert (
        result.returncode == 0
        and result.stdout.strip() == f"accelbackends {accelbackends.__version__}"
    )


#: The console script pip installed beside this interpreter (a venv's bin/), or one on PATH.
SCRIPT = Path(sys.executable).with_name("accelbackends")
if not SCRIPT.exists():
    SCRIPT = Path(shutil.which("accelbackends") or SCRIPT)


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed here")
def test_console_script_runs_the_same_command() -> None:
    result = subprocess.run(
        [str(SCRIPT), "info", "--json"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0
    assert json.loads(result.stdout)["selected"]["accelerator"] == "cpu"


def test_module_entry_point_is_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accelbackends", "info", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert json.loads(result.stdout)["selected"]["backend"] == "gloo"
