"""Waiting for rank 0's store to listen, read from /proc/net without connecting to it."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from accelbackends.listening import is_listening, is_this_host, wait_until_listening

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="listening sockets are read from Linux /proc/net"
)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


@linux_only
def test_a_listening_port_is_seen_and_a_bound_but_silent_one_is_not() -> None:
    quiet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    quiet.bind(("127.0.0.1", 0))
    port = quiet.getsockname()[1]
    try:
        assert is_listening(port) is False
        quiet.listen(1)
        assert is_listening(port) is True
    finally:
        quiet.close()


@linux_only
def test_an_ipv6_dual_stack_listener_like_torchs_store_is_seen() -> None:
    if not socket.has_ipv6:
        pytest.skip("this host has no IPv6 sockets")
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.bind(("::", 0))
    except OSError:
        sock.close()
        pytest.skip("this host cannot bind an IPv6 socket")
    sock.listen(1)
    try:
        assert is_listening(sock.getsockname()[1]) is True
    finally:
        sock.close()


def test_without_readable_tables_it_cannot_tell(tmp_path: object) -> None:
    assert is_listening(12345, tables=("/nonexistent/tcp", "/nonexistent/tcp6")) is None


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        (socket.gethostname(), True),
        ("10.1.2.3", False),
        ("node017", socket.gethostname() == "node017"),
        ("", False),
        (None, False),
    ],
)
def test_only_a_host_named_as_this_one_is_waited_for(host: str | None, local: bool) -> None:
    assert is_this_host(host) is local


@linux_only
def test_waiting_for_a_listening_store_returns_without_connecting_to_it(
    listener: socket.socket,
) -> None:
    wait_until_listening("127.0.0.1", listener.getsockname()[1], timeout=30)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody knocked: the store would have looked the caller up


def test_waiting_for_a_port_nobody_opens_gives_up_after_the_timeout() -> None:
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    try:
        wait_until_listening("127.0.0.1", port, timeout=0.05)  # returns: the connect reports
    finally:
        closed.close()


def test_a_store_on_another_host_is_not_waited_for() -> None:
    # 192.0.2.0/24 is reserved for documentation: nothing listens there, and nothing is read.
    wait_until_listening("192.0.2.1", 1, timeout=3600)
