"""Installed-package facts: which torch build, which vendor stack, read from metadata only."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelbackends.plugin.packages import TorchBuild, installed, torch_build
from accelbackends.testing import FakeStack


def _site(tmp_path: Path, version: str, version_py: str | None = None) -> tuple[str]:
    stack = FakeStack(tmp_path / "site").installed("torch", version, "torch")
    if version_py is not None:
        (stack.directory / "torch").mkdir()
        (stack.directory / "torch" / "version.py").write_text(version_py, encoding="utf-8")
    return (str(stack.directory),)


@pytest.mark.parametrize(
    ("version", "cuda", "hip", "xpu"),
    [
        ("2.13.0+cpu", None, None, None),
        ("2.13.0+cu126", "12.6", None, None),
        ("2.7.1+cu118", "11.8", None, None),
        ("2.5.1+rocm6.2", None, "6.2", None),
        ("2.8.0+xpu", None, None, "xpu"),
    ],
)
def test_local_version_tag_tells_the_build(
    tmp_path: Path, version: str, cuda: str | None, hip: str | None, xpu: str | None
) -> None:
    build = torch_build(_site(tmp_path, version))
    assert build == TorchBuild(version, cuda, hip, xpu)
    assert build.known


def test_generated_version_file_is_the_authority(tmp_path: Path) -> None:
    version_py = (
        "from typing import Optional\n"
        "__version__ = '2.13.0'\n"
        "cuda: Optional[str] = '12.8'\n"
        "hip: Optional[str] = None\n"
    )
    build = torch_build(_site(tmp_path, "2.13.0", version_py))
    assert build is not None
    assert (build.cuda, build.hip, build.xpu, build.known) == ("12.8", None, None, True)


def test_a_plain_version_without_version_file_is_an_unknown_build(tmp_path: Path) -> None:
    build = torch_build(_site(tmp_path, "2.13.0"))
    assert build is not None
    assert not build.known
    assert build.release == (2, 13)


def test_the_installed_torch_is_read_without_importing_it() -> None:
    build = torch_build()
    assert build is not None
    assert build.version.startswith("2.")
    assert str(build) == f"torch {build.version}"


def test_no_torch_installed_is_none(tmp_path: Path) -> None:
    assert torch_build((str(tmp_path),)) is None


def test_installed_matches_distribution_names_in_any_spelling(tmp_path: Path) -> None:
    stack = FakeStack(tmp_path).installed("habana-torch-plugin", "1.21.0", "habana_frameworks")
    found = installed("habana_torch_plugin", paths=(str(stack.directory),))
    assert found is not None
    assert str(found) == "habana-torch-plugin 1.21.0"
    assert installed("oneccl_bind_pt", paths=(str(stack.directory),)) is None


def test_installed_searches_sys_path_by_default() -> None:
    assert installed("pluggy") is not None
    assert installed("surely-not-an-installed-distribution") is None
