"""The secret file is judged as ssh judges a key: its whole path, its content, and ``info`` and
``check`` read it as a job does. Another local user is played by uid 65534 in a child process."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelbackends import ConfigError
from accelbackends.rendezvous import secret
from accelbackends.testing.cluster import clean_environment

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="playing another local user (uid 65534) needs root"
)
OTHER_UID = 65534
KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
LIMIT = 120  # seconds any child of these tests may take before the test fails
VICTIM = Path(__file__).parents[1] / "intruders" / "victim.py"


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory of this user that another user may enter (pytest's own is closed to them),
    outside the home directory, so that every directory up to ``/`` is judged."""
    path = Path(tempfile.mkdtemp(prefix="accelbackends-secret-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _key_file(path: Path, content: str | bytes = KEY + "\n", mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    path.chmod(mode)
    return path


def _as_other_user(action: Callable[[], str | None]) -> str:
    """Run ``action`` as uid 65534, the other local user, in a forked child (this interpreter
    lives under a home that user may not enter); returns what it returned, or its error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return from here
        text = ""
        try:
            os.close(read)
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            text = action() or ""
        except BaseException as exc:  # everything goes back to the test
            text = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(write, text.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said


def _plant(link: Path, target: str) -> None:
    """The other user plants ``link -> target``."""
    assert _as_other_user(lambda: os.symlink(target, link)) == ""


def _refusal(env: dict[str, str]) -> str:
    """The message both a job (`load_secret`) and ``info`` give for ``env``; they must agree."""
    with pytest.raises(ConfigError) as refused:
        secret.load_secret(env)
    assert secret.info_line(env) == f"error: {refused.value}"
    return str(refused.value)


# --- the path, as StrictModes ----------------------------------------------------------------


@ROOT_ONLY
def test_link_another_user_planted_in_a_writable_config_directory_is_refused_naming_it(
    base: Path,
) -> None:
    """Before: ``secret -> /proc/self/personality`` planted by another user in a directory they
    may write was a regular 0400 file of the reader's, holding ``00000000`` for everyone, and
    was used as the key."""
    config = base / "config"
    planted = config / "accelbackends"
    planted.mkdir(parents=True)
    config.chmod(0o755)  # the usual ~/.config
    planted.chmod(0o777)  # a mistake of the victim's: not sticky, so anyone may replace entries
    _plant(planted / "secret", "/proc/self/personality")
    message = _refusal({"XDG_CONFIG_HOME": str(config)})
    assert f"the directory {planted} on its path can be written by its group and other users" in (
        message
    )
    assert "mode 0777" in message and f"run chmod go-w {planted}" in message
    assert f"the link {planted / 'secret'} -> /proc/self/personality" in message


@ROOT_ONLY
def test_config_home_another_user_created_first_is_refused_before_anything_is_created(
    base: Path,
) -> None:
    """``XDG_CONFIG_HOME`` under ``/tmp``: another user made the directory first, so they may
    replace whatever the job creates in it."""
    shared = base / "tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)  # like /tmp
    config = shared / "config"
    assert _as_other_user(lambda: os.mkdir(config, 0o755)) == ""
    env = {"XDG_CONFIG_HOME": str(config)}
    message = _refusal(env)
    assert f"the directory {config} on its path belongs to another user" in message
    assert "uid 65534 (nobody), mode 0755" in message and "directory of your own" in message
    assert not (config / "accelbackends").exists()  # nothing was created there


@ROOT_ONLY
def test_link_owned_by_another_user_is_refused_even_in_a_safe_directory(base: Path) -> None:
    target = _key_file(base / "mine" / "key")
    link = base / "link"
    link.symlink_to(target)
    os.lchown(link, OTHER_UID, OTHER_UID)
    message = _refusal({secret.SECRET: str(link)})
    assert f"the symbolic link {link} -> {target} on its path belongs to another user" in message


def test_link_whose_target_passes_is_accepted_and_one_whose_target_fails_is_refused(
    base: Path,
) -> None:
    target = _key_file(base / "keys" / "job.key")
    link = base / "job.secret"
    link.symlink_to(target)
    assert secret.load_secret({secret.SECRET: str(link)}).key == KEY.encode()
    (base / "keys").chmod(0o775)
    message = _refusal({secret.SECRET: str(link)})
    assert f"the directory {base / 'keys'} on its path can be written by its group" in message
    assert f"it goes through the link {link} -> {target}" in message


def test_group_writable_directory_is_refused_and_a_sticky_one_like_tmp_is_not(base: Path) -> None:
    file = _key_file(base / "shared" / "job.secret")
    (base / "shared").chmod(0o770)
    message = _refusal({secret.SECRET: str(file)})
    assert f"{base / 'shared'} on its path can be written by its group" in message
    assert "mode 0770" in message
    # Others may add entries to a sticky directory but not replace this user's.
    (base / "shared").chmod(0o1777)
    assert secret.load_secret({secret.SECRET: str(file)}).key == KEY.encode()


def test_proc_file_reached_through_the_users_own_link_is_refused_for_its_content(
    base: Path,
) -> None:
    """/proc/self/personality passes every ownership test (it is the reader's own, 0400); its
    eight characters fail the length floor that files are now held to."""
    link = base / "personality"
    link.symlink_to("/proc/self/personality")
    message = _refusal({secret.SECRET: str(link)})
    assert "holds a value of 8 characters, shorter than the 16 accepted" in message


# --- the content, as for values --------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("x", "1 character, shorter than the 16"),
        ("abc\n", "3 characters, shorter than the 16"),
        ("a" * 16, "16 characters with too little variety (1 different character, about 0 bits"),
        ("ab" * 12, "24 characters with too little variety (2 different characters, about 24"),
        (KEY[:10] + "\0" + KEY[10:], "holds a NUL byte"),
        ("   \n", "is empty"),
    ],
    ids=["one-byte", "three-chars", "one-letter", "two-letters", "nul", "blank"],
)
def test_weak_or_binary_secret_file_is_refused_like_a_value(
    base: Path, content: str, said: str
) -> None:
    file = _key_file(base / "job.secret", content)
    assert said in _refusal({secret.SECRET: str(file)})


def test_weak_per_user_file_is_refused(base: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(base / "config")}
    _key_file(secret.user_secret_path(env), "abc\n")
    (base / "config" / "accelbackends").chmod(0o700)
    assert "3 characters, shorter than the 16" in _refusal(env)


def test_value_of_one_repeated_letter_is_refused() -> None:
    """Before: 16 characters of one letter passed, and were found at the first guess."""
    message = _refusal({secret.SECRET: "a" * 16})
    assert message.startswith(f"{secret.SECRET} holds a value of 16 characters with too little")
    assert secret.load_secret({secret.SECRET: KEY}).key == KEY.encode()


def _refused_in_a_child(path: Path) -> str:
    """The refusal for ``ACCELBACKENDS_SECRET=path``, from a child (a read that blocks or fills
    memory shows as a child past the limit, not as a hung test)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from accelbackends.rendezvous import secret as s\n"
            "try: s.load_secret({s.SECRET: sys.argv[1]})\n"
            "except Exception as e: print(type(e).__name__, e)",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "oversized"])
def test_fifo_device_or_oversized_file_is_refused_without_reading_it(base: Path, kind: str) -> None:
    """Before: a FIFO hung the reader, a link to /dev/zero ended in MemoryError, and a 50 MB
    file was used as the key."""
    path = base / "job.secret"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as handle:
            handle.truncate(50 * 1024 * 1024)  # sparse: nothing to read but zeros
        path.chmod(0o600)
    said = _refused_in_a_child(path)
    assert said.startswith("ConfigError ")
    if kind == "oversized":
        assert f"holds {50 * 1024 * 1024} bytes, more than the 1048576" in said
    else:
        assert "is not a regular file" in said


# --- info and check read it as the job does ---------------------------------------------------


def test_empty_per_user_secret_file_fails_info_and_check_as_it_fails_the_job(
    base: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """Before: ``info`` exited 0 and ``check`` PASSED on an empty file; the first job of two
    ranks then failed on it."""
    env = {"XDG_CONFIG_HOME": str(base / "config")}
    path = secret.user_secret_path(env)
    _key_file(path, "")
    path.parent.chmod(0o700)
    info = cli("info", env=env)
    assert info.returncode != 0
    assert f"the per-user secret file {path} is empty" in info.stdout + info.stderr
    check = cli("check", "--quick", env=env)
    assert check.returncode == 2, check.stdout + check.stderr
    assert f"the per-user secret file {path} is empty" in check.stdout + check.stderr
    assert "PASSED" not in check.stdout


@ROOT_ONLY
def test_secret_file_this_user_cannot_read_is_refused_by_info(base: Path) -> None:
    """Run as the other user (root reads anything): their own 0000 file, which they cannot
    read either."""
    home = base / "nobody"
    home.mkdir(mode=0o700)
    file = _key_file(home / "job.secret", mode=0o000)
    for path in (home, file):
        os.chown(path, OTHER_UID, OTHER_UID)
    said = _as_other_user(lambda: secret.info_line({secret.SECRET: str(file)}))
    assert said.startswith(f"error: {secret.SECRET}='{file}': the secret file cannot be read")
    assert "(Permission denied)" in said


def test_relative_path_without_dot_slash_naming_a_file_is_refused_with_the_reason(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``job.secret`` was taken as the value itself (11 characters: refused for its
    length with no word why; a longer name used silently)."""
    _key_file(base / "my-job-secret-for-the-cluster.key")
    monkeypatch.chdir(base)
    for name in ("my-job-secret-for-the-cluster.key", "job.secret"):
        if name == "job.secret":
            _key_file(base / name)
        message = _refusal({secret.SECRET: name})
        assert f"names the file ./{name}" in message
        assert f"write {secret.SECRET}=./{name}" in message
    assert secret.load_secret({secret.SECRET: "./job.secret"}).key == KEY.encode()
    # A short value that looks like a path and names no file: refused, saying why both ways.
    message = _refusal({secret.SECRET: "keys/job"})
    assert "shorter than the 16" in message and "a file's path must start with" in message


# --- the attack, with real processes ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@ROOT_ONLY
@pytest.mark.slow
def test_planted_link_keeps_the_intruder_out_of_a_real_two_rank_job(base: Path) -> None:
    """The attack end to end: rank 0 with a per-user secret that another user redirected to
    /proc/self/personality, and the other user's rank 1 with a file holding ``00000000``.
    Before: admitted, 50 of 50 all_reduces of the victim wrong, the victim's exit 0."""
    config = base / "config"
    planted = config / "accelbackends"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    _plant(planted / "secret", "/proc/self/personality")
    known = _key_file(base / "intruder" / "secret", "00000000\n")
    port = _free_port()
    common = clean_environment(os.environ)
    common.update(
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        ACCELBACKENDS_RENDEZVOUS_TIMEOUT="60",
        ACCELBACKENDS_DISABLE="cuda,hpu,xpu",
    )
    victim = subprocess.Popen(
        [sys.executable, str(VICTIM)],
        env={**common, "RANK": "0", "XDG_CONFIG_HOME": str(config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    intruder = subprocess.Popen(
        [sys.executable, str(VICTIM)],
        env={**common, "RANK": "1", secret.SECRET: str(known)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = victim.communicate(timeout=LIMIT)
        intruder_out, intruder_err = intruder.communicate(timeout=LIMIT)
    finally:
        for process in (victim, intruder):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert victim.returncode != 0 and "all_reduce calls" not in out
    assert f"the directory {planted} on its path can be written" in err
    assert intruder.returncode != 0 and "all_reduce calls" not in intruder_out
    assert "8 characters, shorter than the 16" in intruder_err
    assert stat.S_IMODE(planted.stat().st_mode) == 0o777  # nothing was "fixed" behind the user
