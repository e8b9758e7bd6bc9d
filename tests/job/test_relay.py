"""The ranks' stderr relay: copied as it comes, its last lines kept, nothing waited for."""

from __future__ import annotations

import os

from accelbackends.job.relay import LAST_LINES, StderrRelay


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def test_last_lines_join_partial_writes_and_keep_only_the_last_ones() -> None:
    target_read, target_write = os.pipe()
    rank_read, rank_write = os.pipe()
    relay = StderrRelay(target_write)
    relay.add(0, rank_read)
    relay.start()
    try:
        for number in range(LAST_LINES + 5):
            os.write(rank_write, f"line {number}".encode())  # the line's end comes apart
            os.write(rank_write, b"\n\n")
        os.write(rank_write, b"unfinished")
        os.close(rank_write)  # the rank has ended: everything it wrote is read
        assert (
            relay.last_lines(0)
            == (
                *(f"line {n}" for n in range(5, LAST_LINES + 5)),
                "unfinished",
            )[-LAST_LINES:]
        )
    finally:
        relay.close()
    copied = _read_all(target_read).decode()
    assert copied == "".join(f"line {n}\n\n" for n in range(LAST_LINES + 5)) + "unfinished"
    os.close(target_read)
    os.close(target_write)


def test_close_does_not_wait_for_a_pipe_someone_still_holds() -> None:
    target_read, target_write = os.pipe()
    rank_read, rank_write = os.pipe()  # rank_write stays open: a rank's leftover helper
    relay = StderrRelay(target_write)
    relay.add(3, rank_read)
    relay.start()
    os.write(rank_write, b"said before its helper was left behind\n")
    assert relay.last_lines(3) == ("said before its helper was left behind",)
    relay.close()  # returns, though the pipe never ends
    assert _read_all(target_read) == b"said before its helper was left behind\n"
    for fd in (rank_write, target_read, target_write):
        os.close(fd)


def test_a_rank_that_wrote_nothing_has_no_last_lines() -> None:
    rank_read, rank_write = os.pipe()
    relay = StderrRelay()
    relay.add(0, rank_read)
    os.close(rank_write)
    assert relay.last_lines(0) == ()
    assert relay.last_lines(5) == ()  # a rank the relay never had
    relay.close()  # never started: closes all the same
