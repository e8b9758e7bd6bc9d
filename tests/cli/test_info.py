"""``accelbackends info``: the report, as text and JSON, through a real child process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import accelbackends
from accelbackends.plugin import config

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_info_json_has_the_documented_keys(cli: Cli) -> None:
    result = cli("info", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {
        "plugins",
        "accelerators",
        "selected",
        "cluster",
        "cpu_affinity",
        "overrides",
        "versions",
    }
    assert report["selected"]["accelerator"] == "cpu"
    assert report["selected"]["backend"] == "gloo"
    assert report["selected"]["reason"]
    cpu = next(a for a in report["accelerators"] if a["name"] == "cpu")
    assert set(cpu) >= {
        "name",
        "plugin",
        "available",
        "device_count",
        "priority",
        "backends",
        "default_backend",
        "reason",
    }
    assert cpu["available"] is True and cpu["backends"] == ["gloo"]
    assert set(report["cluster"]) >= {
        "launcher",
        "rank",
        "world_size",
        "local_rank",
        "local_world_size",
        "node_rank",
        "master_addr",
        "master_port",
    }
    assert report["cluster"]["launcher"] == "single"
    # Only the suite's hermetic probe root (tests/conftest.py), which info shows like any other.
    assert report["overrides"] == {config.PROBE_ROOT: os.environ[config.PROBE_ROOT]}
    assert report["versions"]["accelbackends"] == accelbackends.__version__
    assert report["versions"]["torch"].startswith("2.")
    # Built-ins are hidden by default, as pytest and llm do.
    assert all(not p["builtin"] for p in report["plugins"])


def test_info_all_lists_the_builtin_plugins(cli: Cli) -> None:
    plugins = json.loads(cli("info", "--json", "--all").stdout)["plugins"]
    names = {p["name"] for p in plugins}
    assert {"cpu", "torchrun", "env", "single", "defaults"} <= names
    assert {p["status"] for p in plugins} == {"active"}
    assert set(plugins[0]) >= {"name", "distribution", "version", "status", "error"}


def test_info_text_explains_the_choice_and_the_cluster(cli: Cli) -> None:
    result = cli("info", env={"ACCELBACKENDS_TIMEOUT": "60"})
    assert result.returncode == 0
    text = result.stdout
    assert "selected: cpu with gloo" in text
    assert "why: the only available accelerator" in text
    assert "cluster: single" in text
    assert "ACCELBACKENDS_TIMEOUT=60" in text


def test_info_shows_where_each_cluster_field_came_from(cli: Cli) -> None:
    env = {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    report = json.loads(cli("info", "--json", env=env).stdout)
    assert report["cluster"]["launcher"] == "env"
    assert report["cluster"]["rank"] == 1 and report["cluster"]["node_rank"] == 0
    assert report["cluster"]["sources"]["local_world_size"] == "LOCAL_WORLD_SIZE"
    assert "from RANK" in cli("info", env=env).stdout


def test_info_lists_a_failed_plugin_with_its_error_and_still_works(
    cli: Cli, plugin_dist: Callable[..., Path]
) -> None:
    site = plugin_dist("broken", "raise ImportError('vendor runtime missing')\n")
    result = cli("info", "--json", pythonpath=site)
    assert result.returncode == 0
    broken = next(p for p in json.loads(result.stdout)["plugins"] if p["name"] == "broken")
    assert broken["status"] == "failed"
    assert "vendor runtime missing" in broken["error"]
    assert "was not loaded" in result.stderr  # the warning


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ACCELBACKENDS_ACCELERATOR": "hpux"},
            "ACCELBACKENDS_ACCELERATOR=hpux is not a known accelerator; known accelerators: cpu",
        ),
        (
            {"ACCELBACKENDS_BACKEND": "nccl"},
            "ACCELBACKENDS_BACKEND=nccl is not supported by accelerator 'cpu'; it supports: gloo",
        ),
        ({"ACCELBACKENDS_DISABLE": "cpu"}, "plugin 'cpu' cannot be disabled"),
        (
            {"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "sure"},
            "ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD='sure' is not a boolean",
        ),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not valid"),
    ],
)
def test_bad_override_still_prints_the_report_with_the_error_where_it_applies_and_exits_2(
    cli: Cli, env: dict[str, str], message: str
) -> None:
    result = cli("info", env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("accelbackends: error: ")
    assert message in lines[0]
    # The report is still there, the error on the line it concerns.
    assert "versions: python" in result.stdout
    where = next(line for line in result.stdout.splitlines() if message in line)
    section = "cluster:" if "RANK" in message else "selected:"
    assert where.startswith((section, "accelerators:", "  ACCELBACKENDS_"))


@pytest.mark.parametrize(
    ("env", "section"),
    [
        ({"ACCELBACKENDS_ACCELERATOR": "cuda"}, "selected"),
        ({"ACCELBACKENDS_BACKEND": "nccl"}, "selected"),
        ({"RANK": "0"}, "cluster"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, "cluster"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[::1]", "MASTER_PORT": "29500"},
            "cluster",
        ),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h ", "MASTER_PORT": "29500"}, "cluster"),
    ],
)
def test_info_json_with_a_bad_variable_is_the_whole_object_with_the_error(
    cli: Cli, env: dict[str, str], section: str
) -> None:
    result = cli("info", "--json", env=env)
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["error"] and report["error"] == report[section]["error"]
    assert report["errors"] == [report["error"]]
    assert report["accelerators"] and report["versions"]["accelbackends"]
    assert result.stderr == ""  # the JSON carries the error; nothing else to parse around


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ACCELBACKENDS_SHARE_DEVICES", "maybe", "is not a boolean"),
        ("ACCELBACKENDS_EAGER_INIT", "sometimes", "is not a boolean"),
        ("ACCELBACKENDS_TIMEOUT", "1e300", "out of range"),
        ("ACCELBACKENDS_TIMEOUT", "1e14", "out of range"),
        ("ACCELBACKENDS_RENDEZVOUS_TIMEOUT", "1e-9", "out of range"),
        ("ACCELBACKENDS_NVML", "not a module", "is not valid"),
    ],
)
def test_info_validates_every_variable_it_shows(
    cli: Cli, variable: str, value: str, message: str
) -> None:
    result = cli("info", "--json", env={variable: value})
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert message in report["override_errors"][variable]
    assert report["error"] == report["override_errors"][variable]
    text = cli("info", env={variable: value, "COLUMNS": "200"})
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith(f"  {variable}="))
    assert "error: " in line and message in line


def test_info_warns_about_an_unknown_variable_naming_the_closest_one(cli: Cli) -> None:
    result = cli("info", env={"ACCELBACKENDS_TIMEOT": "5", "COLUMNS": "200"})
    assert result.returncode == 0
    assert "did you mean ACCELBACKENDS_TIMEOUT?" in result.stdout


def test_info_escapes_control_characters_and_cuts_long_values(cli: Cli) -> None:
    result = cli("info", env={"ACCELBACKENDS_SHARE_DEVICES": "\x1b[31m" + "y" * 100 * 1024})
    assert result.returncode == 2
    assert "\x1b" not in result.stdout + result.stderr
    assert len(result.stdout) < 10_000 and len(result.stderr) < 1_000
    assert "\\x1b[31m" in result.stderr


def test_info_wraps_to_columns_and_never_past_them(cli: Cli) -> None:
    result = cli("info", env={"COLUMNS": "80", "ACCELBACKENDS_BACKEND": "nccl"})
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    # A wrapped line continues indented, never in column 0.
    assert all(line[:1] in ("", " ") or line.endswith(":") or ":" in line for line in lines)
    assert not any(line.startswith(("no ", "/dev", "torch ")) for line in lines)


def test_info_piped_is_not_wrapped(cli: Cli) -> None:
    result = cli("info")
    cuda = next(line for line in result.stdout.splitlines() if line.startswith("  cuda "))
    assert "has no GPU support" in cuda or "GPU" in cuda
    assert max(len(line) for line in result.stdout.splitlines()) > 80


def test_info_report_is_a_block_to_paste_with_versions_platform_and_the_report(cli: Cli) -> None:
    result = cli("info", "--report")
    assert result.returncode == 0
    out = result.stdout
    assert out.count("```") == 2
    assert f"accelbackends {accelbackends.__version__}" in out
    assert "platform: " in out and "python: " in out and "torch " in out
    assert "selected: cpu with gloo" in out


def test_bad_flag_exits_2_naming_it(cli: Cli) -> None:
    result = cli("info", "--jsn")
    assert result.returncode == 2
    assert "unrecognized arguments: --jsn" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_arguments_shows_the_help_and_exits_0(cli: Cli) -> None:
    result = cli()
    assert result.returncode == 0
    assert result.stdout.startswith("usage: accelbackends")
    assert "examples:" in result.stdout and "documentation:" in result.stdout


def test_typo_in_the_command_suggests_the_closest_one(cli: Cli) -> None:
    result = cli("chek")
    assert result.returncode == 2
    assert result.stderr.startswith("accelbackends: error: 'chek' is not a command")
    assert "did you mean 'check'?" in result.stderr


@pytest.mark.parametrize("args", [("check", "-v", "--nproc", "0"), ("-v", "check", "--nproc", "0")])
def test_verbose_is_accepted_before_and_after_the_command(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert "--nproc" in result.stderr and "-v" not in result.stderr.split("error:")[1]


def test_every_error_has_the_same_prefix(cli: Cli) -> None:
    usage = cli("check", "--nproc", "x")
    late = cli("check", env={"ACCELBACKENDS_BACKEND": "nccl"})
    for result in (usage, late):
        assert result.returncode == 2
        assert result.stderr.startswith("accelbackends: error: "), result.stderr


def test_info_help_has_a_description(cli: Cli) -> None:
    assert "A bad variable is shown where it applies" in cli("info", "--help").stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag(cli: Cli, flag: str) -> None:
    result = cli(flag)
    assert (
        result.returncode == 0
        and result.stdout.strip() == f"accelbackends {accelbackends.__version__}"
    )


#: The console script pip installed beside this interpreter (a venv's bin/), or one on PATH.
SCRIPT = Path(sys.executable).with_name("accelbackends")
if not SCRIPT.exists():
    SCRIPT = Path(shutil.which("accelbackends") or SCRIPT)


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed here")
def test_console_script_runs_the_same_command() -> None:
    result = subprocess.run(
        [str(SCRIPT), "info", "--json"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0
    assert json.loads(result.stdout)["selected"]["accelerator"] == "cpu"


def test_module_entry_point_is_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "accelbackends", "info", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert json.loads(result.stdout)["selected"]["backend"] == "gloo"


def test_escape_codes_in_a_launcher_variable_are_shown_escaped(cli: Cli) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "\x1b[31mred", "MASTER_PORT": "29500"}
    result = cli("info", env=env)
    assert "\x1b" not in result.stdout
    assert "\\x1b[31mred" in result.stdout


def test_a_plugins_own_variables_are_not_called_unknown(
    cli: Cli, plugin_dist: Callable[..., Path]
) -> None:
    site = plugin_dist("mysite", "# a plugin with no hooks of its own\n")
    env = {"ACCELBACKENDS_MYSITE_FILE": "/etc/site.toml", "ACCELBACKENDS_TIMOUT": "5"}
    report = json.loads(cli("info", "--json", env=env, pythonpath=site).stdout)
    assert list(report["unknown_variables"]) == ["ACCELBACKENDS_TIMOUT"]


def test_a_bad_cpu_affinity_mode_is_shown_on_its_section_and_exits_2(cli: Cli) -> None:
    result = cli("info", env={"ACCELBACKENDS_CPU_AFFINITY": "bogus", "COLUMNS": "300"})
    assert result.returncode == 2
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("cpu affinity:"))
    assert line.startswith("cpu affinity: error: ACCELBACKENDS_CPU_AFFINITY='bogus'")


def test_info_warns_about_a_master_addr_that_does_not_resolve_without_failing(cli: Cli) -> None:
    # info may run on a login node where the compute nodes' names do not resolve: a warning
    # there; rank 0 refuses the same name when it starts.
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "no-such-host.invalid"}
    result = cli("info", "--json", env={**env, "MASTER_PORT": "29500"})
    assert result.returncode == 0, result.stderr
    cluster = json.loads(result.stdout)["cluster"]
    assert cluster["error"] is None
    assert "'no-such-host.invalid' does not resolve here" in cluster["warning"]


def test_info_report_without_a_tracker_in_the_metadata_says_so_instead_of_the_issue(
    cli: Cli,
) -> None:
    """Before: "paste everything below into the issue", naming no tracker."""
    from accelbackends.cli.info import issue_tracker, project_urls

    out = cli("info", "--report").stdout
    header = out.splitlines()[0]
    if issue_tracker(project_urls()) is None:
        assert "names no issue tracker" in header and "the issue" not in header
    else:
        assert f"a new issue at {issue_tracker(project_urls())}" in header


@pytest.mark.parametrize(
    ("urls", "tracker"),
    [
        (
            ["Homepage, https://example.org", "Issues, https://example.org/t"],
            "https://example.org/t",
        ),
        (["Bug Tracker, https://example.org/bugs"], "https://example.org/bugs"),
        (["bug-tracker,https://example.org/b"], "https://example.org/b"),
        (["Documentation, https://example.org/docs"], None),
        ([], None),
    ],
)
def test_issue_tracker_is_the_project_url_labelled_for_issues(
    urls: list[str], tracker: str | None
) -> None:
    from accelbackends.cli.info import _where_to_report, issue_tracker

    assert issue_tracker(urls) == tracker
    if tracker is not None:
        assert _where_to_report(urls) == f"paste everything below into a new issue at {tracker}"


def test_info_lists_only_the_backends_init_accepts_on_the_installed_torch(cli: Cli) -> None:
    """Before: on torch 2.13 the cuda row listed nccl2, nccl-lazy and nccl-legacy, which init()
    refuses there."""
    from accelbackends.plugin import torchcompat

    report = json.loads(cli("info", "--json").stdout)
    version = report["torch"]["version"]
    cuda = next(acc for acc in report["accelerators"] if acc["name"] == "cuda")
    refused = {b for b in cuda["backends"] if torchcompat.nccl_backend_problem(b, version)}
    assert set(cuda["refused_backends"]) == refused
    row = next(line for line in cli("info").stdout.splitlines() if line.startswith("  cuda "))
    listed = row.split()[4].replace("*", "").split(",")
    assert set(listed) == set(cuda["backends"]) - refused and "nccl" in listed
    if refused:  # torch before 2.15
        assert (
            f"  cuda: nccl2, nccl-lazy, nccl-legacy refused on torch {version}: torch 2.15 added "
            "nccl2, nccl-lazy, nccl-legacy; use 'nccl'" in cli("info").stdout
        )


@pytest.mark.parametrize(("version", "refused"), [("2.13.0+cpu", 3), ("2.15.0+cu132", 0)])
def test_refused_backends_follow_the_torch_version(version: str, refused: int) -> None:
    from accelbackends.plugin import torchcompat

    names = ("nccl", *torchcompat.NCCL2_BACKENDS, "gloo")
    assert len(torchcompat.refused_backends(names, version)) == refused


def test_info_flags_read_without_argparse_are_what_argparse_reads() -> None:
    """``info`` with its own flags skips argparse; every such command line gives argparse's
    namespace, and every other one (help, an abbreviation, a repeated or conflicting flag)
    goes to the parser."""
    import itertools

    from accelbackends.cli.main import _parser, quick_info_args

    flags = ["--json", "--report", "--all", "--import-torch", "-v", "--verbose"]
    read = 0
    for count in range(len(flags) + 1):
        for chosen in itertools.permutations(flags, count):
            argv = ["info", *chosen]
            quick = quick_info_args(argv)
            if quick is None:
                continue
            read += 1
            assert vars(quick) == vars(_parser().parse_args(argv)), argv
    assert read > 100  # the combinations were read, not all handed on
    for argv in (
        ["info", "--json", "--report"],  # argparse refuses the pair
        ["info", "--js"],  # an abbreviation argparse accepts
        ["info", "--json", "--json"],
        ["info", "--help"],
        ["-v", "info"],
        ["check", "--json"],
        [],
    ):
        assert quick_info_args(argv) is None, argv


def test_info_json_imports_no_argparse() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from accelbackends.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['info', '--json'])\n"
        "print(sorted({'argparse', 'torch'} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stderr
