"""init(), destroy(), distributed(): the full path in this process, and nothing left half-done."""

from __future__ import annotations

import dataclasses
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from conftest import AcceleratorPlugin, fake_accelerator

import accelbackends
from accelbackends import (
    BackendOptions,
    ClusterInfo,
    ConfigError,
    InitError,
    PluginError,
    Registry,
    RendezvousError,
)
from accelbackends.accelerators.cpu import threads_per_rank


def test_single_process_init_gives_a_working_gloo_group() -> None:
    ctx = accelbackends.init()
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size) == (0, 1, 0, 1)
    assert (ctx.accelerator, ctx.backend, ctx.launcher) == ("cpu", "gloo", "single")
    assert ctx.device == torch.device("cpu")
    assert ctx.is_main
    assert isinstance(ctx.init_seconds, float) and ctx.init_seconds > 0
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    tensor = torch.tensor([3.0])
    dist.all_reduce(tensor)
    assert tensor.item() == 3.0


def test_explicit_timeout_reaches_the_process_group() -> None:
    ctx = accelbackends.init(timeout=timedelta(seconds=42))
    assert ctx.timeout == 42.0
    assert ctx.process_group_backend == "gloo"


def test_second_identical_init_returns_the_same_context() -> None:
    first = accelbackends.init(timeout=60)
    assert accelbackends.init() is first
    assert accelbackends.init(timeout=60, accelerator="cpu", backend="gloo") is first


def test_incompatible_second_init_is_an_error_that_names_both_values() -> None:
    accelbackends.init(timeout=60)
    with pytest.raises(
        ConfigError,
        match=r"already ran with timeout=60.0; this call asks for "
        r"timeout=30.0",
    ):
        accelbackends.init(timeout=30)
    assert dist.is_initialized()  # the first group is untouched


def test_a_conflicting_second_init_is_told_to_align_the_calls_not_to_destroy() -> None:
    accelbackends.init(timeout=60)
    with pytest.raises(ConfigError) as caught:
        accelbackends.init(timeout=30)
    fix = str(caught.value).split("Fix: ", 1)[1]
    assert "pass timeout=30.0 to the first call" in fix
    assert "destroy" not in fix


def test_a_seed_the_first_init_left_out_is_applied_by_the_second() -> None:
    import random

    first = accelbackends.init()  # as Ray Train's TorchConfig() does in its worker
    random.random()
    second = accelbackends.init(seed=7)
    drawn = (random.random(), torch.rand(1).item())
    random.seed(7)
    torch.manual_seed(7)
    assert drawn == (random.random(), torch.rand(1).item())
    assert (second.seed, second.rank, second.world_size) == (7, first.rank, first.world_size)
    assert accelbackends.attach().seed == 7
    assert accelbackends.init(seed=7) is second  # the same seed again: no second seeding
    with pytest.raises(ConfigError, match="already ran with seed=7; this call asks for seed=8"):
        accelbackends.init(seed=8)


def test_a_with_block_inside_a_group_made_before_leaves_it_to_its_maker() -> None:
    first = accelbackends.init()
    with accelbackends.distributed(seed=0) as ctx:
        assert (ctx.rank, ctx.seed) == (first.rank, 0)
    assert dist.is_initialized() and accelbackends.is_initialized()
    accelbackends.destroy()
    assert not dist.is_initialized()


def test_destroy_tears_down_and_is_idempotent() -> None:
    accelbackends.init()
    accelbackends.destroy()
    assert not dist.is_initialized() and not accelbackends.is_initialized()
    accelbackends.destroy()
    ctx = accelbackends.init()  # and a fresh init works again
    assert ctx.world_size == 1


def test_context_manager_tears_down_also_on_error() -> None:
    with pytest.raises(ValueError, match="inside"), accelbackends.distributed() as ctx:
        assert ctx.rank == 0 and dist.is_initialized()
        raise ValueError("inside")
    assert not dist.is_initialized()
    assert not accelbackends.is_initialized()


