"""Checks of lm-evaluation-harness tasks, before and while they run (``zoo.harness``).

- the Python a task of ``--include-path`` names (``!function``, a task ``class``, a ``.py``
  beside its YAML) is refused before lm-eval imports it (``refuse_task_code``);
- a task's generation settings are checked before any request runs
  (``check_generation``): ``temperature: 'hot'`` is a line naming the task and the key;
- a task's data that cannot be read (a missing data file, a damaged file or datasets
  cache, a hub dataset not cached while offline) is one ``InputError`` naming the task and
  the fix (``task_data_error``), from loading (``CheckedTasks``) and from iterating.

lm-eval is imported only where these run: the module imports without it.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.errors import InputError, ZooError, os_error, printable, quoted
from zoo.files import read_bytes

#: How lm-eval's YAML names Python: a function tag, or a task class.
FUNCTION_TAG = "!function"
#: Bytes of one task YAML file read for the check (lm-eval's own are a few kilobytes).
TASK_YAML_LIMIT = 16 << 20


def refuse_task_code(index: Mapping[str, Any], names: Sequence[str], folder: Path) -> None:
    """An ``InputError`` naming the first of ``names`` (tasks, groups or tags of the
    folder's index) whose YAML names Python: a ``!function`` tag or a ``class`` in it or
    in a file it includes, or a ``.py`` file beside one of them (lm-eval imports it)."""
    for name in names:
        if name not in index:
            continue  # one of lm-eval's own tasks: installed code, not the folder's
        for file in _task_files(index, name, set()):
            reason = _python_in(file, set())
            if reason is not None:
                raise InputError(
                    f"the task {quoted(name)} from --include-path {quoted(str(folder))} runs Python ({reason}); "
                    f"run it only if you trust that code: add --trust-task-code (trust_task_code=True)"
                )


def _task_files(index: Mapping[str, Any], name: str, seen: set[str]) -> list[Path]:
    """The YAML files that define ``name`` in lm-eval's index: its own, its group's
    tasks' and its tag's tasks', each once."""
    if name in seen or name not in index:
        return []
    seen.add(name)
    entry = index[name]
    files = [Path(entry.yaml_path)] if entry.yaml_path is not None else []
    members: list[Any] = sorted(entry.tags) if getattr(entry.kind, "name", "") == "TAG" else []
    listed = (entry.cfg or {}).get("task") if getattr(entry.kind, "name", "") == "GROUP" else None
    for item in listed if isinstance(listed, list) else []:
        members.append(item.get("task") if isinstance(item, Mapping) else item)
    for member in members:
        if isinstance(member, str):
            files += _task_files(index, member, seen)
    return files


def _python_in(file: Path, seen: set[Path]) -> str | None:
    """How ``file`` (a task's YAML) or a file it includes names Python, or None."""
    file = file.resolve()
    if file in seen or not file.is_file():
        return None
    seen.add(file)
    beside = sorted(path.name for path in file.parent.glob("*.py"))
    if beside:
        return f"{printable(beside[0])} beside {printable(file.name)}"
    text = read_bytes(file, InputError, "task YAML file", limit=TASK_YAML_LIMIT).decode("utf-8", errors="replace")
    if FUNCTION_TAG in text:
        return f"{FUNCTION_TAG} in {printable(file.name)}"
    config = _plain_yaml(text)
    if "class" in config:
        return f"a task class in {printable(file.name)}"
    included = config.get("include")
    for other in included if isinstance(included, list) else [included]:
        if isinstance(other, str):
            reason = _python_in(file.parent / other, seen)
            if reason is not None:
                return reason
    return None


def _plain_yaml(text: str) -> dict[str, Any]:
    """A YAML file's top-level mapping, tags read as plain values (nothing constructed)."""
    import yaml  # type: ignore[import-untyped]  # lm-eval's own dependency, without type information

    class Plain(yaml.SafeLoader):  # type: ignore[misc]  # yaml ships no type information here
        pass

    Plain.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        loaded = yaml.load(text, Loader=Plain)  # noqa: S506 - a SafeLoader: plain data only
    except yaml.YAMLError:
        return {}  # lm-eval skips a file it cannot read
    return loaded if isinstance(loaded, dict) else {}


def _number(least: float, most: float = math.inf, *, above: bool = False) -> Callable[[object], bool]:
    def fits(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        return (value > least if above else value >= least) and value <= most

    return fits


def _count(least: int) -> Callable[[object], bool]:
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= least


def _stops(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(stop, str) for stop in value))


#: What each key of a task's ``generation_kwargs`` takes (lm-eval's names), in words; None is
#: "not set" where lm-eval reads it so (``do_sample``, ``top_k``, ``top_p``, the penalty).
GENERATION_RULES: dict[str, tuple[Callable[[object], bool], str, bool]] = {
    "until": (_stops, "a stop string or a list of them", False),
    "max_gen_toks": (_count(1), "an integer >= 1", False),
    "max_new_tokens": (_count(1), "an integer >= 1", False),
    "max_tokens": (_count(1), "an integer >= 1", False),
    "do_sample": (lambda value: isinstance(value, bool), "true or false", True),
    "temperature": (_number(0.0), "a number >= 0", False),
    "top_k": (_count(0), "an integer >= 0", True),
    "top_p": (_number(0.0, 1.0, above=True), "a number above 0 and at most 1", True),
    "repetition_penalty": (_number(0.0, above=True), "a number above 0", True),
}


def check_generation(task: object, settings: object) -> None:
    """An ``InputError`` naming ``task`` and the key, unless its ``generation_kwargs`` are
    ones the zoo model takes, each of the type and range it takes."""
    name = quoted(printable(task if task is not None else "?", 80))
    if not isinstance(settings, Mapping):
        raise InputError(f"the task {name} has generation_kwargs {quoted(settings, 60)}, not a mapping; fix its YAML")
    unknown = sorted(str(key) for key in settings if key not in GENERATION_RULES)
    if unknown:
        raise InputError(
            f"the generation_kwargs {', '.join(map(quoted, unknown))} of the task {name} are not ones the zoo model "
            f"knows; it takes {', '.join(GENERATION_RULES)}: fix its YAML"
        )
    for key, value in settings.items():
        fits, words, nullable = GENERATION_RULES[key]
        if not (fits(value) or (nullable and value is None)):
            raise InputError(
                f"the task {name} sets generation_kwargs {key} to {quoted(value, 60)}; it must be {words}: "
                f"fix it in the task's YAML"
            )


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _said(err: BaseException) -> str:
    return printable(f"{type(err).__name__}: {err}", 240)


def _offline() -> bool:
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes", "on") for name in OFFLINE)


#: The variables that keep the hub's clients offline.
OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
#: Exceptions that mean a task's data could not be read (the names of their classes, so
#: that neither pyarrow nor datasets is imported to test them).
DAMAGED = ("ArrowException", "DatasetGenerationError", "UnicodeDecodeError", "JSONDecodeError", "ParserError")


def task_data_error(task: str | Sequence[str], err: BaseException) -> ZooError | None:
    """The ``InputError`` for ``err``, met while loading or reading the task ``task``'s
    data (or one of several tasks', met after loading), naming the task and the fix; None
    for an error that is not about its data."""
    chain = list(_chain(err))
    if any(isinstance(e, ZooError) for e in chain):
        return None  # the zoo's own error says it already
    name = " or ".join(quoted(printable(one, 80)) for one in ([task] if isinstance(task, str) else task))
    said = _said(err)
    if any(isinstance(e, ConnectionError) for e in chain):
        if _offline():
            return InputError(
                f"the task {name} needs data from the Hugging Face hub that is not in the cache, and "
                f"{' / '.join(OFFLINE)} forbid downloading it ({said}); run it once online (unset them) to cache "
                f"the data, or point the task's YAML (dataset_path) at a local copy"
            )
        return InputError(
            f"the task {name} cannot download its data ({said}); check the network (or HF_ENDPOINT), or set "
            f"HF_DATASETS_OFFLINE=1 to use a cached copy"
        )
    if any(isinstance(e, FileNotFoundError) for e in chain):
        return InputError(
            f"the task {name} cannot find its data ({said}); fix dataset_path or dataset_kwargs.data_files in its "
            f"YAML, or put the file where it says"
        )
    failed = [e for e in chain if isinstance(e, OSError) and e.errno is not None]
    if failed:  # the disk's error (full, read-only, permission): os_error's words and fix
        return os_error(failed[-1], "read or cache the data of the task", name, InputError)
    # pyarrow's own errors (ArrowInvalid, and the OSError it raises without an errno), datasets' wrapper
    damaged = [e for e in chain if isinstance(e, OSError) or any(c.__name__ in DAMAGED for c in type(e).__mro__)]
    if damaged:
        said = _said(damaged[-1])  # the first cause: ArrowInvalid's words, not datasets' wrapper's
        return InputError(
            f"the data of the task {name} is damaged ({said}); fix or replace its data file, or delete its copy in the "
            f"datasets cache (the task's dataset_kwargs.cache_dir, else HF_DATASETS_CACHE) so it is read again"
        )
    return None


@functools.cache
def checked_tasks() -> type:
    """lm-eval's ``TaskManager`` whose loading checks every task's generation settings
    (``check_generation``, on its whole config before lm-eval reads it) and names the task
    whose data cannot be read (``task_data_error``)."""
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._factory import TaskFactory

    class CheckedFactory(TaskFactory):  # type: ignore[misc]  # lm_eval ships no type information
        def _load_full_config(self, entry: Any, overrides: Any = None) -> Any:
            config = super()._load_full_config(entry, overrides)
            if "generation_kwargs" in config:
                check_generation(config.get("task", entry.name), config["generation_kwargs"])
            return config

    class CheckedTasks(TaskManager):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made: Any = self.__dict__["_factory"]  # lm-eval's, holding the metadata every task gets
            self._factory = CheckedFactory(meta=made._meta)

        def _load_spec(self, spec: Any) -> Any:
            try:
                return super()._load_spec(spec)
            except Exception as err:
                found = task_data_error(spec if isinstance(spec, str) else str(spec.get("task", spec)), err)
                if found is None:
                    raise
                raise found from err

    return CheckedTasks
