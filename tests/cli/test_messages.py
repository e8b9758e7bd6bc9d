"""What a user reads when something is wrong: no pluggy frames in library tracebacks, a broken
plugin's warning that says what to do, colour only on a terminal, lines that fit it."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_cli

from accelbackends.testing import clean_environment

BROKEN = "raise ImportError('vendor runtime missing')\n"


def _python(code: str, env: dict[str, str], pythonpath: Path | None = None) -> str:
    child = clean_environment(os.environ) | env
    if pythonpath is not None:
        child["PYTHONPATH"] = str(pythonpath)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child, timeout=120
    )
    return result.stderr


def test_an_error_raised_through_a_hook_shows_no_pluggy_frames() -> None:
    stderr = _python("import accelbackends; accelbackends.init()", {"RANK": "0"})
    assert "ConfigError: the env:// environment is missing WORLD_SIZE" in stderr
    assert "site-packages/pluggy" not in stderr and "_multicall" not in stderr
    assert "environments/env.py" in stderr  # the code that decided stays visible


def test_a_broken_plugins_warning_names_the_users_line_and_says_what_to_do(
    plugin_dist: Callable[..., Path],
) -> None:
    site = plugin_dist("broken", BROKEN)
    stderr = _python("import accelbackends\naccelbackends.select()", {}, site)
    assert "<string>:2: PluginWarning: accelbackends plugin 'broken'" in stderr
    assert "vendor runtime missing" in stderr
    assert "ACCELBACKENDS_DISABLE=broken" in stderr
    assert "registry.py" not in stderr


def test_the_cli_shows_a_broken_plugins_warning_as_one_clean_line(
    plugin_dist: Callable[..., Path],
) -> None:
    site = plugin_dist("broken", BROKEN)
    result = run_cli("info", pythonpath=site)
    assert result.returncode == 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("accelbackends: warning: accelbackends plugin 'broken'")
    assert lines[0].endswith("set ACCELBACKENDS_DISABLE=broken to skip it")
    assert "\x1b[" not in result.stderr  # piped: no colour


def _on_a_terminal(args: list[str], env: dict[str, str], pythonpath: Path) -> str:
    """The command's output as a terminal shows it (stdout and stderr on one pseudo-terminal)."""
    leader, follower = pty.openpty()
    child = clean_environment(os.environ) | env | {"PYTHONPATH": str(pythonpath), "COLUMNS": "100"}
    child.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "accelbackends", *args],
        stdout=follower,
        stderr=follower,
        env=child | env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is closed once the command has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a Linux pseudo-terminal")
def test_warnings_are_coloured_on_a_terminal_unless_no_color_is_set(
    plugin_dist: Callable[..., Path],
) -> None:
    site = plugin_dist("broken", BROKEN)
    coloured = _on_a_terminal(["info"], {"TERM": "xterm"}, site)
    assert "\x1b[33maccelbackends: warning:\x1b[0m" in coloured
    plain = _on_a_terminal(["info"], {"TERM": "xterm", "NO_COLOR": "1"}, site)
    assert "accelbackends: warning:" in plain and "\x1b[" not in plain


def test_check_json_prints_one_object_on_bad_input_too() -> None:
    import json

    for args, env in (
        (("check", "--json", "--nproc", "x"), {}),
        (("check", "--json"), {"ACCELBACKENDS_BACKEND": "nccl"}),
        (("check", "--json"), {"ACCELBACKENDS_TIMEOUT": "1e300"}),
    ):
        result = run_cli(*args, env=env)
        assert result.returncode == 2
        report = json.loads(result.stdout)
        assert report["ok"] is False and report["error"]
        assert report["versions"]["python"] and report["timestamp"]
        assert result.stderr.startswith("accelbackends: error: ")


QUICK = ("--nproc", "1", "--min-bytes", "1KiB", "--max-bytes", "1KiB", "--iters", "1")


def test_check_lines_fit_the_terminal_width_and_are_whole_when_piped() -> None:
    narrow = run_cli("check", *QUICK, env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    piped = run_cli("check", *QUICK)
    assert max(len(line) for line in piped.stdout.splitlines()) > 80
    assert "\x1b[" not in piped.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a Linux pseudo-terminal")
def test_passed_is_green_on_a_terminal_and_plain_with_no_color(tmp_path: Path) -> None:
    coloured = _on_a_terminal(["check", *QUICK], {"TERM": "xterm"}, tmp_path)
    assert "verdict: \x1b[32mPASSED\x1b[0m" in coloured
    plain = _on_a_terminal(["check", *QUICK], {"TERM": "xterm", "NO_COLOR": "1"}, tmp_path)
    assert "verdict: PASSED" in plain and "\x1b[" not in plain


def test_an_unknown_option_suggests_the_closest_one() -> None:
    result = run_cli("check", "--nprocs", "2")
    assert result.returncode == 2
    assert "did you mean --nproc?" in result.stderr
