"""A fork server for tests/test_exits.py: imports torch and accelbackends once, then runs each
user script in a forked child of its own, from the top, to the interpreter's own exit.

A fresh interpreter spends 1.5 s of CPU importing torch; the exit tests run each failure path
twenty times with the machine busy, which would take most of ten minutes on 2 cores. A forked
child runs the script as ``python script.py`` would (``__main__``, ``sys.argv``, the environment
given) and ends the same way: its ``SystemExit`` or uncaught error reaches the top of this
program, and the interpreter shuts down with its daemon threads as any script's does, which is
where a thread left inside torch aborts it. Nothing but the imports is shared: the parent starts
no thread, creates no store and initialises no process group.

Protocol, one JSON object per line on stdin, one answer per line on stdout:
``{"run": script, "argv": [...], "env": {...}, "out": path, "err": path}`` → ``{"pid": n}``;
``{"wait": pid}`` → ``{"status": s}`` (``os.waitpid``'s exit code, or minus the signal number).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import types

import torch.distributed  # noqa: F401  (the import the children share)

import accelbackends
import accelbackends.job.lifecycle  # noqa: F401


def _child(request: dict[str, object]) -> None:
    """Become the script: its streams, environment, path and arguments; then run it."""
    for fd, key in ((1, "out"), (2, "err")):
        target = os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)  # noqa: SIM115  (the child's stdin for its whole life)
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    script = str(request["run"])
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [os.path.dirname(script), *extra]
    argv = request.get("argv") or []
    assert isinstance(argv, list)
    sys.argv = [script, *map(str, argv)]
    # A module of its own that stays in sys.modules, as a script's __main__ does: its globals
    # (a listening socket, a store) live until the interpreter's shutdown, where the races are
    # (runpy.run_path would drop them while the SystemExit unwinds, before the shutdown).
    main = types.ModuleType("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main
    with open(script, encoding="utf-8") as file:
        code = compile(file.read(), script, "exec")
    exec(code, main.__dict__)


def main() -> None:
    gc.freeze()  # the imports stay out of each child's collections (copy-on-write pages)
    for line in sys.stdin:
        request = json.loads(line)
        if "wait" in request:
            _, status = os.waitpid(int(request["wait"]), 0)
            answer = {"status": os.waitstatus_to_exitcode(status)}
        else:
            pid = os.fork()
            if pid == 0:
                _child(request)
                return  # the script ended without sys.exit: the interpreter exits with 0
            answer = {"pid": pid}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
