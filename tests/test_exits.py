"""Every failure of ``init()`` leaves the exit code to the user's script, with the machine busy.

Each case is a small plain script that calls ``accelbackends.init()`` (or ``spawn()``) in
``try``/``except`` and exits 3, run `LOOPS` times while two processes burn the CPU beside it;
every run must end with the script's own code and no "terminate called" on stderr. Before the
fix the busy-port script aborted every time (SIGABRT, 134): a thread of ours was still inside
torch's store client when the interpreter shut down.

``ACCELBACKENDS_EXIT_LOOPS`` sets the count (20 by default; small while developing on a shared
machine). The scripts run in children of a fork server that has imported torch once
(tests/exit_server.py), so that the twenty runs of every case fit in a few minutes on 2 cores;
``ACCELBACKENDS_EXIT_FRESH=1`` runs each in a new interpreter instead. The busy-port script,
100 runs in new interpreters::

    ACCELBACKENDS_EXIT_FRESH=1 ACCELBACKENDS_EXIT_LOOPS=100 \
        python -m pytest tests/test_exits.py -k plain_listening_socket
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelbackends.testing.cluster import clean_environment
from accelbackends.testing.plugins import install_distribution

LOOPS = int(os.environ.get("ACCELBACKENDS_EXIT_LOOPS", "20"))
#: The suite's 180 s per test is for one run; a case runs `LOOPS` (a run takes 1 to 6 s here).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120 + 15 * LOOPS)]
#: Read at import: the testing kit's fixture removes ACCELBACKENDS_* variables during a test.
TALLY = os.environ.get("ACCELBACKENDS_EXIT_TALLY")
#: ``ACCELBACKENDS_EXIT_FRESH=1``: each run in a new interpreter instead of the fork server
#: (slower: torch is imported every time); how the 100 runs before the fix were measured.
FRESH = os.environ.get("ACCELBACKENDS_EXIT_FRESH", "") == "1"
#: How many runs of one case at a time.
PARALLEL = 4
HERE = Path(__file__).resolve().parent
#: A hang guard for one run; every case ends within a few seconds.
LIMIT = 120.0

_INIT = """
import os, sys
import accelbackends
{setup}
try:
    accelbackends.init()
except Exception as e:
    print("init failed:", type(e).__name__, e)
    sys.exit(3)
print("init returned")
sys.exit(0)
"""


class Server:
    """Runs the scripts: in children of tests/exit_server.py, started once per test module, or
    with `FRESH` each in a new interpreter, as ``python script.py``."""

    def __init__(self) -> None:
        self.fresh: dict[int, subprocess.Popen[bytes]] = {}
        self.process = None
        if not FRESH:
            self.process = subprocess.Popen(
                [sys.executable, str(HERE / "exit_server.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=_env(),
            )

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process and self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "the fork server ended"
        result: dict[str, Any] = json.loads(answer)
        return result

    def start(self, script: Path, env: dict[str, str], tag: str, *argv: str) -> int:
        out, err = script.with_suffix(f".{tag}.out"), script.with_suffix(f".{tag}.err")
        if FRESH:
            with out.open("wb") as stdout, err.open("wb") as stderr:
                run = subprocess.Popen(
                    [sys.executable, str(script), *argv], env=env, stdout=stdout, stderr=stderr
                )
            self.fresh[run.pid] = run
            return run.pid
        request = {"run": str(script), "argv": argv, "env": env, "out": str(out), "err": str(err)}
        pid: int = self._ask(request)["pid"]
        return pid

    def wait(self, pid: int) -> int:
        if pid in self.fresh:
            return self.fresh.pop(pid).wait(timeout=LIMIT)
        status: int = self._ask({"wait": pid})["status"]
        return status

    def close(self) -> None:
        if self.process and self.process.stdin:
            self.process.stdin.close()
            self.process.wait(timeout=LIMIT)


def _env(**extra: str) -> dict[str, str]:
    env = clean_environment(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    # At least the 16 characters a secret value needs (a shorter one is refused before any
    # rendezvous, which would end every script with exit 3 without reaching its failure path).
    env["ACCELBACKENDS_SECRET"] = "exit-tests-shared-secret"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server()
    yield started
    started.close()


@pytest.fixture(scope="module", autouse=True)
def busy() -> Iterator[None]:
    """Two processes burning the CPU beside the scripts for the whole module."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for burner in burners:
        burner.kill()
        burner.wait()


