"""The plain-Python store probe tells a live torch store from a port that accepts and never
answers and from a closed one, within its deadline, and leaves a key torch's client can read."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from accelbackends.rendezvous import storewire

torch_distributed = pytest.importorskip("torch.distributed")


@pytest.fixture
def store() -> Iterator[Any]:
    yield torch_distributed.TCPStore(
        "127.0.0.1", 0, 1, True, timedelta(seconds=10), wait_for_workers=False
    )


def test_a_torch_store_answers_and_a_key_set_through_the_wire_is_read_by_torch(store: Any) -> None:
    peer, client, error = storewire.probe("127.0.0.1", store.port, time.monotonic() + 10)
    assert (peer, error) == (storewire.Peer.STORE, "")
    assert client is not None
    client.set("accelbackends/job/conflict", "another job holds the port")
    client.close()
    assert store.get("accelbackends/job/conflict") == b"another job holds the port"


def test_a_port_that_accepts_and_never_answers_is_silent_by_the_deadline() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        started = time.monotonic()
        peer, client, _ = storewire.probe(
            "127.0.0.1", holder.getsockname()[1], time.monotonic() + 0.5
        )
    assert (peer, client) == (storewire.Peer.SILENT, None)
    assert time.monotonic() - started < 30  # a hang guard: it ends at its deadline


def test_a_closed_port_is_asked_again_until_the_deadline_then_nobody() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: refused
        started = time.monotonic()
        peer, client, error = storewire.probe("127.0.0.1", port, time.monotonic() + 0.3)
    assert (peer, client) == (storewire.Peer.NOBODY, None)
    assert "refused" in error.lower()
    assert time.monotonic() - started >= 0.25  # it retried instead of giving up at once
