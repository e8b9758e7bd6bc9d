"""The plugin author's kit as a pytest plugin: fixtures for testing accelbackends plugins.

Installing accelbackends registers this module with pytest (entry point ``pytest11``, name
``accelbackends``), so its fixtures are there in every test session without a ``conftest.py``;
``pytest -p no:accelbackends`` turns it off. No fixture is autouse: a project that merely
installs accelbackends sees no change in its tests.

Fixtures:

- ``accelbackends_clean_env``: no launcher or ``ACCELBACKENDS_*`` variable in ``os.environ``, a
  fresh default registry, and no process group left behind.
- ``accelbackends_registry``: a factory of fresh [`Registry`][accelbackends.Registry] objects with
  an injected environment, an empty fake machine and plugins registered inline.
- ``accelbackends_tree`` / ``accelbackends_stack``: a `FakeTree`
  and a `FakeStack` in the test's temporary directory.
- ``accelbackends_cluster``: the variables a launcher sets for one rank of a job.
- ``accelbackends_install``: a plugin distribution with real entry points on ``sys.path``.
- ``accelbackends_ranks``: real ranks in child processes, through ``accelbackends.init()``.

Importing this module imports neither torch nor a vendor runtime: pytest loads it in the test
session of everyone who installs accelbackends.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pytest

from ..plugin import config
from ..rendezvous import torchlog
from .cluster import clean_environment, launcher_env
from .plugins import install_distribution
from .stack import FakeStack
from .tree import FakeTree

if TYPE_CHECKING:
    from ..registry.facade import Registry

__all__ = [
    "ClusterFactory",
    "DistributionInstaller",
    "RankReport",
    "RankRunner",
    "RegistryFactory",
    "accelbackends_clean_env",
    "accelbackends_cluster",
    "accelbackends_install",
    "accelbackends_ranks",
    "accelbackends_registry",
    "accelbackends_stack",
    "accelbackends_tree",
]

Plugins: TypeAlias = Mapping[str, object] | Iterable[tuple[str, object]]


def _reset_accelbackends() -> None:
    from ..job.lifecycle import destroy
    from ..registry.facade import reset

    destroy()
    reset()


@pytest.fixture
def accelbackends_clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``os.environ`` without launcher variables (``RANK``, ``SLURM_*``, ``OMPI_*``, ...) and
    ``ACCELBACKENDS_*`` variables, and a fresh default registry; after the test, the process
    group made by [`accelbackends.init`][accelbackends.init] (if any) is destroyed and the
    registry forgotten.

    Make it autouse in your own ``conftest.py`` to isolate every test from the shell:

    ```python
    @pytest.fixture(autouse=True)
    def _isolated(accelbackends_clean_env): ...
    ```
    """
    kept = clean_environment(os.environ)
    for key in list(os.environ):
        if key not in kept:
            monkeypatch.delenv(key)
    _reset_accelbackends()
    yield
    _reset_accelbackends()


@pytest.fixture
def accelbackends_tree(tmp_path: Path) -> FakeTree:
    """An empty fake machine (sysfs, procfs, ``/dev``) in the test's temporary directory; add
    devices with its methods or `write`."""
    return FakeTree(tmp_path / "accelbackends-root")


@pytest.fixture
def accelbackends_stack(tmp_path: Path) -> FakeStack:
    """A directory of fake vendor packages for child processes (see
    `FakeStack`); pass it to ``accelbackends_ranks(stack=...)``."""
    return FakeStack(tmp_path / "accelbackends-stack")


class RegistryFactory:
    """``accelbackends_registry(env=None, *, root=None, plugins=(), autoload=False)``: a fresh
    [`Registry`][accelbackends.Registry].

    - ``env``: the registry's environment (``ACCELBACKENDS_*`` and launcher variables); empty
      by default, never the test process's own.
    - ``root``: where probes look; the ``accelbackends_tree`` fake machine by default, so the
      host's hardware never leaks into a test (only ``cpu`` is available until devices are
      added to the tree).
    - ``plugins``: plugin objects to register inline, as ``{name: object}`` or
      ``[(name, object)]``: a module, an instance with hook methods, or an
      `InlinePlugin`.
    - ``autoload``: also load installed third-party plugins from their entry points. Off by
      default (``ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD=1`` unless ``env`` says otherwise): the
      test sees the plugins it registers, not whatever the environment has installed, and
      registering a plugin inline does not clash with its installed copy.
    """

    def __init__(self, tree: FakeTree) -> None:
        self._tree = tree

    def __call__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        plugins: Plugins = (),
        autoload: bool = False,
    ) -> Registry:
        from ..registry.facade import Registry

        environment = dict(env or {})
        if not autoload:
            environment.setdefault(config.DISABLE_PLUGIN_AUTOLOAD, "1")
        pairs = list(plugins.items()) if isinstance(plugins, Mapping) else list(plugins)
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                raise TypeError(
                    f"plugins: {pair!r} is not a (name, plugin) pair; pass {{name: plugin}} or "
                    "[(name, plugin), ...]"
                )
        return Registry(environment, root=self._tree.root if root is None else root, plugins=pairs)


@pytest.fixture
def accelbackends_registry(accelbackends_tree: FakeTree) -> RegistryFactory:
    """A factory of fresh registries: see `RegistryFactory`."""
    return RegistryFactory(accelbackends_tree)