def _script(tmp_path: Path, name: str, setup: str, body: str = _INIT) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(body.format(setup=textwrap.dedent(setup)), encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _outcome(script: Path, tag: str, status: int) -> str:
    err = script.with_suffix(f".{tag}.err").read_text(errors="replace")
    out = script.with_suffix(f".{tag}.out").read_text(errors="replace")
    return f"status {status}\nstdout: {out[-2000:]}\nstderr: {err[-4000:]}"


class Tally:
    """Each run's exit, checked once the loop is over, so that a failure shows every run's
    status. With ``ACCELBACKENDS_EXIT_TALLY`` set, each run is also appended to that file as
    ``case status`` (how the before/after table of docs/troubleshooting.md was counted)."""

    def __init__(self, case: str, expected: int) -> None:
        self.case, self.expected = case, expected
        self.statuses: list[int] = []
        self.failures: list[str] = []

    def add(self, script: Path, tag: str, status: int) -> None:
        err = script.with_suffix(f".{tag}.err").read_text(errors="replace")
        self.statuses.append(status)
        if status != self.expected or "terminate called" in err:
            self.failures.append(_outcome(script, tag, status))
        if TALLY:
            aborted = " terminate-called" if "terminate called" in err else ""
            with open(TALLY, "a", encoding="utf-8") as file:
                file.write(f"{self.case} {status}{aborted}\n")

    def check(self) -> None:
        counts = dict(Counter(self.statuses))
        assert not self.failures, (
            f"{len(self.failures)} of {len(self.statuses)} runs did not exit {self.expected} "
            f"cleanly (exit statuses: {counts}); the first:\n{self.failures[0]}"
        )


def _loop(
    server: Server,
    script: Path,
    env: Callable[[int], dict[str, str]] | dict[str, str],
    expected: int = 3,
    argv: Callable[[int], tuple[str, ...]] = lambda run: (),
) -> None:
    """Run ``script`` `LOOPS` times, `PARALLEL` at once (each with its own port), and assert
    each run's exit. Most of a run is waiting for a timeout, not computing."""
    tally = Tally(script.stem, expected)
    for first in range(0, LOOPS, PARALLEL):
        runs = range(first, min(first + PARALLEL, LOOPS))
        pids = {
            run: server.start(script, env(run) if callable(env) else env, str(run), *argv(run))
            for run in runs
        }
        for run, pid in pids.items():
            tally.add(script, str(run), server.wait(pid))
    tally.check()


def _rank_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    variables = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "ACCELBACKENDS_RENDEZVOUS_TIMEOUT": "3",
    }
    return _env(**{**variables, **extra})


def test_port_held_by_a_plain_listening_socket(server: Server, tmp_path: Path) -> None:
    """The busy-port script: aborted (134) in every run before the fix."""
    setup = """
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
    os.environ.update(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(s.getsockname()[1]), ACCELBACKENDS_RENDEZVOUS_TIMEOUT="3")
    """
    _loop(server, _script(tmp_path, "busy_port", setup), _env())


