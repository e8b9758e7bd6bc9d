"""Step 4: all_reduce and all_gather swept over sizes, a table row printed as each size
finishes, the ranks agreeing after each size whether to go on."""

from __future__ import annotations

import functools

from .bandwidth import AUTO_SECONDS_PER_SIZE, OPS, Measurement, measure
from .report import table_header, table_row
from .results import Result
from .session import RAISED, UNSUPPORTED, Session
from .sizes import format_size

__all__ = ["sweep"]


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
