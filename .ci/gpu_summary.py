"""The GPU lane's one summary, from what .ci/gpu.sh left in its output folder.

Usage: python .ci/gpu_summary.py OUT SECONDS. Writes OUT/summary.json and OUT/summary.md (with
the row docs/hardware.md keeps) and prints the markdown; exits 1 when a step failed.
"""

from __future__ import annotations

import datetime
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

#: Steps whose non-zero exit is the finding itself, not a failure of the lane.
EXPECTED_TO_REFUSE = {"shared-gpu", "shared-gpu-gloo"}


def _json_tail(path: Path) -> dict[str, Any] | None:
    """The last JSON object a log holds (the command's own output after any warnings)."""
    if not path.exists():
        return None
    text = path.read_text(errors="replace")
    start = text.find("{")
    while start != -1:
        try:
            value = json.loads(text[start:])
        except ValueError:
            start = text.find("\n{", start + 1)
            start = start + 1 if start != -1 else -1
            continue
        return value if isinstance(value, dict) else None
    return None


def _junit(path: Path) -> dict[str, int] | None:
    if not path.exists():
        return None
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in total:
            total[key] += int(suite.get(key, 0))
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return total


def _from_log(path: Path) -> dict[str, int] | None:
    """Counts from pytest's -v lines (``PASSED``, ``FAILED`` ... after each test), for a run cut
    at its time limit, which writes no junit report."""
    if not path.exists():
        return None
    words = {"PASSED": "passed", "FAILED": "failures", "ERROR": "errors", "SKIPPED": "skipped"}
    counts = dict.fromkeys(["passed", "failures", "errors", "skipped"], 0)
    for line in path.read_text(errors="replace").splitlines():
        for word, key in words.items():
            # Not the short summary at the end ("FAILED tests/...::test - why"), which -rfEs
            # adds for what the per-test lines already counted.
            if f" {word} " in f" {line} " and "::" in line and not line.startswith(word):
                counts[key] += 1
                break
    counts["tests"] = sum(counts.values())
    return counts if counts["tests"] else None


def _counts(counts: dict[str, int] | None, status: int | None) -> str:
    if counts is None:
        return "did not run" if status is None else f"no report (exit {status})"
    failed = counts["failures"] + counts["errors"]
    text = f"{counts['passed']} passed, {failed} failed, {counts['skipped']} skipped"
    return text if status in (0, 1, None) else f"{text} (exit {status}: time limit)"


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def main(out: Path, seconds: int) -> int:
    steps: dict[str, tuple[int, int]] = {}
    for line in (out / "steps").read_text().splitlines():
        name, status, took = line.split()
        steps[name] = (int(status), int(took))
    facts = _json_tail(out / "facts.log") or {}
    suite = _junit(out / "suite.xml") or _from_log(out / "suite.log")
    gpu_tests = _junit(out / "gpu-tests.xml") or _from_log(out / "gpu-tests.log")
    check = _json_tail(out / "check-json.log") or {}
    bench = _json_tail(out / "benchmark.json") or {}
    init = (bench.get("init") or {}).get("1", {})
    lazy = init.get("hand-written set_device + init_process_group('nccl')", {}).get("ready")
    ours = init.get("accelbackends.init()", {}).get("ready")
    overhead = (
        f"{(ours - lazy) * 1e3:+.0f} ms ({(ours - lazy) / lazy:+.0%})" if lazy and ours else "-"
    )
    verdict = str(check.get("verdict", "-"))
    shared = steps.get("shared-gpu")
    summary = {
        "date": datetime.date.today().isoformat(),
        "seconds": seconds,
        "facts": facts,
        "steps": {name: {"exit": s, "seconds": t} for name, (s, t) in steps.items()},
        "suite": suite,
        "gpu_tests": gpu_tests,
        "check_verdict": verdict,
        "shared_gpu": None
        if shared is None
        else {"exit": shared[0], "said": _last_line(out / "shared-gpu.log")},
        "init_overhead_one_rank": overhead,
        "benchmark_goals": bench.get("goals", []),
    }
    headers = [
        "date",
        "GPU",
        "driver",
        "torch",
        "NCCL",
        "suite",
        "tests/gpu",
        "check",
        "init() overhead",
        "lane",
    ]
    row = [
        summary["date"],
        f"{facts.get('gpus', '?')}x {facts.get('gpu', '?')}",
        facts.get("driver", "?"),
        facts.get("torch", "?"),
        facts.get("nccl", "?"),
        _counts(suite, steps.get("suite", (None, 0))[0]),
        _counts(gpu_tests, steps.get("gpu-tests", (None, 0))[0]),
        verdict or "-",
        overhead,
        f"{seconds} s",
    ]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + " --- |" * len(headers),
        "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |",
        "",
        "| step | exit | seconds |",
        "| --- | --- | --- |",
        *(f"| {name} | {s} | {t} |" for name, (s, t) in steps.items()),
    ]
    gloo = _json_tail(out / "shared-gpu-gloo.log")
    if gloo is not None:
        summary["shared_gpu_gloo"] = {
            "verdict": gloo.get("verdict"),
            "error": gloo.get("error"),
            "culprits": gloo.get("culprits"),
        }
        lines += ["", f"GPU tensors over Gloo, two ranks on one GPU: {summary['shared_gpu_gloo']}"]
    if summary["shared_gpu"]:
        lines += ["", f"two ranks on one GPU: exit {shared[0]}: {summary['shared_gpu']['said']}"]
    for goal in summary["benchmark_goals"]:
        lines.append(f"- {goal['name']}: {goal['measured']} (target {goal['target']})")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(markdown)
    print(markdown)
    failed = [n for n, (s, _) in steps.items() if s != 0 and n not in EXPECTED_TO_REFUSE]
    if failed:
        print(f"gpu lane: failed steps: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
