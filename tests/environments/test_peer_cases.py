"""Peers' own cases (`peer_cases`): accelbackends' parsers give the answers the table records,
and every answer that differs from the peer's carries the reason it differs on purpose."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accelbackends import ConfigError
from accelbackends.environments import _hostlist
from accelbackends.testing.cluster import clean_environment

from .peer_cases import (
    JSRUN_ENVIRONMENT,
    LIGHTNING_ENVIRONMENTS,
    LIGHTNING_FIRST_HOSTS,
    RAY_TORCH_BACKEND,
    SUBMITIT_HOSTLISTS,
    WORKER_INFO,
    PeerCase,
    Refused,
    lsf_rankfile,
)
from .varsets import cluster, fields

ALL = [
    *SUBMITIT_HOSTLISTS,
    *LIGHTNING_FIRST_HOSTS,
    *LIGHTNING_ENVIRONMENTS,
    JSRUN_ENVIRONMENT,
    *WORKER_INFO,
    *RAY_TORCH_BACKEND,
]


def _id(case: PeerCase) -> str:
    given = case.given if isinstance(case.given, str) else ",".join(sorted(map(str, case.given)))
    return f"{case.peer}: {given!r}"[:90]


def _agree(peer: Any, ours: Any) -> bool:
    """Whether two answers say the same: both refusals, or the same value (for fields, the
    same value of every field both name)."""
    if isinstance(peer, Refused) or isinstance(ours, Refused):
        return isinstance(peer, Refused) and isinstance(ours, Refused)
    if isinstance(peer, dict) and isinstance(ours, dict):
        return all(peer[key] == ours[key] for key in peer.keys() & ours.keys())
    return bool(peer == ours)


def _answer(ours: Any, compute: Any) -> None:
    if isinstance(ours, Refused):
        with pytest.raises(ConfigError, match=re.escape(ours.says)):
            compute()
        return
    got = compute()
    if isinstance(ours, dict):
        got = {key: got[key] for key in ours}
    assert got == ours


@pytest.mark.parametrize("case", ALL, ids=_id)
def test_every_difference_from_a_peer_is_on_purpose_and_says_why(case: PeerCase) -> None:
    agree = _agree(case.peer_answer, case.ours)
    assert agree == (case.disagreement is None), (
        "a case whose answer differs from the peer's needs a disagreement, and only such a case"
    )


@pytest.mark.parametrize("case", SUBMITIT_HOSTLISTS, ids=_id)
def test_submitits_node_lists_expand_as_recorded(case: PeerCase) -> None:
    _answer(case.ours, lambda: _hostlist.expand(case.given, source="SLURM_JOB_NODELIST"))


@pytest.mark.parametrize("case", LIGHTNING_FIRST_HOSTS, ids=_id)
def test_lightnings_main_addresses_are_the_first_host_as_recorded(case: PeerCase) -> None:
    _answer(case.ours, lambda: _hostlist.first_host(case.given, source="SLURM_NODELIST"))


def _variables(case: PeerCase, tmp_path: Path) -> dict[str, str]:
    rankfile = lsf_rankfile(tmp_path)
    return {key: value.replace("{rankfile}", rankfile) for key, value in case.given.items()}


@pytest.mark.parametrize("case", [*LIGHTNING_ENVIRONMENTS, JSRUN_ENVIRONMENT], ids=_id)
def test_lightnings_environment_fixtures_are_recognised_as_recorded(
    case: PeerCase, tmp_path: Path
) -> None:
    env = _variables(case, tmp_path)
    _answer(case.ours, lambda: fields(cluster(env)))


@pytest.mark.parametrize("case", WORKER_INFO, ids=_id)
def test_torchs_proposed_worker_info_validation_cases_as_recorded(case: PeerCase) -> None:
    _answer(case.ours, lambda: fields(cluster(case.given)))


@pytest.fixture(scope="module")
def ray_answers(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """What `ray_backend_cases.py` answered for each case of `RAY_TORCH_BACKEND`, in one Ray
    session."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install 'ray[train]'; .ci/engines.sh does)")
    out = tmp_path_factory.mktemp("ray-peer")
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "ray_backend_cases.py"), str(out)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=360,
        env={
            **clean_environment(os.environ),
            "PYTHONUNBUFFERED": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        },
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [json.loads((out / f"case{i}.json").read_text()) for i in range(len(RAY_TORCH_BACKEND))]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("index", range(len(RAY_TORCH_BACKEND)))
def test_rays_torch_backend_cases_with_accelbackends_torch_config(
    index: int, ray_answers: list[str]
) -> None:
    case = RAY_TORCH_BACKEND[index]
    answer = ray_answers[index]
    if isinstance(case.ours, Refused):
        assert answer.startswith("refused: ") and case.ours.says in answer, answer
    else:
        assert answer == case.ours
