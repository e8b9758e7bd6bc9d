"""``detect()`` and ``select()``: which accelerators exist here, and which one to use, and why.

Order of authority for the accelerator: the ``accelerator=`` argument, then
``ACCELBACKENDS_ACCELERATOR``, then the selection hook (first answer wins; the built-in default,
highest priority among the available with ties broken by name, answers last). A requested
accelerator that is unknown or unavailable is an error, never a silent fallback. The backend:
``backend=``, then ``ACCELBACKENDS_BACKEND``, then the accelerator's default; it must be one the
accelerator supports.
"""

from __future__ import annotations

from ..plugin import config
from ..plugin.errors import ConfigError, PluginError, SelectionError
from ..plugin.text import did_you_mean
from ..plugin.types import AcceleratorSpec, AcceleratorStatus, Selection
from ..registry.facade import Registry, default_registry

__all__ = ["Selection", "detect", "select"]


#: Words a user types for an accelerator, by the accelerator they mean (spelling alone would
#: answer 'gpu' with 'xpu').
_MEANT = {
    "gpu": "cuda",
    "nvidia": "cuda",
    "rocm": "cuda",
    "amd": "cuda",
    "hip": "cuda",
    "intel": "xpu",
    "gaudi": "hpu",
    "habana": "hpu",
}
_MEANT_WHY = {
    "cuda": "NVIDIA and AMD GPUs are 'cuda', as in torch",
    "xpu": "Intel GPUs are 'xpu', as in torch",
    "hpu": "Habana Gaudi devices are 'hpu', as in torch",
}


def detect(*, registry: Registry | None = None) -> tuple[AcceleratorStatus, ...]:
    """Every known accelerator with its verdict (available, device count, reason, provider).

    Cheap: runs each plugin's fast probe once per process (cached); never imports torch or a
    vendor runtime.

    Args:
        registry: Use this registry instead of the process's default.

    Returns:
        Every declared accelerator with its verdict, sorted by name.
    """
    return (registry or default_registry()).detect()


def _requested(
    value: str | None, argument: str, env_value: str | None, variable: str
) -> tuple[str | None, str]:
    if value is not None:
        if not isinstance(value, str) or not value.strip():
            raise SelectionError(f"{argument}={value!r} is not a name; pass a str such as 'cpu'")
        return value.strip(), f"{argument}={value.strip()!r}"
    if env_value is not None:
        return env_value, f"{variable}={env_value}"
    return None, ""


def select(
    accelerator: str | None = None,
    backend: str | None = None,
    *,
    registry: Registry | None = None,
) -> Selection:
    """Choose the accelerator and backend, with a reason for the choice and every candidate.

    Args:
        accelerator: Use this accelerator (overrides ``ACCELBACKENDS_ACCELERATOR``).
        backend: Use this backend (overrides ``ACCELBACKENDS_BACKEND``).
        registry: Use this registry instead of the process's default.

    Returns:
        The chosen accelerator and backend, why, and every candidate's verdict.

    Raises:
        SelectionError: An unknown or unavailable accelerator, or an unsupported backend.
    """
    registry = registry or default_registry()
    candidates = registry.detect()
    by_name = {c.name: c for c in candidates}
    name, reason = _chosen_accelerator(registry, candidates, by_name, accelerator)
    refusal = by_name[name].detection.refusal
    if refusal:
        # The devices are here but init() cannot use them as configured: an error, never a
        # fall back to the next accelerator.
        raise ConfigError(
            f"accelerator {name!r} ({reason}) is refused: {refusal}; or choose another "
            f"accelerator with {config.ACCELERATOR}"
        )
    chosen_backend, backend_reason, process_group_backend = _chosen_backend(
        registry, backend, name, by_name[name].spec
    )
    return Selection(
        name, chosen_backend, reason, backend_reason, candidates, process_group_backend
    )


def _chosen_accelerator(
    registry: Registry,
    candidates: tuple[AcceleratorStatus, ...],
    by_name: dict[str, AcceleratorStatus],
    accelerator: str | None,
) -> tuple[str, str]:
    """The accelerator requested (by argument or environment) or else the selection hook's
    choice, and the reason for it."""
    name, source = _requested(
        accelerator,
        "accelerator",
        config.read_name(registry.env, config.ACCELERATOR),
        config.ACCELERATOR,
    )
    if name is not None:
        _check_requested(registry, by_name, name, source)
        return name, f"requested by {source}"
    choice = registry.select_accelerator(candidates)
    if choice is None:
        raise SelectionError(
            "no accelerator is available: "
            + "; ".join(f"{c.name}: {c.detection.reason}" for c in candidates)
        )
    if choice.accelerator not in by_name or not by_name[choice.accelerator].available:
        raise PluginError(
            f"the selection hook chose {choice.accelerator!r}, which is not an available "
            f"accelerator; available: {', '.join(c.name for c in candidates if c.available)}"
        )
    return choice.accelerator, choice.reason


