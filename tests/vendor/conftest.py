"""The real vendor wheels that install from the public index, each met by its plugin.

``.ci/vendor-wheels.sh`` makes one virtual environment per wheel and runs the matching file
here in it; in any other environment the tests skip, naming the wheel they need. Each test runs
the command line or ``init()`` in a fresh process: a vendor wheel must never break the process
that asks about it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from accelbackends.plugin.config import PROBE_ROOT
from accelbackends.testing.cluster import clean_environment

ROOT = Path(__file__).resolve().parents[2]


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def needs(distribution: str) -> pytest.MarkDecorator:
    """Skip unless ``distribution`` is installed (the CI script installs it in its own venv)."""
    return pytest.mark.skipif(
        installed_version(distribution) is None,
        reason=f"needs the real {distribution} wheel installed (.ci/vendor-wheels.sh does so in "
        "its own virtual environment)",
    )


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without launcher or ACCELBACKENDS_* variables, plus ``extra``,
    with this source tree first on the path."""
    # These tests meet the real vendor wheels on the real machine (each file skips where that
    # machine has the vendor's driver): the suite's probe root, which hides the machine's
    # devices, is left out with the launcher variables.
    env = {
        k: v
        for k, v in clean_environment(os.environ).items()
        if not k.startswith("TORCH_DEVICE_BACKEND") and k != PROBE_ROOT
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run(args: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment(**extra),
        cwd=ROOT,
    )


def info(**extra: str) -> tuple[int, dict[str, Any]]:
    result = run(["-m", "accelbackends", "info", "--json", "--all"], **extra)
    return result.returncode, json.loads(result.stdout)


def reasons(report: dict[str, Any]) -> dict[str, str]:
    return {a["name"]: a["reason"] for a in report["accelerators"]}


#: init() on one rank in a fresh process; prints what was chosen and which vendor modules and
#: backends it left behind.
INIT_PROGRAM = """
import json, sys
import accelbackends
try:
    ctx = accelbackends.init()
except accelbackends.AccelBackendsError as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(0)
import torch.distributed as dist
registered = sorted(getattr(dist.Backend, "_plugins", {}))
print(json.dumps({
    "accelerator": ctx.accelerator,
    "backend": ctx.backend,
    "registered": registered,
    "vendor_modules": sorted(
        m for m in ("intel_extension_for_pytorch", "torch_npu", "habana_frameworks", "pynvml")
        if m in sys.modules
    ),
}))
accelbackends.destroy()
"""


def init(**extra: str) -> dict[str, Any]:
    result = run(["-c", INIT_PROGRAM], **extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def check(**extra: str) -> subprocess.CompletedProcess[str]:
    """A short standalone check: 2 CPU ranks, two small sizes."""
    return run(
        ["-m", "accelbackends", "check", "--max-bytes", "2KiB", "--iters", "2", "--json"],
        **extra,
    )
