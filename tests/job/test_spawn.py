"""spawn(): real ranks on Gloo, failures named, nothing left behind."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import accelbackends
from accelbackends import ConfigError, SpawnError
from accelbackends.job import spawn as spawn_module
from accelbackends.job.spawn import SETTLE
from accelbackends.plugin import torchcompat


def _all_reduce(ctx: accelbackends.Context, scale: float) -> tuple[int, int, float, str]:
    tensor = torch.full((5,), float(ctx.rank + 1) * scale)
    dist.all_reduce(tensor)
    return ctx.rank, ctx.world_size, tensor[0].item(), os.environ["LOCAL_RANK"]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_spawned_ranks_all_reduce_and_return_results_by_rank(nprocs: int) -> None:
    results = accelbackends.spawn(_all_reduce, nprocs, args=(2.0,))
    expected_sum = 2.0 * nprocs * (nprocs + 1) / 2
    assert results == [(rank, nprocs, expected_sum, str(rank)) for rank in range(nprocs)]
    assert multiprocessing.active_children() == []


def _context_fields(ctx: accelbackends.Context) -> tuple[object, ...]:
    return (
        ctx.launcher,
        ctx.local_world_size,
        ctx.master_addr,
        ctx.accelerator,
        ctx.backend,
        dist.get_world_size(),
    )


def test_spawned_context_describes_a_loopback_single_node_job() -> None:
    assert accelbackends.spawn(_context_fields, 2)[1] == ("spawn", 2, None, "cpu", "gloo", 2)


def _raise_on_rank_one(ctx: accelbackends.Context) -> None:
    if ctx.rank == 1:
        raise ValueError("bad batch on rank one")
    dist.barrier()  # rank 0 would wait for rank 1 forever: spawn must stop it


def test_rank_that_raises_is_named_and_the_others_are_stopped() -> None:
    with pytest.raises(
        SpawnError, match=r"rank 1 of 2 raised ValueError: bad batch on rank one"
    ) as caught:
        accelbackends.spawn(_raise_on_rank_one, 2)
    assert caught.value.rank == 1
    assert "Traceback" in caught.value.traceback and "_raise_on_rank_one" in caught.value.traceback
    assert multiprocessing.active_children() == []


def _killed(ctx: accelbackends.Context) -> None:
    if ctx.rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_rank_killed_by_a_signal_is_reported_with_the_signal() -> None:
    with pytest.raises(SpawnError, match=r"rank 0 of 2 was killed by SIGKILL without reporting"):
        accelbackends.spawn(_killed, 2)
    assert multiprocessing.active_children() == []


def _dies_in_a_collective(ctx: accelbackends.Context, signum: int | None) -> None:
    from dying import die_slowly

    if ctx.rank == 0:
        die_slowly(signum)  # its end reaches the parent seconds after rank 1's report
    dist.all_reduce(torch.ones(4))  # rank 1 waits here for rank 0, and loses it


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "how", "exitcode"),
    [(signal.SIGSEGV, "was killed by SIGSEGV", -signal.SIGSEGV), (None, "exited with code 3", 3)],
    ids=["signal", "exit-code"],
)
def test_rank_dying_in_a_collective_is_named_first_and_its_peers_loss_as_the_consequence(
    signum: int | None, how: str, exitcode: int
) -> None:
    """The dead rank's end reaches the parent after the survivor reported "Connection closed
    by peer" (as a CUDA rank's does): the parent waits for it, and names it."""
    with pytest.raises(SpawnError) as caught:
        accelbackends.spawn(_dies_in_a_collective, 2, args=(signum,))
    error = caught.value
    assert (error.rank, error.death, error.exitcode) == (0, how, exitcode)
    lines = str(error).splitlines()
    assert lines[0] == f"rank 0 of 2 {how} without reporting a result"
    ((rank, said),) = error.consequences
    assert rank == 1 and said.startswith("rank 1 raised "), said
    assert lines[-1] == f"({said} — a consequence of rank 0's death above)"
    assert multiprocessing.active_children() == []


