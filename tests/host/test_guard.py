"""Foreign code runs bounded in a thread of its own; a thread given up on is recorded, keeps
spawn() from forking and makes the exit of a process we own skip the interpreter's shutdown."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from conftest import AcceleratorPlugin, fake_accelerator, wait_until_no_plugin_call_is_stuck

import accelbackends
from accelbackends import Registry
from accelbackends.host import guard
from accelbackends.job import spawn as spawning
from accelbackends.rendezvous import network


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


def test_a_thread_given_up_on_is_recorded_and_keeps_spawn_from_forking() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()
    guard.give_up("check heartbeat of rank 0 (a store call)", thread)
    try:
        assert guard.stuck() == ["check heartbeat of rank 0 (a store call)"]
        assert spawning._start_method(None, _rank) == "spawn"
    finally:
        release.set()
        wait_until_no_plugin_call_is_stuck()


def test_a_name_look_up_that_hangs_is_given_up_on_through_the_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def hang(*args: object, **kwargs: object) -> list[object]:
        release.wait()
        return []

    monkeypatch.setattr(network.socket, "getaddrinfo", hang)
    try:
        assert network.resolve("slow.example", 0.1) is None
        assert guard.stuck() == ["resolving 'slow.example'"]
    finally:
        release.set()
        wait_until_no_plugin_call_is_stuck()


def test_an_address_literal_is_parsed_without_a_look_up_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_thread(*args: object, **kwargs: object) -> object:
        raise AssertionError("a look-up thread was started for an address literal")

    monkeypatch.setattr(guard, "bounded", no_thread)
    assert network.resolve("127.0.0.1") == ["127.0.0.1"]
    assert network.resolve("::1") == ["::1"]
    with pytest.raises(AssertionError, match="look-up thread"):
        network.resolve("localhost")  # a name is still looked up through the guard


_LEAVE = """
import sys, threading, time
from accelbackends.host import guard
release = threading.Event()
thread = threading.Thread(target=release.wait, daemon=False)  # would keep the shutdown waiting
thread.start()
guard.give_up("a call that never returns", thread)
print("flushed by leave", end="")
guard.leave(5)
"""


def test_leave_exits_with_the_code_without_waiting_for_a_thread_given_up_on() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LEAVE], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (5, "flushed by leave")


def test_check_heartbeat_stop_joins_its_thread() -> None:
    from accelbackends.cli.check.heartbeat import Heartbeat

    class Store:
        def add(self, key: str, amount: int) -> int:
            return 0

    heartbeat = Heartbeat(Store(), 0, 1)
    thread = heartbeat._thread
    assert thread is not None and thread.is_alive()
    heartbeat.stop()
    assert not thread.is_alive()
    assert guard.stuck() == []


def _sigterm_action() -> object:
    return signal.getsignal(signal.SIGTERM)


def test_sigterm_has_its_default_action_only_while_third_party_code_of_an_owned_process_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Python SIGTERM handler cannot run while a plugin holds the GIL; the default action can.
    Only in a process accelbackends owns, only around third-party code, and put back after."""
    previous = signal.getsignal(signal.SIGTERM)
    foreign = "plugin 'x''s probe"
    assert guard.bounded(_sigterm_action, 60, "probing", foreign) == previous  # a user's process
    monkeypatch.setattr(guard, "_owned", True)
    assert guard.bounded(_sigterm_action, 60, "probing") == previous  # a built-in plugin's code
    assert guard.bounded(_sigterm_action, 60, "probing", foreign) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) == previous


_DISARMED = """
import time
from accelbackends.host import guard
guard.own_process()
guard.bounded(lambda: None, 0.1, "probing", "plugin 'x''s probe")
time.sleep(0.1 + guard.GIL_GRACE_S + 1)  # an armed watchdog would have ended the process by now
print("still running", end="")
"""


def test_the_gil_watchdog_is_disarmed_once_the_third_party_call_returns() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _DISARMED], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (0, "still running"), done.stderr
