"""`accelbackends.host.workers`: torch's Gloo workers are found, waited for while they run, and
the wait is registered where accelbackends meets a group (the abort at exit, "terminate called
without an active exception", with torch 2.13 on CPU)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from accelbackends.host import workers

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads thread states from /proc (Linux only)"
)


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_running_thread_reads_as_running() -> None:
    assert workers._state(str(threading.get_native_id())) == "R"
    assert workers._state("0") is None  # no such thread: nothing, not an error


def test_a_gloo_groups_workers_are_found_and_settle_after_its_collectives(tmp_path: object) -> None:
    result = _python(
        f"""
        import tempfile, time
        import torch, torch.distributed as dist
        from accelbackends.host import workers

        store = dist.FileStore(tempfile.mktemp(dir={str(tmp_path)!r}), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        for _ in range(20):
            dist.all_reduce(torch.ones(1000))
        found = workers._worker_threads()
        started = time.monotonic()
        settled = workers.wait_until_idle()
        print("RESULT", len(found), settled, time.monotonic() - started)
        dist.destroy_process_group()
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT"))
    _, found, settled, seconds = line.split()
    assert int(found) >= 1  # Gloo's workers (2 by default), by name or as native threads
    assert settled == "True"
    assert float(seconds) < workers.LIMIT_S


def test_the_wait_gives_up_at_its_limit_while_a_native_thread_keeps_running() -> None:
    # torch's intra-op threads doing a matmul in a loop are native threads that keep running
    # (there is no Gloo worker by name in this process, so every native thread is watched).
    result = _python(
        """
        import threading, time
        import torch
        from accelbackends.host import workers

        torch.set_num_threads(2)
        stop = threading.Event()

        def spin():
            # Products of tens of milliseconds each: the intra-op worker stays running (or
            # runnable, under load) through each, and the gaps between them are microseconds,
            # so two quiet checks 10 ms apart cannot both fall into gaps.
            a = torch.randn(1024, 1024)
            while not stop.is_set():
                a @ a

        threading.Thread(target=spin, daemon=True).start()
        time.sleep(0.3)
        started = time.monotonic()
        settled = workers.wait_until_idle(limit_s=0.3)
        busy_for = time.monotonic() - started
        stop.set()
        time.sleep(0.5)
        print("RESULT", settled, busy_for, workers.wait_until_idle(limit_s=5.0))
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT"))
    _, settled, busy_for, after = line.split()
    # Returned while the threads still ran: it gave up, and not before its limit.
    assert settled == "False" and float(busy_for) >= 0.3
    assert after == "True"  # once the loop stops, the same threads settle


def test_the_exit_wait_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(workers, "_registered", False)
    monkeypatch.setattr(workers.atexit, "register", registered.append)
    workers.at_exit()
    workers.at_exit()
    assert registered == [workers._settle_at_exit]


def test_init_without_destroy_tears_down_then_waits_for_the_workers_at_exit() -> None:
    result = _python(
        """
        import accelbackends
        from accelbackends.job import lifecycle
        from accelbackends.host import workers

        real_wait, real_destroy = workers.wait_until_idle, lifecycle._destroy

        def wait(*args, **kwargs):
            print("WAIT", flush=True)
            return real_wait(*args, **kwargs)

        def destroy(**kwargs):  # the teardown destroy() and the exit handler share
            print("DESTROY", flush=True)
            real_destroy(**kwargs)

        workers.wait_until_idle, lifecycle._destroy = wait, destroy
        ctx = accelbackends.init()
        print("INIT", ctx.world_size, flush=True)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [x for x in result.stdout.splitlines() if x in ("INIT 1", "DESTROY", "WAIT")]
    # destroy() waits once itself; the exit wait, registered before it, runs after it
    assert lines == ["INIT 1", "DESTROY", "WAIT", "WAIT"]


def test_the_lightning_environment_registers_the_exit_wait() -> None:
    pytest.importorskip("lightning", reason="needs Lightning: pip install -e '.[frameworks]'")
    result = _python(
        """
        from accelbackends.host import workers
        before = workers._registered
        from accelbackends.integrations.lightning import AccelBackendsEnvironment
        AccelBackendsEnvironment()
        print("RESULT", before, workers._registered)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "RESULT False True" in result.stdout
