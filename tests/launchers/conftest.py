"""A local Slurm cluster for the whole session, started once and stopped by PID at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .slurmcluster import SlurmCluster, missing, slurm_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    why = missing()
    if why is not None:
        pytest.skip(f"no local Slurm cluster because {why}")
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
