"""Step 4: all_reduce and all_gather swept over sizes, a table row printed as each size
finishes, the ranks agreeing after each size whether to go on; with one rank, which no
collective can measure, a device memory copy instead (`copy_alone`)."""

from __future__ import annotations

import functools

from .bandwidth import AUTO_SECONDS_PER_SIZE, OPS, Measurement, measure
from .devicecopy import COPY_ITERS, COPY_LABEL, CopyMeasurement, copy_size, measure_copy
from .report import table_header, table_row
from .results import Result
from .session import RAISED, UNSUPPORTED, Session
from .sizes import format_size

__all__ = ["copy_alone", "sweep"]


def sweep(session: Session) -> tuple[list[Measurement], list[Result]]:
    """Step 4. Returns the measurements and this rank's problems (an operation the backend
    does not support, one that raised)."""
    ctx, options = session.ctx, session.options
    sizes = options.sizes(ctx.device.type)
    iterations = (
        f"{options.iters} iterations"
        if options.iters
        else f"automatic iterations (about {AUTO_SECONDS_PER_SIZE:g} s per size)"
    )
    session.say(
        f"[4/4] bandwidth: {' and '.join(OPS)} on float32 from {format_size(sizes[0])} to "
        f"{format_size(sizes[-1])}, {iterations} after {options.warmup} warm-up\n"
        "      time: the slowest rank's mean; algbw = size / time; busbw = algbw x 2(n-1)/n "
        "(all_reduce), x (n-1)/n (all_gather, size = total output); GB/s = 10^9 bytes/s"
    )
    if session.stopped:
        session.say(f"      not run: {session.stopped}")
        return [], [Result("bandwidth", "not run", f"not run: {session.stopped}")]
    session.say("      " + table_header())
    measurements: list[Measurement] = []
    problems: list[Result] = []
    for op in OPS:
        for nbytes in sizes:
            name = f"bandwidth {op} {format_size(nbytes)}"
            call = functools.partial(
                measure,
                ctx,
                op,
                nbytes,
                iters=options.iters,
                warmup=options.warmup,
                control=session.control,
            )
            attempt = session.attempt(call, step=name, what=name)
            if attempt.outcome == UNSUPPORTED:
                detail = f"not supported by {ctx.backend} ({attempt.error})"
                problems.append(Result(f"bandwidth {op}", "skipped", detail))
                session.say(f"      {op:<11} skipped: {detail}")
                if not attempt.go_on:  # another rank raised: every rank stops here, together
                    return measurements, problems
                break
            if attempt.outcome == RAISED:
                problems.append(Result(name, "failed", f"raised {attempt.error}"))
                session.say(f"      {op:<11} {format_size(nbytes):>9}  FAILED on rank {ctx.rank}")
            if not attempt.go_on:
                return measurements, problems
            if attempt.value is not None:
                measurements.append(attempt.value)
                session.progress.add_measurement(attempt.value.as_json())
                session.say("      " + table_row(attempt.value))
    return measurements, problems


def copy_alone(session: Session) -> tuple[CopyMeasurement | None, list[Result]]:
    """Step 4 with one rank: a collective of one rank moves no data, so its time is no
    bandwidth; the rank's device memory copy is measured instead, and labelled as such."""
    ctx, options = session.ctx, session.options
    nbytes = copy_size(ctx.device.type, options.quick, options.max_bytes)
    iters = options.iters or COPY_ITERS
    session.say(
        "[4/4] bandwidth: none measured with one rank (a one-rank collective moves no data); "
        f"instead a {COPY_LABEL} on {ctx.device}"
    )
    if session.stopped:
        session.say(f"      not run: {session.stopped}")
        return None, [Result(COPY_LABEL, "not run", f"not run: {session.stopped}")]
    call = functools.partial(measure_copy, ctx.device, nbytes, iters=iters, warmup=options.warmup)
    attempt = session.attempt(call, step=COPY_LABEL, what=f"the {COPY_LABEL}")
    if attempt.value is None:
        session.say(f"      {COPY_LABEL}: FAILED: raised {attempt.error}")
        return None, [Result(COPY_LABEL, "failed", f"raised {attempt.error}")]
    session.progress.update(device_copy=attempt.value.as_json())
    session.say(f"      {attempt.value.text()}")
    return attempt.value, []