def _check_requested(
    registry: Registry, by_name: dict[str, AcceleratorStatus], name: str, source: str
) -> None:
    """Raise unless the requested accelerator ``name`` is known and available."""
    if name not in by_name:
        blocked = registry.blocked_plugins()
        hint = f" (blocked plugins: {', '.join(blocked)})" if blocked else ""
        meant = _MEANT.get(name.lower())
        guess = (
            f"; did you mean {meant!r}? ({name!r} names no accelerator: {_MEANT_WHY[meant]})"
            if meant in by_name
            else did_you_mean(name, sorted(by_name))
        )
        raise SelectionError(
            f"{source} is not a known accelerator; known accelerators: "
            f"{', '.join(sorted(by_name))}{hint}{guess}"
        )
    if not by_name[name].available:
        raise SelectionError(
            f"{source}: accelerator {name!r} is not available: {by_name[name].detection.reason}"
        )


def _chosen_backend(
    registry: Registry, backend: str | None, name: str, spec: AcceleratorSpec
) -> tuple[str, str, str | None]:
    """The backend requested (by argument or environment) or else ``name``'s default, the
    reason for it, and the composite backend string passed to torch as given (or None)."""
    chosen_backend, backend_source = _requested(
        backend, "backend", config.read_name(registry.env, config.BACKEND), config.BACKEND
    )
    process_group_backend = None
    if chosen_backend is None:
        chosen_backend, backend_reason = spec.default_backend, f"default backend of {name}"
    elif ":" in chosen_backend:
        process_group_backend = chosen_backend
        chosen_backend = _from_composite(chosen_backend, backend_source, spec)
        backend_reason = f"requested by {backend_source} (passed to torch as given)"
    else:
        if chosen_backend not in spec.backends:
            raise SelectionError(
                f"{backend_source} is not supported by accelerator {name!r}; "
                f"it supports: {', '.join(spec.backends)}"
                f"{did_you_mean(chosen_backend, spec.backends)}"
            )
        backend_reason = f"requested by {backend_source}"
    return chosen_backend, backend_reason, process_group_backend


def _from_composite(value: str, source: str, spec: AcceleratorSpec) -> str:
    """The backend a process group's string (``cpu:gloo,cuda:nccl``, what
    ``torch.distributed.get_backend()`` prints) names for the accelerator's device, where the
    string fits it: one ``device:backend`` pair per device, the accelerator's device with a
    backend it supports, and besides it only ``cpu`` (with ``gloo`` or one of its backends)."""
    give = f"give {spec.default_backend!r} (or one of: {', '.join(spec.backends)})"
    pairs: dict[str, str] = {}
    for item in value.split(","):
        device, colon, backend = (part.strip() for part in item.partition(":"))
        if not colon or not device or not backend or device in pairs:
            raise SelectionError(
                f"{source} is not a backend name or a process group's string of one "
                f"'device:backend' pair per device (such as 'cpu:gloo,{spec.device_type}:"
                f"{spec.default_backend}'); {give}"
            )
        pairs[device] = backend
    others = [d for d in pairs if d not in (spec.device_type, "cpu")]
    if spec.device_type not in pairs or others:
        named = ", ".join(d for d in pairs if d != "cpu") or "cpu"
        raise SelectionError(
            f"{source} names device {named} but the selected accelerator is {spec.name!r} "
            f"(device {spec.device_type}); {give}"
        )
    backend = pairs[spec.device_type]
    if backend not in spec.backends:
        raise SelectionError(
            f"{source}: backend {backend!r} for device {spec.device_type} is not supported by "
            f"accelerator {spec.name!r}; it supports: {', '.join(spec.backends)}"
            f"{did_you_mean(backend, spec.backends)}"
        )
    cpu = pairs.get("cpu")
    if cpu is not None and cpu != "gloo" and cpu not in spec.backends:
        raise SelectionError(
            f"{source}: backend {cpu!r} for device cpu is not one accelerator {spec.name!r} "
            f"can serve CPU tensors with; use 'gloo'{did_you_mean(cpu, ('gloo',))}"
        )
    return backend
