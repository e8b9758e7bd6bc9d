"""The published package: the sdist and the wheel are built from the source tree, carry the
LICENSE and the user guide, pass ``twine check``, and the installed wheel finds its own guide."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("build", "hatchling", "twine")),
        reason="needs build, hatchling and twine (the dev extra: pip install -e '.[dev]')",
    ),
]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend comes from this environment (the dev extra), so the
    # test needs no package index.
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("accelbackends-*.whl")
    return wheel


def _sdist(dist: Path) -> Path:
    (sdist,) = dist.glob("accelbackends-*.tar.gz")
    return sdist


def test_wheel_carries_the_license_the_guide_and_the_typing_marker(dist: Path) -> None:
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = zipfile.ZipFile(_wheel(dist)).read(license_file).decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    for page in ("index.md", "troubleshooting.md", "reference/json.md", "launchers/slurm.md"):
        assert f"accelbackends/_docs/{page}" in names
    assert "accelbackends/py.typed" in names
    # The testing kit's fakes ship (the pytest plugin uses them); the tests do not.
    assert not any(n.startswith("tests/") for n in names)


def test_wheel_metadata_declares_license_classifiers_and_no_made_up_urls(dist: Path) -> None:
    wheel = zipfile.ZipFile(_wheel(dist))
    (metadata_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(wheel.read(metadata_name).decode())
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = metadata.get_all("Classifier") or []
    assert "Topic :: System :: Distributed Computing" in classifiers
    assert "Programming Language :: Python :: 3.13" in classifiers
    assert len(classifiers) >= 15
    # No web site exists; the README says where the guide is instead (accelbackends docs).
    assert metadata.get_all("Project-URL") is None
    assert "accelbackends docs" in metadata.get_payload()
    # Vendor stacks that cannot be installed from the public index are not offered as extras.
    extras = metadata.get_all("Provides-Extra") or []
    assert "hpu" not in extras and "xpu" not in extras


def test_sdist_carries_the_license_docs_tests_and_plugins(dist: Path) -> None:
    with tarfile.open(_sdist(dist)) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for name in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "mkdocs.yml",
        "docs/index.md",
        "docs/css/extra.css",
        "tests/test_packaging.py",
        "plugins/accelbackends-ascend/pyproject.toml",
        "accelbackends/cli/main.py",
    ):
        assert name in names, name


def test_twine_check_passes_on_both(dist: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2


def test_installed_wheel_lists_and_prints_its_own_guide(dist: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(target), str(_wheel(dist))],
        check=True,
        timeout=120,
    )  # fmt: skip

    def docs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "accelbackends", "docs", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        )

    listing = docs()
    assert listing.returncode == 0, listing.stderr
    assert f"documentation: {target / 'accelbackends' / '_docs'}" in listing.stdout
    assert "troubleshooting" in listing.stdout
    page = docs("troubleshooting")
    assert page.returncode == 0, page.stderr
    assert page.stdout.startswith("# Troubleshooting")
    wrong = docs("trubleshooting")
    assert wrong.returncode == 2
    assert "did you mean 'troubleshooting'?" in wrong.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "accelbackends", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert "the docs/ folder of the source" not in helped.stdout
    assert "documentation: accelbackends docs" in helped.stdout
