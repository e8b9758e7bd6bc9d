"""``python -m benchmarks NAME [options]``: the single entry point of every benchmark.

Each benchmark is a module of this package with a docstring (its first line is the help text),
``add_arguments(parser)`` and ``main(args) -> int``; add one by naming it in ``BENCHMARKS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Command name -> module (imported only when that benchmark runs).
BENCHMARKS: dict[str, str] = {
    "check-overhead": "benchmarks.check_overhead",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of accelbackends, each a ratio against a reference in one run.",
    )
    commands = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or name).strip().splitlines()[0]
        module.add_arguments(commands.add_parser(name, help=summary, description=module.__doc__))
    args = parser.parse_args(argv)
    result: int = importlib.import_module(BENCHMARKS[args.benchmark]).main(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
