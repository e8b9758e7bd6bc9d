"""Nothing left behind: loopback-only stores, no leaked descriptors or threads, warnings."""

from __future__ import annotations

import os
import socket
import threading
import warnings
from pathlib import Path

import pytest
import torch.distributed as dist

import accelbackends
from accelbackends import Registry, RendezvousError, RendezvousWarning


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a socket in LISTEN state on ``port``, from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def _store_listeners(ctx: accelbackends.Context) -> set[str]:
    assert ctx.master_port is not None
    return _listening_addresses(ctx.master_port)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_spawn_binds_the_rendezvous_store_to_loopback_only() -> None:
    listeners = accelbackends.spawn(_store_listeners, 2)
    # 0100007F is 127.0.0.1 in /proc's little-endian hex; 00000000 would be every interface.
    assert listeners[0] == {"0100007F"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_wildcard_master_address_is_warned_about() -> None:
    env = {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "0.0.0.0",
        "MASTER_PORT": str(_free_port()),
    }
    with (
        pytest.warns(RendezvousWarning, match=r"MASTER_ADDR=0.0.0.0 is a wildcard address"),
        pytest.raises(RendezvousError, match="1/2 ranks joined"),
    ):
        accelbackends.init(registry=Registry(env=env), rendezvous_timeout=0.5)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux /proc/self/fd")
def test_two_hundred_init_destroy_cycles_leak_no_descriptors_or_threads() -> None:
    accelbackends.init()
    accelbackends.destroy()  # first-use costs (torch's own threads, imports) before counting
    fds, threads = _open_descriptors(), threading.active_count()
    for _ in range(200):
        with accelbackends.distributed() as ctx:
            assert ctx.world_size == 1
    assert not dist.is_initialized()
    assert _open_descriptors() - fds <= 2
    assert threading.active_count() - threads <= 1


def _rank(ctx: accelbackends.Context) -> int:
    return ctx.rank


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux /proc/self/fd")
def test_repeated_spawns_leak_no_descriptors_in_the_parent() -> None:
    accelbackends.spawn(_rank, 2)
    fds = _open_descriptors()
    for _ in range(10):
        assert accelbackends.spawn(_rank, 2) == [0, 1]
    assert _open_descriptors() - fds <= 2


def test_public_names_are_exactly_the_lazy_exports() -> None:
    assert set(accelbackends.__all__) - {"__version__"} == set(accelbackends._EXPORTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in accelbackends.__all__:
            assert getattr(accelbackends, name) is not None
