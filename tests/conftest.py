"""Shared fixtures: a clean environment per test, fake plugin distributions, CLI runs."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import accelbackends
from accelbackends import accelerators
from accelbackends.host import guard
from accelbackends.plugin import config
from accelbackends.plugin import installed as _installed
from accelbackends.registry import facade as _registry
from accelbackends.testing import cluster as kit_cluster
from accelbackends.testing import tree as kit_tree

# The per-user secret file (rendezvous.membership) goes to a fresh directory, never into the
# home of whoever runs the suite; child processes inherit it.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="accelbackends-tests-config-")

#: The machine as every test not marked ``gpu`` sees it: its CPUs and no accelerator, on a GPU
#: node too (ACCELBACKENDS_PROBE_ROOT, the package's one seam for it). Set here, before any test
#: or fixture runs, so that every process a test starts inherits it; a test that needs a device
#: builds a FakeTree of its own, and only tests marked ``gpu`` see the real one.
HERMETIC_ROOT = str(
    kit_tree.FakeTree(tempfile.mkdtemp(prefix="accelbackends-tests-host-")).host_cpus().root
)
os.environ[config.PROBE_ROOT] = HERMETIC_ROOT

#: The accelerators the package declares itself (cpu, cuda, hpu, xpu), sorted.
BUILTIN_ACCELERATORS = sorted(name for name, _ in accelerators.BUILTIN)
#: An environment in which only the CPU can be chosen, whatever hardware the test machine has.
CPU_ONLY = {"ACCELBACKENDS_DISABLE": ",".join(a for a in BUILTIN_ACCELERATORS if a != "cpu")}

#: Open MPI's remote-shell agent: which program it starts daemons with.
_RSH_AGENT = "OMPI_MCA_plm_rsh_agent"


#: Plugins installed in the environment before the tests started (e.g. the packages in plugins/):
#: hidden from in-process registries, so that a test sees only the plugins it installs itself.
_PREINSTALLED = frozenset(
    (ep.name, ep.value) for ep in _installed.entry_points(_registry.ENTRY_POINT_GROUP)
)


def _entry_points_of_this_test() -> list[_installed.EntryPoint]:
    return [
        ep
        for ep in _installed.entry_points(_registry.ENTRY_POINT_GROUP)
        if (ep.name, ep.value) not in _PREINSTALLED
    ]


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's own XDG cache directory: the installed-distribution cache of the test runs
    and their children stays out of the developer's home."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(autouse=True)
def clean_environment(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> Iterator[None]:
    """Every test starts without launcher or ACCELBACKENDS_* variables and a fresh registry,
    and sees the machine without accelerators unless it is marked ``gpu``."""
    monkeypatch.setattr(_registry, "_entry_points", _entry_points_of_this_test)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    for key in list(os.environ):
        if kit_cluster.is_launcher_variable(key):
            monkeypatch.delenv(key)
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv(config.PROBE_ROOT, HERMETIC_ROOT)
    else:
        monkeypatch.delenv(config.PROBE_ROOT, raising=False)  # the machine as it is
    if not any(shutil.which(agent) for agent in ("ssh", "rsh")):
        # Open MPI refuses to start, even alone on one machine (mpirun, or a singleton such as
        # Lightning's mpi4py import), where its rsh agent is not on PATH; `false` never runs.
        monkeypatch.setenv(_RSH_AGENT, os.environ.get(_RSH_AGENT, "false"))
    # The command line wraps to COLUMNS where it is set (pytest-xdist's workers set it to 80):
    # its tests start piped, as a script would, and give a width where they want one.
    for size in ("COLUMNS", "LINES"):
        monkeypatch.delenv(size, raising=False)
    accelbackends.destroy()
    accelbackends.reset()
    yield
    accelbackends.destroy()
    accelbackends.reset()


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Install a plugin distribution for real: a module and its ``*.dist-info`` with an
    ``entry_points.txt`` in the ``accelbackends`` group, in a directory put on ``sys.path``.

    ``plugin_dist("ascend", source)`` writes ``source`` as the plugin module and returns the
    directory (to put on PYTHONPATH for subprocesses too).
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def make(
        entry_name: str, source: str, *, distribution: str | None = None, version: str = "1.0"
    ) -> Path:
        module = f"abplugin_{entry_name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        dist = distribution or f"accelbackends-{entry_name}"
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[accelbackends]\n{entry_name} = {module}\n")
        importlib.invalidate_caches()
        return site

    return make


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m accelbackends ARGS`` in a child process; see :func:`run_cli`."""
    return run_cli


def fake_accelerator(
    name: str,
    priority: int = 10,
    available: bool = True,
    *,
    backends: tuple[str, ...] = ("gloo",),
    reason: str = "",
    devices: int = 1,
    **fields: object,
) -> accelbackends.AcceleratorSpec:
    """A spec whose probe answers as told and whose device is the CPU (its backend runs on Gloo)."""

    def detect(probe: accelbackends.Probe) -> accelbackends.Detection:
        return accelbackends.Detection(
            available,
            devices if available else 0,
            reason or ("fake device" if available else "no fake device"),
        )

    def bind(request: accelbackends.BindRequest) -> object:
        import torch

        return torch.device("cpu")

    return accelbackends.AcceleratorSpec(
        name=name,
        device_type="cpu",
        priority=priority,
        backends=backends,
        default_backend=backends[0],
        detect=detect,
        bind=bind,
        **fields,  # type: ignore[arg-type]
    )


class AcceleratorPlugin:
    """An inline plugin declaring the given specs."""

    def __init__(self, *specs: accelbackends.AcceleratorSpec) -> None:
        self.specs = list(specs)

    @accelbackends.hookimpl
    def accelbackends_declare_accelerators(self) -> list[accelbackends.AcceleratorSpec]:
        return self.specs


def wait_until_no_plugin_call_is_stuck(limit: float = 60) -> None:
    """After a test released a plugin call it had let hang: wait for its thread to end, so that
    later tests do not see it as stuck (spawn() would not fork). ``limit`` is a hang guard."""
    deadline = time.monotonic() + limit
    while guard.stuck() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert guard.stuck() == []


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    pythonpath: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m accelbackends ARGS`` in a child with a clean environment plus ``env``."""
    child_env = kit_cluster.clean_environment(os.environ)
    child_env.update(env or {})
    if pythonpath is not None:
        child_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(pythonpath), child_env.get("PYTHONPATH", "")])
        )
    return subprocess.run(
        [sys.executable, "-m", "accelbackends", *args],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout,
        check=False,
    )
