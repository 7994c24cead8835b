"""The component registry: a pluggy plugin manager plus what its plugins registered.

Plugins load one at a time: the built-ins (``zoo.plugins.*``) first, then the
entry points of group ``zoo``. A plugin that fails to import or to register is
recorded as a failure (a ``PluginError`` naming its distribution) and everything it
registered is rolled back; the others still work. ``Registry`` objects are
independent, so tests create fresh ones instead of reloading modules.

Plugin control, for ruling out a misbehaving plugin:

- ``ZOO_PLUGINS=name1,name2`` loads only these third-party plugins;
  ``ZOO_PLUGINS=none`` loads none (built-ins only).
- ``ZOO_DISABLE_PLUGINS=name1,name2`` skips these.

Either list may name a plugin (its entry-point name, ``modern``) or the distribution
that installs it (``zoo-lm-modern``); a name that matches neither is a warning.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import importlib.metadata as metadata
import os
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pluggy
from pydantic import BaseModel, ConfigDict

from zoo._version import __version__
from zoo.errors import (
    DuplicateComponentError,
    PluginError,
    PresetError,
    RegistryError,
    UnknownComponentError,
    did_you_mean,
)
from zoo.nn.contracts import legacy_arguments, options_from_signature
from zoo.nn.hookspecs import PROJECT, ZooSpec
from zoo.nn.kinds import KINDS as KINDS  # the kinds of component, in their order (declared there)

BUILTIN_PLUGINS: tuple[str, ...] = (
    "zoo.plugins.attention",
    "zoo.plugins.norms",
    "zoo.plugins.placement",
    "zoo.plugins.activations",
    "zoo.plugins.positions",
    "zoo.plugins.mlp",
    "zoo.plugins.init",
    "zoo.plugins.presets",
    "zoo.plugins.hf_gpt2",
)
BUILTIN_DISTRIBUTION = "zoo-lm"
ENTRY_POINT_GROUP = "zoo"


class NoOptions(BaseModel):
    """The options of a component that takes none."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class PluginInfo:
    """One plugin the registry saw: loaded, skipped by plugin control, or failed."""

    name: str
    distribution: str | None
    version: str | None
    status: str  # "loaded" | "skipped" | "failed"
    error: PluginError | None = None
    builtin: bool = False