class ClusterFactory:
    """``accelbackends_cluster(launcher="torchrun", *, rank=0, world_size=1,
    local_world_size=None, apply=False, ...)``: the variables ``launcher`` sets for one rank.

    Returns them as a dict for ``accelbackends_registry(env=...)``. With ``apply=True`` they are
    also set in ``os.environ`` for the duration of the test (for code that calls
    [`accelbackends.init`][accelbackends.init] without a registry). The other keyword arguments
    are those of [`launcher_env`][accelbackends.testing.launcher_env].
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch

    def __call__(
        self, launcher: str = "torchrun", *, apply: bool = False, **shape: Any
    ) -> dict[str, str]:
        env = launcher_env(launcher, **shape)
        if apply:
            for key, value in env.items():
                self._monkeypatch.setenv(key, value)
        return env


@pytest.fixture
def accelbackends_cluster(monkeypatch: pytest.MonkeyPatch) -> ClusterFactory:
    """A fake launcher: see `ClusterFactory`."""
    return ClusterFactory(monkeypatch)


class DistributionInstaller:
    """``accelbackends_install(name, module=None, *, source=None, distribution=None,
    version="1.0", group="accelbackends")``: install a plugin distribution for real.

    Writes its ``*.dist-info`` (with an ``entry_points.txt``) into one directory per test that is
    on ``sys.path`` for the test, so the registry loads the plugin through its entry point exactly
    as after ``pip install``. With ``source``, the module is written too (its name is made up
    when ``module`` is None). Returns the directory: put it on ``PYTHONPATH`` for child processes
    (``accelbackends_ranks(pythonpath=[site])``).
    """

    def __init__(self, site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.site = site
        self._monkeypatch = monkeypatch
        self._on_path = False

    def __call__(
        self,
        name: str,
        module: str | None = None,
        *,
        source: str | None = None,
        distribution: str | None = None,
        version: str = "1.0",
        group: str = "accelbackends",
    ) -> Path:
        if module is None:
            if source is None:
                raise TypeError(f"accelbackends_install({name!r}): give module=, source=, or both")
            module = f"accelbackends_kit_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        install_distribution(
            self.site,
            name,
            module,
            source=source,
            distribution=distribution,
            version=version,
            group=group,
        )
        if not self._on_path:
            self._monkeypatch.syspath_prepend(str(self.site))
            self._on_path = True
        return self.site


@pytest.fixture
def accelbackends_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DistributionInstaller:
    """Install plugin distributions on ``sys.path``: see `DistributionInstaller`."""
    return DistributionInstaller(tmp_path / "accelbackends-site", monkeypatch)


@dataclass(frozen=True)
class RankReport:
    """One rank's exit status, output, and the report it printed.

    Attributes:
        rank: The rank.
        returncode: Its exit status (negative: killed by that signal).
        stdout: What it printed on stdout.
        stderr: What it printed on stderr.
        report: What `python -m accelbackends.testing.rank_program` printed (rank, accelerator,
            backend, process-group backend, device, the sums of its all-reduces, ...), or
            `{"error": {"type": ..., "message": ...}}` when the rank failed.
    """

    rank: int
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> dict[str, Any] | None:
        """The report's `error` (its `type` and `message`), or None when the rank succeeded."""
        error: dict[str, Any] | None = self.report.get("error")
        return error


class RankRunner:
    """``accelbackends_ranks(nprocs=2, *, root=None, stack=None, env=None, pythonpath=(),
    argv=None, timeout=120)``: start ``nprocs`` real ranks the way ``torchrun`` does and return
    a `RankReport` per rank.

    Every rank runs ``python -m accelbackends.testing.rank_program --root ROOT`` (or ``argv``),
    which initialises through [`accelbackends.init`][accelbackends.init], all-reduces over the CPU
    backend and over the accelerator's own, and reports what it saw.

    - ``root``: the fake machine the ranks' probes look under (``accelbackends_tree`` by
      default).
    - ``stack``: fake vendor packages the ranks import (put first on ``PYTHONPATH``).
    - ``env``: extra variables for every rank (``ACCELBACKENDS_*``, visible devices, ...). The
      ranks start from the test process's environment without launcher or ``ACCELBACKENDS_*``
      variables.
    - ``pythonpath``: directories put on ``PYTHONPATH`` (e.g. from ``accelbackends_install``).
    - ``argv``: the rank program, instead of ``python -m accelbackends.testing.rank_program``.
    - ``timeout``: seconds after which a rank still running is killed.
    """

    def __init__(self, tree: FakeTree) -> None:
        self._tree = tree

    def __call__(
        self,
        nprocs: int = 2,
        *,
        root: str | os.PathLike[str] | None = None,
        stack: FakeStack | None = None,
        env: Mapping[str, str] | None = None,
        pythonpath: Sequence[str | os.PathLike[str]] = (),
        argv: Sequence[str] | None = None,
        timeout: float = 120.0,
    ) -> list[RankReport]:
        from .launch import launch_ranks
        from .rank_program import parse

        root = self._tree.root if root is None else root
        base = clean_environment(os.environ)
        # Store start-up failures print C++ stack frames unless this is raised before import.
        torchlog.quiet_torch_logs(torchlog.LIBRARY, base)
        if stack is not None:
            base = stack.env(base)
        if pythonpath:
            base["PYTHONPATH"] = os.pathsep.join(
                [*map(str, pythonpath), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
            )
        base.update(env or {})
        command = (
            list(argv)
            if argv is not None
            else [sys.executable, "-m", "accelbackends.testing.rank_program", "--root", str(root)]
        )
        results = launch_ranks(command, nprocs, env=base, timeout=timeout)
        return [
            RankReport(r.rank, r.returncode, r.stdout, r.stderr, parse(r.stdout)) for r in results
        ]


@pytest.fixture
def accelbackends_ranks(accelbackends_tree: FakeTree) -> RankRunner:
    """Run real ranks in child processes: see `RankRunner`."""
    return RankRunner(accelbackends_tree)
