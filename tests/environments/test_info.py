"""accelbackends info: the cluster fields and the variable each came from."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping

import pytest

from .varsets import (
    SRUN_UNEVEN,
    MPIRUN_2x4,
    SRUN_2x4,
)

Cli = Callable[..., "subprocess.CompletedProcess[str]"]


def _info(cli: Cli, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli("info", *args, env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", **env})


def test_info_json_reports_the_cluster_fields_and_their_variables_under_srun(cli: Cli) -> None:
    done = _info(cli, SRUN_2x4, "--json")
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout)["cluster"]
    assert reported["launcher"] == "slurm"
    assert (reported["rank"], reported["world_size"], reported["local_world_size"]) == (6, 8, 4)
    assert reported["master_addr"] == "gnode10"
    assert reported["sources"]["local_world_size"] == "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]"


def test_info_text_shows_each_fields_variable(cli: Cli) -> None:
    done = _info(cli, SRUN_UNEVEN)
    assert done.returncode == 0, done.stderr
    assert "cluster: slurm" in done.stdout
    assert "from SLURM_STEP_NODELIST (first host)" in done.stdout
    assert "from SLURM_PROCID" in done.stdout


@pytest.mark.parametrize(
    "env, var",
    [
        ({**SRUN_2x4, "SLURM_PROCID": "six"}, "SLURM_PROCID"),
        ({**MPIRUN_2x4, "OMPI_COMM_WORLD_LOCAL_SIZE": "4x"}, "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ({**SRUN_2x4, "SLURM_STEP_NODELIST": "gnode[1"}, "SLURM_STEP_NODELIST"),
    ],
    ids=["slurm", "openmpi", "hostlist"],
)
def test_info_exits_2_naming_the_bad_variable_without_a_traceback(
    cli: Cli, env: Mapping[str, str], var: str
) -> None:
    done = _info(cli, env)
    assert done.returncode == 2
    assert var in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("accelbackends: error:")


def test_environment_plugins_never_import_torch() -> None:
    code = (
        "import sys, accelbackends\n"
        "r = accelbackends.Registry(env={'ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD': '1', "
        "'SLURM_STEP_ID': '0', 'SLURM_PROCID': '0', 'SLURM_NTASKS': '1', "
        "'SLURM_LOCALID': '0', 'SLURM_NODEID': '0', 'SLURM_TASKS_PER_NODE': '1'})\n"
        "r.cluster_environment()\n"
        "import accelbackends.environments as e, importlib\n"
        "for _, module in e.BUILTIN: importlib.import_module(module)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
