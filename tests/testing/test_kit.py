"""The plugin author's kit: its helpers, and its fixtures run as a real pytest plugin.

The fixtures are checked in inner pytest sessions (pytest's own ``pytester``) that find the kit
the way an installed accelbackends offers it: through a ``pytest11`` entry point.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import accelbackends
import accelbackends.job.lifecycle
import accelbackends.registry.facade

# Imported here, before any pytester snapshot of sys.modules: an inner session must not be the
# first to import them, or the snapshot's restore would leave a second copy behind.
import accelbackends.testing.pytest_plugin
from accelbackends import ConfigError, Registry
from accelbackends.testing import (
    LAUNCHERS,
    InlinePlugin,
    clean_environment,
    fake_accelerator,
    install_distribution,
    launcher_env,
)

for _, _module in accelbackends.registry.facade.BUILTIN_PLUGINS:
    importlib.import_module(_module)

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
NO_AUTOLOAD = {"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"}


# -- the entry point -------------------------------------------------------------------------


def test_the_distribution_offers_the_kit_to_pytest_through_pytest11() -> None:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    entry_points = project.get("entry-points", {}).get("pytest11", {})
    assert entry_points == {"accelbackends": "accelbackends.testing.pytest_plugin"}


def test_loading_the_kit_imports_neither_torch_nor_a_vendor_runtime() -> None:
    code = (
        "import sys, accelbackends.testing.pytest_plugin\n"
        "heavy = ('torch', 'torch_npu', 'habana_frameworks', 'intel_extension_for_pytorch')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


@pytest.fixture
def kit(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An inner pytest session that finds the kit through a ``pytest11`` entry point, in this
    process or (through ``PYTHONPATH``) in a child."""
    site = pytester.mkdir("kit-site")
    install_distribution(
        site,
        "accelbackends",
        "accelbackends.testing.pytest_plugin",
        distribution="accelbackends-kit-under-test",
        group="pytest11",
    )
    pytester.syspathinsert(site)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )
    return pytester


def test_every_fixture_is_offered_once_the_kit_is_installed(kit: pytest.Pytester) -> None:
    result = kit.runpytest("--fixtures")
    for name in (
        "accelbackends_clean_env",
        "accelbackends_cluster",
        "accelbackends_install",
        "accelbackends_ranks",
        "accelbackends_registry",
        "accelbackends_stack",
        "accelbackends_tree",
    ):
        result.stdout.fnmatch_lines([f"{name}*"])


