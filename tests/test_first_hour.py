"""The first hour's stumbles, each with the message that says what to do: misspelt names and
variables, bounds of check's flags, a torch whose device extension breaks its import, no torch
at all, and a secret the first multi-rank job could not use, predicted by info and check alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli

from accelbackends.cli.check import options
from accelbackends.host.torchfeatures import read_build_files
from accelbackends.testing.cluster import clean_environment

ROOT = Path(__file__).resolve().parent.parent
QUICK = ("--max-bytes", "2KiB", "--iters", "1")


# -- names and variables --------------------------------------------------------------------------


def test_an_accelerator_name_in_another_case_gets_did_you_mean() -> None:
    result = run_cli("info", env={"ACCELBACKENDS_ACCELERATOR": "CPU"})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "accelbackends: error: ACCELBACKENDS_ACCELERATOR=CPU is not a known accelerator; known "
        "accelerators: cpu, cuda, hpu, xpu; did you mean 'cpu'?"
    )


def test_a_misspelt_backend_gets_did_you_mean() -> None:
    result = run_cli("check", *QUICK, env={"ACCELBACKENDS_BACKEND": "Gloo"})
    assert result.returncode == 2
    assert result.stderr.strip().endswith("it supports: gloo; did you mean 'gloo'?")


def test_nvml_naming_a_module_that_cannot_be_imported_is_bad_input_for_info_and_check() -> None:
    env = {"ACCELBACKENDS_NVML": "nosuchmodule"}
    expected = (
        "accelbackends: error: ACCELBACKENDS_NVML='nosuchmodule': no module of that name can be "
        "imported here; use auto (NVIDIA's pynvml where installed: pip install nvidia-ml-py), "
        "off, or the name of an installed module with pynvml's functions"
    )
    for args in (("info",), ("check", *QUICK)):
        result = run_cli(*args, env=env)
        assert result.returncode == 2, args
        assert result.stderr.strip().splitlines()[-1] == expected


def test_nvml_naming_an_importable_module_is_accepted() -> None:
    result = run_cli("info", "--json", env={"ACCELBACKENDS_NVML": "accelbackends.testing.nvml"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["override_errors"] == {}


def test_init_warns_about_a_misspelt_variable_once() -> None:
    program = textwrap.dedent(
        """
        import warnings, accelbackends
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            accelbackends.init()
            accelbackends.destroy()
            accelbackends.init()
            accelbackends.destroy()
        print([(str(w.message), w.filename) for w in seen if "ACCELBACKENDS_" in str(w.message)])
        """
    )
    env = {**os.environ, "ACCELBACKENDS_TIMOUT": "5", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    # Named at the user's line (here the program, "<string>"), not inside init()'s steps.
    assert result.stdout.strip() == (
        "[('ACCELBACKENDS_TIMOUT is set but not read by accelbackends itself; did you mean "
        "ACCELBACKENDS_TIMEOUT?', '<string>')]"
    )


@pytest.mark.slow
def test_check_warns_about_a_misspelt_variable_once_and_still_runs() -> None:
    result = run_cli("check", *QUICK, env={"ACCELBACKENDS_TIMOUT": "5"})
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "ACCELBACKENDS_TIMOUT" in line]
    assert warned == [
        "accelbackends: warning: ACCELBACKENDS_TIMOUT is set but not read by accelbackends "
        "itself; did you mean ACCELBACKENDS_TIMEOUT?"
    ]


# -- check's flags --------------------------------------------------------------------------------


def test_far_too_many_ranks_are_refused_as_such_not_as_a_memory_size() -> None:
    result = run_cli("check", "--nproc", "100000")
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.startswith(
        "accelbackends: error: --nproc=100000 is more local ranks than this node can run"
    )
    assert "use --nproc" in message and "--max-bytes" not in message


def test_iters_beyond_the_bound_is_refused_with_what_to_do() -> None:
    result = run_cli("check", "--iters", "100000000")
    assert result.returncode == 2
    assert "'100000000' is not valid; use an integer from 1 to 10000, or leave --iters out" in (
        result.stderr
    )


def test_more_cpu_ranks_than_cores_get_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "available_cores", lambda: 2)
    assert options.oversubscription(2, "cpu") is None
    assert options.oversubscription(32, "cuda") is None
    note = options.oversubscription(32, "cpu")
    assert note is not None
    assert note.startswith("note: 32 CPU ranks on 2 cores: the ranks take turns on the cores")
    assert note.endswith("--nproc 2 or fewer avoids it")


def test_the_rank_limit_follows_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "available_cores", lambda: 4)
    options.check_ranks(128)
    with pytest.raises(options.ConfigError, match="use --nproc 128 or fewer"):
        options.check_ranks(129)


def test_nproc_under_torchrun_names_torchruns_own_flag() -> None:
    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
        "TORCHELASTIC_RUN_ID": "none",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    result = run_cli("check", "--nproc", "4", *QUICK, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "the launcher decides how many ranks run (torchrun --nproc-per-node 4 -m accelbackends "
        "check)"
    )


# -- torch: its backends, its absence, its broken import ------------------------------------------


def test_info_reads_the_compiled_backends_from_torchs_build_files(tmp_path: Path) -> None:
    cmake = tmp_path / "torch" / "share" / "cmake" / "Caffe2" / "Caffe2Targets.cmake"
    cmake.parent.mkdir(parents=True)
    cmake.write_text(
        'INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC"\n'
        'INTERFACE_COMPILE_DEFINITIONS "USE_NVSHMEM;USE_C10D_NCCL"\n'
        'INTERFACE_COMPILE_DEFINITIONS "USE_C10D_UCC"\n'
    )
    features = read_build_files(tmp_path / "torch")
    assert features is not None
    assert (features.distributed, features.backends) == (True, ("gloo", "nccl", "ucc"))
    cmake.write_text('INTERFACE_COMPILE_DEFINITIONS "USE_RPC"\n')
    features = read_build_files(tmp_path / "torch")
    assert features is not None and (features.distributed, features.backends) == (False, ())
    cmake.unlink()
    features = read_build_files(tmp_path / "torch")
    assert features is not None and features.distributed is None
    assert "--import-torch" in features.source


def test_the_build_files_agree_with_what_the_installed_torch_says() -> None:
    from_files = json.loads(run_cli("info", "--json").stdout)["torch"]
    from_torch = json.loads(run_cli("info", "--json", "--import-torch").stdout)["torch"]
    assert from_files["distributed"] is from_torch["distributed"] is True
    assert from_files["backends"] == from_torch["backends"]
    assert "gloo" in from_files["backends"]
    assert "Caffe2Targets.cmake" in from_files["source"]


def test_info_without_torch_says_so_and_exits_1(tmp_path: Path) -> None:
    # An interpreter that sees pluggy but no torch: -S keeps site-packages off sys.path, and
    # only pluggy is linked into the path given.
    import pluggy

    (tmp_path / "pluggy").symlink_to(Path(pluggy.__file__).parent)
    program = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(tmp_path)!r}]; "
        "from accelbackends.cli.main import main; sys.exit(main(['info']))"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "XDG_CONFIG_HOME": str(tmp_path)},
    )
    assert result.returncode == 1, result.stderr
    assert "selected: none: error: torch is not installed, so nothing can run here" in (
        result.stdout
    )
    assert "selected: cpu" not in result.stdout
    assert "torch: not installed" in result.stdout


def test_a_device_extension_that_breaks_import_torch_is_one_error_naming_it(
    tmp_path: Path,
) -> None:
    # What torch-npu without CANN does: a torch.backends entry point whose import fails.
    (tmp_path / "brokenext.py").write_text(
        "raise ImportError('libbroken.so: cannot open shared object file')\n"
    )
    info = tmp_path / "brokenext-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenext\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nbrokenext = brokenext:load\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    program = "import accelbackends; accelbackends.init()"
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "accelbackends.plugin.errors.InitError: import torch failed: torch loads the device "
        "extension brokenext at import"
    )
    assert "ImportError: libbroken.so" in last
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in last
    checked = run_cli("check", "--json", *QUICK, env={"PYTHONPATH": str(tmp_path)})
    assert checked.returncode == 1
    assert json.loads(checked.stdout)["error"].startswith("import torch failed")


# -- the secret the first multi-rank job needs ----------------------------------------------------


def test_a_config_dir_that_cannot_hold_the_secret_fails_info_and_check_alike(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    env = {"XDG_CONFIG_HOME": str(blocker)}
    info = run_cli("info", "--json", env=env)
    assert info.returncode == 2
    report = json.loads(info.stdout)
    assert report["membership"].startswith(
        f"error: the per-user secret file {blocker}/accelbackends/secret cannot be created "
        f"({blocker} is not a directory), so a job of more than one rank would fail"
    )
    assert report["error_kind"] == "bad input"
    check = run_cli("check", *QUICK, env=env)
    assert check.returncode == 2
    assert report["membership"].removeprefix("error: ") in check.stderr


@pytest.mark.skipif(os.getuid() == 0, reason="root may write to any directory")
def test_an_unwritable_config_dir_is_predicted(tmp_path: Path) -> None:
    locked = tmp_path / "config"
    locked.mkdir(mode=0o500)
    report = json.loads(run_cli("info", "--json", env={"XDG_CONFIG_HOME": str(locked)}).stdout)
    assert f"({locked} is not writable by this user)" in report["membership"]


def test_a_bad_secret_path_fails_info_and_a_standalone_check_alike(tmp_path: Path) -> None:
    env = {"ACCELBACKENDS_SECRET": str(tmp_path / "missing")}
    info = run_cli("info", env=env)
    check = run_cli("check", *QUICK, env=env)
    assert (info.returncode, check.returncode) == (2, 2)
    line = info.stderr.strip().splitlines()[-1]
    assert "the secret file cannot be read (No such file or directory)" in line
    assert check.stderr.strip().splitlines()[-1] == line


def test_a_misspelt_accelerator_in_init_fails_before_torch_is_imported() -> None:
    # On a GPU node's large environment, importing torch first made this typo take 11-15 s.
    code = (
        "import sys, accelbackends\n"
        "try:\n"
        "    accelbackends.init(accelerator='CUDA')\n"
        "except accelbackends.SelectionError as error:\n"
        "    print('torch' in sys.modules, error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_environment(os.environ),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout
    assert said.startswith("False accelerator='CUDA' is not a known accelerator"), said
    assert "did you mean 'cuda'?" in said
