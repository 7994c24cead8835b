"""The wrong-type sweep of the public API (issue 41): every argument of every public call,
given a value of a type its annotation does not name (a list for a path, ``'4'`` for a
count, ``'hot'`` for a temperature), is an ``InputError`` naming the argument and what it
takes, never a raw ``TypeError`` or ``AttributeError`` from deep inside.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
import zoo.ablate
import zoo.decoding
import zoo.probe
import zoo.training
from helpers import tiny
from zoo import ArgumentError, ZooError

MODEL = tiny(vocab_size=256)
IDS = torch.tensor([[1, 2, 3]])
PLACE = "/no-such-folder/placeholder"  # never read: the types are checked before anything runs

# Each public call, with valid values for its required arguments.
CALLS: dict[
    str, tuple[Callable[..., Any], tuple[Any, ...]] | tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
] = {
    name: (getattr(zoo, name), ())
    for name in zoo.__all__
    if inspect.isfunction(getattr(zoo, name)) and name not in ("residual_output", "check_inputs", "os_error")
}
CALLS.update({
    "build": (zoo.build, ("gpt2-small",)), "get_config": (zoo.get_config, ("gpt2-small",)),
    "summarize": (zoo.summarize, ("gpt2-small",)), "save": (zoo.save, (MODEL, PLACE)),
    "load": (zoo.load, (PLACE,)), "versions": (zoo.versions, (PLACE,)), "from_hf": (zoo.from_hf, (PLACE,)),
    "to_hf": (zoo.to_hf, (MODEL, PLACE)), "from_pretrained": (zoo.from_pretrained, (PLACE,)),
    "from_nanogpt": (zoo.from_nanogpt, (PLACE,)), "generate_text": (zoo.generate_text, (MODEL, "x")),
    "train": (zoo.train, (MODEL,)), "evaluate": (zoo.evaluate, (MODEL,)),
    "evaluate_tasks": (zoo.evaluate_tasks, (MODEL, "a-task")),
    "decoding.generate": (zoo.decoding.generate, (MODEL, IDS)), "model.generate": (MODEL.generate, (IDS,)),
    "probe": (zoo.probe.probe, (MODEL, IDS)), "probe_designs": (zoo.probe.probe_designs, ([],)),
    "designs": (zoo.probe.designs, (["gpt2-small"],)), "corpus_batch": (zoo.probe.corpus_batch, (256, 1, 8)),
    "stdlib_corpus": (zoo.training.stdlib_corpus, ()), "read_text": (zoo.training.read_text, (PLACE,)),
    "run_ablation": (zoo.ablate.run_ablation, (), {"out_dir": PLACE}),
    "run_study": (zoo.ablate.run_study, (), {"out_dir": PLACE}),
    "training.prepare": (zoo.training.prepare, ([PLACE], PLACE)),
})  # fmt: skip

# Annotations that say too little to check (``Any``, a callback protocol, ``object``).
UNCHECKED = {
    ("decoding.generate", "tokenizer"),
    ("model.generate", "tokenizer"),
    ("run_ablation", "on_progress"),
    ("run_study", "on_progress"),
}

WRONG: list[Any] = [[], {}, object(), b"x", 1.5, "4", 4]


def _admits(word: str, value: Any) -> bool:
    """Whether one part of an annotation takes ``value`` (by the test's own reading)."""
    head = word.split("[")[0].split(".")[-1]
    if head == "str":
        return isinstance(value, str)
    if head == "int":
        return type(value) is int
    if head == "float":
        return type(value) in (int, float)
    if head in ("Sequence", "list"):
        return isinstance(value, (list, str))
    if head == "Iterable":
        return isinstance(value, (list, str, dict))
    if head in ("Mapping", "dict"):
        return isinstance(value, dict)
    return False  # None, a path, a tensor, a module, a zoo class: nothing in WRONG


def _parameters(call: str) -> list[tuple[str, str]]:
    function = CALLS[call][0]
    if call == "model.generate":  # its keywords are decoding.generate's
        function = zoo.decoding.generate
    found = []
    for parameter in inspect.signature(function).parameters.values():
        words = zoo.errors._alternatives(str(parameter.annotation))
        if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL) or "bool" in words:
            continue  # flags: test_api_types
        if (
            "Any" in words
            or (call, parameter.name) in UNCHECKED
            or (call, parameter.name) == ("model.generate", "model")
        ):
            continue
        found.append((parameter.name, str(parameter.annotation)))
    return found


CASES = [
    (call, name, value)
    for call in CALLS
    for name, annotation in _parameters(call)
    for value in WRONG
    if not any(_admits(word, value) for word in zoo.errors._alternatives(annotation))
]


def test_the_sweep_covers_the_calls_and_arguments_users_reach_for() -> None:
    covered = {(call, name) for call, name, _ in CASES}
    assert {("model.generate", "num_beams"), ("generate_text", "temperature"), ("decoding.generate", "max_new_tokens"),
            ("build", "device"), ("load", "version"), ("train", "settings"), ("training.prepare", "workers"),
            ("evaluate_tasks", "limit"), ("probe", "tokens"), ("run_ablation", "base"), ("to_hf", "model")} <= covered  # fmt: skip
    assert len(covered) > 120


