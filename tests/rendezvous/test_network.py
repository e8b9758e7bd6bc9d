"""Choosing Gloo's interface towards the rendezvous host."""

from __future__ import annotations

import socket

import pytest

from accelbackends.rendezvous.network import gloo_interface_for, interface_towards


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


def test_listening_sees_a_port_listen_and_stop_without_connecting_to_it() -> None:
    from accelbackends.rendezvous.network import connections_to, listening

    if listening(1) is None:
        pytest.skip("the kernel cannot be asked (no sock_diag netlink here)")
    server = socket.socket(socket.AF_INET6)
    server.bind(("::", 0))
    port = server.getsockname()[1]
    assert listening(port) is False  # bound, not yet listening
    server.listen()
    assert listening(port) is True
    assert connections_to(port) == []  # it asked the kernel; nobody connected
    server.close()
    assert listening(port) is False


def test_this_host_is_localhost_or_an_address_it_owns_and_no_name_is_resolved() -> None:
    from accelbackends.rendezvous.network import is_this_host

    assert is_this_host("localhost")
    assert is_this_host("127.0.0.1") and is_this_host("::1")
    assert not is_this_host("192.0.2.1")  # TEST-NET-1: an address no host here owns
    assert not is_this_host("node-that-does-not-exist.invalid")  # a name is not looked up
    assert not is_this_host(socket.gethostname())  # nor this host's own name
