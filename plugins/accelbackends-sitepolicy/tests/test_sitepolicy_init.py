"""The policy in a real init(): loaded through an entry point, on a real Gloo process group."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import accelbackends_sitepolicy
import pytest

import accelbackends
from accelbackends.testing import InlinePlugin, clean_environment, fake_accelerator
from accelbackends.testing.pytest_plugin import DistributionInstaller, RegistryFactory

#: Its own entry-point name, allow-listed: an installed copy of the plugin stays out.
NAME = "sitepolicy_under_test"
SOURCE = str(Path(accelbackends_sitepolicy.__file__).resolve().parents[1])


@pytest.fixture
def site_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accelbackends_install: DistributionInstaller
) -> Path:
    """The plugin installed through an entry point, reading a policy file from the variable."""
    accelbackends_install(NAME, "accelbackends_sitepolicy", distribution="site-policy-test")
    path = tmp_path / "site.toml"
    monkeypatch.setenv("ACCELBACKENDS_SITEPOLICY_FILE", str(path))
    # init() sets the policy's variables in os.environ; monkeypatch removes them afterwards.
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    return path


def _early(
    accelerator: accelbackends.AcceleratorSpec,
    options: accelbackends.BackendOptions,
    cluster: accelbackends.ClusterInfo,
) -> accelbackends.BackendOptions:
    return dataclasses.replace(options, timeout=timedelta(seconds=5))


def test_the_wrapper_has_the_last_word_in_a_real_init(
    site_policy: Path, accelbackends_registry: RegistryFactory
) -> None:
    import torch
    import torch.distributed as dist

    site_policy.write_text('min_timeout = 120\ngloo_socket_ifname = "lo"\n')
    registry = accelbackends_registry(
        {"ACCELBACKENDS_PLUGINS": NAME, "ACCELBACKENDS_TIMEOUT": "10"},
        autoload=True,
        # Another plugin answers the options hook first with an even shorter timeout.
        plugins={"early": InlinePlugin(accelbackends_backend_options=_early)},
    )
    with accelbackends.distributed(registry=registry) as ctx:
        assert (ctx.accelerator, ctx.process_group_backend) == ("cpu", "gloo")
        assert ctx.timeout == 120.0
        assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
        tensor = torch.ones(2)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [1.0, 1.0]
    loaded = {plugin.name: plugin for plugin in registry.plugins}
    assert (loaded[NAME].status, loaded[NAME].distribution) == ("active", "site-policy-test")


def test_the_users_own_interface_wins_over_the_sites_default(
    site_policy: Path, accelbackends_registry: RegistryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    site_policy.write_text('gloo_socket_ifname = "nosuchif0"\n')
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    registry = accelbackends_registry({"ACCELBACKENDS_PLUGINS": NAME}, autoload=True)
    with accelbackends.distributed(registry=registry, timeout=30) as ctx:
        assert ctx.backend == "gloo"
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"


def test_a_bad_policy_fails_init_naming_the_plugin_the_file_and_the_key(
    site_policy: Path, accelbackends_registry: RegistryFactory
) -> None:
    site_policy.write_text("min_timeout = 0\n")
    registry = accelbackends_registry({"ACCELBACKENDS_PLUGINS": NAME}, autoload=True)
    # Bad configuration is bad input (a ConfigError: exit 2 on the command line), and the
    # message still names the plugin, the file and the key.
    with pytest.raises(accelbackends.ConfigError) as error:
        accelbackends.init(registry=registry)
    assert str(error.value) == (
        f"plugin {NAME!r}: site policy "
        f"{site_policy}: min_timeout = 0 is not valid; use a positive number of seconds, e.g. 900"
    )
    assert not accelbackends.is_initialized()


def test_a_job_on_a_backend_the_site_forbids_is_refused_before_the_process_group(
    site_policy: Path, accelbackends_registry: RegistryFactory
) -> None:
    site_policy.write_text('[required_backend]\nfakeaccel = "fakeccl"\n')
    accelerator = fake_accelerator("fakeaccel", priority=50, backends=("gloo", "fakeccl"))
    registry = accelbackends_registry(
        {"ACCELBACKENDS_PLUGINS": NAME, "ACCELBACKENDS_BACKEND": "gloo"},
        autoload=True,
        plugins={"fake": InlinePlugin(accelerator)},
    )
    with pytest.raises(accelbackends.ConfigError) as error:
        accelbackends.init(registry=registry)
    assert str(error.value).startswith(f"plugin {NAME!r}: site policy:")
    assert "accelerator 'fakeaccel' must use backend 'fakeccl' on this site" in str(error.value)
    assert "but this job would use 'gloo'" in str(error.value)
    assert not accelbackends.is_initialized()


def test_info_lists_the_plugin_as_active(
    site_policy: Path, accelbackends_install: DistributionInstaller
) -> None:
    env = clean_environment(os.environ)
    env["ACCELBACKENDS_PLUGINS"] = NAME
    env["PYTHONPATH"] = os.pathsep.join(
        [str(accelbackends_install.site), SOURCE, env.get("PYTHONPATH", "")]
    )
    run = subprocess.run(
        [sys.executable, "-m", "accelbackends", "info", "--all", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    plugins = {plugin["name"]: plugin for plugin in json.loads(run.stdout)["plugins"]}
    assert plugins[NAME]["status"] == "active"
    assert plugins[NAME]["builtin"] is False


def test_loading_the_plugin_imports_nothing_heavy_and_reads_nothing() -> None:
    code = (
        "import sys, accelbackends_sitepolicy\n"
        "print(sorted(m for m in ('torch', 'tomllib', 'tomli') if m in sys.modules))\n"
    )
    env = {**os.environ, "ACCELBACKENDS_SITEPOLICY_FILE": "/nonexistent/site.toml"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE, env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
