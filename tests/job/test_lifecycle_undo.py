"""init() as undoable steps: a failure at any step leaves os.environ exactly as it was and no
store listening; destroy() undoes the variables init() set and leaves the user's alone."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist
from conftest import fake_accelerator

import accelbackends
from accelbackends import (
    BackendOptions,
    ClusterInfo,
    ConfigError,
    InitError,
    PluginError,
    Registry,
    RendezvousError,
)
from accelbackends.job.undo import EnvironmentChanges
from accelbackends.testing import InlinePlugin

#: What the test plugin's bind writes, like the Habana plugin's module id.
BIND_VARIABLE = "ACCELBACKENDS_TEST_BOUND"
#: What the test plugin's backend options ask for, like the CCL_* defaults.
DEFAULT_VARIABLE = "ACCELBACKENDS_TEST_DEFAULT"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


def _plugin(*, fail_bind: bool = False, fail_post_init: bool = False) -> InlinePlugin:
    spec = fake_accelerator("undoable", priority=90)
    bind = spec.bind

    def binding(request: Any) -> Any:
        os.environ[BIND_VARIABLE] = str(request.local_rank)
        if fail_bind:
            raise RuntimeError("no device for this rank")
        return bind(request)

    def options(request: Any) -> BackendOptions:
        return BackendOptions("gloo", request.timeout, env_defaults={DEFAULT_VARIABLE: "on"})

    spec = dataclasses.replace(spec, bind=binding, backend_options=options)
    hooks: dict[str, Any] = {}
    if fail_post_init:

        def post_init(context: Any) -> None:
            os.environ["ACCELBACKENDS_TEST_POST_INIT"] = "1"
            raise RuntimeError("post-init refused")

        hooks["accelbackends_post_init"] = post_init
    return InlinePlugin(spec, **hooks)


def _two_hosts(port: int) -> ClusterInfo:
    """Rank 0 of a two-host job: rank 0 hosts the store early, and Gloo is given an interface."""
    return ClusterInfo(
        "test",
        rank=0,
        world_size=2,
        local_world_size=1,
        master_addr="127.0.0.1",
        master_port=port,
    )


@pytest.fixture
def environment() -> Iterator[None]:
    for key in (BIND_VARIABLE, DEFAULT_VARIABLE, "GLOO_SOCKET_IFNAME"):
        os.environ.pop(key, None)
    yield
    for key in (BIND_VARIABLE, DEFAULT_VARIABLE, "ACCELBACKENDS_TEST_POST_INIT"):
        os.environ.pop(key, None)


FAILURES = {
    "bad override": (dict(accelerator="nonesuch"), {}, ConfigError, "nonesuch"),
    "bind failure": ({}, dict(fail_bind=True), InitError, "no device for this rank"),
    "rendezvous timeout": ({}, {}, RendezvousError, "1/2 ranks joined"),
    "plugin raising in post-init": (
        dict(cluster=None),
        dict(fail_post_init=True),
        PluginError,
        "post-init refused",
    ),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_failed_init_leaves_the_environment_as_it_found_it_and_the_port_free(
    failure: str, environment: None
) -> None:
    arguments, plugin, error, message = FAILURES[failure]
    port = _free_port()
    options: dict[str, Any] = {"cluster": _two_hosts(port), "rendezvous_timeout": 1, **arguments}
    if options["cluster"] is None:  # a single process gets as far as the post-init hook
        del options["cluster"]
    registry = Registry(env=os.environ, plugins=[("undoable", _plugin(**plugin))])
    before = dict(os.environ)
    with pytest.raises(error, match=message) as raised:
        accelbackends.init(registry=registry, **options)
    # The exception (and its traceback) is still alive here, as in a notebook after an error.
    assert raised.value is not None
    assert dict(os.environ) == before
    assert _port_is_free(port)
    assert not accelbackends.is_initialized() and not dist.is_initialized()


def test_failed_init_at_the_port_step_leaves_the_environment_as_it_found_it(
    environment: None,
) -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        registry = Registry(env=os.environ, plugins=[("undoable", _plugin())])
        before = dict(os.environ)
        with pytest.raises(RendezvousError, match=f"port {port} is already in use"):
            accelbackends.init(registry=registry, cluster=_two_hosts(port), rendezvous_timeout=5)
        assert dict(os.environ) == before


def test_failed_init_can_be_retried_on_the_same_port_while_its_error_is_kept() -> None:
    port = _free_port()
    registry = Registry(env={}, plugins=[("undoable", _plugin())])
    with pytest.raises(ConfigError) as first:
        accelbackends.init(registry=registry, cluster=_two_hosts(port), accelerator="nonesuch")
    with pytest.raises(RendezvousError, match="1/2 ranks joined"):  # not "address in use"
        accelbackends.init(registry=registry, cluster=_two_hosts(port), rendezvous_timeout=1)
    assert first.value is not None


def test_destroy_undoes_the_variables_init_set_and_keeps_the_users_own(
    environment: None,
) -> None:
    os.environ["ACCELBACKENDS_TEST_USERS"] = "mine"
    registry = Registry(env=os.environ, plugins=[("undoable", _plugin())])
    try:
        accelbackends.init(registry=registry)
        assert os.environ[DEFAULT_VARIABLE] == "on" and os.environ[BIND_VARIABLE] == "0"
        os.environ[BIND_VARIABLE] = "changed by the user after init"
        accelbackends.destroy()
        assert DEFAULT_VARIABLE not in os.environ
        assert os.environ[BIND_VARIABLE] == "changed by the user after init"
        assert os.environ["ACCELBACKENDS_TEST_USERS"] == "mine"
    finally:
        os.environ.pop("ACCELBACKENDS_TEST_USERS", None)


def test_a_default_the_user_already_set_is_neither_overwritten_nor_removed(
    environment: None,
) -> None:
    os.environ[DEFAULT_VARIABLE] = "user"
    registry = Registry(env=os.environ, plugins=[("undoable", _plugin())])
    accelbackends.init(registry=registry, timeout=timedelta(seconds=60))
    assert os.environ[DEFAULT_VARIABLE] == "user"
    accelbackends.destroy()
    assert os.environ[DEFAULT_VARIABLE] == "user"


def test_environment_changes_restore_set_changed_and_removed_variables() -> None:
    environ = {"KEPT": "1", "CHANGED": "old", "REMOVED": "x"}
    changes = EnvironmentChanges(environ)
    environ.update(CHANGED="new", ADDED="yes")
    del environ["REMOVED"]
    assert changes.changed() == {"ADDED": "yes", "CHANGED": "new", "REMOVED": None}
    changes.undo()
    assert environ == {"KEPT": "1", "CHANGED": "old", "REMOVED": "x"}
