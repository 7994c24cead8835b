"""The registry: plugins register through hooks; failures are contained and named."""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from torch import nn

import zoo
from helpers import TINY


def plugin(name: str, **hooks) -> types.ModuleType:
    """An inline plugin module with the given hook implementations."""
    obj = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(obj, hook_name, zoo.hookimpl(fn))
    return obj


def tanh_factory():
    """Tanh, for tests."""
    return nn.Tanh()


def registers_tanh(register) -> None:
    register("activation", "tanh", tanh_factory)


def test_builtins_register_through_the_same_hooks() -> None:
    registry = zoo.Registry(entry_points=False)
    builtins = {p.name for p in registry.plugins if p.builtin}
    assert "zoo.plugins.attention" in builtins
    assert all(p.status == "loaded" for p in registry.plugins)
    for component in registry.components():
        assert component.plugin.distribution == "zoo-lm"
    assert {c.kind for c in registry.components()} == set(zoo.KINDS)


def test_inline_plugin_adds_a_component_usable_in_a_build() -> None:
    registry = zoo.Registry(entry_points=False, plugins=[plugin("tanh-plugin", zoo_register_components=registers_tanh)])
    component = registry.get("activation", "tanh")
    assert component.plugin.name == "tanh-plugin" and component.plugin.distribution is None
    model = zoo.build("gpt2-small", registry=registry, activation="tanh", **TINY)
    assert isinstance(model.blocks[0].mlp.act, nn.Tanh)
    # The default registry is untouched: registries are independent.
    with pytest.raises(zoo.UnknownComponentError):
        zoo.default_registry().get("activation", "tanh")


def test_a_plugin_that_raises_while_registering_is_contained() -> None:
    def broken(register) -> None:
        register("activation", "half-done", tanh_factory)
        raise RuntimeError("boom")

    with pytest.warns(RuntimeWarning, match="boom"):
        registry = zoo.Registry(
            entry_points=False,
            plugins=[
                plugin("broken-plugin", zoo_register_components=broken),
                plugin("good", zoo_register_components=registers_tanh),
            ],
        )
    failed = [p for p in registry.plugins if p.status == "failed"]
    assert [p.name for p in failed] == ["broken-plugin"]
    assert isinstance(failed[0].error, zoo.PluginError)
    assert "broken-plugin" in str(failed[0].error) and "RuntimeError: boom" in str(failed[0].error)
    assert isinstance(failed[0].error.__cause__, RuntimeError)
    # Its partial registration was rolled back; the other plugin still works.
    with pytest.raises(zoo.UnknownComponentError, match="broken-plugin"):
        registry.get("activation", "half-done")
    assert registry.get("activation", "tanh").plugin.name == "good"


def test_strict_registry_raises_the_plugin_error() -> None:
    def broken(register) -> None:
        raise ValueError("bad plugin")

    with pytest.raises(zoo.PluginError, match="bad plugin"):
        zoo.Registry(entry_points=False, strict=True, plugins=[plugin("broken", zoo_register_components=broken)])


def test_duplicate_component_names_both_plugins() -> None:
    def steals_relu(register) -> None:
        register("activation", "relu", tanh_factory)

    with pytest.warns(RuntimeWarning):
        registry = zoo.Registry(entry_points=False, plugins=[plugin("thief", zoo_register_components=steals_relu)])
    failure = next(p for p in registry.plugins if p.status == "failed")
    message = str(failure.error)
    assert "'relu'" in message and "zoo.plugins.activations" in message and "thief" in message
    assert isinstance(failure.error.__cause__, zoo.DuplicateComponentError)
    # The built-in keeps its name.
    assert registry.get("activation", "relu").plugin.name == "zoo.plugins.activations"
    with pytest.raises(zoo.DuplicateComponentError):
        zoo.Registry(entry_points=False, strict=True, plugins=[plugin("thief", zoo_register_components=steals_relu)])


def test_registering_an_unknown_kind_or_bad_factory_fails_the_plugin() -> None:
    def bad_kind(register) -> None:
        register("normalisation", "x", tanh_factory)

    with pytest.warns(RuntimeWarning, match="unknown component kind"):
        registry = zoo.Registry(entry_points=False, plugins=[plugin("bad-kind", zoo_register_components=bad_kind)])
    assert registry.plugins[-1].status == "failed"


def test_a_hook_with_a_wrong_signature_is_a_plugin_error() -> None:
    def wrong(register, extra) -> None:  # pluggy rejects arguments the spec does not have
        pass

    with pytest.warns(RuntimeWarning):
        registry = zoo.Registry(entry_points=False, plugins=[plugin("wrong-sig", zoo_register_components=wrong)])
    assert registry.plugins[-1].status == "failed"


