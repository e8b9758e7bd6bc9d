"""Draw one chart from a JSON spec: ``python -m benchmarks._charts SPEC.json OUT.png``.

Run by :func:`benchmarks._common.draw` in whichever interpreter has matplotlib (possibly the
peers' environment, where accelbackends is not installed): this module imports nothing from
the project.

Kinds:
- ``bars``: ``{"title", "rows": [{"label", "seconds", "peak_mib", "highlight"}]}``, two panels,
  median time (log scale) and peak memory, one bar per row.
- ``lines``: ``{"title", "xlabel", "ylabel", "series": [{"label", "x", "median", "low",
  "high"}]}``, medians with a shaded low..high band per series.
- ``strip``: ``{"title", "ylabel", "groups": [{"label", "values"}]}``, every run as a dot
  and a box per group.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

_OURS, _OTHERS = "#1f77b4", "#9a9a9a"


def _bars(spec: dict[str, Any], plt: Any) -> Any:
    rows = spec["rows"]
    labels = [r["label"] for r in rows]
    colours = [_OURS if r.get("highlight") else _OTHERS for r in rows]
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(11, 0.45 * len(rows) + 1.6), sharey=True, width_ratios=[3, 2]
    )
    positions = range(len(rows))
    seconds = [r["seconds"] for r in rows]
    left.barh(positions, seconds, color=colours)
    left.set_xscale("log")
    left.set_xlabel("median wall time of a cold process (s, log scale)")
    for y, value in zip(positions, seconds, strict=True):
        text = f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.2f} s"
        left.text(value * 1.05, y, text, va="center", fontsize=8)
    left.set_xlim(left=min(0.01, min(seconds) / 2), right=max(seconds) * 3)
    mib = [r["peak_mib"] for r in rows]
    right.barh(positions, mib, color=colours)
    right.set_xlabel("peak resident memory (MiB)")
    for y, value in zip(positions, mib, strict=True):
        right.text(value + max(mib) * 0.01, y, f"{value:.0f}", va="center", fontsize=8)
    right.set_xlim(right=max(mib) * 1.2)
    left.set_yticks(list(positions), labels)
    left.invert_yaxis()
    figure.suptitle(spec["title"])
    return figure


def _lines(spec: dict[str, Any], plt: Any) -> Any:
    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    for series in spec["series"]:
        (line,) = axes.plot(series["x"], series["median"], marker="o", label=series["label"])
        if series.get("low") and series.get("high"):
            axes.fill_between(
                series["x"], series["low"], series["high"], alpha=0.15, color=line.get_color()
            )
    axes.set_xscale("log", base=2)
    axes.set_xticks(spec["series"][0]["x"], [str(x) for x in spec["series"][0]["x"]])
    axes.set_xlabel(spec["xlabel"])
    axes.set_ylabel(spec["ylabel"])
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend()
    axes.set_title(spec["title"])
    return figure


def _strip(spec: dict[str, Any], plt: Any) -> Any:
    import random

    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    groups = spec["groups"]
    jitter = random.Random(0)
    for index, group in enumerate(groups):
        values = group["values"]
        xs = [index + jitter.uniform(-0.15, 0.15) for _ in values]
        colour = _OURS if group.get("highlight") else _OTHERS
        axes.scatter(xs, values, s=12, alpha=0.7, color=colour)
    axes.boxplot(
        [g["values"] for g in groups],
        positions=list(range(len(groups))),
        widths=0.5,
        showfliers=False,
    )
    axes.set_xticks(list(range(len(groups))), [g["label"] for g in groups])
    axes.set_ylabel(spec["ylabel"])
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3, axis="y")
    axes.set_title(spec["title"])
    return figure


def main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec_path, out = argv
    spec = json.loads(Path(spec_path).read_text())
    draw = {"bars": _bars, "lines": _lines, "strip": _strip}[spec["kind"]]
    figure = draw(spec, plt)
    figure.tight_layout()
    figure.savefig(out, dpi=spec.get("dpi", 90))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
