"""Nothing left behind: loopback-only stores, no leaked descriptors or threads, warnings."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
import warnings
from pathlib import Path

import pytest
import torch.distributed as dist

import accelbackends
from accelbackends import Registry, RendezvousError, RendezvousWarning


def _own_tcp_listeners() -> set[str]:
    """Local addresses of the TCP sockets this process listens on (from /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(fields[1].rsplit(":", 1)[0])
    return found


def _exposure(ctx: accelbackends.Context) -> tuple[set[str], str | None, bool, int]:
    store_path = ctx.cluster.store_socket
    is_file = bool(store_path) and stat.S_ISREG(os.stat(store_path).st_mode)
    mode = stat.S_IMODE(os.stat(os.path.dirname(store_path)).st_mode) if store_path else -1
    return _own_tcp_listeners(), store_path, is_file, mode


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_spawned_ranks_listen_on_loopback_only_and_meet_through_a_private_store_file() -> None:
    for listeners, store_path, is_file, mode in accelbackends.spawn(_exposure, 2):
        # Gloo's own listening sockets: 0100007F is 127.0.0.1 in /proc's little-endian hex;
        # 00000000 would be every interface.
        assert listeners and listeners <= {"0100007F"}
        # The rendezvous store is a plain file (torch's FileStore) in a directory only this
        # user may enter: no store socket at all, TCP or Unix.
        assert store_path is not None and is_file
        assert mode == 0o700


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


FORK_SAFETY = """
import json, sys
import accelbackends

registry = accelbackends.Registry(root=sys.argv[1])
selection = accelbackends.select(registry=registry)

def rank(ctx):
    import habana_frameworks.torch.hpu as hpu
    return {"device": str(ctx.device), "acquired": hpu.acquired_module_id,
            "backend": ctx.process_group_backend}

results = accelbackends.spawn(rank, 2, registry=registry)
print(json.dumps({
    "selected": selection.accelerator,
    "parent_loaded": sorted(m for m in sys.modules
                            if m.split(".")[0] in ("habana_frameworks", "torch_npu")),
    "ranks": results,
}))
"""


@pytest.mark.slow
def test_after_detect_and_select_forked_ranks_initialise_their_own_device_runtime(
    tmp_path: Path,
) -> None:
    import json
    import subprocess
    import sys

    from accelbackends.testing import FakeStack, FakeTree

    tree = FakeTree(tmp_path / "root").gaudi(4)
    stack = FakeStack(tmp_path / "stack").habana(devices=4)
    env = stack.env(
        {
            "PATH": os.environ.get("PATH", ""),
            "TORCH_CPP_LOG_LEVEL": "ERROR",
            "HABANA_VISIBLE_MODULES": "2,3",
        }
    )
    result = subprocess.run(
        [sys.executable, "-c", FORK_SAFETY, str(tree.root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["selected"] == "hpu"
    # Detection, selection and spawning never touched the vendor runtime in the parent ...
    assert report["parent_loaded"] == []
    # ... so each forked rank acquired its own module, the one its local rank maps to.
    assert [r["acquired"] for r in report["ranks"]] == ["2", "3"]
    assert {r["backend"] for r in report["ranks"]} == {"cpu:gloo,hpu:hccl"}