@dataclass(frozen=True)
class Component:
    """A registered component: its factory, its options model and who provided it."""

    kind: str
    name: str
    factory: Callable[..., Any]
    options_model: type[BaseModel]
    check: Callable[..., None] | None
    plugin: PluginInfo

    @property
    def description(self) -> str:
        doc = (self.factory.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    @property
    def provider(self) -> str:
        """``distribution version`` (or the plugin name for an unpackaged plugin)."""
        plugin = self.plugin
        if plugin.distribution:
            return f"{plugin.distribution} {plugin.version or ''}".strip()
        return plugin.name


@dataclass(frozen=True)
class Preset:
    """A registered preset; its source is validated into a config when first used."""

    name: str
    source: Any
    description: str
    plugin: PluginInfo


@dataclass(frozen=True)
class RegisteredConverter:
    """A registered Hugging Face converter (``zoo.nn.converter.Converter``) and who provided it."""

    architecture: str
    model_type: str
    converter: Any
    plugin: PluginInfo

    @property
    def description(self) -> str:
        return str(getattr(self.converter, "description", "") or "")

    @property
    def exports(self) -> bool:
        """Whether it also writes this architecture (``zoo.to_hf``)."""
        return bool(getattr(self.converter, "exports", False))

    @property
    def provider(self) -> str:
        plugin = self.plugin
        if plugin.distribution:
            return f"{plugin.distribution} {plugin.version or ''}".strip()
        return plugin.name


@dataclass
class _Staged:
    """What one plugin registered, held back until the whole plugin succeeds."""

    components: list[Component] = field(default_factory=list)
    presets: list[Preset] = field(default_factory=list)
    converters: list[RegisteredConverter] = field(default_factory=list)


def _canonical(name: str) -> str:
    """A distribution name as pip compares them: ``Zoo_LM.modern`` -> ``zoo-lm-modern``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _names_of(ep: metadata.EntryPoint) -> set[str]:
    """What plugin control may call an entry point: its name, or its distribution's."""
    dist = getattr(ep, "dist", None)
    return {ep.name, _canonical(dist.name)} if dist is not None else {ep.name}


def _given(plugin: object) -> object:
    """A plugin object passed to ``Registry(plugins=...)``: loading it is returning it."""
    return plugin


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


class Registry:
    """Holds the components and presets of a set of plugins.

    Args:
        builtins: load the built-in plugins (``zoo.plugins.*``).
        entry_points: load third-party plugins from the entry-point group ``zoo``.
        plugins: extra plugin objects (modules or instances), loaded after the others;
            handy for tests and notebooks.
        allow: names of third-party plugins to load (default: ``$ZOO_PLUGINS`` or all).
        deny: names of third-party plugins to skip (default: ``$ZOO_DISABLE_PLUGINS``).
        strict: raise the first plugin failure instead of recording it.
    """

    def __init__(
        self,
        *,
        builtins: bool = True,
        entry_points: bool = True,
        plugins: Iterable[object] = (),
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        strict: bool = False,
    ) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(ZooSpec)
        self._components: dict[tuple[str, str], Component] = {}
        self._presets: dict[str, Preset] = {}
        self._converters: dict[str, RegisteredConverter] = {}
        self.plugins: list[PluginInfo] = []
        self.strict = strict
        allow = _env_list("ZOO_PLUGINS") if allow is None else list(allow)
        if allow is not None and [a.lower() for a in allow] in (["none"], ["builtins"]):
            allow = []
        deny = _env_list("ZOO_DISABLE_PLUGINS") if deny is None else list(deny)

        if builtins:
            for module_name in BUILTIN_PLUGINS:
                info = PluginInfo(module_name, BUILTIN_DISTRIBUTION, __version__, "loaded", builtin=True)
                self._load(info, functools.partial(importlib.import_module, module_name))
        if entry_points:
            found = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
            for ep in found:
                dist = getattr(ep, "dist", None)
                info = PluginInfo(ep.name, dist.name if dist else None, dist.version if dist else None, "loaded")
                names = _names_of(ep)
                allowed = allow is None or bool(names & {*allow, *map(_canonical, allow)})
                denied = bool(deny and names & {*deny, *map(_canonical, deny)})
                if not allowed or denied:
                    self.plugins.append(replace(info, status="skipped"))
                    continue
                self._load(info, ep.load)
            known = {name for ep in found for name in _names_of(ep)}
            unknown = sorted(
                n for n in {*(allow or ()), *(deny or ())} if n not in known and _canonical(n) not in known
            )
            if unknown:
                installed = ", ".join(
                    f"{ep.name} ({dist.name})" if (dist := getattr(ep, "dist", None)) else ep.name for ep in found
                )
                warnings.warn(
                    f"plugin control (ZOO_PLUGINS / ZOO_DISABLE_PLUGINS) names {', '.join(map(repr, unknown))}, "
                    f"which is neither an installed plugin nor its distribution; installed plugins: "
                    f"{installed or 'none'}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        for index, obj in enumerate(plugins):
            name = getattr(obj, "__name__", None) or f"{type(obj).__name__}-{index}"
            self._load(PluginInfo(name, None, None, "loaded"), functools.partial(_given, obj))

    # -- loading -----------------------------------------------------------------

    def _load(self, info: PluginInfo, importer: Callable[[], object]) -> None:
        """Import and register one plugin; on any failure roll it back and record why."""
        advice = f"Fix or uninstall it, or skip it with ZOO_DISABLE_PLUGINS={info.name}."
        try:
            plugin = importer()
        except Exception as err:
            failure = PluginError(
                f"plugin {info.name!r} ({_origin(info)}) failed to import: {type(err).__name__}: {err}. {advice}"
            )
            return self._fail(info, failure, err)
        staged = _Staged()
        registered = False  # by this call: a rollback must not unregister an earlier plugin
        try:
            self._check_unique(plugin, info.name)
            self.pm.register(plugin, name=info.name)
            registered = True
            self._check_hook_names(plugin)
            others = [p for p in self.pm.get_plugins() if p is not plugin]
            register_components = self.pm.subset_hook_caller("zoo_register_components", others)
            register_components(register=self._component_registrar(info, staged))
            register_presets = self.pm.subset_hook_caller("zoo_register_presets", others)
            register_presets(register=self._preset_registrar(info, staged))
            register_converters = self.pm.subset_hook_caller("zoo_register_converters", others)
            register_converters(register=self._converter_registrar(info, staged))
        except Exception as err:
            if registered:
                self.pm.unregister(plugin)
            if isinstance(err, DuplicateComponentError):
                failure = PluginError(str(err))
            else:
                failure = PluginError(
                    f"plugin {info.name!r} ({_origin(info)}) failed to register: {type(err).__name__}: {err}. {advice}"
                )
            return self._fail(info, failure, err)
        for component in staged.components:
            self._components[(component.kind, component.name)] = component
        for preset in staged.presets:
            self._presets[preset.name] = preset
        for converter in staged.converters:
            self._converters[converter.architecture] = converter
        self.plugins.append(info)

    def _fail(self, info: PluginInfo, failure: PluginError, cause: Exception) -> None:
        """Record a plugin's failure; raise it when strict (a clash as itself), else warn."""
        failure.__cause__ = cause
        self.plugins.append(replace(info, status="failed", error=failure))
        if self.strict:
            raise cause if isinstance(cause, DuplicateComponentError) else failure
        warnings.warn(str(failure), RuntimeWarning, stacklevel=4)

    def _check_unique(self, plugin: object, name: str) -> None:
        if self.pm.is_registered(plugin):
            raise ValueError(f"this plugin object is already loaded, as {self.pm.get_name(plugin)!r}; load it once")
        if self.pm.has_plugin(name):
            raise ValueError(f"another plugin is already loaded under the name {name!r}; give this one another name")

    def _check_hook_names(self, plugin: object) -> None:
        """Refuse a hook implementation whose name is not a zoo hook (a typo would do nothing)."""
        hooks = sorted(n for n in dir(ZooSpec) if n.startswith(f"{PROJECT}_"))
        for caller in self.pm.get_hookcallers(plugin) or []:
            own = [i for i in caller.get_hookimpls() if i.plugin is plugin and not i.optionalhook]
            if caller.spec is None and own:
                raise ValueError(
                    f"{caller.name!r} is not a zoo hook.{did_you_mean(caller.name, hooks)} "
                    f"The hooks are: {', '.join(hooks)}"
                )

    def _component_registrar(self, info: PluginInfo, staged: _Staged) -> Callable[..., None]:
        def register(
            kind: str,
            name: str,
            factory: Callable[..., Any],
            options_model: type[BaseModel] | None = None,
            *,
            check: Callable[..., None] | None = None,
        ) -> None:
            if kind not in KINDS:
                raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")
            if not name or not isinstance(name, str):
                raise ValueError(f"a {kind} component needs a non-empty string name, got {name!r}")
            if not callable(factory):
                raise ValueError(f"the factory of {kind} {name!r} is not callable")
            if legacy_arguments(factory):
                raise ValueError(
                    f"the factory of {kind} {name!r} takes (builder, options), the contract before "
                    f"zoo 0.2; take explicit arguments instead (d_model, n_heads, norm, ... and the "
                    f"options by name), see zoo.nn.contracts"
                )
            options_model = options_model or options_from_signature(factory)
            if options_model is not None and "name" in options_model.model_fields:
                raise ValueError(f"the options of {kind} {name!r} may not have a field called 'name'")
            clash = self._components.get((kind, name)) or next(
                (c for c in staged.components if (c.kind, c.name) == (kind, name)), None
            )
            if clash is not None:
                raise DuplicateComponentError(
                    f"{kind} component {name!r} is registered twice: by plugin "
                    f"{clash.plugin.name!r} ({_origin(clash.plugin)}) and by plugin "
                    f"{info.name!r} ({_origin(info)}). The second was not loaded; rename "
                    f"its component or disable one with ZOO_DISABLE_PLUGINS."
                )
            staged.components.append(Component(kind, name, factory, options_model, check, info))

        return register

    def _preset_registrar(self, info: PluginInfo, staged: _Staged) -> Callable[..., None]:
        def register(name: str, source: Any, *, description: str = "") -> None:
            clash = self._presets.get(name) or next((p for p in staged.presets if p.name == name), None)
            if clash is not None:
                raise DuplicateComponentError(
                    f"preset {name!r} is registered twice: by plugin {clash.plugin.name!r} "
                    f"({_origin(clash.plugin)}) and by plugin {info.name!r} ({_origin(info)})."
                )
            staged.presets.append(Preset(name, source, description, info))

        return register

    def _converter_registrar(self, info: PluginInfo, staged: _Staged) -> Callable[..., None]:
        def register(converter: Any) -> None:
            architecture = getattr(converter, "architecture", None)
            model_type = getattr(converter, "model_type", None)
            if not (isinstance(architecture, str) and architecture and isinstance(model_type, str) and model_type):
                raise ValueError(
                    f"a converter needs non-empty string attributes 'architecture' and 'model_type', got "
                    f"{architecture!r} and {model_type!r}; subclass zoo.nn.converter.Converter"
                )
            for method in ("config_from_hf", "rules"):
                if not callable(getattr(converter, method, None)):
                    raise ValueError(f"converter {architecture!r} has no method {method!r}")
            clash = self._converters.get(architecture) or next(
                (c for c in staged.converters if c.architecture == architecture), None
            )
            if clash is not None:
                raise DuplicateComponentError(
                    f"converter {architecture!r} is registered twice: by plugin {clash.plugin.name!r} "
                    f"({_origin(clash.plugin)}) and by plugin {info.name!r} ({_origin(info)}). The second "
                    f"was not loaded; disable one with ZOO_DISABLE_PLUGINS."
                )
            staged.converters.append(RegisteredConverter(architecture, model_type, converter, info))

        return register

    # -- lookups -----------------------------------------------------------------

    def get(self, kind: str, name: str) -> Component:
        """The component ``kind``/``name``, or ``UnknownComponentError`` with suggestions."""
        component = self._components.get((kind, name))
        if component is None:
            hint = ""
            failed = [p.name for p in self.plugins if p.status == "failed"]
            skipped = [p.name for p in self.plugins if p.status == "skipped"]
            if failed:
                hint += f" Note: plugin(s) {', '.join(map(repr, failed))} failed to load (see `zoo plugins`)."
            if skipped:
                hint += (
                    f" Note: plugin(s) {', '.join(map(repr, skipped))} were skipped by "
                    f"ZOO_PLUGINS / ZOO_DISABLE_PLUGINS."
                )
            raise UnknownComponentError(kind, name, (n for k, n in self._components if k == kind), hint)
        return component

    def components(self, kind: str | None = None) -> list[Component]:
        """Registered components, sorted by kind (in ``KINDS`` order) then name."""
        if kind is not None and kind not in KINDS:
            raise RegistryError(
                f"unknown component kind {kind!r}.{did_you_mean(kind, KINDS)} Kinds are: {', '.join(KINDS)}."
            )
        found = [c for c in self._components.values() if kind is None or c.kind == kind]
        return sorted(found, key=lambda c: (KINDS.index(c.kind), c.name))

    def preset_names(self, pattern: str = "*") -> list[str]:
        """Preset names matching an fnmatch ``pattern``, sorted."""
        return sorted(n for n in self._presets if fnmatch.fnmatchcase(n, pattern))

    def preset(self, name: str) -> Preset:
        try:
            return self._presets[name]
        except KeyError:
            raise PresetError(
                f"unknown preset {name!r}.{did_you_mean(name, self._presets)} Available presets: {', '.join(self.preset_names())}."
            ) from None

    def converters(self) -> list[RegisteredConverter]:
        """Registered Hugging Face converters, in load order (built-ins first)."""
        return list(self._converters.values())

    @property
    def hook(self) -> Any:
        """The pluggy hook relay, e.g. ``registry.hook.zoo_migrate_checkpoint(...)``."""
        return self.pm.hook


def _origin(info: PluginInfo) -> str:
    if info.distribution:
        return f"distribution {info.distribution} {info.version or ''}".strip()
    return "not from an installed distribution"


_default: Registry | None = None


def default_registry() -> Registry:
    """The registry of all installed plugins, created on first use."""
    global _default
    if _default is None:
        _default = Registry()
    return _default


def set_default_registry(registry: Registry | None) -> Registry | None:
    """Replace the default registry (``None``: rebuild on next use); returns the old one."""
    global _default
    old, _default = _default, registry
    return old
