"""``accelbackends check`` (placeholder until the check issue lands)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=2)


def run(args: argparse.Namespace) -> int:
    return 0