def test_port_held_by_another_jobs_torch_store(server: Server, tmp_path: Path) -> None:
    holder = _script(
        tmp_path,
        "holder",
        "",
        body=textwrap.dedent(
            """
            import sys, time
            from datetime import timedelta
            import torch.distributed as dist
            store = dist.TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=60),
                                  wait_for_workers=False)
            print(store.port, flush=True)
            time.sleep(600)
            """
        ),
    )
    other_job = subprocess.Popen(
        [sys.executable, str(holder)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert other_job.stdout
        port = int(other_job.stdout.readline())
        _loop(server, _script(tmp_path, "store_port", ""), _rank_env(0, 2, port))
    finally:
        other_job.kill()
        other_job.wait()


def test_a_rank_that_never_comes(server: Server, tmp_path: Path) -> None:
    def env(run: int) -> dict[str, str]:
        # Rank 0 waits for rank 1; in the other half rank 1 waits for a rank 0 that never comes.
        return _rank_env(run % 2, 2, _free_port(), ACCELBACKENDS_RENDEZVOUS_TIMEOUT="1")

    _loop(server, _script(tmp_path, "missing_rank", ""), env)


def test_a_master_addr_that_does_not_resolve(server: Server, tmp_path: Path) -> None:
    env = _rank_env(1, 2, _free_port(), MASTER_ADDR="no-such-host.invalid")
    _loop(server, _script(tmp_path, "unresolved", ""), env)


def test_an_intruder_without_the_secret(server: Server, tmp_path: Path) -> None:
    script = _script(tmp_path, "secret", "")
    tally = Tally("intruder", 3)
    pairs = max(1, PARALLEL // 2)
    for first in range(0, LOOPS, pairs):
        started: dict[str, int] = {}
        for run in range(first, min(first + pairs, LOOPS)):
            port = _free_port()
            started[f"{run}.rank0"] = server.start(script, _rank_env(0, 2, port), f"{run}.rank0")
            intruder = _rank_env(1, 2, port, ACCELBACKENDS_SECRET="not-the-jobs-secret")
            started[f"{run}.intruder"] = server.start(script, intruder, f"{run}.intruder")
        for tag, pid in started.items():
            tally.add(script, tag, server.wait(pid))
    tally.check()


def test_sigterm_during_the_wait(server: Server, tmp_path: Path) -> None:
    """A script that turns SIGTERM into an exception, as training scripts do to save state."""
    setup = """
    import signal
    class Terminated(Exception):
        pass
    def _stop(signum, frame):
        raise Terminated("SIGTERM")
    signal.signal(signal.SIGTERM, _stop)
    print("waiting", flush=True)
    """
    script = _script(tmp_path, "sigterm", setup)
    tally = Tally(script.stem, 3)
    for run in range(LOOPS):
        env = _rank_env(run % 2, 2, _free_port(), ACCELBACKENDS_RENDEZVOUS_TIMEOUT="60")
        pid = server.start(script, env, str(run))
        out = script.with_suffix(f".{run}.out")
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline and not (out.exists() and "waiting" in out.read_text()):
            time.sleep(0.05)
        time.sleep(0.5 + 0.1 * (run % 5))  # inside the rendezvous wait, at varied points
        os.kill(pid, signal.SIGTERM)
        tally.add(script, str(run), server.wait(pid))
    tally.check()


_HANGING_PLUGIN = """
import dataclasses
import time

import accelbackends
from accelbackends.testing.plugins import fake_accelerator


def _probe(probe):
    time.sleep(30)  # far past ACCELBACKENDS_PLUGIN_TIMEOUT


@accelbackends.hookimpl
def accelbackends_declare_accelerators():
    return [dataclasses.replace(fake_accelerator("slowpoke", priority=90), detect=_probe)]
"""


def test_a_plugin_probe_that_hangs_past_the_plugin_timeout(server: Server, tmp_path: Path) -> None:
    site = install_distribution(
        tmp_path / "site", "slowpoke", "abexit_slowpoke", source=_HANGING_PLUGIN
    )
    env = _env(
        PYTHONPATH=os.pathsep.join([str(site), _env()["PYTHONPATH"]]),
        ACCELBACKENDS_PLUGIN_TIMEOUT="0.5",
        ACCELBACKENDS_ACCELERATOR="slowpoke",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    _loop(server, _script(tmp_path, "hung_probe", ""), env)


_SPAWN = """
import sys
import accelbackends


def work(ctx):
    import torch
    import torch.distributed as dist
    if ctx.rank == 1:
        raise RuntimeError("rank 1 fails early")
    dist.all_reduce(torch.ones(1))


if __name__ == "__main__":
    try:
        accelbackends.spawn(work, nprocs=2, start_method=sys.argv[1])
    except Exception as e:
        print("spawn failed:", type(e).__name__, e)
        sys.exit(3)
    sys.exit(0)
"""


def test_spawn_with_one_rank_failing_early(server: Server, tmp_path: Path) -> None:
    script = tmp_path / "spawn_fails.py"
    script.write_text(_SPAWN, encoding="utf-8")
    # A rank started with "spawn" imports torch afresh (1.5 s of CPU): one run in five.
    _loop(server, script, _env(), argv=lambda run: ("spawn" if run % 5 == 0 else "fork",))


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def test_check_with_a_rank_killed(server: Server, tmp_path: Path) -> None:
    script = tmp_path / "check_cli.py"
    script.write_text("from accelbackends.cli import run\nrun()\n", encoding="utf-8")
    argv = ("check", "--nproc", "2", "--min-bytes", "1KiB", "--max-bytes", "8KiB")
    tally = Tally("check", 1)
    for run in range(LOOPS):
        pid = server.start(script, _env(), str(run), *argv)
        deadline = time.monotonic() + LIMIT
        # Until both ranks run, or the command ended without starting them (bad input).
        while (
            len(_descendants(pid)) < 2
            and os.path.exists(f"/proc/{pid}")
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        time.sleep(0.2 * (run % 6))  # in the rendezvous, the collectives or the sweep
        ranks = _descendants(pid)
        if ranks:
            os.kill(ranks[-1], signal.SIGKILL)
        tally.add(script, str(run), server.wait(pid))
    tally.check()


_ENVIRON = """
import json, os, socket, sys
import accelbackends
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
os.environ.update(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(s.getsockname()[1]), ACCELBACKENDS_RENDEZVOUS_TIMEOUT="3")
before = dict(os.environ)
try:
    accelbackends.init()
except Exception:
    pass
print(json.dumps({"torch": "torch" in sys.modules, "changed": {
    k: os.environ.get(k) for k in set(before) ^ set(os.environ) | {
        k for k in before if before[k] != os.environ.get(k)}}}))
"""


def test_a_failed_init_leaves_torch_cpp_log_level_as_it_found_it(tmp_path: Path) -> None:
    """A fresh interpreter (torch not imported yet, so init() sets the level before torch reads
    it): afterwards os.environ is exactly as before, the variable included."""
    env = _env()
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    done = subprocess.run(
        [sys.executable, "-c", _ENVIRON],
        capture_output=True,
        text=True,
        env=env,
        timeout=LIMIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"torch": True, "changed": {}}
