"""Loading plugins: built-ins, real entry points, failures kept apart, blocking and allow-lists."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    BUILTIN_ACCELERATORS,
    AcceleratorPlugin,
    fake_accelerator,
    wait_until_no_plugin_call_is_stuck,
)

import accelbackends
from accelbackends import ConfigError, PluginWarning, Registry

GOOD_PLUGIN = """
import accelbackends

def _detect(probe):
    return accelbackends.Detection(True, 4, "4 fake devices")

def _bind(request):
    import torch
    return torch.device("cpu")

@accelbackends.hookimpl
def accelbackends_declare_accelerators():
    return [accelbackends.AcceleratorSpec(
        name="{name}", device_type="cpu", priority=50, backends=("gloo",),
        default_backend="gloo", detect=_detect, bind=_bind)]
"""


def _by_name(registry: Registry) -> dict[str, accelbackends.PluginInfo]:
    return {p.name: p for p in registry.plugins}


def _load_quietly(registry: Registry) -> dict[str, accelbackends.PluginInfo]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        return _by_name(registry)


def test_builtin_plugins_are_registered_as_active_builtins() -> None:
    plugins = _by_name(Registry(env={}))
    for name in ("defaults", "cpu", "torchrun", "env", "single"):
        assert plugins[name].status == "active"
        assert plugins[name].builtin
        assert plugins[name].distribution == "accelbackends"


def test_entry_point_plugin_is_loaded_with_its_distribution_and_version(
    plugin_dist: Callable[..., Path],
) -> None:
    plugin_dist("fakeacc", GOOD_PLUGIN.format(name="fakeacc"), version="2.5")
    registry = Registry(env={})
    info = _by_name(registry)["fakeacc"]
    assert (info.status, info.distribution, info.version, info.builtin) == (
        "active",
        "accelbackends-fakeacc",
        "2.5",
        False,
    )
    status = {s.name: s for s in registry.detect()}["fakeacc"]
    assert status.available and status.detection.device_count == 4
    assert status.plugin == "fakeacc" and status.distribution == "accelbackends-fakeacc"
    assert accelbackends.select(registry=registry).accelerator == "fakeacc"


def test_plugin_that_fails_to_import_is_recorded_failed_and_warned_and_host_keeps_working(
    plugin_dist: Callable[..., Path],
) -> None:
    plugin_dist("broken", "import a_module_that_does_not_exist\n")
    registry = Registry(env={})
    with pytest.warns(PluginWarning, match=r"'broken' \(accelbackends-broken 1.0\).*import failed"):
        info = _by_name(registry)["broken"]
    assert info.status == "failed"
    assert "ModuleNotFoundError" in info.error and "a_module_that_does_not_exist" in info.error
    assert accelbackends.select(registry=registry).accelerator == "cpu"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "import accelbackends\n@accelbackends.hookimpl\n"
            "def accelbackends_declare_accelerators():\n    return {'name': 'x'}\n",
            "must return a list of AcceleratorSpec",
        ),
        (
            "import accelbackends\n@accelbackends.hookimpl\n"
            "def accelbackends_declare_accelerators():\n    raise RuntimeError('no luck')\n",
            "RuntimeError: no luck",
        ),
        (
            "import accelbackends\n@accelbackends.hookimpl\n"
            "def accelbackends_declare_accelerator():\n    return []\n",
            "unknown hook 'accelbackends_declare_accelerator'",
        ),
        (
            "import accelbackends\n@accelbackends.hookimpl\n"
            "def accelbackends_cluster_environment(environment):\n    return None\n",
            "environment",
        ),
    ],
    ids=["malformed-spec", "declare-raises", "misspelled-hook", "wrong-argument-name"],
)
def test_plugin_that_declares_nonsense_is_failed_with_its_error(
    plugin_dist: Callable[..., Path], source: str, message: str
) -> None:
    plugin_dist("odd", source)
    registry = Registry(env={})
    info = _load_quietly(registry)["odd"]
    assert info.status == "failed"
    assert message in info.error
    # Its hooks are gone: nothing of it remains registered.
    assert registry.pm.get_plugin("odd") is None
    assert [s.name for s in registry.detect()] == BUILTIN_ACCELERATORS


def test_duplicate_accelerator_name_is_an_error_naming_both_providers(
    plugin_dist: Callable[..., Path],
) -> None:
    plugin_dist("first", GOOD_PLUGIN.format(name="npu"), distribution="vendor-a", version="1.0")
    plugin_dist("second", GOOD_PLUGIN.format(name="npu"), distribution="vendor-b", version="0.2")
    registry = Registry(env={})
    with pytest.warns(PluginWarning) as caught:
        plugins = _by_name(registry)
    assert plugins["first"].status == "active"
    assert plugins["second"].status == "failed"
    assert "'npu' is already declared by plugin 'first' (vendor-a 1.0)" in plugins["second"].error
    assert "vendor-b 0.2" in str(caught[0].message)


def test_plugin_redeclaring_a_builtin_accelerator_fails_naming_accelbackends(
    plugin_dist: Callable[..., Path],
) -> None:
    plugin_dist("fakecpu", GOOD_PLUGIN.format(name="cpu"))
    info = _load_quietly(Registry(env={}))["fakecpu"]
    assert info.status == "failed"
    assert "'cpu' is already declared by plugin 'cpu' (accelbackends" in info.error


def test_disable_blocks_named_plugins_builtin_and_third_party(
    plugin_dist: Callable[..., Path],
) -> None:
    plugin_dist("fakeacc", GOOD_PLUGIN.format(name="fakeacc"))
    registry = Registry(env={"ACCELBACKENDS_DISABLE": "fakeacc, torchrun"})
    plugins = _by_name(registry)
    assert plugins["fakeacc"].status == "blocked"
    assert plugins["torchrun"].status == "blocked"
    assert "ACCELBACKENDS_DISABLE" in plugins["fakeacc"].error
    assert [s.name for s in registry.detect()] == BUILTIN_ACCELERATORS
    # A blocked environment plugin is not asked: torchrun's variables fall through to env://.
    env = {
        "ACCELBACKENDS_DISABLE": "torchrun",
        "TORCHELASTIC_RUN_ID": "x",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    assert Registry(env=env).cluster_environment().launcher == "env"


@pytest.mark.parametrize("name", ["cpu", "single", "defaults"])
def test_disabling_the_fallbacks_is_an_error(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"ACCELBACKENDS_DISABLE: plugin '{name}' cannot be"):
        _by_name(Registry(env={"ACCELBACKENDS_DISABLE": name}))


def test_disabling_an_unknown_plugin_lists_the_known_ones() -> None:
    with pytest.raises(
        ConfigError,
        match=r"'cudaa' is not an installed plugin; known plugins: .*\bcuda\b.*\btorchrun\b",
    ):
        _by_name(Registry(env={"ACCELBACKENDS_DISABLE": "cudaa"}))


def test_disable_with_empty_item_is_an_error() -> None:
    with pytest.raises(ConfigError, match="empty item"):
        _by_name(Registry(env={"ACCELBACKENDS_DISABLE": "torchrun,,env"}))


def test_allow_list_loads_only_named_third_party_plugins(plugin_dist: Callable[..., Path]) -> None:
    plugin_dist("alpha", GOOD_PLUGIN.format(name="alpha"))
    plugin_dist("beta", GOOD_PLUGIN.format(name="beta"))
    plugins = _by_name(Registry(env={"ACCELBACKENDS_PLUGINS": "beta"}))
    assert plugins["beta"].status == "active"
    assert plugins["alpha"].status == "blocked"
    assert "not in ACCELBACKENDS_PLUGINS" in plugins["alpha"].error
    assert plugins["cpu"].status == "active"  # built-ins are not subject to the allow-list


def test_empty_allow_list_loads_no_third_party_plugin(plugin_dist: Callable[..., Path]) -> None:
    plugin_dist("alpha", GOOD_PLUGIN.format(name="alpha"))
    registry = Registry(env={"ACCELBACKENDS_PLUGINS": ""})
    assert _by_name(registry)["alpha"].status == "blocked"
    assert [s.name for s in registry.detect()] == BUILTIN_ACCELERATORS


def test_allow_list_naming_an_uninstalled_plugin_lists_installed_ones(
    plugin_dist: Callable[..., Path],
) -> None:
    plugin_dist("alpha", GOOD_PLUGIN.format(name="alpha"))
    with pytest.raises(ConfigError, match=r"ACCELBACKENDS_PLUGINS: 'gamma' .* installed: alpha"):
        _by_name(Registry(env={"ACCELBACKENDS_PLUGINS": "gamma"}))


def test_autoload_off_loads_only_builtins(plugin_dist: Callable[..., Path]) -> None:
    plugin_dist("alpha", GOOD_PLUGIN.format(name="alpha"))
    plugins = _by_name(Registry(env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    assert "alpha" not in plugins
    assert all(p.builtin for p in plugins.values())


def test_autoload_with_a_wrong_boolean_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD='maybe'"):
        _by_name(Registry(env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "maybe"}))


def test_inline_plugin_registers_like_an_installed_one() -> None:
    registry = Registry(env={}, plugins=[("inline", AcceleratorPlugin(fake_accelerator("zed")))])
    assert _by_name(registry)["inline"].status == "active"
    assert "zed" in [s.name for s in registry.detect()]


def test_detect_that_raises_makes_the_accelerator_unavailable_with_the_plugin_named() -> None:
    def explode(probe: accelbackends.Probe) -> accelbackends.Detection:
        raise OSError("sysfs unreadable")

    spec = fake_accelerator("boom", priority=99)
    spec = accelbackends.AcceleratorSpec(**{**spec.__dict__, "detect": explode})
    registry = Registry(env={}, plugins=[("boomplug", AcceleratorPlugin(spec))])
    status = {s.name: s for s in registry.detect()}["boom"]
    assert not status.available
    assert status.detection.reason == "plugin error in 'boomplug': OSError: sysfs unreadable"
    assert accelbackends.select(registry=registry).accelerator == "cpu"


def test_detect_returning_the_wrong_type_is_unavailable() -> None:
    spec = fake_accelerator("bad")
    spec = accelbackends.AcceleratorSpec(**{**spec.__dict__, "detect": lambda probe: True})
    registry = Registry(env={}, plugins=[("badplug", AcceleratorPlugin(spec))])
    status = {s.name: s for s in registry.detect()}["bad"]
    assert not status.available
    assert "detect returned True, not Detection" in status.detection.reason


def test_detection_is_cached_until_reset() -> None:
    calls = []

    def counting(probe: accelbackends.Probe) -> accelbackends.Detection:
        calls.append(probe)
        return accelbackends.Detection(True, 1, "counted")

    spec = accelbackends.AcceleratorSpec(**{**fake_accelerator("cnt").__dict__, "detect": counting})
    registry = Registry(env={}, root="/nonexistent-root", plugins=[("c", AcceleratorPlugin(spec))])
    registry.detect()
    registry.detect()
    assert len(calls) == 1
    assert calls[0].root == Path("/nonexistent-root")
    registry.forget_detections()
    registry.detect()
    assert len(calls) == 2
    with pytest.warns(DeprecationWarning, match="renamed Registry.forget_detections"):
        registry.reset()
    registry.detect()
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Bad Name"}, "accelerator name 'Bad Name' is not valid"),
        ({"backends": ()}, "backends must be a non-empty tuple"),
        ({"default_backend": "nccl"}, "default backend 'nccl' is not one of its backends"),
        ({"bind": None}, "bind must be callable"),
        ({"priority": "high"}, "priority must be an int"),
    ],
)
def test_accelerator_spec_rejects_nonsense_at_declaration(
    fields: dict[str, object], message: str
) -> None:
    base = fake_accelerator("ok").__dict__
    with pytest.raises(TypeError, match=message):
        accelbackends.AcceleratorSpec(**{**base, **fields})


def test_detect_that_hangs_is_unavailable_after_the_time_limit_and_others_still_answer() -> None:
    import threading

    release = threading.Event()

    def hang(probe: accelbackends.Probe) -> accelbackends.Detection:
        release.wait(30)
        return accelbackends.Detection(True, 1, "too late")

    spec = accelbackends.AcceleratorSpec(
        **{**fake_accelerator("slowpoke").__dict__, "detect": hang}
    )
    registry = Registry(env={}, plugins=[("slowplug", AcceleratorPlugin(spec))], detect_timeout=0.5)
    verdicts = {s.name: s.detection for s in registry.detect()}  # the hang guard is pytest's
    release.set()
    wait_until_no_plugin_call_is_stuck()
    assert verdicts["slowpoke"].reason == "plugin error in 'slowplug': detect timed out after 0.5 s"
    assert verdicts["cpu"].available


class _CustomLauncher:
    @accelbackends.hookimpl
    def accelbackends_cluster_environment(
        self, env: dict[str, str]
    ) -> accelbackends.ClusterInfo | None:
        if "MYSCHED_RANK" not in env:
            return None
        return accelbackends.ClusterInfo(
            "mysched",
            rank=int(env["MYSCHED_RANK"]),
            world_size=4,
            local_world_size=4,
            master_addr="head",
            master_port=29400,
            sources={"rank": "MYSCHED_RANK"},
        )


def test_third_party_cluster_environment_is_asked_before_the_builtins() -> None:
    # torchrun's variables are present too; the third-party plugin still answers first.
    env = {"MYSCHED_RANK": "2", "TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "1"}
    cluster = Registry(env=env, plugins=[("mysched", _CustomLauncher())]).cluster_environment()
    assert (cluster.launcher, cluster.rank, cluster.sources["rank"]) == (
        "mysched",
        2,
        "MYSCHED_RANK",
    )


def test_third_party_cluster_environment_answering_none_falls_through_to_builtins() -> None:
    registry = Registry(env={}, plugins=[("mysched", _CustomLauncher())])
    assert registry.cluster_environment().launcher == "single"


def test_cluster_environment_returning_nonsense_is_a_plugin_error() -> None:
    class Nonsense:
        @accelbackends.hookimpl
        def accelbackends_cluster_environment(self, env: dict[str, str]) -> object:
            return {"rank": 0}

    with pytest.raises(accelbackends.PluginError, match="instead of a ClusterInfo"):
        Registry(env={}, plugins=[("nonsense", Nonsense())]).cluster_environment()


def test_the_quick_hook_lookup_answers_as_pluggy_does_for_every_name_of_every_plugin() -> None:
    """`_PluginManager` answers None at once for a module attribute pluggy cannot hook; for
    every name of every built-in plugin module, and of a module with each hookable kind, its
    answer is pluggy's own."""
    import importlib
    import types

    import pluggy

    from accelbackends.plugin import hookimpl, hookspecs
    from accelbackends.registry.facade import BUILTIN_PLUGINS, _PluginManager

    @hookimpl
    def accelbackends_declare_accelerators() -> list[object]:
        return []

    odd = types.ModuleType("odd_plugin")
    odd.plain = accelbackends_declare_accelerators  # type: ignore[attr-defined]
    odd.static = staticmethod(accelbackends_declare_accelerators)  # type: ignore[attr-defined]
    odd.constant = 3  # type: ignore[attr-defined]
    odd.cls = int  # type: ignore[attr-defined]
    odd.helper = lambda: None  # type: ignore[attr-defined]  # a plain function, no marker
    quick, plain = _PluginManager(hookspecs.PROJECT), pluggy.PluginManager(hookspecs.PROJECT)
    modules = [importlib.import_module(module) for _, module in BUILTIN_PLUGINS] + [odd]
    found = 0
    for module in modules:
        for name in dir(module):
            expected = plain.parse_hookimpl_opts(module, name)
            assert quick.parse_hookimpl_opts(module, name) == expected, (module, name)
            found += expected is not None
    # A plain function is hookable on every pluggy (a module's staticmethod only on newer ones,
    # which the loop above compares with whatever pluggy is installed).
    assert quick.parse_hookimpl_opts(odd, "plain") is not None
    assert quick.parse_hookimpl_opts(odd, "helper") is None
    assert found > len(BUILTIN_PLUGINS)  # every built-in implements at least one hook