def _closes_its_group_then_aborts(ctx: accelbackends.Context, done: str) -> None:
    import time

    if ctx.rank == 0:
        # Its sockets close while it still runs (as Gloo closes a pair when it raises, before
        # the C++ exception aborts the process): rank 1 reports the loss first.
        dist.destroy_process_group()
        while not os.path.exists(done):  # until rank 1 has lost it
            time.sleep(0.01)
        time.sleep(2 * SETTLE)  # past the window in which the parent collects reports anyway
        os.abort()
    try:
        dist.all_reduce(torch.ones(4))
    finally:
        open(done, "w").close()


@pytest.mark.slow
@pytest.mark.skipif(
    torchcompat.release() < (2, 9),
    reason="destroying a Gloo group can deadlock before torch 2.9 (pytorch/pytorch#154976)",
)
def test_a_rank_still_running_when_its_peer_reports_losing_it_is_waited_for_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No wall-clock margin: the grace is made far longer than the rank's way to its end.
    monkeypatch.setattr(spawn_module, "PEER_GRACE", 300.0)
    with pytest.raises(SpawnError) as caught:
        accelbackends.spawn(_closes_its_group_then_aborts, 2, args=(str(tmp_path / "lost"),))
    error = caught.value
    assert (error.rank, error.death) == (0, "was killed by SIGABRT"), str(error)
    assert str(error).splitlines()[-1].endswith("a consequence of rank 0's death above)")


def test_init_options_are_forwarded_to_every_rank() -> None:
    def timeouts(ctx: accelbackends.Context) -> float:
        return ctx.timeout

    assert accelbackends.spawn(timeouts, 2, timeout=77) == [77.0, 77.0]


