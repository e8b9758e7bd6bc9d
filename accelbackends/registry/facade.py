"""The plugin registry: loading plugins, and the typed facade that is the only caller of hooks.

Built-in plugins are registered by module path through the same path as third-party ones, which come
from the ``accelbackends`` entry-point group one at a time: a plugin that fails to import, misspells
a hook or declares nonsense is recorded as *failed*, warned about, and left out; the host keeps
working. Tests build a fresh [`Registry`][accelbackends.Registry] with an injected environment
instead of touching a global.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pluggy

from .. import accelerators, environments
from ..host.guard import Call, PluginTimeout, bounded, codes_of, failure, held_bound
from ..plugin import config, hookspecs, installed
from ..plugin.errors import (
    AccelBackendsError,
    AccelBackendsWarning,
    ConfigError,
    PluginError,
    PluginWarning,
    describe,
)
from ..plugin.types import (
    AcceleratorSpec,
    AcceleratorStatus,
    BackendOptions,
    Choice,
    ClusterInfo,
    Detection,
    Probe,
)
from .exits import refusing_exit
from .frames import caller_stacklevel, without_pluggy_frames

if TYPE_CHECKING:
    from ..plugin.types import Context

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "PluginInfo",
    "Registry",
    "default_registry",
    "reset",
    "warn_unknown_variables",
]

ENTRY_POINT_GROUP = "accelbackends"
BUILTIN_DISTRIBUTION = "accelbackends"

#: Built-in plugins as (name, module), in registration order: the hook defaults, the accelerators,
#: then the cluster environments from the last asked to the first asked (pluggy calls later
#: registrations first).
BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("defaults", "accelbackends.registry.defaults"),
    *accelerators.BUILTIN,
    *reversed(environments.BUILTIN),
)
#: Built-ins that cannot be blocked: the always-available fallbacks and the hook defaults.
UNBLOCKABLE = frozenset({"defaults", "cpu", "single"})

#: A third-party plugin's import, declaration or cluster hook, or any probe, that has not
#: answered after this many seconds counts as failed (``ACCELBACKENDS_PLUGIN_TIMEOUT``).
DETECT_TIMEOUT = 10.0

Status = Literal["active", "blocked", "failed"]


@dataclass(frozen=True)
class PluginInfo:
    """A plugin as `info` lists it.

    Attributes:
        name: The plugin's name (its entry point's name), as `ACCELBACKENDS_DISABLE` takes it.
        distribution: The installed package that provides it.
        version: That package's version.
        status: `active`, `blocked` or `failed`.
        error: Why it failed or was blocked; empty when active.
        builtin: Whether it ships with accelbackends.
    """

    name: str
    distribution: str
    version: str
    status: Status
    error: str = ""
    builtin: bool = False

    @property
    def provider(self) -> str:
        """``distribution version`` for messages, e.g. ``accelbackends-ascend 1.0``."""
        return f"{self.distribution} {self.version}".strip() or self.name


def _version() -> str:
    from .._version import __version__

    return __version__


#: What pluggy can take a hook implementation from: plain functions, static and class methods,
#: bound methods (pluggy's own rule, `_static_hook_attr`).
_HOOKABLE = (types.FunctionType, staticmethod, classmethod, types.MethodType)
_ABSENT = object()


class _PluginManager(pluggy.PluginManager):
    """pluggy's manager, with a quick answer for a module's other attributes.

    `register` asks `parse_hookimpl_opts` about every name in ``dir(plugin)``, and pluggy looks
    each up with `inspect.getattr_static`: for a plugin module, every import and constant too
    (about 300 names a module, 80 % of a first detection's time). A module's own attribute that
    is none of the kinds pluggy can hook, or a plain function without the hook marker (an
    imported helper: every pluggy from 1.5 on answers None for it too), is answered None here
    at once; everything else goes to pluggy unchanged."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if isinstance(plugin, types.ModuleType):
            value = plugin.__dict__.get(name, _ABSENT)
            if value is not _ABSENT and not isinstance(value, _HOOKABLE):
                return None
            if type(value) is types.FunctionType and not hasattr(value, self._marker):
                return None
        return super().parse_hookimpl_opts(plugin, name)

    @functools.cached_property
    def _marker(self) -> str:
        return self.project_name + "_impl"


class Registry:
    """Plugins, their accelerators and the hooks, for one environment.

    Args:
        env: The environment to read ``ACCELBACKENDS_*`` and launcher variables from
            (``os.environ`` itself by default, read live).
        root: The filesystem root that detection probes look under (default:
            ``ACCELBACKENDS_PROBE_ROOT`` of ``env``, else of the process environment, else
            ``/``).
        detect_timeout: Seconds a probe, a third-party plugin's import or declaration, or the
            cluster-environment and selection hooks may take before they count as failed
            (default: ``ACCELBACKENDS_PLUGIN_TIMEOUT``, else 10).
        plugins: Extra plugin objects to register after the built-ins, as (name, object); the
            testing kit uses this to register a plugin inline.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        plugins: Iterable[tuple[str, object]] = (),
        detect_timeout: float | None = None,
    ) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        if root is None:
            # The machine is the process's, whatever job environment a caller injects: an
            # injected env that names no probe root takes the process's own.
            machine = self.env if config.PROBE_ROOT in self.env else os.environ
            root = config.read_probe_root(machine)
        self.root = Path(root)
        if detect_timeout is None:
            detect_timeout = config.read_seconds(self.env, config.PLUGIN_TIMEOUT) or DETECT_TIMEOUT
        self.detect_timeout = detect_timeout
        self._inline = list(plugins)
        self._pm: pluggy.PluginManager | None = None
        self._plugins: dict[str, PluginInfo] = {}
        self._accelerators: dict[str, tuple[AcceleratorSpec, PluginInfo]] = {}
        self._detections: tuple[AcceleratorStatus, ...] | None = None

    # -- loading -------------------------------------------------------------------------------

    @property
    def pm(self) -> pluggy.PluginManager:
        if self._pm is None:
            self._load()
        assert self._pm is not None
        return self._pm

    def _load(self) -> None:
        """Load the plugins, in the order of conda's ``get_plugin_manager``: the settings, a
        manager that knows every hook spec, the built-ins, the installed entry points, then the
        plugins given inline."""
        settings = _read_settings(self.env)
        entry_points = _entry_points() if settings.autoload else []
        _check_settings(settings, sorted({ep.name for ep in entry_points}))
        self._pm = _new_manager()
        self._load_builtins(settings)
        self._load_entry_points(entry_points, settings)
        self._load_inline()

    def _load_builtins(self, settings: _Settings) -> None:
        for name, module_path in BUILTIN_PLUGINS:
            if name in settings.disable:
                self._block(name, BUILTIN_DISTRIBUTION, _version(), True, f"{config.DISABLE}")
                continue
            self._register(
                functools.partial(importlib.import_module, module_path),
                name,
                BUILTIN_DISTRIBUTION,
                _version(),
                builtin=True,
            )

    def _load_entry_points(
        self, entry_points: list[installed.EntryPoint], settings: _Settings
    ) -> None:
        for ep in sorted(entry_points, key=lambda e: (e.name, _dist_name(e))):
            dist, version = _dist_name(ep), _dist_version(ep)
            if name_taken := self._plugins.get(ep.name):
                self._fail(
                    ep.name,
                    dist,
                    version,
                    f"plugin name {ep.name!r} is already used by {name_taken.provider}",
                )
            elif ep.name in settings.disable:
                self._block(ep.name, dist, version, False, config.DISABLE)
            elif settings.allow is not None and ep.name not in settings.allow:
                self._block(ep.name, dist, version, False, f"not in {config.PLUGINS}")
            else:
                self._register(ep.load, ep.name, dist, version, builtin=False)

    def _load_inline(self) -> None:
        for name, plugin in self._inline:
            self._register(functools.partial(_identity, plugin), name, "", "", builtin=False)

    def _block(self, name: str, dist: str, version: str, builtin: bool, why: str) -> None:
        assert self._pm is not None
        self._pm.set_blocked(name)
        self._plugins[name] = PluginInfo(
            name, dist, version, "blocked", f"blocked by {why}", builtin
        )

    def _fail(self, name: str, dist: str, version: str, error: str, builtin: bool = False) -> None:
        self._plugins[name] = PluginInfo(name, dist, version, "failed", error, builtin)
        where = f" ({dist} {version})" if dist else ""
        remedy = (
            f"fix or uninstall {dist}, or set {config.DISABLE}={name} to skip it"
            if dist and not builtin
            else f"set {config.DISABLE}={name} to skip it"
        )
        warnings.warn(
            f"accelbackends plugin {name!r}{where} was not loaded: {error}; {remedy}",
            PluginWarning,
            stacklevel=caller_stacklevel(),
        )

    def _register(
        self,
        load: Callable[[], object],
        name: str,
        dist: str,
        version: str,
        *,
        builtin: bool,
    ) -> None:
        pm = self.pm
        info = PluginInfo(name, dist, version, "active", "", builtin)
        try:
            # A third-party plugin's own code runs bounded, in a thread (`host.guard`);
            # os._exit at import is made a failure of the plugin (`exits`).
            plugin = (
                load()
                if builtin
                else bounded(
                    refusing_exit(load),
                    self.detect_timeout,
                    "import",
                    f"plugin {name!r}'s import",
                )
            )
        except PluginTimeout as exc:
            self._fail(
                name, dist, version, f"import did not finish within {exc.limit:g} s", builtin
            )
            return
        except Exception as exc:
            self._fail(name, dist, version, f"import failed: {failure(exc)}", builtin)
            return
        try:
            pm.register(plugin, name)
            # Every hook spec is known before any plugin loads, so anything pending now is this
            # plugin's: a misspelled accelbackends_* hook.
            pm.check_pending()
            specs = self._declared(plugin, name, builtin)
        except Exception as exc:
            if pm.is_registered(plugin):
                pm.unregister(plugin)
            self._fail(name, dist, version, failure(exc), builtin)
            return
        for spec in specs:
            self._accelerators[spec.name] = (spec, info)
        self._plugins[name] = info
        self._detections = None

    def _declared(self, plugin: object, name: str, builtin: bool) -> list[AcceleratorSpec]:
        specs: list[AcceleratorSpec] = []
        for impl in self.pm.hook.accelbackends_declare_accelerators.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            declared = (
                impl.function()
                if builtin
                else bounded(
                    impl.function,
                    self.detect_timeout,
                    impl.function.__name__,
                    f"plugin {name!r}'s {impl.function.__name__} hook",
                )
            )
            if not isinstance(declared, (list, tuple)) or not all(
                isinstance(spec, AcceleratorSpec) for spec in declared
            ):
                raise PluginError(
                    "accelbackends_declare_accelerators must return a list of AcceleratorSpec, "
                    f"not {declared!r}"
                )
            specs.extend(declared)
        seen: dict[str, str] = {}
        for spec in specs:
            if spec.name in seen:
                raise PluginError(f"declares accelerator {spec.name!r} twice")
            seen[spec.name] = name
            if spec.name in self._accelerators:
                other = self._accelerators[spec.name][1]
                raise PluginError(
                    f"accelerator {spec.name!r} is already declared by plugin {other.name!r} "
                    f"({other.provider}); uninstall one of them or block one with "
                    f"{config.DISABLE}"
                )
        return specs

    def register(self, plugin: object, name: str) -> PluginInfo:
        """Register a plugin object now (inline plugins in tests and notebooks)."""
        self._register(functools.partial(_identity, plugin), name, "", "", builtin=False)
        return self._plugins[name]

    @property
    def unknown_variables(self) -> dict[str, str]:
        """``ACCELBACKENDS_*`` variables nobody reads, each with a note (the closest known name):
        neither the package nor a plugin that owns the prefix ``ACCELBACKENDS_<PLUGIN>_`` (a
        site-policy plugin's settings file, say)."""
        try:
            owners = tuple(
                f"{config.PREFIX}{p.name.upper().replace('-', '_')}_" for p in self.plugins
            )
        except AccelBackendsError:
            owners = ()
        return {k: v for k, v in config.unknown(self.env).items() if not k.startswith(owners)}

    @property
    def plugins(self) -> tuple[PluginInfo, ...]:
        """Every plugin seen: active, blocked or failed, in load order."""
        self.pm  # noqa: B018 - loads on first use
        return tuple(self._plugins.values())

    # -- detection -----------------------------------------------------------------------------

    def detect(self) -> tuple[AcceleratorStatus, ...]:
        """Every declared accelerator with its verdict, sorted by name; cached until
        `forget_detections`."""
        self.pm  # noqa: B018
        if self._detections is None:
            pairs = [pair for _, pair in sorted(self._accelerators.items())]
            verdicts = _detect_all(pairs, Probe(env=self.env, root=self.root), self.detect_timeout)
            self._detections = tuple(
                AcceleratorStatus(spec, info.name, info.distribution, info.version, verdict)
                for (spec, info), verdict in zip(pairs, verdicts, strict=True)
            )
        return self._detections

    def forget_detections(self) -> None:
        """Forget detection results, so the next [`detect`][accelbackends.Registry.detect] probes
        again (the plugins stay loaded; [`accelbackends.reset`][accelbackends.reset] instead drops
        the process's whole registry)."""
        self._detections = None

    def reset(self) -> None:
        """The old name of `forget_detections`, kept for callers written against it;
        it warns because [`accelbackends.reset`][accelbackends.reset] does something else."""
        warnings.warn(
            "Registry.reset() is renamed Registry.forget_detections(); accelbackends.reset() "
            "is the one that drops the process's registry",
            DeprecationWarning,
            stacklevel=2,
        )
        self.forget_detections()

    def blocked_plugins(self) -> list[str]:
        return [p.name for p in self.plugins if p.status == "blocked"]

    # -- the typed facade over the policy hooks -------------------------------------------------

    def cluster_environment(self) -> ClusterInfo:
        hook = self.pm.hook.accelbackends_cluster_environment
        try:
            result = self._bounded_hook(
                hook, "recognising the cluster environment", functools.partial(hook, env=self.env)
            )
        except ConfigError as exc:
            raise without_pluggy_frames(exc) from None
        except PluginError:
            raise
        except Exception as exc:
            raise self._hook_error(hook, exc, "recognising the cluster environment") from exc
        if not isinstance(result, ClusterInfo):
            raise PluginError(
                "accelbackends_cluster_environment returned "
                f"{result!r} instead of a ClusterInfo (plugins: {_impl_names(hook)})"
            )
        return result

    def select_accelerator(self, candidates: Sequence[AcceleratorStatus]) -> Choice | None:
        hook = self.pm.hook.accelbackends_select_accelerator
        try:
            result = self._bounded_hook(
                hook,
                "selecting the accelerator",
                functools.partial(hook, candidates=candidates, env=self.env),
            )
        except PluginError:
            raise
        except Exception as exc:
            raise self._hook_error(hook, exc, "selecting the accelerator") from exc
        if result is not None and not isinstance(result, Choice):
            raise PluginError(
                f"accelbackends_select_accelerator returned {result!r} instead of a Choice "
                f"(plugins: {_impl_names(hook)})"
            )
        return result

    def backend_options(
        self, accelerator: AcceleratorSpec, options: BackendOptions, cluster: ClusterInfo
    ) -> BackendOptions:
        hook = self.pm.hook.accelbackends_backend_options
        try:
            result = hook(accelerator=accelerator, options=options, cluster=cluster)
        except ConfigError as exc:
            # A policy plugin's verdict on bad configuration: bad input (exit 2), still named.
            culprit = _culprit(hook, exc)
            raise ConfigError(
                f"plugin {culprit!r}: {exc}" if culprit else str(exc)
            ) from without_pluggy_frames(exc)
        except Exception as exc:
            raise self._hook_error(hook, exc, "adjusting the backend options") from exc
        if not isinstance(result, BackendOptions):
            raise PluginError(
                f"accelbackends_backend_options returned {result!r} instead of BackendOptions "
                f"(plugins: {_impl_names(hook)})"
            )
        return result

    def post_init(self, context: Context) -> None:
        hook = self.pm.hook.accelbackends_post_init
        try:
            hook(context=context)
        except Exception as exc:
            raise self._hook_error(hook, exc, "running the post-init hook") from exc

    def _hook_error(self, hook: Any, exc: Exception, doing: str) -> PluginError:
        without_pluggy_frames(exc)  # the chained traceback then goes straight to the plugin
        culprit = _culprit(hook, getattr(exc, "original", exc))
        who = f"plugin {culprit!r}" if culprit else f"one of the plugins {_impl_names(hook)}"
        return PluginError(f"{who} failed while {doing}: {failure(exc)}")

    def _bounded_hook(self, hook: Any, doing: str, call: Callable[[], Any]) -> Any:
        """A hook that only reads (the environment, the candidates) and may run third-party
        code: bounded like a probe. The hooks of ``init()`` (bind, backend options, post-init)
        are not: CUDA's current device is per thread, and they may take long for good reasons."""
        third_party = sorted(
            {
                impl.plugin_name
                for impl in hook.get_hookimpls()
                if not getattr(self._plugins.get(impl.plugin_name), "builtin", False)
            }
        )
        foreign = None
        if len(third_party) == 1:
            foreign = f"plugin {third_party[0]!r}'s hook while {doing}"
        elif third_party:
            foreign = f"a hook of the plugins {', '.join(map(repr, third_party))} while {doing}"
        try:
            return bounded(call, self.detect_timeout, doing, foreign)
        except PluginTimeout as exc:
            culprit = exc.call.where(
                codes_of((impl.function, impl.plugin_name) for impl in hook.get_hookimpls())
            )
            who = f"plugin {culprit!r}" if culprit else f"one of the plugins {_impl_names(hook)}"
            raise PluginError(
                f"{who} did not answer within {exc.limit:g} s while {doing} "
                f"(raise {config.PLUGIN_TIMEOUT} if it is only slow)"
            ) from None


def _detect_all(
    pairs: Sequence[tuple[AcceleratorSpec, PluginInfo]], probe: Probe, limit: float
) -> list[Detection]:
    """Every probe at once, each in its own thread; one that has not answered by ``limit``
    seconds counts as unavailable (a hung driver query must not hang ``info``)."""
    calls = [
        Call(
            functools.partial(_guarded_detect, spec, info, probe),
            f"detecting {spec.name}",
            None if info.builtin else f"plugin {info.name!r}'s probe of {spec.name!r}",
            limit,
        )
        for spec, info in pairs
    ]
    deadline = time.monotonic() + limit
    verdicts = []
    with held_bound(limit, any(not info.builtin for _, info in pairs)):
        waited = [call.wait(deadline - time.monotonic()) for call in calls]
    for call, finished, (_, info) in zip(calls, waited, pairs, strict=True):
        if finished:
            verdicts.append(call.result())
        else:
            call.abandon()
            verdicts.append(
                Detection(
                    False, 0, f"plugin error in {info.name!r}: detect timed out after {limit:g} s"
                )
            )
    return verdicts


def _guarded_detect(spec: AcceleratorSpec, info: PluginInfo, probe: Probe) -> Detection:
    """Run a spec's probe; a probe that raises or returns nonsense is "unavailable"."""
    try:
        result: object = spec.detect(probe)
    except BaseException as exc:  # run in a thread of its own: a SystemExit here is the plugin's
        return Detection(False, 0, f"plugin error in {info.name!r}: {describe(exc)}")
    if not isinstance(result, Detection):
        return Detection(
            False, 0, f"plugin error in {info.name!r}: detect returned {result!r}, not Detection"
        )
    if not result.reason:
        return Detection(
            result.available,
            result.device_count,
            "available" if result.available else "not available",
            result.refusal,
        )
    return result


def _identity(plugin: object) -> object:
    return plugin


def _impl_names(hook: Any) -> str:
    return ", ".join(sorted({impl.plugin_name for impl in hook.get_hookimpls()}))


def _culprit(hook: Any, exc: BaseException) -> str | None:
    """The plugin whose hook implementation raised ``exc``, from the traceback's code objects."""
    codes = {}
    for impl in hook.get_hookimpls():
        code = getattr(impl.function, "__code__", None)
        if isinstance(code, types.CodeType):
            codes[code] = impl.plugin_name
    tb = exc.__traceback__
    culprit = None
    while tb is not None:
        culprit = codes.get(tb.tb_frame.f_code, culprit)
        tb = tb.tb_next
    return culprit


class _Settings(NamedTuple):
    """What the environment says about loading plugins."""

    disable: Sequence[str]
    #: The third-party plugins allowed (``ACCELBACKENDS_PLUGINS``), None for all.
    allow: Sequence[str] | None
    autoload: bool


def _read_settings(env: Mapping[str, str]) -> _Settings:
    return _Settings(
        disable=config.read_name_list(env, config.DISABLE) or (),
        allow=config.read_name_list(env, config.PLUGINS),
        autoload=not config.read_bool(env, config.DISABLE_PLUGIN_AUTOLOAD),
    )


def _check_settings(settings: _Settings, third_party: list[str]) -> None:
    """Refuse a name in the settings that no installed plugin has, before any plugin loads."""
    builtin_names = [name for name, _ in BUILTIN_PLUGINS]
    blockable = ", ".join(sorted(set(builtin_names + third_party) - UNBLOCKABLE))
    for name in settings.disable:
        if name in UNBLOCKABLE:
            raise ConfigError(
                f"{config.DISABLE}: plugin {name!r} cannot be disabled "
                f"(it is the always-available fallback); blockable plugins: {blockable}"
            )
        if name not in builtin_names and name not in third_party:
            raise ConfigError(
                f"{config.DISABLE}: {name!r} is not an installed plugin; known plugins: {blockable}"
            )
    if settings.allow is not None and settings.autoload:
        for name in settings.allow:
            if name not in third_party:
                raise ConfigError(
                    f"{config.PLUGINS}: {name!r} is not an installed third-party plugin; "
                    f"installed: {', '.join(third_party) or 'none'}"
                )


def _new_manager() -> _PluginManager:
    pm = _PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _entry_points() -> list[installed.EntryPoint]:
    return list(installed.entry_points(ENTRY_POINT_GROUP))


def _dist_name(ep: installed.EntryPoint) -> str:
    return ep.distribution


def _dist_version(ep: installed.EntryPoint) -> str:
    return ep.version


_default: Registry | None = None


def default_registry() -> Registry:
    """The process's registry over ``os.environ``, loaded on first use."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def reset() -> None:
    """Forget the process's registry and its detection cache (plugins load again on next use)."""
    global _default
    _default = None


def warn_unknown_variables(registry: Registry) -> None:
    """Warn about each ``ACCELBACKENDS_*`` variable that nothing reads (a misspelt name would
    otherwise be ignored without a word), as ``info`` lists them."""
    for name, note in registry.unknown_variables.items():
        if (name, note) not in _warned_variables:  # once per process (forked ranks inherit it)
            _warned_variables.add((name, note))
            warnings.warn(
                f"{name} is set but {note}", AccelBackendsWarning, stacklevel=caller_stacklevel()
            )


_warned_variables: set[tuple[str, str]] = set()
