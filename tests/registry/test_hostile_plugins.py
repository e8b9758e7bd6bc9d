"""Broken and hostile third-party plugins, installed as a distribution with an entry point and
run through the real command in a child process: each is named, contained, and the command still
answers (``--json`` stays parseable, the command exits, nothing waits for the plugin)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_cli

from accelbackends.testing import cluster as kit_cluster

PluginDist = Callable[..., Path]

#: A plugin call that never returns is given this long (ACCELBACKENDS_PLUGIN_TIMEOUT).
LIMIT = {"ACCELBACKENDS_PLUGIN_TIMEOUT": "2"}
#: Only the CPU is considered, whatever this machine has.
CPU = {"ACCELBACKENDS_DISABLE": "cuda,hpu,xpu"}

_DECLARES_NOTHING = """
from accelbackends.plugin import hookimpl

@hookimpl
def accelbackends_declare_accelerators():
    return []
"""

_FOREVER = "threading.Event().wait()"


def _info(site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # The child's own limit is the hang guard: a contained plugin never gets near it.
    return run_cli("info", "--json", env={**CPU, **LIMIT, **env}, pythonpath=site, timeout=120)


def _plugin_entry(report: dict[str, object], name: str) -> dict[str, str]:
    plugins = report["plugins"]
    assert isinstance(plugins, list)
    (entry,) = (p for p in plugins if p["name"] == name)
    return dict(entry)


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("import", "raise SystemExit(5)\n"),
        (
            "declare hook",
            "from accelbackends.plugin import hookimpl\n\n"
            "@hookimpl\ndef accelbackends_declare_accelerators():\n    raise SystemExit(6)\n",
        ),
        ("import", "raise KeyboardInterrupt\n"),
    ],
)
def test_plugin_exiting_while_loading_is_reported_by_name_and_info_still_answers(
    plugin_dist: PluginDist, where: str, source: str
) -> None:
    result = _info(plugin_dist("quitter", source))
    assert result.returncode == 0, result.stderr
    entry = _plugin_entry(json.loads(result.stdout), "quitter")
    assert entry["status"] == "failed"
    assert entry["distribution"] == "accelbackends-quitter"
    assert "SystemExit" in entry["error"] or "KeyboardInterrupt" in entry["error"]
    assert "quitter" in result.stderr  # the warning names it too


def test_plugin_exiting_in_the_cluster_hook_is_an_error_naming_it(
    plugin_dist: PluginDist,
) -> None:
    source = _DECLARES_NOTHING + (
        "\n@hookimpl\ndef accelbackends_cluster_environment(env):\n    raise SystemExit(8)\n"
    )
    result = _info(plugin_dist("quitter", source))
    assert result.returncode == 1, result.stderr  # a plugin's failure, not bad input
    report = json.loads(result.stdout)  # info still reports, the error on the cluster
    assert report["error_kind"] == "failure"
    error = report["cluster"]["error"]
    assert "plugin 'quitter' failed while recognising the cluster environment" in error
    assert "SystemExit: 8" in error


_NOISY = """
import os, sys
print("hello from the plugin's import")
sys.stdout.flush()
os.write(1, b"and straight to file descriptor 1\\n")
"""


def test_plugin_printing_at_import_does_not_reach_info_json(plugin_dist: PluginDist) -> None:
    result = _info(plugin_dist("noisy", _NOISY + _DECLARES_NOTHING))
    assert result.returncode == 0, result.stderr
    assert _plugin_entry(json.loads(result.stdout), "noisy")["status"] == "active"
    assert "hello from the plugin's import" in result.stderr
    assert "file descriptor 1" in result.stderr


@pytest.mark.slow
def test_plugin_printing_at_import_does_not_reach_check_json(plugin_dist: PluginDist) -> None:
    site = plugin_dist("noisy", _NOISY + _DECLARES_NOTHING)
    result = run_cli(
        "check",
        "--json",
        "--nproc",
        "2",
        "--max-bytes",
        "4096",
        env=CPU,
        pythonpath=site,
        timeout=150,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["checks"]
    assert "hello from the plugin's import" in result.stderr


_THREAD = f"""
import threading
threading.Thread(target=lambda: {_FOREVER}, name="plugin-worker").start()
"""


@pytest.mark.parametrize(
    "command", [("info", "--json"), ("check", "--nproc", "2", "--max-bytes", "4096")]
)
def test_plugin_starting_a_thread_at_import_does_not_keep_the_command_alive(
    plugin_dist: PluginDist, command: tuple[str, ...]
) -> None:
    site = plugin_dist("lingering", "import threading\n" + _THREAD + _DECLARES_NOTHING)
    # Without containment the child never exits and run_cli's limit raises TimeoutExpired.
    result = run_cli(*command, env=CPU, pythonpath=site, timeout=150)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("where", "source", "failure"),
    [
        ("import", f"import threading\n{_FOREVER}\n", "import did not finish within 2 s"),
        (
            "declare hook",
            "import threading\nfrom accelbackends.plugin import hookimpl\n\n"
            f"@hookimpl\ndef accelbackends_declare_accelerators():\n    {_FOREVER}\n",
            "accelbackends_declare_accelerators did not return within 2 s",
        ),
    ],
)
def test_plugin_that_never_finishes_loading_is_failed_after_the_limit(
    plugin_dist: PluginDist, where: str, source: str, failure: str
) -> None:
    result = _info(plugin_dist("sleeper", source))
    assert result.returncode == 0, result.stderr
    entry = _plugin_entry(json.loads(result.stdout), "sleeper")
    assert entry["status"] == "failed"
    assert failure in entry["error"]


def test_cluster_hook_that_never_returns_is_an_error_naming_the_plugin(
    plugin_dist: PluginDist,
) -> None:
    source = (
        "import threading\n"
        + _DECLARES_NOTHING
        + (f"\n@hookimpl\ndef accelbackends_cluster_environment(env):\n    {_FOREVER}\n")
    )
    result = _info(plugin_dist("sleeper", source))
    assert result.returncode == 1, result.stderr
    assert (  # info still reports, the error on the cluster
        "plugin 'sleeper' did not answer within 2 s while recognising the cluster environment"
        in json.loads(result.stdout)["cluster"]["error"]
    )


_DETECT = """
from accelbackends.plugin import AcceleratorSpec, Detection, hookimpl

