"""Set up the peers' own virtual environment and show what each peer answers.

The peers (Accelerate, DeepSpeed, Lightning, and plain torch) are installed only into
``benchmarks/.venv-peers``, never into the project's environment: torch first, pinned to the
version the project's environment has (so pip never resolves a different torch build), then
each peer on its own, so that one that fails to install is reported and the others still
count. matplotlib goes there too, for the charts. Each peer's probe answers "which accelerator
and which communication backend", the same question ``accelbackends info`` answers; the
``detection`` benchmark times them.

Usage: ``python -m benchmarks peers [--reinstall]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ._common import HERE, ROOT, Goal, add_common_arguments, report, say, table, write_results

VENV = HERE / ".venv-peers"
#: Installed one by one after torch; a failure is recorded and the next one is tried.
PACKAGES = ("accelerate", "deepspeed", "lightning", "matplotlib")
_STATE = "accelbackends-peers.json"


@dataclass(frozen=True)
class Peer:
    """A way to learn the accelerator and backend, run as a cold process."""

    name: str
    #: The distribution it needs in the peers' environment (None: torch alone).
    needs: str | None
    #: ``argv`` after the peers' interpreter, or a console script name starting with ``@``.
    argv: tuple[str, ...]


_DEEPSPEED = """\
from deepspeed.accelerator import get_accelerator
accelerator = get_accelerator()
print(accelerator.device_name(), accelerator.communication_backend_name())
"""
# Lightning's public route to its automatic choice is the Trainer; the backend its DDP
# strategies would pass to init_process_group follows from the chosen device.
_LIGHTNING = """\
from lightning.pytorch import Trainer
from lightning.fabric.utilities.distributed import _get_default_process_group_backend_for_device
trainer = Trainer(accelerator="auto", devices="auto", logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False)
device = trainer.strategy.root_device
print(type(trainer.accelerator).__name__, _get_default_process_group_backend_for_device(device))
"""
# What a script without any framework writes: torch's current accelerator (None on a CPU-only
# build), then the backend torch maps that device type to.
_TORCH = """\
import torch
import torch.distributed as dist
accelerator = torch.accelerator.current_accelerator()
device = accelerator.type if accelerator is not None else "cpu"
print(device, dist.Backend.default_device_backend_map.get(device))
"""

PEERS: tuple[Peer, ...] = (
    Peer("torch.accelerator + backend map", None, ("-c", _TORCH)),
    Peer("accelerate env", "accelerate", ("@accelerate", "env")),
    Peer("DeepSpeed get_accelerator()", "deepspeed", ("-c", _DEEPSPEED)),
    Peer("Lightning Trainer(accelerator='auto')", "lightning", ("-c", _LIGHTNING)),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "peers")
    parser.add_argument(
        "--reinstall", action="store_true", help="delete and rebuild benchmarks/.venv-peers"
    )


def venv_python() -> Path | None:
    python = VENV / "bin" / "python"
    return python if python.exists() else None


def torch_pin() -> str:
    """The project environment's torch release without its local tag (``2.13.0``), so that the
    peers' environment gets the same build from the same place."""
    return metadata.version("torch").split("+", 1)[0]


def state() -> dict[str, str]:
    """What the last set-up installed: package -> version, or ``failed: reason``."""
    path = VENV / _STATE
    if not path.exists():
        return {}
    loaded: dict[str, str] = json.loads(path.read_text())
    return loaded


def _pip(*args: str, constraint: Path) -> subprocess.CompletedProcess[str]:
    python = VENV / "bin" / "python"
    return subprocess.run(
        [str(python), "-m", "pip", "install", "--constraint", str(constraint), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def setup(*, reinstall: bool = False) -> dict[str, str]:
    """Create the peers' environment if needed; returns :func:`state`."""
    if reinstall and VENV.exists():
        shutil.rmtree(VENV)
    installed = state()
    if installed and all(name in installed for name in ("torch", *PACKAGES)):
        return installed
    started = time.monotonic()
    if not (VENV / "bin" / "python").exists():
        say(f"creating {VENV.relative_to(ROOT)} (python -m venv)")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pin = torch_pin()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraint:
        constraint.write(f"torch=={pin}\n")
    try:
        for package in ("torch", *PACKAGES):
            if package in installed and not installed[package].startswith("failed"):
                continue
            spec = f"torch=={pin}" if package == "torch" else package
            say(f"  pip install {spec}")
            done = _pip(spec, constraint=Path(constraint.name))
            if done.returncode == 0:
                installed[package] = _version_in_venv(package)
            else:
                last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
                installed[package] = f"failed: {last}"
                say(f"  {package} did not install: {last}")
                if package == "torch":
                    break
            (VENV / _STATE).write_text(json.dumps(installed, indent=2) + "\n")
    finally:
        os.unlink(constraint.name)
    say(f"peers' environment ready in {time.monotonic() - started:.0f} s")
    return installed


def _version_in_venv(package: str) -> str:
    python = VENV / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def available() -> list[Peer]:
    """The peers whose packages installed."""
    installed = state()
    if venv_python() is None or installed.get("torch", "failed").startswith("failed"):
        return []
    return [
        peer
        for peer in PEERS
        if peer.needs is None or not installed.get(peer.needs, "failed").startswith("failed")
    ]


def argv(peer: Peer) -> list[str]:
    """The command line that runs ``peer`` in the peers' environment."""
    if peer.argv[0].startswith("@"):
        return [str(VENV / "bin" / peer.argv[0][1:]), *peer.argv[1:]]
    return [str(VENV / "bin" / "python"), *peer.argv]


def answer(peer: Peer) -> str:
    """What the peer prints (its choice), for a look by hand; the first lines that say it."""
    done = subprocess.run(argv(peer), capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        return f"failed ({done.returncode}): {(done.stderr.strip().splitlines() or [''])[-1]}"
    lines = done.stdout.strip().splitlines()
    if peer.name.startswith("accelerate"):
        wanted = [line.strip("- ") for line in lines if "accelerator" in line.lower()]
        return "; ".join(wanted) or (lines[-1] if lines else "")
    return lines[-1] if lines else ""


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    installed = setup(reinstall=args.reinstall)
    rows = [[name, version] for name, version in installed.items()]
    say(table(["package", "version in benchmarks/.venv-peers"], rows))
    answers = {peer.name: answer(peer) for peer in available()}
    say("")
    say(table(["peer", "its answer here"], [[k, v] for k, v in answers.items()]))
    failed = [name for name, version in installed.items() if version.startswith("failed")]
    goals = [
        Goal(
            "peers installed",
            ", ".join(f"{k} {v}" for k, v in installed.items() if not v.startswith("failed")),
            "torch, accelerate, deepspeed, lightning",
            None,
            detail=f"failed: {', '.join(failed)}" if failed else "",
        )
    ]
    write_results(args.out, "peers", goals, started, installed=installed, answers=answers)
    report("peers", [], args.out)
    return 0
