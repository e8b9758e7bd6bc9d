"""The values that cross the plugin boundary, where a name changed: `BackendOptions` holds the
process group's string as ``process_group_backend`` (``backend`` is one backend's name
everywhere else), and its old name ``backend`` still works, warning, until 0.3."""

from __future__ import annotations

import dataclasses
import warnings
from datetime import timedelta

import pytest

from accelbackends import BackendOptions, Context, OptionsRequest, Selection

TIMEOUT = timedelta(seconds=30)


def test_the_process_groups_string_is_process_group_backend_by_position_or_by_name() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_position = BackendOptions("cpu:gloo,cuda:nccl", TIMEOUT)
        by_name = BackendOptions(process_group_backend="cpu:gloo,cuda:nccl", timeout=TIMEOUT)
        changed = dataclasses.replace(by_name, process_group_backend="gloo")
    assert by_position == by_name
    assert by_name.process_group_backend == "cpu:gloo,cuda:nccl"
    assert changed.process_group_backend == "gloo"
    assert changed.timeout == TIMEOUT
    assert "process_group_backend='cpu:gloo,cuda:nccl'" in repr(by_name)


def test_the_old_name_backend_builds_reads_and_replaces_with_a_deprecation_warning() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"renamed BackendOptions\.process_group_backend"
    ) as told:
        old = BackendOptions(backend="cpu:gloo,cuda:nccl", timeout=TIMEOUT)
    assert [w.filename for w in told] == [__file__]
    assert old.process_group_backend == "cpu:gloo,cuda:nccl"
    with pytest.warns(DeprecationWarning, match=r"the old name goes in 0\.3"):
        assert old.backend == "cpu:gloo,cuda:nccl"
    with pytest.warns(DeprecationWarning, match=r"BackendOptions\.backend is renamed") as told:
        replaced = dataclasses.replace(old, backend="gloo")
    assert replaced == BackendOptions("gloo", TIMEOUT)
    assert [w.filename for w in told] == [__file__]  # the caller of replace(), not dataclasses


def test_both_names_at_once_are_refused_naming_both() -> None:
    with pytest.raises(
        TypeError,
        match=r"process_group_backend='gloo' and its old name "
        r"backend='cpu:gloo,cuda:nccl'",
    ):
        BackendOptions("gloo", TIMEOUT, backend="cpu:gloo,cuda:nccl")


@pytest.mark.parametrize("value", ["", None, 3])
def test_a_missing_or_empty_process_group_backend_is_refused_by_its_name(value: object) -> None:
    with pytest.raises(TypeError, match=r"BackendOptions\.process_group_backend must be a "):
        BackendOptions(value, TIMEOUT)  # type: ignore[arg-type]


def test_backend_is_one_backends_name_on_every_other_value() -> None:
    """Everything else called ``backend`` holds one backend's name; only the fields called
    ``process_group_backend`` hold the process group's string."""
    for cls in (Selection, OptionsRequest, Context):
        names = {f.name for f in dataclasses.fields(cls)}
        assert "backend" in names, cls
    assert "process_group_backend" in {f.name for f in dataclasses.fields(Context)}
    assert "backend" not in {f.name for f in dataclasses.fields(BackendOptions)}