def detect(probe):
    raise {error}

def bind(request):
    raise RuntimeError("never bound")

@hookimpl
def accelbackends_declare_accelerators():
    return [AcceleratorSpec(name="grumpy", device_type="cpu", priority=5, backends=("gloo",),
                            default_backend="gloo", detect=detect, bind=bind)]
"""


@pytest.mark.parametrize("error", ["KeyboardInterrupt", "SystemExit(3)"])
def test_detect_raising_an_exit_is_reported_as_what_it_raised_not_as_a_timeout(
    plugin_dist: PluginDist, error: str
) -> None:
    result = _info(plugin_dist("grumpy", _DETECT.format(error=error)))
    assert result.returncode == 0, result.stderr
    (grumpy,) = (a for a in json.loads(result.stdout)["accelerators"] if a["name"] == "grumpy")
    assert not grumpy["available"]
    assert grumpy["reason"].startswith(f"plugin error in 'grumpy': {error.split('(')[0]}")
    assert "timed out" not in grumpy["reason"]


_HUGE_NAME = """
from accelbackends.plugin import AcceleratorSpec, hookimpl

@hookimpl
def accelbackends_declare_accelerators():
    return [AcceleratorSpec(name="a" * 1_000_000, device_type="cpu", priority=5,
                            backends=("gloo",), default_backend="gloo",
                            detect=lambda probe: None, bind=lambda request: None)]