def test_the_kit_changes_nothing_in_a_session_that_does_not_ask_for_it(
    kit: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    kit.makepyfile(
        """
        import os

        def test_environment_untouched():
            assert os.environ["RANK"] == "3"
        """
    )
    kit.runpytest().assert_outcomes(passed=1)
    # With the plugin blocked, the fixtures are gone: proof that the entry point provided them.
    kit.makepyfile(
        test_uses="def test_registry(accelbackends_registry):\n    pass\n",
    )
    kit.runpytest("-p", "no:accelbackends", "test_uses.py").assert_outcomes(errors=1)


def test_clean_env_hides_the_shell_and_restores_it_afterwards(
    kit: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("ACCELBACKENDS_ACCELERATOR", "cuda")
    monkeypatch.setenv("KEEP_ME", "yes")
    kit.makepyfile(
        """
        import os

        def test_clean(accelbackends_clean_env):
            assert "RANK" not in os.environ
            assert "SLURM_PROCID" not in os.environ
            assert "ACCELBACKENDS_ACCELERATOR" not in os.environ
            assert os.environ["KEEP_ME"] == "yes"
        """
    )
    kit.runpytest().assert_outcomes(passed=1)
    assert (sys.modules["os"].environ["RANK"], sys.modules["os"].environ["SLURM_PROCID"]) == (
        "3",
        "1",
    )


def test_the_registry_fixture_isolates_plugins_environment_and_hardware(
    kit: pytest.Pytester,
) -> None:
    kit.makepyfile(
        """
        import accelbackends
        from accelbackends.testing import InlinePlugin, fake_accelerator

        SOURCE = "\\n".join([
            "import accelbackends",
            "from accelbackends.testing import fake_accelerator",
            "@accelbackends.hookimpl",
            "def accelbackends_declare_accelerators():",
            "    return [fake_accelerator('installedaccel', priority=70)]",
        ])

        def test_inline_plugin_empty_machine_no_autoload(
            accelbackends_registry, accelbackends_install
        ):
            accelbackends_install("installed", source=SOURCE)
            spec = fake_accelerator("inlineaccel", priority=60)
            registry = accelbackends_registry(plugins={"inline": InlinePlugin(spec)})
            verdicts = {s.name: s.available for s in registry.detect()}
            assert verdicts == {
                "cpu": True, "cuda": False, "hpu": False, "inlineaccel": True, "xpu": False
            }
            assert accelbackends.select(registry=registry).accelerator == "inlineaccel"
            assert registry.env == {"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"}

        def test_autoload_finds_the_installed_plugin(accelbackends_registry, accelbackends_install):
            accelbackends_install("installed", source=SOURCE, distribution="accelbackends-inst")
            registry = accelbackends_registry(
                {"ACCELBACKENDS_PLUGINS": "installed"}, autoload=True
            )
            plugins = {p.name: p for p in registry.plugins}
            assert (plugins["installed"].status, plugins["installed"].distribution) == (
                "active", "accelbackends-inst"
            )
            assert accelbackends.select(registry=registry).accelerator == "installedaccel"

        def test_devices_in_the_tree_are_what_the_probes_see(
            accelbackends_registry, accelbackends_tree
        ):
            accelbackends_tree.gaudi(2)
            hpu = {s.name: s for s in accelbackends_registry().detect()}["hpu"]
            assert "2 Gaudi devices" in hpu.detection.reason

        def test_bad_plugins_argument_is_named(accelbackends_registry):
            import pytest
            with pytest.raises(TypeError, match="is not a \\\\(name, plugin\\\\) pair"):
                accelbackends_registry(plugins=[object()])
        """
    )
    kit.runpytest().assert_outcomes(passed=4)


def test_the_cluster_fixture_feeds_a_registry_and_can_set_the_process_environment(
    kit: pytest.Pytester,
) -> None:
    kit.makepyfile(
        """
        import os

        def test_shape(accelbackends_registry, accelbackends_cluster):
            env = accelbackends_cluster("slurm", rank=5, world_size=8, local_world_size=4)
            cluster = accelbackends_registry(env).cluster_environment()
            assert (cluster.launcher, cluster.rank, cluster.node_rank, cluster.local_rank) == (
                "slurm", 5, 1, 1
            )

        def test_apply(accelbackends_clean_env, accelbackends_cluster):
            accelbackends_cluster("torchrun", rank=1, world_size=2, apply=True)
            assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("1", "2")

        def test_applied_variables_are_gone_in_the_next_test():
            assert "TORCHELASTIC_RUN_ID" not in os.environ
        """
    )
    kit.runpytest().assert_outcomes(passed=3)


@pytest.mark.slow
def test_the_ranks_fixture_runs_real_ranks_through_init(kit: pytest.Pytester) -> None:
    kit.makepyfile(
        """
        def test_two_ranks(accelbackends_ranks):
            reports = accelbackends_ranks(2, env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"})
            assert [r.returncode for r in reports] == [0, 0], [r.stderr for r in reports]
            for rank, result in enumerate(reports):
                assert result.error is None
                assert (result.report["rank"], result.report["accelerator"]) == (rank, "cpu")
                assert result.report["cpu_sum"] == 3.0

        def test_a_failing_rank_reports_its_error(accelbackends_ranks):
            reports = accelbackends_ranks(1, env={"ACCELBACKENDS_ACCELERATOR": "nosuch"})
            assert [r.returncode for r in reports] == [1]
            assert reports[0].error["type"] == "SelectionError"
            assert "nosuch" in reports[0].error["message"]
        """
    )
    # In a child process: ranks import torch in the test process (the store), which an
    # in-process inner session would import for the first time and then unload.
    kit.runpytest_subprocess().assert_outcomes(passed=2)


# -- the helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(
    ("rank", "world_size", "local_world_size", "local_rank", "node_rank"),
    [(0, 1, None, 0, 0), (5, 8, 4, 1, 1), (3, 4, None, 3, 0), (7, 8, 2, 1, 3)],
)
def test_launcher_env_is_recognised_as_the_launcher_with_the_jobs_shape(
    launcher: str,
    rank: int,
    world_size: int,
    local_world_size: int | None,
    local_rank: int,
    node_rank: int,
) -> None:
    env = launcher_env(
        launcher, rank=rank, world_size=world_size, local_world_size=local_world_size
    )
    cluster = Registry(env=env).cluster_environment()
    assert (
        cluster.launcher,
        cluster.rank,
        cluster.world_size,
        cluster.local_rank,
        cluster.local_world_size,
        cluster.node_rank,
    ) == (launcher, rank, world_size, local_rank, local_world_size or world_size, node_rank)
    assert (cluster.master_addr, cluster.master_port) == ("127.0.0.1", 29500)


def test_launcher_env_without_an_address_leaves_the_derivation_to_the_launcher() -> None:
    env = launcher_env("slurm", rank=0, world_size=4, local_world_size=2, master_addr=None)
    assert "MASTER_ADDR" not in env
    cluster = Registry(env=env).cluster_environment()
    assert cluster.master_addr == "node001"
    assert cluster.sources["master_addr"] == "SLURM_STEP_NODELIST (first host)"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"launcher": "pbs"}, "launcher='pbs' is not known; use one of torchrun, env, slurm"),
        ({"rank": 4, "world_size": 4}, "rank=4 must be less than world_size=4"),
        ({"rank": -1}, "rank=-1 is not valid; use an integer >= 0"),
        (
            {"world_size": 6, "local_world_size": 4},
            "world_size=6 is not a multiple of local_world_size=4",
        ),
        ({"master_port": 70000}, "master_port=70000 is not a TCP port; use 1 to 65535"),
    ],
)
def test_launcher_env_names_a_bad_argument(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        launcher_env(**arguments)  # type: ignore[arg-type]


def test_clean_environment_drops_launcher_and_accelbackends_variables_only() -> None:
    env = {
        "RANK": "1",
        "MASTER_PORT": "29500",
        "OMPI_COMM_WORLD_RANK": "1",
        "ACCELBACKENDS_TIMEOUT": "5",
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    assert clean_environment(env) == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}


def test_clean_environment_keeps_the_machines_settings() -> None:
    # Which machine the test set up, and how Open MPI runs on it, are not a launch.
    env = {
        "ACCELBACKENDS_PROBE_ROOT": "/tmp/host",
        "OMPI_MCA_plm_rsh_agent": "false",
        "OMPI_COMM_WORLD_SIZE": "2",
        "ACCELBACKENDS_ACCELERATOR": "cpu",
    }
    assert clean_environment(env) == {
        "ACCELBACKENDS_PROBE_ROOT": "/tmp/host",
        "OMPI_MCA_plm_rsh_agent": "false",
    }


def test_clean_environment_drops_every_variable_a_built_in_environment_reads() -> None:
    """A test run inside a real job (an MVAPICH allocation, a SageMaker instance) must not leak
    that job's variables into the jobs it starts: every upper-case name with an underscore that
    a built-in environment plugin spells out is one it reads."""
    import ast
    import re

    # The names in __all__ of _common and of variables; and the machine's visible devices, which
    # torchrun's --virtual-local-rank sets per worker but which say which GPUs a test may use,
    # not how it was launched (clean_environment keeps them).
    not_variables = {
        "DEFAULT_PORT",
        "MAX_COUNT",
        "LAUNCHER_PREFIXES",
        "LAUNCHER_VARIABLES",
        "CUDA_VISIBLE_DEVICES",
    }
    read = {
        node.value
        for path in (ROOT / "accelbackends" / "environments").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", node.value)
    } - not_variables
    assert {"MV2_COMM_WORLD_RANK", "SM_HOSTS", "SLURM_PROCID"} <= read
    assert sorted(name for name in read if clean_environment({name: "1"})) == []


def test_inline_plugin_marks_plain_functions_and_keeps_a_wrappers_marker() -> None:
    def choose(candidates, env):  # type: ignore[no-untyped-def]
        return accelbackends.Choice("cpu", "the test says so")

    @accelbackends.hookimpl(wrapper=True)
    def options(accelerator, options, cluster):  # type: ignore[no-untyped-def]
        result = yield
        return result

    plugin = InlinePlugin(
        accelbackends_select_accelerator=choose, accelbackends_backend_options=options
    )
    assert not hasattr(choose, "accelbackends_impl")  # the caller's function is left alone
    assert plugin.accelbackends_backend_options is options  # type: ignore[attr-defined]
    registry = Registry(env=NO_AUTOLOAD, plugins=[("inline", plugin)])
    selection = accelbackends.select(registry=registry)
    assert (selection.accelerator, selection.reason) == ("cpu", "the test says so")
    assert {p.name: p.status for p in registry.plugins}["inline"] == "active"


def test_inline_plugin_refuses_what_is_not_a_hook_or_not_a_spec() -> None:
    with pytest.raises(TypeError) as error:
        InlinePlugin(accelbackends_backend_option=lambda: None)
    assert str(error.value).startswith(
        "InlinePlugin: 'accelbackends_backend_option' is not a hook; hooks: "
        "accelbackends_backend_options, accelbackends_cluster_environment"
    )
    with pytest.raises(TypeError, match="must be AcceleratorSpec values, not 'cpu'"):
        InlinePlugin("cpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        InlinePlugin(fake_accelerator("x"), accelbackends_declare_accelerators=lambda: [])


def test_fake_accelerator_answers_as_told_and_initialises_on_gloo() -> None:
    spec = fake_accelerator("fakeaccel", priority=50, devices=3)
    assert spec.detect(accelbackends.Probe(env={})) == accelbackends.Detection(
        True, 3, "3 fake device(s)"
    )
    absent = fake_accelerator("absentaccel", available=False, reason="unplugged")
    assert absent.detect(accelbackends.Probe(env={})) == accelbackends.Detection(
        False, 0, "unplugged"
    )
    registry = Registry(env=NO_AUTOLOAD, plugins=[("fake", InlinePlugin(spec, absent))])
    with accelbackends.distributed(registry=registry, timeout=30) as ctx:
        assert (ctx.accelerator, ctx.backend, str(ctx.device)) == ("fakeaccel", "gloo", "cpu")


def test_install_distribution_writes_what_pip_would_and_the_registry_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = (
        "import accelbackends\n"
        "from accelbackends.testing import fake_accelerator\n"
        "@accelbackends.hookimpl\n"
        "def accelbackends_declare_accelerators():\n"
        "    return [fake_accelerator('kitaccel')]\n"
    )
    site = install_distribution(
        tmp_path / "site", "kitplug", "kit_plugin_module", source=source, version="3.1"
    )
    info = site / "accelbackends_kitplug-3.1.dist-info"
    assert (info / "entry_points.txt").read_text() == (
        "[accelbackends]\nkitplug = kit_plugin_module\n"
    )
    assert "Name: accelbackends-kitplug\nVersion: 3.1\n" in (info / "METADATA").read_text()
    monkeypatch.syspath_prepend(str(site))
    registry = Registry(env={"ACCELBACKENDS_PLUGINS": "kitplug"})
    plugin = {p.name: p for p in registry.plugins}["kitplug"]
    assert (plugin.status, plugin.provider) == ("active", "accelbackends-kitplug 3.1")
    assert "kitaccel" in {status.name for status in registry.detect()}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"module": "not a module"}, "module='not a module' is not an importable module name"),
        ({"distribution": "bad name!"}, "distribution='bad name!' is not a distribution name"),
        ({"name": "=x"}, "name='=x' is not an entry-point name"),
        (
            {"module": "pkg.mod", "source": "x = 1"},
            "module='pkg.mod': with source=, give a top-level module name",
        ),
    ],
)
def test_install_distribution_names_a_bad_argument(
    tmp_path: Path, arguments: dict[str, str], message: str
) -> None:
    values = {"name": "plug", "module": "plug_module", **arguments}
    with pytest.raises(ValueError) as error:
        install_distribution(tmp_path, **values)  # type: ignore[arg-type]
    assert str(error.value).startswith(message)


def test_a_plugin_registered_inline_needs_no_installation() -> None:
    plugin = InlinePlugin(fake_accelerator("quick", priority=5))
    registry = Registry(env=NO_AUTOLOAD)
    info = registry.register(plugin, "quick")
    assert (info.status, info.distribution) == ("active", "")
    with pytest.raises(ConfigError):
        accelbackends.select("nosuch", registry=registry)
