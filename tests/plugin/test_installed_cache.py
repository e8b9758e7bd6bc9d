"""What ``info`` and ``select()`` import, and the cache of installed-distribution facts that keeps
:mod:`importlib.metadata` out of a warm start without ever hiding a newly installed plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelbackends.plugin import installed as _installed
from accelbackends.testing import cluster as kit_cluster
from accelbackends.testing.plugins import install_distribution

#: Modules that ``accelbackends info`` and ``select()`` must not load once the cache is warm,
#: and why each is on the list:
FORBIDDEN = {
    # The house rule: detection never imports torch, NumPy or a vendor stack.
    "torch": "detection never imports torch",
    "numpy": "detection never imports NumPy",
    # check's flags are added to the parser only when check runs.
    "accelbackends.cli.check": "only `check` needs it",
    # The runtime half of the package: nothing to initialise or start here.
    "accelbackends.job.lifecycle": "only init() needs it",
    "accelbackends.job.spawn": "only spawn() needs it",
    "accelbackends.rendezvous.store": "only init() needs it",
    # importlib.metadata and what it alone pulls in (METADATA is an e-mail header block,
    # RECORD a CSV file, eggs zip files): the cache answers instead.
    "importlib.metadata": "the cache answers from a warm start",
    "email": "importlib.metadata parses METADATA with it",
    "csv": "importlib.metadata reads RECORD with it",
    "zipfile": "importlib.metadata reads zipped eggs with it",
    # The proof of membership and the network checks: info only says where the secret comes
    # from (accelbackends.rendezvous.secret), and a one-rank environment has no address to check.
    "accelbackends.rendezvous.membership": "only the rendezvous proves membership",
    "accelbackends.rendezvous.network": "only a job of more than one rank has an address to check",
    "hashlib": "nothing is hashed",
    "hmac": "nothing is signed",
    "secrets": "no secret is made",
    "socket": "no connection is made",
    # Logging: only the rendezvous logs, so the CLI sets it up for check alone.
    "logging": "nothing logs",
    # Archives: nothing is packed or unpacked (shutil would bring bz2 and lzma; the terminal's
    # width is read without it unless stdout is a terminal).
    "shutil": "archives and copies",
    "bz2": "archives",
    "lzma": "archives",
    "tarfile": "archives",
    # platform.platform() starts `uname -p` and scans the interpreter's binary (about 50 ms):
    # the report reads os.uname() and the C library's version instead.
    "platform": "os.uname() says the same",
    "difflib": "only an unknown ACCELBACKENDS_ variable needs a suggestion",
    # Files and processes: info writes nothing but its cache and starts no process (the
    # probes are threads).
    "subprocess": "no process is started",
    "tempfile": "nothing temporary is written",
    "multiprocessing": "no process is started",
    "concurrent": "the probes run in plain threads",
    "asyncio": "nothing asynchronous",
    # The network: detection asks no one.
    "ssl": "no connection is made",
    "http": "no connection is made",
    "urllib.request": "no connection is made",
    # Heavy formatting and introspection helpers nothing here needs.
    "pprint": "json prints the report",
    "pydoc": "no help pages are rendered",
    "doctest": "nothing is tested",
    "unittest": "nothing is tested",
    "decimal": "no decimal arithmetic",
}

_REPORT_MODULES = """
import contextlib, io, json, sys
with contextlib.redirect_stdout(io.StringIO()):
    {body}
print(json.dumps(sorted(sys.modules)))
"""
_INFO = "from accelbackends.cli.main import main; main({argv!r})"
_SELECT = "import accelbackends; accelbackends.select()"
#: A child that writes the cache whatever the age of the directories it stamps (a test's
#: directories are seconds old; the settle rule is tested on its own below).
_WARM = "from accelbackends.plugin import installed; installed.SETTLE_SECONDS = -1e9\n"


def _forbidden(modules: list[str]) -> dict[str, str]:
    return {
        module: FORBIDDEN[name]
        for module in modules
        for name in FORBIDDEN
        if module == name or module.startswith(name + ".")
    }


def _child_env(cache: Path, pythonpath: Path | None = None) -> dict[str, str]:
    env = kit_cluster.clean_environment(os.environ)
    env["XDG_CACHE_HOME"] = str(cache)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def _settled(*paths: Path) -> None:
    """Date ``paths`` a minute back, as directories nobody wrote to lately are."""
    past = time.time() - 60
    for path in paths:
        os.utime(path, (past, past))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory for children (on their sys.path as "" for ``-c``)."""
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.mark.parametrize(
    "body",
    [_INFO.format(argv=["info", "--json"]), _INFO.format(argv=["info"]), _SELECT],
    ids=["info --json", "info", "select()"],
)
def test_a_warm_start_loads_no_check_torch_metadata_or_heavy_stdlib_module(
    body: str, workdir: Path, tmp_path: Path
) -> None:
    env = _child_env(tmp_path / "cache")
    code = _REPORT_MODULES.format(body=body)
    _run(_WARM + code, env, workdir)  # the first start after an install reads and caches
    modules = json.loads(_run(code, env, workdir).stdout)
    assert _forbidden(modules) == {}
    assert "accelbackends.registry.facade" in modules  # the plugins were loaded: it did the work


