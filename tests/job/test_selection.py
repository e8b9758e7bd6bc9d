"""Selection: deterministic, explained, overridable, and never a silent fallback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import CPU_ONLY, AcceleratorPlugin, fake_accelerator

import accelbackends
from accelbackends import Choice, ConfigError, PluginError, Registry, SelectionError
from accelbackends.testing import fake_accelerator as kit_fake_accelerator


def _registry(
    *specs: accelbackends.AcceleratorSpec,
    env: dict[str, str] | None = None,
    extra: tuple[tuple[str, object], ...] = (),
) -> Registry:
    """A registry with the given fake accelerators where, of the built-ins, only cpu exists."""
    return Registry(
        env={**CPU_ONLY, **(env or {})}, plugins=[("fakes", AcceleratorPlugin(*specs)), *extra]
    )


def test_default_on_a_cpu_machine_is_cpu_with_gloo_and_a_reason() -> None:
    selection = accelbackends.select(registry=Registry(env=CPU_ONLY))
    assert (selection.accelerator, selection.backend) == ("cpu", "gloo")
    assert selection.reason == "the only available accelerator (priority 0)"
    assert selection.backend_reason == "default backend of cpu"


def test_highest_priority_available_wins_and_the_reason_ranks_them() -> None:
    registry = _registry(
        fake_accelerator("fast", 100),
        fake_accelerator("slow", 20),
        fake_accelerator("absent", 500, available=False),
    )
    selection = accelbackends.select(registry=registry)
    assert selection.accelerator == "fast"
    assert selection.reason == (
        "highest priority among available accelerators (fast 100, slow 20, cpu 0)"
    )


def test_ties_are_broken_by_name_not_by_registration_order() -> None:
    for order in (("beta", "alpha"), ("alpha", "beta")):
        registry = _registry(*(fake_accelerator(name, 30) for name in order))
        assert accelbackends.select(registry=registry).accelerator == "alpha"


def test_every_candidate_carries_its_verdict() -> None:
    registry = _registry(fake_accelerator("absent", 500, available=False, reason="no /dev/x"))
    verdicts = {
        c.name: (c.available, c.detection.reason)
        for c in accelbackends.select(registry=registry).candidates
    }
    assert verdicts["absent"] == (False, "no /dev/x")
    assert verdicts["cpu"][0] is True


def test_override_naming_unknown_accelerator_lists_known_ones() -> None:
    registry = _registry(fake_accelerator("fast", 100), env={"ACCELBACKENDS_ACCELERATOR": "cdua"})
    with pytest.raises(
        SelectionError,
        match=r"ACCELBACKENDS_ACCELERATOR=cdua is not a known "
        r"accelerator; known accelerators: cpu, fast",
    ):
        accelbackends.select(registry=registry)


def test_override_naming_unavailable_accelerator_gives_its_reason_and_no_fallback() -> None:
    registry = _registry(
        fake_accelerator("gone", 100, available=False, reason="no fake driver"),
        env={"ACCELBACKENDS_ACCELERATOR": "gone"},
    )
    with pytest.raises(
        SelectionError, match=r"accelerator 'gone' is not available: no fake driver"
    ):
        accelbackends.select(registry=registry)


def test_override_picks_a_lower_priority_accelerator_with_the_reason() -> None:
    registry = _registry(fake_accelerator("fast", 100), env={"ACCELBACKENDS_ACCELERATOR": "cpu"})
    selection = accelbackends.select(registry=registry)
    assert selection.accelerator == "cpu"
    assert selection.reason == "requested by ACCELBACKENDS_ACCELERATOR=cpu"


def test_argument_wins_over_environment_variable() -> None:
    registry = _registry(fake_accelerator("fast", 100), env={"ACCELBACKENDS_ACCELERATOR": "cpu"})
    selection = accelbackends.select("fast", registry=registry)
    assert selection.accelerator == "fast"
    assert selection.reason == "requested by accelerator='fast'"


def test_unknown_name_mentions_blocked_plugins() -> None:
    registry = Registry(env={"ACCELBACKENDS_DISABLE": "torchrun"})
    with pytest.raises(SelectionError, match=r"blocked plugins: torchrun"):
        accelbackends.select("tpu", registry=registry)


def test_backend_override_must_be_supported_by_the_accelerator() -> None:
    registry = Registry(env={"ACCELBACKENDS_BACKEND": "nccl"})
    with pytest.raises(
        SelectionError,
        match=r"ACCELBACKENDS_BACKEND=nccl is not supported by "
        r"accelerator 'cpu'; it supports: gloo",
    ):
        accelbackends.select(registry=registry)


def test_backend_override_among_supported_ones_is_used_with_its_reason() -> None:
    registry = _registry(
        fake_accelerator("multi", 100, backends=("fakeccl", "gloo")),
        env={"ACCELBACKENDS_BACKEND": "gloo"},
    )
    selection = accelbackends.select(registry=registry)
    assert (selection.accelerator, selection.backend) == ("multi", "gloo")
    assert selection.backend_reason == "requested by ACCELBACKENDS_BACKEND=gloo"


@pytest.mark.parametrize("value", ["", 3])
def test_accelerator_argument_that_is_not_a_name_is_an_error(value: object) -> None:
    with pytest.raises(SelectionError, match=r"accelerator=.* is not a name"):
        accelbackends.select(value, registry=Registry(env={}))  # type: ignore[arg-type]


class _Policy:
    def __init__(self, answer: Choice | None = None, error: Exception | None = None) -> None:
        self.answer, self.error = answer, error

    @accelbackends.hookimpl
    def accelbackends_select_accelerator(self, candidates: object, env: object) -> Choice | None:
        if self.error is not None:
            raise self.error
        return self.answer


def test_selection_hook_overrides_the_priority_rule_with_its_reason() -> None:
    registry = _registry(
        fake_accelerator("fast", 100),
        fake_accelerator("slow", 1),
        extra=(("policy", _Policy(Choice("slow", "site policy: slow first"))),),
    )
    selection = accelbackends.select(registry=registry)
    assert (selection.accelerator, selection.reason) == ("slow", "site policy: slow first")


def test_selection_hook_answering_none_leaves_the_default_rule() -> None:
    registry = _registry(fake_accelerator("fast", 100), extra=(("policy", _Policy(None)),))
    assert accelbackends.select(registry=registry).accelerator == "fast"


def test_selection_hook_choosing_an_unavailable_accelerator_is_a_plugin_error() -> None:
    registry = _registry(
        fake_accelerator("gone", 5, available=False),
        extra=(("policy", _Policy(Choice("gone", "because"))),),
    )
    with pytest.raises(PluginError, match=r"chose 'gone', which is not an available"):
        accelbackends.select(registry=registry)


def test_selection_hook_that_raises_is_attributed_to_its_plugin() -> None:
    registry = _registry(extra=(("policy", _Policy(error=KeyError("site.toml"))),))
    with pytest.raises(
        PluginError,
        match=r"plugin 'policy' failed while selecting the "
        r"accelerator: KeyError",
    ):
        accelbackends.select(registry=registry)


def test_environment_override_is_read_at_call_time_not_import_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert accelbackends.select().accelerator == "cpu"
    monkeypatch.setenv("ACCELBACKENDS_ACCELERATOR", "nope")
    with pytest.raises(SelectionError, match="ACCELBACKENDS_ACCELERATOR=nope"):
        accelbackends.select()


def test_import_detect_and_select_do_not_import_torch() -> None:
    code = (
        "import sys, accelbackends\n"
        "accelbackends.detect(); accelbackends.select(); accelbackends.default_registry()"
        ".cluster_environment()\n"
        "from accelbackends.cli.main import main\n"
        "main(['info', '--json'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'numpy', 'habana_frameworks', 'intel_extension_for_pytorch', "
        "'oneccl_bindings_for_pytorch', 'torch_npu'))\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "HEAVY []" in result.stdout


def test_the_cpu_accelerator_refuses_a_process_group_string_for_a_gpu() -> None:
    registry = Registry(env={**CPU_ONLY, "ACCELBACKENDS_BACKEND": "cpu:gloo,cuda:nccl"})
    with pytest.raises(
        SelectionError,
        match=r"^ACCELBACKENDS_BACKEND=cpu:gloo,cuda:nccl names device cuda but the selected "
        r"accelerator is 'cpu' \(device cpu\); give 'gloo'",
    ):
        accelbackends.select(registry=registry)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("cpu:gloo,cpu:gloo", "one 'device:backend' pair per device"),
        ("cpu:", "one 'device:backend' pair per device"),
        ("cpu:glo", "backend 'glo' for device cpu is not supported by accelerator 'cpu'"),
    ],
)
def test_a_malformed_process_group_string_is_refused_naming_it(value: str, expected: str) -> None:
    with pytest.raises(SelectionError, match=re.escape(expected)) as refused:
        accelbackends.select(backend=value, registry=Registry(env=CPU_ONLY))
    assert str(refused.value).startswith(f"backend={value!r}")


def test_a_refused_accelerator_is_an_error_not_a_fall_back_to_the_next() -> None:
    registry = _registry(
        kit_fake_accelerator("gpuish", priority=100, refusal="GPUISH_VISIBLE='0,0' lists '0' twice")
    )
    with pytest.raises(ConfigError, match=r"accelerator 'gpuish' \(.*\) is refused: GPUISH"):
        accelbackends.select(registry=registry)
    # Asked for another accelerator, the refused one does not matter.
    assert accelbackends.select("cpu", registry=registry).accelerator == "cpu"


@pytest.mark.parametrize(("typed", "meant"), [("gpu", "cuda"), ("GPU", "cuda"), ("gaudi", "hpu")])
def test_a_word_for_a_device_gets_the_accelerator_it_means_not_the_closest_spelling(
    typed: str, meant: str
) -> None:
    # Spelling alone answers 'gpu' with 'xpu'; a user who types gpu means cuda.
    with pytest.raises(SelectionError, match=rf"did you mean {meant!r}\? \({typed!r} names no"):
        accelbackends.select(typed, registry=Registry(env={}))
