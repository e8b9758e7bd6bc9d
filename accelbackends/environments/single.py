"""``single``: no launcher variables; one process, and no network needed."""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl


@hookimpl(trylast=True)
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo:
    return ClusterInfo(launcher="single")
