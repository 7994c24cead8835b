"""The part maker: the configured component of each kind, constructed with explicit arguments.

``PartMaker(config, registry).make("attention")`` looks up the configured attention,
validates its options, and calls its factory (usually the module class itself) with
every argument filled by name, as ``zoo.nn.contracts`` describes: the component's options,
the config's sizes (``CONFIG_ARGUMENTS``) and fresh modules of other kinds (``norm``,
``activation``, ``norm_in``, ...). The model classes use it; ``zoo.build`` is the factory
of whole models.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from zoo.errors import ConfigError
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import CONFIG_ARGUMENTS, Placement, constructor_parameters, part_kind, signature_of
from zoo.nn.registry import Component, Registry, default_registry


def config_arguments(config: ModelConfig) -> dict[str, Any]:
    """The value of each name in ``CONFIG_ARGUMENTS`` for ``config``."""
    values = {
        "config": config,
        "vocab_size": config.vocab_size,
        "max_seq_len": config.max_seq_len,
        "d_model": config.d_model,
        "n_layers": config.n_layers,
        "n_heads": config.n_heads,
        "head_dim": config.head_dim,
        "n_encoder_layers": config.n_encoder_layers,
        "d_ff": config.d_ff,
        "bias": config.bias,
        "norm_eps": config.norm_eps,
        "dropout": config.dropout.residual,
        "attn_dropout": config.dropout.attention,
        "embedding_dropout": config.dropout.embedding,
    }
    assert tuple(values) == CONFIG_ARGUMENTS, "config_arguments and CONFIG_ARGUMENTS disagree"
    return values


def accepts_any_keyword(factory: Callable[..., Any]) -> bool:
    signature = signature_of(factory)
    return signature is not None and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())


class PartMaker:
    """Makes the configured component of each kind for one config: the parts of one model.
    (A registered component is a ``zoo.nn.registry.Component``.)"""

    def __init__(self, config: ModelConfig, registry: Registry | None = None) -> None:
        self.config = config
        self.registry = registry or default_registry()
        self._config_arguments = config_arguments(config)
        self._making: list[str] = []  # kinds being made, outermost first

    def make(self, kind: str, **given: Any) -> Any:
        """A new instance of the configured component of ``kind``; ``given`` constructor
        arguments take the place of what would be filled in (see ``Placement.pair``)."""
        spec = getattr(self.config, kind)
        component = self.registry.get(kind, spec.name)
        if kind in self._making:
            chain = " -> ".join(f"{k} {getattr(self.config, k).name!r}" for k in (*self._making, kind))
            raise ConfigError(
                f"components ask for each other in a cycle: {chain}; configure another {kind} "
                f"or rename the constructor argument named after it"
            )
        options = component.options_model.model_validate(spec.options)
        self._making.append(kind)
        try:
            made = component.factory(**self.arguments(component, options, given))
        finally:
            self._making.pop()
        if isinstance(made, nn.Module):
            made.zoo_kind = kind  # type: ignore[assignment]  # what it was made as: hook points find an MLP's activation by it
        return made

    def placements(self) -> tuple[Placement, Placement]:
        """One layer's placements, around its attention and its MLP, made together by the
        configured placement's ``pair`` (independent ones for a factory that is no class)."""
        # unwrapped: a registry view may wrap the class (zoo.summary records what each factory makes)
        factory = inspect.unwrap(self.registry.get("placement", self.config.placement.name).factory)
        placement = factory if isinstance(factory, type) and issubclass(factory, Placement) else Placement
        return placement.pair(functools.partial(self.make, "placement"))

    def arguments(self, component: Component, options: Any, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """The keyword arguments for ``component``'s factory, filled by name: ``given``
        first, then its options, the config's values, and fresh modules of other kinds."""
        explicit, given = given or {}, {**dict(options), **(given or {})}
        arguments: dict[str, Any] = {}
        for parameter in constructor_parameters(component.factory):
            name = parameter.name
            if name in given:
                arguments[name] = given[name]
            elif name in self._config_arguments:
                arguments[name] = self._config_arguments[name]
            elif (kind := part_kind(name)) is not None:
                arguments[name] = self.make(kind)
            elif parameter.default is parameter.empty:
                raise ConfigError(
                    f"{component.kind} {component.name!r} (plugin {component.plugin.name!r}) takes an "
                    f"argument {name!r} that is neither one of its options nor a config value "
                    f"({', '.join(CONFIG_ARGUMENTS)}) nor a kind of component; give it a default "
                    f"or declare it in the component's options model"
                )
        if accepts_any_keyword(component.factory):  # options it does not name go through **kwargs
            arguments.update((k, v) for k, v in given.items() if k not in arguments)
        unknown = sorted(set(explicit) - set(arguments))
        if unknown:
            raise ConfigError(
                f"{component.kind} {component.name!r} (plugin {component.plugin.name!r}) was made with "
                f"{', '.join(unknown)}, which its constructor does not take; name them in its signature"
            )
        return arguments

    def norm(self) -> nn.Module:
        """A new norm module of the configured kind (the model's final norms use it)."""
        module: nn.Module = self.make("norm")
        return module
