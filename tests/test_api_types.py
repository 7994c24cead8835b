"""Strict types at the public API (issue 29, item 5): every boolean parameter of the
functions ``zoo`` exports takes True or False only, and an argument that does not apply
to what was passed is refused, not ignored.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import zoo
from helpers import tiny
from zoo import ConfigError, InputError, ZooError


def _public_functions() -> dict[str, Callable[..., Any]]:
    """The functions ``zoo`` exports, and the public methods the zoo's model classes define
    themselves (``DecoderLM.run_with_cache``; not torch's own ``nn.Module`` methods)."""
    found = {name: getattr(zoo, name) for name in zoo.__all__ if inspect.isfunction(getattr(zoo, name))}
    for cls in (zoo.DecoderLM, zoo.EncoderDecoder):
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_") and method.__module__.startswith("zoo."):
                found[f"{cls.__name__}.{name}"] = method
    return found


FUNCTIONS = _public_functions()


def _boolean_parameters() -> list[tuple[str, str, str]]:
    """``(function, parameter, annotation)`` of every public function's parameter typed
    with ``bool``, found from the signatures, so a new one is covered without a list."""
    found = []
    for name, function in FUNCTIONS.items():
        for parameter in inspect.signature(function).parameters.values():
            if "bool" in str(parameter.annotation).split(" | "):
                found.append((name, parameter.name, str(parameter.annotation)))
    return found


BOOLEANS = _boolean_parameters()


def test_the_boolean_parameters_are_found() -> None:
    names = {(function, parameter) for function, parameter, _ in BOOLEANS}
    assert {("generate_text", "stop_at_eot"), ("from_hf", "allow_nonfinite"), ("load", "verify")} <= names
    assert ("build", "pretrained") in names and ("train", "resume") in names
    assert ("DecoderLM.run_with_cache", "detach") in names and ("DecoderLM.forward", "last_only") in names


PLACEHOLDER = "/no-such-folder/placeholder"  # no path, hub id or preset: nothing is read or downloaded


def _call(function: Callable[..., Any], **keywords: Any) -> Any:
    """``function`` with a placeholder for each required positional argument: the flags
    are checked before anything else, so the placeholders are never looked at."""
    required = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return function(*[_placeholder(str(p.annotation)) for p in required], **keywords)


def _placeholder(annotation: str) -> Any:
    """A value of the type a required argument takes (the types are checked first, by
    ``checked_types``): a tiny model for a module, else a path that is never read."""
    return MODEL if annotation.startswith(("nn.Module", "torch.nn.Module")) else PLACEHOLDER


MODEL = tiny(vocab_size=256)


# Truthy strings and numbers; a parameter that also takes a path or None (train's resume) gets the numbers.
NOT_BOOLEANS = [
    (function, parameter, value)
    for function, parameter, annotation in BOOLEANS
    for value in ("no", "False", 1, 0, None, 1.0)
    if annotation == "bool" or not (value is None or isinstance(value, str))
]


@pytest.mark.parametrize(("function", "parameter", "value"), NOT_BOOLEANS, ids=str)
def test_every_boolean_parameter_refuses_what_is_not_a_boolean(function: str, parameter: str, value: Any) -> None:
    with pytest.raises(InputError, match=rf"^{parameter} must be True(, False, None)? or"):
        _call(FUNCTIONS[function], **{parameter: value})


@pytest.mark.parametrize(("function", "parameter", "annotation"), BOOLEANS, ids=str)
@pytest.mark.parametrize("value", [True, False])
def test_true_and_false_pass_the_check(
    function: str, parameter: str, annotation: str, value: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:  # the placeholders then fail further on, but not on the flag
        _call(FUNCTIONS[function], **{parameter: value})
    except Exception as err:  # noqa: BLE001  any later refusal of the placeholders is fine
        assert not str(err).startswith(f"{parameter} must be True"), err


def test_a_loaded_model_takes_no_revision_or_version(tmp_path: Any) -> None:
    model = tiny(vocab_size=256)
    with pytest.raises(InputError, match=r"^revision must be a string or None, got int 5; give revision="):
        zoo.generate_text(model, "x", revision=5, max_new_tokens=1)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"revision='main' .*drop revision"):
        zoo.generate_text(model, "x", revision="main", max_new_tokens=1)
    from zoo.pipelines import load_model

    with pytest.raises(InputError, match=r"version=2 picks what to load"):
        load_model(model, version=2)
    assert zoo.generate_text(model, "x", max_new_tokens=1, tokenizer="bytes") is not None  # without them it runs


@pytest.mark.parametrize("source", ["bytes", "loaded"])
def test_a_tokenizer_without_versions_takes_no_revision(source: str) -> None:
    given = zoo.tokenizer("bytes") if source == "loaded" else source
    with pytest.raises(ConfigError, match=r"revision='v1' picks a hub id's version.*drop revision"):
        zoo.tokenizer(given, revision="v1")


@pytest.mark.parametrize(
    ("call", "match"),
    [(lambda: zoo.build("gpt2-small", revision="main"), "pass it with pretrained=True"),
     (lambda: zoo.load("placeholder.safetensors", version=2), "not a directory"),
     (lambda: zoo.from_pretrained("./a-folder", revision="main"), "is a local path; drop revision")],
)  # fmt: skip
def test_the_other_arguments_that_do_not_apply_are_refused(call: Callable[[], Any], match: str) -> None:
    with pytest.raises(ZooError, match=match):
        call()


@pytest.mark.parametrize(
    ("options", "match"),
    [({"on_text": 5}, "on_text must be a function"), ({"temperature": "hot", "do_sample": True}, "temperature must be a number"),
     ({"top_k": -1}, "top_k must be a positive integer"), ({"top_p": 2.0}, r"top_p must be in \(0, 1\]"),
     ({"repetition_penalty": float("nan")}, "repetition_penalty must be a finite number"),
     ({"seed": "1"}, "seed must be an integer")],
)  # fmt: skip
def test_generate_text_refuses_its_options_before_loading_the_model(
    tmp_path: Any, options: dict[str, Any], match: str
) -> None:
    missing = tmp_path / "no-such-checkpoint.safetensors"  # loading it would be a CheckpointError
    with pytest.raises(InputError, match=match):
        zoo.generate_text(missing, "x", **options)
