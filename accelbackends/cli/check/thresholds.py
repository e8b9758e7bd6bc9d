"""What the sweep must reach: ``--min-busbw`` (at the largest size, or size by size), the
expected bandwidth a plugin declares for its fabric, and ``--baseline`` (an earlier
``check --json``, size by size). Pure functions of the report: no torch.

A miss here is the whole job's: every rank took part in the collective, so no node is named for
it (unless the job has one node, `verdicts`); the link step (`links`, judged in `verdicts`)
names the node that is slower than the rest.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...plugin.errors import ConfigError
from .sizes import format_size, parse_size

__all__ = [
    "DEFAULT_BASELINE_FRACTION",
    "BaselineRow",
    "Floor",
    "Miss",
    "below_baseline",
    "below_floors",
    "parse_fraction",
    "parse_min_busbw",
    "read_baseline",
    "unmatched_floors",
]

#: A size fails against the baseline below this fraction of the baseline's busbw. Measured on
#: the project's 2-core machine (docs/check.md, "Thresholds and baselines"): two healthy runs of
#: the default sweep differ by up to 0.35 at sizes below 64 KiB and by up to 0.2 above, so a
#: default of 0.7 keeps healthy reruns passing at the large sizes while a link at half its
#: speed fails.
DEFAULT_BASELINE_FRACTION = 0.7

_NUMBER = r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_HINT = (
    "use a number of GB/s for the largest size (such as 20) or SIZE=GBPS pairs separated by "
    "commas (such as 1MiB=5,64MiB=20)"
)


@dataclass(frozen=True)
class Floor:
    """A busbw the sweep must reach: at ``nbytes``, or at the largest size where None."""

    nbytes: int | None
    gbps: float
    source: str  # "--min-busbw", or the plugin that declared its fabric's bandwidth


@dataclass(frozen=True)
class BaselineRow:
    """One size of one operation in the baseline report."""

    op: str
    nbytes: int
    busbw_gbps: float
    noise: float | None  # the baseline run's own noise at that size (see bandwidth.Measurement)


@dataclass(frozen=True)
class Miss:
    """One size that fell short of a floor or of the baseline."""

    kind: str  # "min-busbw", "baseline" or "device-copy" (op "device memory copy")
    op: str
    nbytes: int
    busbw_gbps: float
    limit_gbps: float  # what it had to reach
    source: str
    noise: float | None = None  # the larger of this run's and the baseline's noise at that size
    baseline_gbps: float | None = None  # the baseline's busbw at that size

    def text(self) -> str:
        """``all_reduce 64 MiB: busbw 0.41 GB/s below --min-busbw 1 GB/s``."""
        if self.kind == "device-copy":
            return (
                f"{self.op} of {format_size(self.nbytes)}: {self.busbw_gbps:.4g} GB/s read+write, "
                f"below the floor {self.limit_gbps:g} GB/s: {self.source}"
            )
        where = f"{self.op} {format_size(self.nbytes)}: busbw {self.busbw_gbps:.3g} GB/s"
        if self.kind == "min-busbw":
            return f"{where} below {self.source} {self.limit_gbps:g} GB/s"
        noise = "" if self.noise is None else f"; the method's own noise there: {self.noise:.0%}"
        base = self.baseline_gbps or self.limit_gbps
        return (
            f"{where}, {self.busbw_gbps / base:.2f} of the baseline's {base:.3g} GB/s (below "
            f"--baseline-fraction {self.limit_gbps / base:.2g}{noise}; baseline {self.source})"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "op": self.op,
            "bytes": self.nbytes,
            "busbw_gbps": round(self.busbw_gbps, 6),
            "limit_gbps": round(self.limit_gbps, 6),
            "source": self.source,
            "noise": None if self.noise is None else round(self.noise, 4),
            "baseline_gbps": self.baseline_gbps,
        }


def parse_min_busbw(text: str) -> tuple[Floor, ...]:
    """``"20"`` (GB/s at the largest size) or ``"1MiB=5,64MiB=20"`` (size by size)."""
    floors: list[Floor] = []
    for part in text.split(","):
        size, sep, value = part.rpartition("=")
        if not re.fullmatch(rf"\s*{_NUMBER}\s*", value) or float(value) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid; {_HINT}")
        nbytes = None
        if sep:
            try:
                nbytes = parse_size(size)
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(f"{text!r} is not valid; {_HINT}") from None
        floors.append(Floor(nbytes, float(value), "--min-busbw"))
    if len(floors) > 1 and any(f.nbytes is None for f in floors):
        raise argparse.ArgumentTypeError(
            f"{text!r} mixes a bare number with SIZE=GBPS pairs; {_HINT}"
        )
    return tuple(floors)


def parse_fraction(text: str) -> float:
    """A fraction in (0, 1], such as ``0.8``."""
    if not re.fullmatch(rf"\s*{_NUMBER}\s*", text) or not 0 < float(text) <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid; use a fraction greater than 0 and at most 1, such as 0.8"
        )
    return float(text)


def read_baseline(path: str) -> tuple[BaselineRow, ...]:
    """The bandwidth rows of an earlier ``check --json`` report; bad input is a `ConfigError`."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--baseline={path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(
            f"--baseline={path} is not JSON ({exc}); use the output of accelbackends check --json"
        ) from None
    rows = report.get("bandwidth") if isinstance(report, dict) else None
    if isinstance(report, dict) and report.get("world_size") == 1 and not rows:
        raise ConfigError(
            f"--baseline={path} is a run of 1 rank, which measures no collective bandwidth; "
            "use the output of accelbackends check --json with 2 ranks or more"
        )
    if not isinstance(rows, list) or not rows:
        raise ConfigError(
            f"--baseline={path} has no bandwidth rows; use the output of a finished "
            "accelbackends check --json"
        )
    try:
        return tuple(
            BaselineRow(
                str(r["op"]),
                int(r["bytes"]),
                float(r["busbw_gbps"]),
                None if r.get("noise") is None else float(r["noise"]),
            )
            for r in rows
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ConfigError(
            f"--baseline={path}: a bandwidth row lacks op, bytes or busbw_gbps; use the output "
            "of accelbackends check --json"
        ) from None


def below_floors(rows: Sequence[dict[str, Any]], floors: Sequence[Floor]) -> list[Miss]:
    """The swept sizes whose busbw is below a floor (every swept operation is held to it; a
    floor without a size holds at each operation's largest size)."""
    misses = []
    for floor in floors:
        for row in rows:
            if _at(row, floor, rows) and row["busbw_gbps"] < floor.gbps:
                miss = Miss(
                    "min-busbw",
                    row["op"],
                    row["bytes"],
                    row["busbw_gbps"],
                    floor.gbps,
                    floor.source,
                )
                misses.append(miss)
    return misses


def unmatched_floors(rows: Sequence[dict[str, Any]], floors: Sequence[Floor]) -> list[Floor]:
    """The floors at a size the sweep did not measure (said, rather than silently passed)."""
    return [
        f
        for f in floors
        if f.nbytes is not None and not any(_same_size(r["bytes"], f.nbytes) for r in rows)
    ]


def below_baseline(
    rows: Sequence[dict[str, Any]],
    baseline: Sequence[BaselineRow],
    fraction: float,
    source: str,
) -> tuple[list[Miss], int]:
    """The sizes whose busbw is below ``fraction`` of the baseline's at the same operation and
    size, and how many sizes were compared."""
    by_key = {(b.op, b.nbytes): b for b in baseline}
    misses, compared = [], 0
    for row in rows:
        base = by_key.get((row["op"], row["bytes"]))
        if base is None or base.busbw_gbps <= 0:
            continue
        compared += 1
        limit = fraction * base.busbw_gbps
        if row["busbw_gbps"] < limit:
            noises = [n for n in (row.get("noise"), base.noise) if n is not None]
            noise = max(noises) if noises else None
            misses.append(
                Miss(
                    "baseline",
                    row["op"],
                    row["bytes"],
                    row["busbw_gbps"],
                    limit,
                    source,
                    noise,
                    base.busbw_gbps,
                )
            )
    return misses, compared


def _at(row: dict[str, Any], floor: Floor, rows: Sequence[dict[str, Any]]) -> bool:
    if floor.nbytes is None:
        return bool(row["bytes"] == max(r["bytes"] for r in rows if r["op"] == row["op"]))
    return _same_size(row["bytes"], floor.nbytes)


def _same_size(swept: int, asked: int) -> bool:
    # all_gather's size is rounded down to whole elements per rank (1020 bytes for 1 KiB on
    # 3 ranks): within 1 % below the asked size is the same size.
    return bool(asked * 0.99 <= swept <= asked)
