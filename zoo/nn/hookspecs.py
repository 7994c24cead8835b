"""The hooks a zoo plugin implements.

A plugin is any module or object with functions named like the hooks below, decorated
with ``zoo.hookimpl``. Built-in components (``zoo.plugins.*``) use exactly these hooks;
a third-party package exposes its plugin module under the entry-point group ``zoo``::

    [project.entry-points.zoo]
    my_plugin = "my_pkg.zoo_plugin"

Registration uses callbacks, as in pytest and llm: the host passes ``register`` and the
plugin calls it once per thing it contributes. The host knows which plugin is calling,
so every component and preset records the distribution that provided it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from pydantic import BaseModel

PROJECT = "zoo"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class RegisterComponent(Protocol):
    """``register(kind, name, factory, options_model=None, *, check=None)``.

    - ``kind``: one of ``zoo.KINDS`` (attention, norm, placement, activation, position,
      mlp, init).
    - ``factory``: usually the module class itself (for ``init``, a function returning
      ``init(model)``). The model calls it with keyword arguments filled by name: its
      options; config values (``d_model``, ``n_heads``, ``head_dim``, ``d_ff``, ``bias``,
      ``norm_eps``, ``dropout``, ``attn_dropout``, ... see ``zoo.nn.contracts.CONFIG_ARGUMENTS``);
      and a fresh module of another kind for an argument named after it (``norm``,
      ``activation``, ``norm_in``). An argument it cannot fill needs a default.
    - ``options_model``: a pydantic model for this component's own options (they sit
      beside ``name`` in the config, e.g. ``{"name": "gqa", "n_kv_heads": 2}``). Default:
      the factory's ``Options`` attribute, else one derived from its signature (every
      argument that is not filled from the config or another kind).
    - ``check(config, options)``: optional cross-field check; raise ``ValueError`` with
      a message naming the field and the fix.
    """

    def __call__(
        self,
        kind: str,
        name: str,
        factory: Callable[..., Any],
        options_model: type[BaseModel] | None = None,
        *,
        check: Callable[[Any, Any], None] | None = None,  # (ModelConfig, options); hookspecs sits below config
    ) -> None: ...


class RegisterPreset(Protocol):
    """``register(name, source, *, description="")``.

    ``source`` is a TOML file (a path, or a package resource from ``importlib.resources``),
    a mapping of config fields, or a ``ModelConfig``.
    Presets are validated when first used, so a broken one fails alone, naming its file.
    """

    def __call__(
        self, name: str, source: Path | Traversable | dict[str, Any] | BaseModel, *, description: str = ""
    ) -> None: ...


class RegisterConverter(Protocol):
    """``register(converter)``: one Hugging Face architecture, read and maybe written.

    ``converter`` is a ``zoo.nn.converter.Converter`` (subclass it): its
    ``architecture`` (``config.json``'s ``architectures[0]``, e.g. ``"LlamaForCausalLM"``)
    and ``model_type`` pick it, ``config_from_hf`` maps ``config.json`` to zoo config
    fields (raising ``InteropError`` for any setting it does not model), ``rules`` map
    weight names and layouts both ways, and ``config_to_hf`` (optional) writes one.
    """

    def __call__(self, converter: Any) -> None: ...


class ZooSpec:
    """Hook specifications; see each method for when it is called."""

    @hookspec
    def zoo_register_components(self, register: RegisterComponent) -> None:
        """Register components. Called once per plugin when a ``Registry`` is created.

        Call ``register`` for each component the plugin provides. Registering a
        (kind, name) that another plugin already registered is a
        ``DuplicateComponentError`` naming both; that plugin is then not loaded.
        Returns nothing; all results of all plugins are collected.
        """

    @hookspec
    def zoo_register_presets(self, register: RegisterPreset) -> None:
        """Register presets (named configs). Called once per plugin, right after its
        own components; a preset is validated when first used, so it may name components
        of plugins that load later. Returns nothing."""

    @hookspec
    def zoo_register_converters(self, register: RegisterConverter) -> None:
        """Register Hugging Face converters (see ``RegisterConverter``). Called once per
        plugin, after its presets. ``zoo.from_hf`` and ``zoo.to_hf`` dispatch on the
        architecture; registering one another plugin already registered is a
        ``DuplicateComponentError`` naming both. Returns nothing."""

    @hookspec
    def zoo_migrate_checkpoint(
        self, metadata: dict[str, str], tensors: dict[str, Any], from_format: int
    ) -> tuple[dict[str, str], dict[str, Any]] | None:
        """Upgrade a checkpoint written in layout ``from_format`` by one step.

        Called by ``zoo.load`` (and ``zoo.checkpoint.inspect``) for a file whose
        ``zoo.format`` is older than the current one, once per step from the file's
        format up to the current one, after the file's digest is verified. At each step
        the plugins are asked in load order (built-ins, entry points, extra plugins),
        each receiving what the previous one returned, so the zoo's own layout change
        and a plugin's upgrade of its component options can share a step. Not
        firstresult.

        ``metadata`` holds the header's strings (``zoo.config`` is JSON); ``tensors``
        maps names to memory-mapped tensors, read only when touched. Return
        ``(metadata, tensors)`` upgraded to ``from_format + 1`` as new mappings (never
        mutate the arguments), or ``None`` when this plugin has nothing to do at this
        step. ``zoo.format`` is set by the zoo. A step that no plugin handles is a
        ``CheckpointError``; so is an exception raised here, naming the plugin.
        """
