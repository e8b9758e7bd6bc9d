"""What rank 0 has found so far, kept where the report can still be printed when a later step
fails: the checks that passed stay in ``check --json`` when a rank dies or hangs afterwards.

Under ``spawn()`` the reporting process is the parent, so rank 0 writes the report so far to a
file the parent named (replaced whole at each step, never half-written); under a launcher rank 0
prints it itself.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

__all__ = ["Progress", "read_progress"]


class Progress:
    """Rank 0's report so far (other ranks keep nothing)."""

    def __init__(self, path: str | None, enabled: bool) -> None:
        self._path = path
        self._enabled = enabled
        self.report: dict[str, Any] = {"checks": [], "bandwidth": []}

    def update(self, **fields: Any) -> None:
        if not self._enabled:
            return
        self.report.update(fields)
        self._write()

    def hold(self, line: str) -> None:
        """Keep a line of the text report for later (``--quick`` prints the verdict first)."""
        if self._enabled:
            self.report.setdefault("text", []).append(line)
            self._write()

    def add_measurement(self, measurement: dict[str, Any]) -> None:
        if self._enabled:
            self.report["bandwidth"].append(measurement)
            self._write()

    def _write(self) -> None:
        if self._path is None:
            return
        folder = os.path.dirname(self._path) or "."
        with tempfile.NamedTemporaryFile(
            "w", dir=folder, prefix=".progress-", suffix=".json", delete=False
        ) as handle:
            json.dump(self.report, handle)
        os.replace(handle.name, self._path)


def read_progress(path: str) -> dict[str, Any]:
    """What rank 0 wrote to ``path`` (empty where it wrote nothing, or nothing readable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}