def test_plugin_presets_register_and_validate_lazily() -> None:
    def presets(register) -> None:
        register("tiny-test", {**TINY, "activation": "relu"}, description="a tiny model")
        register("tiny-broken", {**TINY, "activation": "nope"})
        register("tiny-child", {"n_layers": 1, "preset": {"extends": "tiny-test"}})

    registry = zoo.Registry(entry_points=False, plugins=[plugin("presets", zoo_register_presets=presets)])
    assert {"tiny-test", "tiny-broken", "tiny-child"} <= set(registry.preset_names())
    assert zoo.get_config("tiny-test", registry=registry).activation.name == "relu"
    child = zoo.get_config("tiny-child", registry=registry)
    assert (child.n_layers, child.activation.name) == (1, "relu")
    with pytest.raises(zoo.UnknownComponentError, match="nope"):
        zoo.get_config("tiny-broken", registry=registry)


def test_preset_cycle_is_a_preset_error() -> None:
    def presets(register) -> None:
        register("a", {"preset": {"extends": "b"}})
        register("b", {"preset": {"extends": "a"}})

    registry = zoo.Registry(entry_points=False, plugins=[plugin("cycle", zoo_register_presets=presets)])
    with pytest.raises(zoo.PresetError, match="cycle"):
        zoo.get_config("a", registry=registry)


def test_plugin_allow_list_and_deny_list_skip_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_PLUGINS", "none")
    registry = zoo.Registry()
    assert all(p.builtin or p.status == "skipped" for p in registry.plugins)
    registry = zoo.Registry(deny=[p.name for p in zoo.default_registry().plugins if not p.builtin])
    assert all(p.builtin or p.status == "skipped" for p in registry.plugins)


def test_unknown_kind_in_components_lookup() -> None:
    with pytest.raises(zoo.RegistryError, match="unknown component kind 'norms'. Did you mean 'norm'"):
        zoo.components("norms")


def test_fresh_registries_do_not_share_state() -> None:
    a = zoo.Registry(entry_points=False, plugins=[plugin("t", zoo_register_components=registers_tanh)])
    b = zoo.Registry(entry_points=False)
    assert a.get("activation", "tanh").plugin.name == "t"
    with pytest.raises(zoo.UnknownComponentError):
        b.get("activation", "tanh")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zoo.Registry(entry_points=False)  # built-ins alone load without any warning
    torch.manual_seed(0)


def test_a_misspelled_hook_name_fails_the_plugin_with_a_suggestion() -> None:
    # pluggy alone would accept an implementation of an unknown hook and never call it.
    typo = plugin("typo", zoo_register_component=registers_tanh)
    with pytest.warns(RuntimeWarning, match="'zoo_register_component' is not a zoo hook"):
        registry = zoo.Registry(entry_points=False, plugins=[typo])
    [info] = [p for p in registry.plugins if p.name == "typo"]
    assert info.status == "failed" and isinstance(info.error, zoo.PluginError)
    assert "Did you mean 'zoo_register_components'" in str(info.error)
    assert not registry.pm.is_registered(typo)  # rolled back
    with pytest.raises(zoo.PluginError, match="is not a zoo hook"):
        zoo.Registry(entry_points=False, plugins=[plugin("typo", zoo_register_component=registers_tanh)], strict=True)


def test_a_plugin_failing_in_any_hook_leaves_the_plugins_after_it_loaded() -> None:
    """A failure rolls back that plugin only: the next one registers its presets and
    components as if the failed one had never been there."""

    class FailsAtPresets:
        @zoo.hookimpl
        def zoo_register_components(self, register: zoo.RegisterComponent) -> None:
            register("activation", "never-seen", torch.nn.ReLU)

        @zoo.hookimpl
        def zoo_register_presets(self, register: zoo.RegisterPreset) -> None:
            raise ValueError("boom")

    class Good:
        @zoo.hookimpl
        def zoo_register_components(self, register: zoo.RegisterComponent) -> None:
            register("activation", "after-the-failure", torch.nn.ReLU)

        @zoo.hookimpl
        def zoo_register_presets(self, register: zoo.RegisterPreset) -> None:
            register("after-the-failure", {"n_layers": 1, "d_model": 32, "n_heads": 2, "vocab_size": 256})

    with pytest.warns(RuntimeWarning, match="boom"):
        registry = zoo.Registry(entry_points=False, plugins=[FailsAtPresets(), Good()])
    assert [p.status for p in registry.plugins[-2:]] == ["failed", "loaded"]
    assert "after-the-failure" in registry.preset_names()
    assert registry.get("activation", "after-the-failure").factory is torch.nn.ReLU
    assert not [c for c in registry.components("activation") if c.name == "never-seen"]  # rolled back