def test_init_refuses_a_process_group_it_did_not_make() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(InitError, match="already initialised by code outside accelbackends"):
            accelbackends.init()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": -5}, r"timeout=-5 must be a positive"),
        ({"timeout": "soon"}, r"timeout='soon' is not a number of seconds"),
        ({"rendezvous_timeout": 0}, r"rendezvous_timeout=0 must be a positive"),
        ({"seed": -1}, r"seed=-1 is not valid; use an integer from 0 to 4294967295"),
        ({"seed": 1.5}, r"seed=1.5 is not valid"),
        ({"threads": 0}, r"threads=0 is not valid; use an integer >= 1"),
        ({"cluster": {"rank": 0}}, r"cluster=.* pass an accelbackends.ClusterInfo"),
        ({"accelerator": "tpu"}, r"accelerator='tpu' is not a known accelerator"),
        ({"backend": "mpi"}, r"backend='mpi' is not supported by accelerator 'cpu'"),
    ],
)
def test_bad_arguments_are_errors_and_leave_nothing_initialised(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        accelbackends.init(**kwargs)  # type: ignore[arg-type]
    assert not dist.is_initialized() and not accelbackends.is_initialized()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("ACCELBACKENDS_TIMEOUT", "-1"), ("ACCELBACKENDS_RENDEZVOUS_TIMEOUT", "ten")],
)
def test_bad_timeout_variables_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=rf"{variable}='{value}'"):
        accelbackends.init()
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "0"}, r"missing WORLD_SIZE"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, r"RANK='x' is not valid; use an integer >= 0"),
        (
            {"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
            r"RANK=2 must be less than WORLD_SIZE=2",
        ),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, r"missing MASTER_PORT"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"},
            r"MASTER_PORT='70000' is not a TCP port",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"},
            r"LOCAL_RANK=1 must be less than LOCAL_WORLD_SIZE=1",
        ),
        (
            {"TORCHELASTIC_RUN_ID": "r", "RANK": "0", "WORLD_SIZE": "1"},
            r"torchrun .*missing "
            r"LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT",
        ),
    ],
)
def test_bad_launcher_variables_are_errors_naming_the_variable(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        accelbackends.init(registry=Registry(env=env))
    assert not dist.is_initialized()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_missing_rank_fails_within_the_rendezvous_timeout_saying_how_many_joined() -> None:
    env = {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
    }
    with pytest.raises(RendezvousError, match=r"timed out after 2 s: 1/2 ranks joined"):
        accelbackends.init(registry=Registry(env=env), rendezvous_timeout=2)
    assert not dist.is_initialized() and not accelbackends.is_initialized()


def test_port_in_use_is_reported_naming_the_port() -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        with pytest.raises(
            RendezvousError,
            match=rf"MASTER_PORT={port}: port {port} is already "
            r"in use",
        ):
            accelbackends.init(registry=Registry(env=env), rendezvous_timeout=5)
    assert not dist.is_initialized()


def test_unreachable_store_is_reported_naming_the_address() -> None:
    port = _free_port()
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    with pytest.raises(
        RendezvousError,
        match=rf"rank 1 could not reach the rendezvous store at "
        rf"127.0.0.1:{port} \(MASTER_ADDR/MASTER_PORT\)",
    ):
        accelbackends.init(registry=Registry(env=env), rendezvous_timeout=1)
    assert not dist.is_initialized()


def test_cpu_binding_divides_cores_between_local_ranks() -> None:
    cluster = ClusterInfo(
        "spawn",
        rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=2,
        master_addr="127.0.0.1",
        master_port=1,
    )
    spec = accelbackends.default_registry().detect()[0].spec
    request = accelbackends.BindRequest(0, 2, cluster, {})
    before = torch.get_num_threads()
    try:
        spec.bind(request)
        assert torch.get_num_threads() == threads_per_rank(2)
        spec.bind(dataclasses.replace(request, env={"OMP_NUM_THREADS": "1"}))
        assert torch.get_num_threads() == threads_per_rank(2)  # the user's variable: untouched
        spec.bind(dataclasses.replace(request, threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_threads_per_rank_is_at_least_one() -> None:
    assert threads_per_rank(8, cores=2) == 1
    assert threads_per_rank(2, cores=16) == 8


def test_torchrun_default_omp_of_one_is_not_taken_as_the_users_choice() -> None:
    from accelbackends.accelerators.cpu import intra_op_threads

    cluster = ClusterInfo("torchrun", rank=0, world_size=1, master_addr="h", master_port=1)
    request = accelbackends.BindRequest(0, 1, cluster, {"OMP_NUM_THREADS": "1"})
    assert intra_op_threads(request)[0] == threads_per_rank(1)
    plain = dataclasses.replace(request, cluster=ClusterInfo("env"))
    assert intra_op_threads(plain) == (None, "OMP_NUM_THREADS is set")


def test_seed_makes_random_draws_repeatable() -> None:
    with accelbackends.distributed(seed=1234):
        first = torch.rand(4)
    with accelbackends.distributed(seed=1234):
        second = torch.rand(4)
    assert torch.equal(first, second)


class _SitePolicy:
    """Has the last word on the backend options, as a wrapper; records post-init events."""

    def __init__(self) -> None:
        self.events: list[accelbackends.Context] = []

    @accelbackends.hookimpl(wrapper=True)
    def accelbackends_backend_options(self, accelerator, options, cluster):  # type: ignore[no-untyped-def]
        result = yield
        return dataclasses.replace(
            result,
            timeout=max(result.timeout, timedelta(seconds=99)),
            env_defaults={"ACCELBACKENDS_TEST_POLICY": "on"},
        )

    @accelbackends.hookimpl
    def accelbackends_post_init(self, context: accelbackends.Context) -> None:
        self.events.append(context)


class _EarlyOptions:
    @accelbackends.hookimpl
    def accelbackends_backend_options(self, accelerator, options, cluster):  # type: ignore[no-untyped-def]
        return dataclasses.replace(options, timeout=timedelta(seconds=5))


def test_options_wrapper_gets_the_last_word_and_post_init_sees_the_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACCELBACKENDS_TEST_POLICY", raising=False)
    policy = _SitePolicy()
    registry = Registry(env={}, plugins=[("early", _EarlyOptions()), ("policy", policy)])
    ctx = accelbackends.init(registry=registry, timeout=10)
    assert ctx.timeout == 99.0  # the plain answer said 5 s; the wrapper raised it to its minimum
    assert policy.events == [ctx]
    import os

    assert os.environ["ACCELBACKENDS_TEST_POLICY"] == "on"


class _BrokenPostInit:
    @accelbackends.hookimpl
    def accelbackends_post_init(self, context: accelbackends.Context) -> None:
        raise RuntimeError("metrics server down")


def test_post_init_hook_failure_names_the_plugin_and_tears_the_group_down() -> None:
    registry = Registry(env={}, plugins=[("metrics", _BrokenPostInit())])
    with pytest.raises(
        PluginError,
        match=r"plugin 'metrics' failed while running the post-init "
        r"hook: RuntimeError: metrics server down",
    ):
        accelbackends.init(registry=registry)
    assert not dist.is_initialized() and not accelbackends.is_initialized()


def test_bind_failure_is_attributed_to_the_plugin_and_nothing_is_initialised() -> None:
    def bind(request: accelbackends.BindRequest) -> object:
        raise RuntimeError("device 3 is wedged")

    spec = dataclasses.replace(fake_accelerator("wedge", 100), bind=bind)
    registry = Registry(env={}, plugins=[("wedgeplug", AcceleratorPlugin(spec))])
    with pytest.raises(
        InitError,
        match=r"binding local rank 0 to a wedge device failed in plugin "
        r"'wedgeplug': RuntimeError: device 3 is wedged",
    ):
        accelbackends.init(registry=registry)
    assert not dist.is_initialized()


def test_deep_check_disagreement_is_an_init_error_with_both_reasons() -> None:
    spec = dataclasses.replace(
        fake_accelerator("ghost", 100, reason="2 ghosts in sysfs"),
        confirm=lambda: "torch sees 0 ghosts",
    )
    registry = Registry(env={}, plugins=[("ghostplug", AcceleratorPlugin(spec))])
    with pytest.raises(
        InitError,
        match=r"'ghost' was detected \(2 ghosts in sysfs\), but torch "
        r"disagrees: torch sees 0 ghosts",
    ):
        accelbackends.init(registry=registry)


def test_backend_options_of_the_accelerator_are_used() -> None:
    def options(request: accelbackends.OptionsRequest) -> BackendOptions:
        return BackendOptions(
            process_group_backend=f"cpu:{request.backend}", timeout=request.timeout
        )

    spec = dataclasses.replace(fake_accelerator("opt", 100), backend_options=options)
    registry = Registry(env={}, plugins=[("optplug", AcceleratorPlugin(spec))])
    ctx = accelbackends.init(registry=registry)
    assert ctx.process_group_backend == "cpu:gloo"
    assert ctx.accelerator == "opt"


def test_backend_torch_lacks_is_an_init_error_and_nothing_is_initialised() -> None:
    # MPI: a backend torch knows but its wheels are built without, CPU and CUDA builds alike
    # (NCCL would not do: the CUDA builds have it, also on a node without a GPU).
    assert not dist.is_mpi_available()
    spec = fake_accelerator("fakempi", 100, backends=("mpi", "gloo"))
    registry = Registry(env={}, plugins=[("fk", AcceleratorPlugin(spec))])
    with pytest.raises(InitError, match=r"init_process_group\(backend='mpi'\) failed on rank 0"):
        accelbackends.init(registry=registry)
    assert not dist.is_initialized() and not accelbackends.is_initialized()


def test_port_held_by_a_program_that_never_answers_fails_within_the_timeout() -> None:
    import threading

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    accepted: list[socket.socket] = []

    def accept_forever() -> None:
        while True:
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept_forever, daemon=True).start()
    port = silent.getsockname()[1]
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    try:
        with pytest.raises(
            RendezvousError,
            match=r"accepted the connection but did not answer "
            r"as a rendezvous store within 2 s",
        ):
            accelbackends.init(registry=Registry(env=env), rendezvous_timeout=2)
    finally:
        silent.close()
        for conn in accepted:
            conn.close()
    assert not dist.is_initialized()


class _BrokenOptions:
    @accelbackends.hookimpl
    def accelbackends_backend_options(self, accelerator, options, cluster):  # type: ignore[no-untyped-def]
        raise KeyError("NCCL_SOCKET_IFNAME")


def test_options_hook_failure_is_attributed_to_its_plugin_and_nothing_is_initialised() -> None:
    registry = Registry(env={}, plugins=[("sitepolicy", _BrokenOptions())])
    with pytest.raises(
        PluginError,
        match=r"plugin 'sitepolicy' failed while adjusting the "
        r"backend options: KeyError",
    ):
        accelbackends.init(registry=registry)
    assert not dist.is_initialized() and not accelbackends.is_initialized()


class _StrictPolicy:
    @accelbackends.hookimpl(wrapper=True)
    def accelbackends_backend_options(self, accelerator, options, cluster):  # type: ignore[no-untyped-def]
        yield
        raise ConfigError("site.toml: min_timeout='soon' is not a number of seconds")


def test_config_error_from_the_options_hook_stays_a_config_error() -> None:
    registry = Registry(env={}, plugins=[("strict", _StrictPolicy())])
    with pytest.raises(ConfigError, match=r"site.toml: min_timeout='soon'"):
        accelbackends.init(registry=registry)
    assert not dist.is_initialized()


def test_the_process_group_string_as_backend_is_passed_to_torch_as_given() -> None:
    ctx = accelbackends.init(backend="cpu:gloo")
    assert (ctx.backend, ctx.process_group_backend) == ("gloo", "cpu:gloo")
    tensor = torch.tensor([2.0])
    dist.all_reduce(tensor)
    assert tensor.item() == 2.0
    # The same string again is the same call, not an incompatible one.
    assert accelbackends.init(backend="cpu:gloo") is ctx
    assert accelbackends.init(backend="gloo") is ctx
