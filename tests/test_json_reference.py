"""docs/reference/json.md against the real output of ``info --json`` and ``check --json``:
every key printed is documented and every documented key is printed, nested objects included."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "json.md"
_ROW = re.compile(r"^\| (`[^|]+`) \| [^|]+ \| (.*) \|$")


def _tables() -> dict[str, dict[str, str]]:
    """Each table of the page by the line that introduces it (its heading or "Each entry of
    `x`:"), as key → meaning."""
    tables: dict[str, dict[str, str]] = {}
    title = ""
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("## ") or line.startswith("Each entry of"):
            title = line
            tables[title] = {}
            continue
        match = _ROW.match(line)
        if match and title:
            for key in re.findall(r"`([^`]+)`", match.group(1)):
                tables[title][key] = match.group(2)
    return tables


def _json(*args: str) -> dict[str, Any]:
    result = run_cli(*args)
    assert result.stdout, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _same_keys(documented: dict[str, str], printed: dict[str, Any], what: str) -> None:
    optional = {key for key, meaning in documented.items() if "only" in meaning.split(":")[0]}
    assert set(printed) - set(documented) == set(), f"{what}: printed but not documented"
    assert set(documented) - set(printed) - optional == set(), f"{what}: documented, not printed"


def _nested_keys_are_named(documented: dict[str, str], printed: dict[str, Any]) -> None:
    for key, value in printed.items():
        if isinstance(value, dict) and key not in ("overrides", "override_errors"):
            if key == "unknown_variables" or key == "sources":
                continue
            named = set(re.findall(r"`([^`]+)`", documented[key]))
            assert set(value) - named == set(), f"{key}: keys not named in its row"


def test_info_json_keys_match_the_reference() -> None:
    tables = _tables()
    report = _json("info", "--json", "--all")
    top = tables["## `accelbackends info --json`"]
    _same_keys(top, report, "info --json")
    _nested_keys_are_named(top, report)
    _same_keys(tables["Each entry of `plugins`:"], report["plugins"][0], "plugins[]")
    _same_keys(tables["Each entry of `accelerators`:"], report["accelerators"][0], "accelerators[]")


@pytest.mark.slow
def test_check_json_keys_match_the_reference() -> None:
    tables = _tables()
    report = _json("check", "--json", "--max-bytes", "2KiB", "--iters", "1")
    assert report["ok"], report["error"]
    top = tables["## `accelbackends check --json`"]
    _same_keys(top, report, "check --json")
    assert set(report["ranks"][0]) == set(re.findall(r"`([^`]+)`", top["ranks"]))
    assert {"python", "torch", "pluggy", "accelbackends"} <= set(report["versions"])
    _same_keys(tables["Each entry of `checks`:"], report["checks"][0], "checks[]")
    _same_keys(tables["Each entry of `bandwidth`:"], report["bandwidth"][0], "bandwidth[]")
    assert report["device_copy"] is None  # two ranks: a collective bandwidth, no device copy
    _same_keys(tables["Each entry of `copies`:"], report["copies"][0], "copies[]")


def test_one_rank_check_json_names_the_device_copys_keys() -> None:
    top = _tables()["## `accelbackends check --json`"]
    report = _json("check", "--json", "--nproc", "1", "--max-bytes", "2KiB", "--iters", "1")
    assert report["ok"], report["error"]
    _same_keys(top, report, "check --json --nproc 1")
    named = set(re.findall(r"`([^`]+)`", top["device_copy"]))
    assert set(report["device_copy"]) - named == set(), "device_copy: keys not named in its row"
    assert report["bandwidth"] == []
