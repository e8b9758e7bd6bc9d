"""The Unix-socket store that spawn() uses: torch's store semantics, errors, and timeouts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

import accelbackends
from accelbackends import ClusterInfo, RendezvousError, localstore


@pytest.fixture
def server(tmp_path: Path) -> Iterator[localstore.LocalStoreServer]:
    serving = localstore.LocalStoreServer(str(tmp_path / "store.sock"))
    yield serving
    serving.close()


def test_set_get_add_check_delete_and_count(server: localstore.LocalStoreServer) -> None:
    store = localstore.connect(server.path, timedelta(seconds=5))
    store.set("a", "one")
    store.set("b", b"\x00\xff")
    assert store.get("a") == b"one"
    assert store.get("b") == b"\x00\xff"
    assert store.add("n", 2) == 2
    assert store.add("n", 3) == 5
    assert store.check(["a", "n"]) and not store.check(["a", "missing"])
    assert store.num_keys() == 3
    assert store.delete_key("a") and not store.delete_key("a")


def test_compare_set_follows_torch_semantics(server: localstore.LocalStoreServer) -> None:
    store = localstore.connect(server.path, timedelta(seconds=5))
    assert store.compare_set("k", "", "first") == b"first"  # missing key and empty expectation
    assert store.compare_set("k", "wrong", "second") == b"first"  # mismatch: current value
    assert store.compare_set("k", "first", "second") == b"second"


def test_get_waits_for_a_key_another_client_sets(server: localstore.LocalStoreServer) -> None:
    reader = localstore.connect(server.path, timedelta(seconds=60))
    writer = localstore.connect(server.path, timedelta(seconds=60))
    got: list[bytes] = []
    waiting = threading.Thread(target=lambda: got.append(reader.get("late")))
    waiting.start()
    # Still waiting for the key nobody has set: a get that did not wait would have returned or
    # raised by now. (Slowness can only keep it waiting longer, never fail this.)
    waiting.join(0.2)
    assert waiting.is_alive() and got == []
    writer.set("late", "here")
    waiting.join(60)  # a hang guard
    assert got == [b"here"]


def test_missing_key_times_out_with_torchs_store_error(server: localstore.LocalStoreServer) -> None:
    store = localstore.connect(server.path, timedelta(seconds=0.3))
    with pytest.raises(dist.DistStoreError, match=r"wait timeout after 0\.3 s, keys: never"):
        store.get("never")
    with pytest.raises(dist.DistStoreError, match="keys: a, b"):
        store.wait(["a", "b"], timedelta(seconds=0.2))


def test_a_store_that_went_away_is_a_network_error(tmp_path: Path) -> None:
    with pytest.raises(dist.DistNetworkError, match="cannot reach the local rendezvous store"):
        localstore.connect(str(tmp_path / "nobody.sock"), timedelta(seconds=1)).get("x")


def test_works_under_a_prefix_store_as_torch_uses_it(server: localstore.LocalStoreServer) -> None:
    # torch wraps the store in PrefixStores and calls it from C++: the operations Gloo's
    # connection set-up and our rendezvous use must all go through.
    client = localstore.connect(server.path, timedelta(seconds=5))  # torch keeps no Python ref
    store = dist.PrefixStore("job", client)
    store.set("k", "v")
    assert store.get("k") == b"v"
    assert store.add("c", 2) == 2
    assert store.check(["k", "c"])
    store.wait(["k"], timedelta(seconds=1))
    assert store.compare_set("k", "v", "w") == b"w"
    direct = localstore.connect(server.path, timedelta(seconds=5))
    assert direct.get("job/k") == b"w"


def test_missing_rank_through_the_local_store_says_how_many_joined(
    server: localstore.LocalStoreServer,
) -> None:
    cluster = ClusterInfo(
        "spawn", rank=0, world_size=3, local_world_size=3, store_socket=server.path
    )
    with pytest.raises(
        RendezvousError,
        match=r"timed out after 0.5 s: 1/3 ranks joined at the "
        r"local store",
    ):
        accelbackends.init(cluster=cluster, rendezvous_timeout=0.5)
    assert not dist.is_initialized()