def test_the_cold_start_reads_importlib_metadata_and_writes_the_cache(
    workdir: Path, tmp_path: Path
) -> None:
    env = _child_env(tmp_path / "cache")
    modules = json.loads(_run(_WARM + _REPORT_MODULES.format(body=_SELECT), env, workdir).stdout)
    assert "importlib.metadata" in modules
    assert list((tmp_path / "cache" / "accelbackends").glob("installed-*.json"))


def _info_plugins(env: dict[str, str], cwd: Path, *, warm: bool = False) -> list[str]:
    code = (_WARM if warm else "") + (
        "import json\nfrom accelbackends.cli.info import collect\n"
        "from accelbackends.registry.facade import Registry\n"
        "print(json.dumps([p['name'] for p in collect(Registry())['plugins']]))\n"
    )
    names: list[str] = json.loads(_run(code, env, cwd).stdout.splitlines()[-1])
    return names


_PLUGIN = """\
from accelbackends.plugin import hookimpl

@hookimpl
def accelbackends_post_init(context):
    pass
"""


def test_a_plugin_installed_after_the_cache_was_written_is_found_by_the_next_process(
    workdir: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _settled(site)
    env = _child_env(tmp_path / "cache", site)
    assert "late" not in _info_plugins(env, workdir, warm=True)
    assert list((tmp_path / "cache" / "accelbackends").glob("installed-*.json"))
    install_distribution(site, "late", "abplugin_late", source=_PLUGIN)
    assert "late" in _info_plugins(env, workdir)


def test_an_entry_point_added_in_place_to_an_installed_distribution_is_found(
    workdir: Path, tmp_path: Path
) -> None:
    # setup.py egg_info (and a hand edit) rewrite entry_points.txt in place: the directory
    # around it keeps its modification time.
    site = tmp_path / "site"
    install_distribution(site, "first", "abplugin_first", source=_PLUGIN)
    (site / "abplugin_second.py").write_text(_PLUGIN)
    points = next(site.glob("*.dist-info")) / "entry_points.txt"
    _settled(site, points.parent, points, points.parent / "METADATA")
    env = _child_env(tmp_path / "cache", site)
    assert "second" not in _info_plugins(env, workdir, warm=True)
    assert list((tmp_path / "cache" / "accelbackends").glob("installed-*.json"))
    site_time = site.stat().st_mtime_ns
    with points.open("a") as handle:
        handle.write("second = abplugin_second\n")
    assert site.stat().st_mtime_ns == site_time  # only the file itself shows the change
    assert {"first", "second"} <= set(_info_plugins(env, workdir))


def test_answers_about_a_directory_changed_moments_ago_are_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()  # modified just now: a change in the same clock tick could keep its time
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_installed, "_snapshot", None)
    assert _installed.entry_points("accelbackends") == ()
    assert not (tmp_path / "cache" / "accelbackends").exists()
    _settled(site)
    monkeypatch.setattr(_installed, "_snapshot", None)
    assert _installed.entry_points("accelbackends") == ()
    cache = _installed.cache_path()
    assert cache is not None and Path(cache).exists()


def test_nothing_is_cached_while_another_finder_can_list_distributions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Finder:
        @staticmethod
        def find_distributions(*args: object, **kwargs: object) -> list[object]:
            return []

    site = tmp_path / "site"
    site.mkdir()
    _settled(site)
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_installed, "_snapshot", None)
    assert _installed.entry_points("accelbackends") == ()
    assert not (tmp_path / "cache" / "accelbackends").exists()


def test_a_damaged_cache_file_is_read_afresh_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = install_distribution(tmp_path / "site", "mine", "abplugin_mine", source=_PLUGIN)
    points = next(site.glob("*.dist-info"))
    _settled(site, points, points / "entry_points.txt", points / "METADATA")
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = _installed.cache_path()
    assert cache is not None
    Path(cache).parent.mkdir(parents=True)
    Path(cache).write_text("{not json")
    monkeypatch.setattr(_installed, "_snapshot", None)
    found = _installed.entry_points("accelbackends")
    assert [(ep.name, ep.value, ep.distribution, ep.version) for ep in found] == [
        ("mine", "abplugin_mine", "accelbackends-mine", "1.0")
    ]
    assert "abplugin_mine" in Path(cache).read_text()