"""


def test_plugin_declaring_a_megabyte_name_is_failed_with_a_short_error(
    plugin_dist: PluginDist,
) -> None:
    """Before: a 1 MB accelerator name was accepted and printed in every table."""
    result = _info(plugin_dist("bigname", _HUGE_NAME))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) < 100_000 and len(result.stderr) < 10_000
    entry = _plugin_entry(json.loads(result.stdout), "bigname")
    assert entry["status"] == "failed"
    assert "(1000000 characters; at most 64)" in entry["error"]
    assert len(entry["error"]) < 1000


@pytest.mark.parametrize(
    "command", [("info", "--json"), ("check", "--json", "--max-bytes", "4096")]
)
def test_plugin_calling_os_exit_at_import_is_failed_by_name_and_the_command_answers(
    plugin_dist: PluginDist, command: tuple[str, ...]
) -> None:
    """Before: info and check ended with the plugin's code (3) and no output."""
    site = plugin_dist("exiter", "import os\nos._exit(3)\n")
    result = run_cli(*command, env={**CPU, **LIMIT}, pythonpath=site, timeout=150)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    if command[0] == "info":
        entry = _plugin_entry(report, "exiter")
        assert entry["status"] == "failed"
        assert "called os._exit(3) while it was imported" in entry["error"]
    assert "plugin 'exiter'" in result.stderr and "os._exit(3)" in result.stderr


#: Blocks holding the GIL: a ctypes.PyDLL call does not release it (a C extension's busy loop).
#: The line before it tells the test that the plugin is there.
_HOLD_GIL = (
    "import ctypes, os\nos.write(2, b'holding the GIL\\n')\nctypes.PyDLL(None).sleep(3600)\n"
)

_GIL_HOOKS = {
    "import": _HOLD_GIL,
    "declare hook": (
        "from accelbackends.plugin import hookimpl\n\n"
        "@hookimpl\ndef accelbackends_declare_accelerators():\n"
        + "".join(f"    {line}\n" for line in _HOLD_GIL.splitlines())
    ),
    "probe": _DETECT.replace(
        "    raise {error}\n", "".join(f"    {line}\n" for line in _HOLD_GIL.splitlines())
    ).replace("grumpy", "hog"),
    "cluster hook": (
        _DECLARES_NOTHING
        + "\n@hookimpl\ndef accelbackends_cluster_environment(env):\n"
        + "".join(f"    {line}\n" for line in _HOLD_GIL.splitlines())
    ),
}


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("import", "plugin 'hog''s import"),
        ("declare hook", "plugin 'hog''s accelbackends_declare_accelerators hook"),
        ("probe", "plugin 'hog''s probe of 'hog'"),
        ("cluster hook", "plugin 'hog''s hook while recognising the cluster environment"),
    ],
)
def test_plugin_holding_the_gil_ends_info_after_the_limit_naming_it(
    plugin_dist: PluginDist, where: str, said: str
) -> None:
    """Before: the thread's deadline never fired (the waiting thread needs the GIL), and info
    ran until the plugin let go of it (here an hour; the safety net failed the test)."""
    result = _info(plugin_dist("hog", _GIL_HOOKS[where]))
    assert result.returncode == 1, result.stderr
    assert (
        f"accelbackends: {said} did not return within 2 s while holding the GIL; "
        "the process ends (exit 1)" in result.stderr
    )
    assert result.stderr.count("holding the GIL\n") == 1  # the plugin ran once, then the end


def test_sigterm_ends_info_while_a_plugin_holds_the_gil(plugin_dist: PluginDist) -> None:
    """Before: the SIGTERM handler and its watchdog thread need the GIL: the signal was obeyed
    only once the plugin let go of it. The limit is far away: only the signal can end it."""
    site = plugin_dist("hog", _HOLD_GIL)
    env = kit_cluster.clean_environment(os.environ)
    env.update({**CPU, "ACCELBACKENDS_PLUGIN_TIMEOUT": "3000", "PYTHONPATH": str(site)})
    with subprocess.Popen(
        [sys.executable, "-m", "accelbackends", "info"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    ) as child:
        try:
            assert child.stderr is not None
            assert child.stderr.readline() == b"holding the GIL\n"
            child.send_signal(signal.SIGTERM)
            # Obeyed at once, by the signal's default action; the timeout is a safety net only.
            assert child.wait(timeout=60) == -signal.SIGTERM
        finally:
            child.kill()
