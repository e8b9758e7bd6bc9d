"""Choosing Gloo's interface towards the rendezvous host."""

from __future__ import annotations

import socket

from accelbackends.network import gloo_interface_for, interface_towards


def _loopback_name() -> str | None:
    names = [name for _, name in socket.if_nameindex()]
    return "lo" if "lo" in names else None


def test_the_interface_towards_loopback_is_the_loopback_interface() -> None:
    assert interface_towards("127.0.0.1") == _loopback_name()


def test_an_unresolvable_host_gives_no_interface() -> None:
    assert interface_towards("") is None


def test_gloo_interface_is_chosen_only_for_gloo_jobs_across_hosts_without_a_user_choice() -> None:
    assert gloo_interface_for("gloo", "127.0.0.1", True, env={}) == _loopback_name()
    assert gloo_interface_for("cpu:gloo,cuda:nccl", "127.0.0.1", True, env={}) == _loopback_name()
    assert gloo_interface_for("gloo", "127.0.0.1", False, env={}) is None  # one host
    assert gloo_interface_for("nccl", "127.0.0.1", True, env={}) is None  # no Gloo
    assert gloo_interface_for("gloo", None, True, env={}) is None
    assert gloo_interface_for("gloo", "127.0.0.1", True, env={"GLOO_SOCKET_IFNAME": "eth1"}) is None