def test_cache_files_beyond_the_limit_are_removed_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cache" / "accelbackends"
    folder.mkdir(parents=True)
    for index in range(_installed.KEEP_FILES + 3):
        old = folder / f"installed-{index:08x}.json"
        old.write_text("{}")
        os.utime(old, (1000 + index, 1000 + index))
    site = tmp_path / "site"
    site.mkdir()
    _settled(site)
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_installed, "_snapshot", None)
    _installed.entry_points("accelbackends")
    left = sorted(path.name for path in folder.glob("installed-*.json"))
    assert len(left) == _installed.KEEP_FILES
    assert Path(str(_installed.cache_path())).name in left
    assert "installed-00000000.json" not in left


def test_an_entry_point_from_the_cache_loads_what_its_value_names() -> None:
    point = _installed.EntryPoint("join", "os.path:join", "group")
    assert point.load() is os.path.join
    assert _installed.EntryPoint("os", "os", "group").load() is os
    with pytest.raises(ValueError, match="not module:attr"):
        _installed.EntryPoint("bad", "not a value!", "group").load()


def _warm_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A settled site with one plugin on ``sys.path`` alone, and its cache file written;
    returns the site and the cache file."""
    site = install_distribution(tmp_path / "site", "mine", "abplugin_mine", source=_PLUGIN)
    points = next(site.glob("*.dist-info"))
    _settled(site, points, points / "entry_points.txt", points / "METADATA")
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_installed, "_snapshot", None)
    _installed.entry_points("accelbackends")
    _installed.distribution("accelbackends-mine")
    cache = _installed.cache_path()
    assert cache is not None and Path(cache).is_file()
    monkeypatch.setattr(_installed, "_snapshot", None)
    return site, Path(cache)


_MINE = [("mine", "abplugin_mine", "accelbackends-mine", "1.0")]


@pytest.mark.parametrize(
    "facts",
    [
        {"entry_points:accelbackends": [["mine", "abplugin_mine"]]},
        {"entry_points:accelbackends": "mine"},
        {"entry_points:accelbackends": [[1, 2, 3, 4]]},
        {"distribution:accelbackends-mine": ["accelbackends-mine", "1.0"]},
        {"distribution:accelbackends-mine": {"name": "x"}},
        {"something:else": []},
        [],
    ],
    ids=["short-entry", "string", "numbers", "short-dist", "dict-dist", "unknown-key", "list"],
)
def test_a_cache_whose_stamp_matches_but_whose_answers_have_another_shape_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, facts: object
) -> None:
    """Before: a matching stamp was enough; another shape of answers made ``info`` exit 1
    with a traceback and ``init()`` raise a bare ValueError."""
    _, cache = _warm_cache(tmp_path, monkeypatch)
    data = json.loads(cache.read_text())
    data["facts"] = facts
    cache.write_text(json.dumps(data))
    found = _installed.entry_points("accelbackends")
    assert [(ep.name, ep.value, ep.distribution, ep.version) for ep in found] == _MINE
    mine = _installed.distribution("accelbackends-mine")
    assert mine is not None and mine[:2] == ("accelbackends-mine", "1.0")
    assert Path(mine.location) == tmp_path / "site"
    rebuilt = json.loads(cache.read_text())["facts"]
    assert rebuilt["entry_points:accelbackends"] == [list(_MINE[0])]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "oversized", "deeply-nested"])
def test_a_cache_that_is_no_regular_file_or_too_large_is_rebuilt_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Before: a FIFO in the cache's place hung ``info`` and ``init()``; a link to /dev/zero
    ended in MemoryError. Read in a child: a hang shows as a child past its limit."""
    site = install_distribution(tmp_path / "site", "mine", "abplugin_mine", source=_PLUGIN)
    # The child's sys.path: the site and the standard library (importlib.metadata needs it).
    code = (
        _WARM + "import sys\n"
        f"sys.path[:] = [{str(site)!r}, *(p for p in sys.path if p and 'site-packages' not in p)]\n"
        "print(installed.cache_path())\n"
        "print([tuple(ep) for ep in installed.entry_points('accelbackends')])"
    )
    env = _child_env(tmp_path / "cache")
    path, answer = _run(code, env, tmp_path).stdout.splitlines()
    assert "abplugin_mine" in answer
    cache = Path(path)
    cache.unlink()
    if kind == "fifo":
        os.mkfifo(cache, 0o600)
    elif kind == "dev-zero-link":
        cache.symlink_to("/dev/zero")
    elif kind == "oversized":
        with open(cache, "wb") as handle:
            handle.truncate(_installed.MAX_BYTES + 1)  # sparse
    else:
        cache.write_text("[" * 100_000)
    assert _run(code, env, tmp_path).stdout.splitlines() == [path, answer]
    assert cache.is_file() and not cache.is_symlink()  # replaced by a good cache
    assert "abplugin_mine" in cache.read_text()