def _id(value: Any) -> str:
    """A case's id, the same in every xdist worker (an ``object()``'s repr holds its address)."""
    return value if isinstance(value, str) else "object" if type(value) is object else repr(value)


@pytest.mark.parametrize(("call", "name", "value"), CASES, ids=_id)
def test_a_wrong_type_is_an_input_error_naming_the_argument(call: str, name: str, value: Any) -> None:
    function, required, *given = CALLS[call]
    signature = inspect.signature(zoo.decoding.generate if call == "model.generate" else function)
    names = list(signature.parameters)[1:] if call == "model.generate" else list(signature.parameters)
    args, keywords = list(required), dict(given[0]) if given else {}
    if name in names[: len(args)]:
        args[names.index(name)] = value
    else:
        keywords[name] = value
    with pytest.raises(ZooError, match=rf"\b{name}\b"):  # checked_types' words, or the function's own check
        function(*args, **keywords)


@pytest.mark.parametrize(
    ("keywords", "name"),
    [({"num_beams": "4"}, "num_beams"), ({"max_new_tokens": "5"}, "max_new_tokens"),
     ({"temperature": "hot", "do_sample": True}, "temperature"), ({"max_new_tokens": 2.0}, "max_new_tokens")],
)  # fmt: skip
def test_the_strings_a_number_belongs_in_are_named(keywords: dict[str, Any], name: str) -> None:
    for call in (lambda: MODEL.generate(IDS, **keywords), lambda: zoo.generate_text(MODEL, "x", **keywords)):
        with pytest.raises(ZooError, match=rf"^{name} must be an integer|^{name} must be a number"):
            call()


def test_valid_values_of_every_kind_still_pass() -> None:
    assert zoo.generate_text(MODEL, "x", max_new_tokens=2, temperature=1, tokenizer="bytes") is not None
    assert MODEL.generate(IDS, 2, num_beams=2).shape == (1, 5)
    assert MODEL.generate(IDS, max_new_tokens=1, temperature=2, do_sample=True, top_p=1).shape == (1, 4)
    assert zoo.get_config("gpt2-small", registry=None).d_model == 768
    assert zoo.list_models("gpt2-s*") == ["gpt2-small", *zoo.list_models("gpt2-small-*")]


@pytest.mark.parametrize("shape", [(3,), (1, 3)])
@pytest.mark.parametrize("call", ["model.generate", "decoding.generate"])
def test_ids_on_the_meta_device_are_an_input_error(call: str, shape: tuple[int, ...]) -> None:
    ids = torch.ones(shape, dtype=torch.long, device="meta")
    with pytest.raises(zoo.InputError, match=r"input_ids are on the meta device .*give real token ids .* cpu"):
        MODEL.generate(ids, 2) if call == "model.generate" else zoo.decoding.generate(MODEL, ids, 2)


def _decorated() -> set[str]:
    """The names of every function zoo/ decorates with ``checked_types``, from its source."""
    root = Path(zoo.__file__).parent
    found = re.compile(r"@checked_types\([^)]*\)\n(?:    )?def (\w+)")
    return {name for path in root.rglob("*.py") for name in found.findall(path.read_text(encoding="utf-8"))}


def _required(call: str) -> list[str]:
    function = CALLS[call][0]
    parameters = inspect.signature(function).parameters.values()
    return [p.name for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


MISSING = [(call, name) for call in CALLS for name in _required(call)]


def test_the_missing_argument_sweep_covers_every_checked_function() -> None:
    covered = {CALLS[call][0].__name__ for call in CALLS}
    assert _decorated() <= covered, _decorated() - covered
    assert {("run_ablation", "out_dir"), ("save", "path"), ("model.generate", "input_ids")} <= set(MISSING)


@pytest.mark.parametrize(("call", "name"), MISSING)
def test_a_missing_required_argument_is_an_argument_error_naming_it(call: str, name: str) -> None:
    """Every required argument of every checked call left out: an ``ArgumentError`` (a
    ``ZooError``, and a ``TypeError`` as Python's own is) naming it and how to give it."""
    function, required, *given = CALLS[call]
    names = list(inspect.signature(function).parameters)
    keywords = {**dict(zip(names, required)), **(given[0] if given else {})}
    del keywords[name]
    with pytest.raises(ArgumentError, match=rf"needs the argument {name}\b.*give {name}=") as raised:
        function(**keywords)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ZooError)


@pytest.mark.parametrize(
    ("call", "message"),
    [(lambda: zoo.list_models("a", "b"), r"list_models\(\) takes at most 1 positional argument\(s\) \(pattern\), got 2"),
     (lambda: zoo.save(MODEL, PLACE, metdata={}), r"save\(\) takes no argument 'metdata'\. Did you mean 'metadata'"),
     (lambda: zoo.probe.probe(MODEL, IDS, tokenz=1), r"probe\(\) takes no argument .tokenz.\. Did you mean .tokens.")],
)  # fmt: skip
def test_an_unknown_or_extra_argument_is_an_argument_error(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        call()
