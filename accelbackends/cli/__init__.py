"""The command line, a face on top of the job: ``accelbackends info`` and ``accelbackends check``.

- `main`: the commands' dispatch (the console script's ``run``), and ``info``'s own flags read
  without argparse.
- `parser`: the whole command line's parser (argparse), built where a command line needs it.
- `process`: what the command does so that a plugin cannot spoil its output or its exit.
- `sigterm`: a launcher's SIGTERM ends the command within seconds.
- `text`: how the commands print.
- `info`: the report of ``accelbackends info``.
- `topology`: what judges a node (the collective library's version, each device's links, the
  NICs and their rates), as ``info`` shows it and ``check`` picks its floors by.
- `manual`: ``accelbackends docs``, the user guide that ships inside the package.
- `check`: ``accelbackends check``, a package of its own.

Nothing is imported here: ``accelbackends info`` must stay as light as it is.
"""

from __future__ import annotations


def run() -> None:
    """The console script as installed before 0.2 (``accelbackends.cli:run``): `main.run`."""
    from .main import run

    run()
