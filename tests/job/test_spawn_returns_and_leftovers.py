"""spawn(): what ranks return arrives whole in the parent, a rank's exception keeps its type,
and nothing a rank leaves behind (a thread, a helper process, a temp folder) outlives the call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy
import pytest
import torch

import accelbackends
import accelbackends.job.spawn as spawning
from accelbackends import ConfigError, SpawnError


def _tensors(ctx: accelbackends.Context) -> dict[str, object]:
    return {
        "tensor": torch.ones(3) * ctx.rank,
        "array": numpy.arange(4) + ctx.rank,
        "nested": [(torch.zeros(2, 2) + ctx.rank, {"x": torch.tensor([ctx.rank])})],
    }


def test_returned_tensors_arrays_and_containers_arrive_whole_and_owned_by_the_parent() -> None:
    results = accelbackends.spawn(_tensors, 2)
    for rank, result in enumerate(results):
        assert torch.equal(result["tensor"], torch.full((3,), float(rank)))  # type: ignore[arg-type]
        assert numpy.array_equal(result["array"], numpy.arange(4) + rank)  # type: ignore[arg-type]
        nested = result["nested"][0]  # type: ignore[index]
        assert torch.equal(nested[0], torch.full((2, 2), float(rank)))
        assert nested[1]["x"].item() == rank
    # Owned by the parent: not shared memory that went away with the rank.
    assert not results[1]["tensor"].is_shared()  # type: ignore[union-attr]
    results[1]["tensor"].add_(1)  # type: ignore[union-attr]


def _generator(ctx: accelbackends.Context) -> object:
    return (i for i in range(3))


def test_an_unpicklable_return_is_one_line_naming_the_rank_and_the_type() -> None:
    with pytest.raises(SpawnError) as caught:
        accelbackends.spawn(_generator, 2)
    first = str(caught.value).splitlines()[0]
    assert first.startswith("rank ") and " of 2 returned a generator that cannot be sent" in first
    assert "Traceback" not in str(caught.value)


def _value_error_on_rank_1(ctx: accelbackends.Context) -> int:
    if ctx.rank == 1:
        raise ValueError("rank 1 does not like this value")
    return ctx.rank


def test_a_ranks_exception_type_stays_catchable_with_the_rank_and_its_traceback() -> None:
    with pytest.raises(ValueError, match="rank 1 does not like this value") as caught:
        accelbackends.spawn(_value_error_on_rank_1, 2)
    error = caught.value
    assert isinstance(error, SpawnError) and error.rank == 1
    assert str(error).startswith("rank 1 of 2 raised ValueError: rank 1 does not like")
    assert "Traceback of rank 1" in str(error) and "_value_error_on_rank_1" in error.traceback


class _NeedsTwoArguments(Exception):
    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")


def _custom_error(ctx: accelbackends.Context) -> None:
    raise _NeedsTwoArguments("x", "y")


def test_an_exception_class_that_cannot_be_combined_still_gives_a_spawn_error() -> None:
    with pytest.raises(SpawnError, match="raised _NeedsTwoArguments: x/y") as caught:
        accelbackends.spawn(_custom_error, 1)
    assert caught.value.rank == 0


def _leave_a_thread(ctx: accelbackends.Context) -> int:
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    return ctx.rank


def test_spawn_returns_when_a_rank_leaves_a_non_daemon_thread_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spawning, "EXIT_GRACE", 0.5)
    assert accelbackends.spawn(_leave_a_thread, 2) == [0, 1]


def _leave_helpers(ctx: accelbackends.Context, folder: str) -> int:
    sleeper = [sys.executable, "-c", "import time; time.sleep(3600)"]
    stays = subprocess.Popen(sleeper)
    detached = subprocess.Popen(sleeper, start_new_session=True)
    forked = os.fork()
    if forked == 0:  # holds the rank's pipes, as a helper forked without exec does
        time.sleep(3600)
        os._exit(0)
    Path(folder, str(ctx.rank)).write_text(f"{stays.pid} {detached.pid} {forked}")
    return ctx.rank


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, Linux only")
def test_helpers_a_rank_started_or_detached_are_ended_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawning, "EXIT_GRACE", 0.5)
    assert accelbackends.spawn(_leave_helpers, 2, args=(str(tmp_path),)) == [0, 1]
    pids = [int(p) for rank in (0, 1) for p in (tmp_path / str(rank)).read_text().split()]
    assert len(pids) == 6
    assert [pid for pid in pids if _running(pid)] == []


def test_a_function_from_stdin_with_start_method_spawn_is_a_config_error() -> None:
    script = textwrap.dedent("""
        import accelbackends
        def f(ctx):
            return ctx.rank
        try:
            accelbackends.spawn(f, 2, start_method="spawn")
        except accelbackends.ConfigError as exc:
            print("CONFIG", exc)
    """)
    result = subprocess.run(
        [sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "CONFIG fn='f' cannot be pickled for start_method='spawn'" in result.stdout
    assert "start_method='fork'" in result.stdout


def test_start_method_spawn_still_refuses_in_this_process_for_a_main_function() -> None:
    def local(ctx: accelbackends.Context) -> int:
        return 0

    with pytest.raises(ConfigError, match="cannot be pickled"):
        accelbackends.spawn(local, 2, start_method="spawn")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, Linux only")
def test_a_killed_parents_temp_folder_is_removed_by_the_next_run() -> None:
    # A short temp folder of its own: the store's socket path must fit AF_UNIX's 108 bytes.
    with tempfile.TemporaryDirectory(prefix="ab-", dir="/tmp") as folder:
        _killed_parent_then_next_run(Path(folder))


def _killed_parent_then_next_run(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    script = textwrap.dedent("""
        import sys, time, accelbackends
        def wait(ctx):
            if ctx.rank == 0:
                print("STARTED", flush=True)
            time.sleep(3600)
        accelbackends.spawn(wait, 2)
    """)
    parent = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == "STARTED"
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("accelbackends-spawn-")]
    assert left and str(parent.pid) in left[0]
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=60)
    after = subprocess.run(
        [sys.executable, "-c", "import accelbackends; print(accelbackends.spawn(lambda c: 1, 1))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert after.returncode == 0, after.stderr
    assert not (tmp_path / left[0]).exists()
