"""Plugin calls run bounded in a thread of their own; one given up on keeps spawn() from forking."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import pytest
from conftest import AcceleratorPlugin, fake_accelerator, wait_until_no_plugin_call_is_stuck

import accelbackends
from accelbackends import Registry, guard, spawning


def _exits() -> None:
    raise SystemExit(4)


def test_bounded_call_returns_the_value_and_carries_a_plugins_exit_as_an_ordinary_error() -> None:
    assert guard.bounded(lambda: 42, 60, "answering") == 42
    with pytest.raises(guard.PluginExit) as caught:
        guard.bounded(_exits, 60, "exiting")
    assert isinstance(caught.value.original, SystemExit)
    assert guard.failure(caught.value) == "SystemExit: 4"
    with pytest.raises(KeyError):
        guard.bounded(lambda: {}["missing"], 60, "looking up")


@pytest.fixture
def hung_probe() -> Iterator[threading.Event]:
    """A registry whose probe hangs until the returned event is set, detected once."""
    release = threading.Event()

    def hang(probe: accelbackends.Probe) -> accelbackends.Detection:
        release.wait()
        return accelbackends.Detection(True, 1, "too late")

    spec = dataclasses.replace(fake_accelerator("slowpoke"), detect=hang)
    registry = Registry(env={}, plugins=[("slowplug", AcceleratorPlugin(spec))], detect_timeout=0.2)
    registry.detect()
    try:
        yield release
    finally:
        release.set()
        wait_until_no_plugin_call_is_stuck()


def _rank(ctx: accelbackends.Context) -> int:
    return ctx.rank


def test_probe_given_up_on_is_named_as_stuck_until_it_ends(hung_probe: threading.Event) -> None:
    assert guard.stuck() == ["detecting slowpoke"]
    hung_probe.set()
    wait_until_no_plugin_call_is_stuck()


def test_spawn_does_not_fork_while_a_probe_is_stuck(hung_probe: threading.Event) -> None:
    assert spawning._start_method(None, _rank) == "spawn"
    with pytest.raises(accelbackends.ConfigError, match=r"stuck now: detecting slowpoke"):
        spawning._start_method(None, lambda ctx: ctx.rank)  # not picklable: fork was the way
    hung_probe.set()
    wait_until_no_plugin_call_is_stuck()
    assert spawning._start_method(None, _rank) == "fork"


def test_spawn_still_runs_its_ranks_while_a_probe_is_stuck(hung_probe: threading.Event) -> None:
    assert accelbackends.spawn(_rank, 2, accelerator="cpu") == [0, 1]