def test_bad_selection_fails_in_the_parent_before_any_rank_starts() -> None:
    with pytest.raises(accelbackends.SelectionError, match=r"backend='nccl' is not supported"):
        accelbackends.spawn(_all_reduce, 2, args=(1.0,), backend="nccl")
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((_all_reduce, 0), {}, r"nprocs=0 is not valid; use an integer >= 1"),
        ((_all_reduce, "2"), {}, r"nprocs='2' is not valid"),
        (("not callable", 2), {}, r"fn='not callable' is not callable"),
        ((_all_reduce, 2), {"args": 5}, r"args=5 is not valid; pass a tuple"),
        (
            (_all_reduce, 2),
            {"start_method": "teleport"},
            r"start_method='teleport' is not "
            r"available here; use one of",
        ),
        (
            (lambda ctx: None, 2),
            {"start_method": "spawn"},
            r"cannot be pickled for "
            r"start_method='spawn'.*need start_method='fork'",
        ),
    ],
)
def test_bad_spawn_arguments_are_config_errors(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        accelbackends.spawn(*args, **kwargs)  # type: ignore[arg-type]


def test_spawn_start_method_runs_importable_functions() -> None:
    results = accelbackends.spawn(_all_reduce, 2, args=(1.0,), start_method="spawn")
    assert [r[2] for r in results] == [3.0, 3.0]


def test_function_from_a_script_read_from_stdin_runs() -> None:
    script = textwrap.dedent("""
        import torch, torch.distributed as dist, accelbackends
        def total(ctx):
            t = torch.tensor([ctx.rank + 1])
            dist.all_reduce(t)
            return t.item()
        print("RESULT", accelbackends.spawn(total, 3))
    """)
    result = subprocess.run(
        [sys.executable, "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "RESULT [6, 6, 6]" in result.stdout


def _draw(ctx: accelbackends.Context) -> list[float]:
    import random

    import numpy

    return [torch.rand(1).item(), random.random(), float(numpy.random.rand())]


def test_seed_is_identical_on_every_rank_unless_offset_per_rank() -> None:
    same = accelbackends.spawn(_draw, 2, seed=7)
    assert same[0] == same[1]
    offset = accelbackends.spawn(_draw, 2, seed=7, seed_per_rank=True)
    assert offset[0] == same[0]  # rank 0's offset is 0
    assert all(a != b for a, b in zip(offset[0], offset[1], strict=True))


def test_the_spawn_function_survives_an_import_of_its_module() -> None:
    import importlib

    importlib.import_module("accelbackends.job.spawn")
    assert callable(accelbackends.spawn)
    assert accelbackends.spawn(_rank_only, 1) == [0]


def _rank_only(ctx: accelbackends.Context) -> int:
    return ctx.rank


_LAST_WORDS = textwrap.dedent("""
    import json, os, signal, sys
    import torch.distributed as dist, accelbackends
    def says_then_dies(ctx, how):
        if ctx.rank == 1:
            print("first words of rank 1", file=sys.stderr)
            print("rank 1: out of cheese at step 7", file=sys.stderr, flush=True)
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()  # rank 0 waits for rank 1, and loses it
    try:
        accelbackends.spawn(says_then_dies, 2, args=(sys.argv[1],))
    except accelbackends.SpawnError as error:
        print(json.dumps([error.rank, error.death, error.last_stderr, str(error)]))
""")


@pytest.mark.parametrize(
    ("how", "death"), [("exit", "exited with code 3"), ("signal", "was killed by SIGKILL")]
)
def test_a_dead_ranks_last_stderr_lines_are_in_its_death_message_and_shown_once(
    how: str, death: str
) -> None:
    # A program of its own, so that the ranks' stderr is a plain one (pytest's capture
    # replaces sys.stderr in this process, and forked ranks would inherit that).
    result = subprocess.run(
        [sys.executable, "-", how],
        input=_LAST_WORDS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rank, said_death, last, message = json.loads(result.stdout)
    assert (rank, said_death) == (1, death)
    assert last == ["first words of rank 1", "rank 1: out of cheese at step 7"]
    assert message.splitlines()[0] == (
        f"rank 1 of 2 {death} without reporting a result; its last stderr lines: "
        "first words of rank 1 | rank 1: out of cheese at step 7"
    )
    # Relayed to the parent's stderr as the rank wrote it, once.
    lines = result.stderr.splitlines()
    assert lines.count("rank 1: out of cheese at step 7") == 1, result.stderr
    assert lines.count("first words of rank 1") == 1, result.stderr


def _says_then_exits(ctx: accelbackends.Context) -> None:
    if ctx.rank == 0:
        print("rank 0 started fresh and gave up", file=sys.stderr, flush=True)
        os._exit(5)
    dist.barrier()


def test_a_dead_ranks_last_stderr_lines_reach_the_parent_with_the_spawn_start_method(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SpawnError) as caught:
        accelbackends.spawn(_says_then_exits, 2, start_method="spawn")
    assert caught.value.last_stderr == ("rank 0 started fresh and gave up",)
    assert str(caught.value).splitlines()[0] == (
        "rank 0 of 2 exited with code 5 without reporting a result; its last stderr lines: "
        "rank 0 started fresh and gave up"
    )
    err = capfd.readouterr().err
    assert err.splitlines().count("rank 0 started fresh and gave up") == 1, err
    assert multiprocessing.active_children() == []


def _writes_raw_bytes(ctx: accelbackends.Context) -> None:
    if ctx.rank == 0:
        # Binary, a terminal escape, and a last line with no newline.
        os.write(2, b"\x00\xff\x1b[31mred\n" + b"x" * 300 + b"\nno newline at the end")
        os._exit(4)
    dist.barrier()


def test_a_ranks_binary_and_unterminated_stderr_is_quoted_printable_and_relayed_whole(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SpawnError) as caught:
        accelbackends.spawn(_writes_raw_bytes, 2)
    error = caught.value
    assert (error.rank, error.death) == (0, "exited with code 4")
    # Control characters shown as "?", the long line cut to its end, and the last one quoted
    # though no newline ended it.
    binary, long_line, last = error.last_stderr
    assert binary == "?\ufffd?[31mred"
    assert long_line == "..." + "x" * 240
    assert last == "no newline at the end"
    err = capfd.readouterr().err
    # Relayed as written, escape and all.
    assert "\x1b[31mred\n" + "x" * 300 + "\nno newline at the end" in err


def _chatty(ctx: accelbackends.Context) -> int:
    # More than a pipe holds (64 KiB), from every rank, while the others wait in a collective:
    # the relay drains the pipes, so no rank blocks on its stderr.
    for _ in range(2000):
        sys.stderr.write(f"rank {ctx.rank} says something of no importance at all\n")
    sys.stderr.flush()
    dist.barrier()
    return ctx.rank


def test_ranks_writing_more_stderr_than_a_pipe_holds_finish_and_every_line_arrives(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert accelbackends.spawn(_chatty, 2) == [0, 1]
    lines = capfd.readouterr().err.splitlines()
    for rank in (0, 1):
        said = f"rank {rank} says something of no importance at all"
        assert lines.count(said) == 2000
