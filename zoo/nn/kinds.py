"""The kinds of component, declared once and torch-free, so that ``zoo components -h``
lists them without importing the model (``zoo.nn.contracts`` says what each promises)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComponentKind:
    """One kind of component: its name (a config field, the ``kind`` of ``register``), the
    component a config uses when it names none, and whether it is a module another
    constructor may ask for by argument name (``init`` is applied to the model instead)."""

    name: str
    default: str
    part: bool = True


#: Every kind of component, declared once: ``KINDS``, ``PART_KINDS``, the config's spec
#: classes and fields and the ablation's axes derive from it, in this order. A new kind is
#: one entry here, plus what its components promise (``zoo.nn.contracts``) for the model to use.
COMPONENT_KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("attention", "sdpa"),
    ComponentKind("norm", "layernorm"),
    ComponentKind("placement", "pre"),
    ComponentKind("activation", "gelu"),
    ComponentKind("position", "learned"),
    ComponentKind("mlp", "standard"),
    ComponentKind("init", "gpt2", part=False),
)

#: The kinds of component by name, in their order (the registry's ``KINDS``).
KINDS: tuple[str, ...] = tuple(kind.name for kind in COMPONENT_KINDS)
