"""One source per option (zoo/ablate/options.py): every field of ``Options`` and
``StudyOptions`` is a ``zoo ablate`` flag whose ``-h`` states its default, is named by the
repeat command when it is not the default, and is kept in the record; the repeat command,
parsed again by the CLI, gives back the same options; a study resolves each preset once."""

from __future__ import annotations

import argparse
import inspect
import json
import re
import shlex
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

import pytest

from zoo.ablate.options import (
    KINDS,
    Options,
    StudyOptions,
    flag_name,
    flag_of,
    record,
    spell,
    study_command,
)
from zoo.ablate.studies import run_study
from zoo.cli import build_parser, main
from zoo.cli.ablate import FLAGS_BEGIN, FLAGS_END, _options, given_options, with_flags_table
from zoo.cli.parsers.ablate import KIND_ARGUMENTS
from zoo.errors import ConfigError
from zoo.nn.config import resolve_config
from zoo.nn.registry import Registry

OUT = Path("runs/somewhere")
ABLATION = {f.name: f for f in fields(Options)}
STUDY = {f.name: f for f in fields(StudyOptions)}
EVERY = [*(("ablation", name) for name in ABLATION), *(("study", name) for name in STUDY)]


def field_of(side: str, name: str) -> Field[Any]:
    return (ABLATION if side == "ablation" else STUDY)[name]


def other_value(f: Field[Any]) -> Any:
    """A value of ``f`` that is not its default, of the kind its flag takes; a float
    that ``%g`` would round, so the repeat command has to spell it in full."""
    default = None if f.default is MISSING else f.default  # out_dir: no default
    kind = flag_of(f).kind
    if kind == "choice":
        return next(choice for choice in flag_of(f).choices or () if choice != default)
    by_kind: dict[str, Any] = {
        "text": "some-preset",
        "count": (default or 1) + 2 if kind == "count" else None,
        "int": 3,
        "seed": 5,
        "float": (default or 0.5) * 1.1 if kind == "float" else None,
        "switch": True,
        "vocab": 300,
        "path": Path("corpus.txt"),
        "out": Path("elsewhere"),
        "rates": [1e-3, 0.01],
        "axes": ["placement"],
        "optional-axes": ["placement", "position"],
        "scales": [(16, 1), (32, 2)],
        "warmups": [0, None],
        "factors": [2, 4],
    }
    value = by_kind[kind]
    assert value != default, (f.name, value)
    return value


def with_value(side: str, name: str) -> tuple[Options, StudyOptions]:
    """The options with ``name`` at another value than its default (and the option its
    flag's ``when`` names on, so the repeat command names it)."""
    f = field_of(side, name)
    changed: dict[str, Any] = {name: other_value(f)}
    when = flag_of(f).when
    if when in ABLATION or when in STUDY:
        changed[when] = True
    ablation = {k: v for k, v in changed.items() if k in ABLATION}
    study = {k: v for k, v in changed.items() if k in STUDY}
    return Options(**{"out_dir": OUT, **ablation}), StudyOptions(**study)


def ablate_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["ablate"]


def test_every_kind_is_read_by_the_command_line() -> None:
    assert set(KIND_ARGUMENTS) | {"out"} == set(KINDS)
    assert {flag_of(f).kind for f in [*ABLATION.values(), *STUDY.values()]} <= set(KINDS)


@pytest.mark.parametrize(("side", "name"), EVERY)
def test_every_option_is_a_flag_whose_help_states_its_default(
    side: str, name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = field_of(side, name)
    flag, _, model_field = flag_name(f).partition(" ")
    monkeypatch.setenv("COLUMNS", "2000")  # no help wrapped: each as written
    with pytest.raises(SystemExit):
        main(["ablate", "--help"])
    shown = capsys.readouterr().out
    (action,) = [a for a in ablate_parser()._actions if flag in a.option_strings and a.help != argparse.SUPPRESS]
    assert action.help and action.help in shown and f" {flag} " in shown.replace(",", " ")
    if model_field:  # a field of the scale: --set FIELD=N, its default in --set's help
        shown = f.default if f.default is not None else flag_of(f).shown  # --set dropout: each preset's own
        assert f"{model_field}={shown}" in action.help
    else:  # (default 150), or in words: (default: a tenth of --steps); -o states its own
        default = flag_of(f).shown if flag_of(f).shown is not None else spell(f.default)
        assert re.search(rf"\(default:? {re.escape(default)}\)$", action.help), action.help


@pytest.mark.parametrize(("side", "name"), EVERY)
def test_every_option_not_at_its_default_is_in_the_repeat_command(side: str, name: str) -> None:
    ablation, study = with_value(side, name)
    words = shlex.split(study_command(ablation, study) if side == "study" else ablation.command())
    value = getattr(ablation if side == "ablation" else study, name)
    flag, _, model_field = flag_name(field_of(side, name)).partition(" ")
    if model_field:
        assert f"{model_field}={value}" in words
    elif value is True:
        assert flag in words
    else:
        text = words[words.index(flag) + 1]
        assert text == (flag_of(field_of(side, name)).spell or spell)(value)


@pytest.mark.parametrize(("side", "name"), EVERY)
def test_every_option_is_in_the_record(side: str, name: str) -> None:
    ablation, study = with_value(side, name)
    kept = json.loads(json.dumps(record(ablation if side == "ablation" else study)))
    assert set(kept) == set(ABLATION if side == "ablation" else STUDY)
    value = getattr(ablation if side == "ablation" else study, name)
    assert kept[name] == (str(value) if isinstance(value, Path) else json.loads(json.dumps(value)))


@pytest.mark.parametrize(("side", "name"), EVERY)
def test_the_api_names_every_option_with_its_default(side: str, name: str) -> None:
    from zoo.ablate import run_ablation

    f = field_of(side, name)
    functions = [run_study] if side == "study" else [run_ablation, run_study]
    for function in functions:  # help(run_ablation) and editors list the options, not **options
        parameter = inspect.signature(function).parameters[name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY or name in ("base", "target")
        assert parameter.default == (inspect.Parameter.empty if f.default is MISSING else f.default)


@pytest.mark.parametrize(("side", "name"), EVERY)
def test_the_repeat_command_parsed_again_gives_the_same_options(side: str, name: str) -> None:
    ablation, study = with_value(side, name)
    command = study_command(ablation, study) if side == "study" else ablation.command()
    words = shlex.split(command)
    assert words[:2] == ["zoo", "ablate"]
    args = build_parser().parse_args(words[1:])
    assert Options(**_options(args)) == ablation
    assert StudyOptions(**given_options(args, StudyOptions)) == study


def test_the_docs_table_of_the_flags_is_what_help_says() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "ablation.md").read_text(encoding="utf-8")
    assert with_flags_table(text, ablate_parser()) == text, "docs/ablation.md's flags are stale: run make docs-flags"
    rows = text.split(FLAGS_BEGIN)[1].split(FLAGS_END)[0]
    for f in [*ABLATION.values(), *STUDY.values()]:
        flag = flag_name(f).partition(" ")[0]
        assert re.search(rf"^\| `{re.escape(flag)}[ `/]", rows, re.MULTILINE), flag
    assert "| `--eval-batches N` | 4 | validation batches per evaluation" in rows
    with pytest.raises(ConfigError, match="must hold the line"):
        with_flags_table(text.replace(FLAGS_END, ""), ablate_parser())


class CountingRegistry(Registry):
    """The installed plugins, counting how often each preset is looked up."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: dict[str, int] = {}

    def preset(self, name: str) -> Any:
        self.lookups[name] = self.lookups.get(name, 0) + 1
        return super().preset(name)


def test_a_study_resolves_each_preset_once_and_its_records_keep_every_option(tmp_path: Path) -> None:
    once = CountingRegistry()
    for name in ("transformer-2017", "gpt2-small"):
        resolve_config(name, registry=once)
    registry = CountingRegistry()
    study = run_study(
        "transformer-2017",
        "gpt2-small",
        d_model=16,
        layers=1,
        heads=2,
        seq_len=16,
        steps=2,
        batch=2,
        eval_every=2,
        seeds=1,
        tokenizer="bytes",
        max_chars=4000,
        swaps=["placement"],
        eval_batches=3,
        scales=[(16, 1), (32, 1)],
        tokens_per_param=0.02,
        out_dir=tmp_path,
        registry=registry,
    )
    assert len(study.cells) == 2  # two rungs, each planned and trained
    assert registry.lookups == once.lookups  # as one resolve of each: not once per rung or cell
    kept = json.loads((tmp_path / "study.json").read_text())
    assert set(kept["options"]) == set(ABLATION) | set(STUDY) and kept["options"]["scales"] == [[16, 1], [32, 1]]
    args = build_parser().parse_args(shlex.split(kept["command"])[1:])  # the record's command repeats the record
    assert {**record(Options(**_options(args))), **record(StudyOptions(**given_options(args, StudyOptions)))} == (
        kept["options"]
    )
    cell = json.loads((tmp_path / study.cells[1][0].name / "ablation.json").read_text())
    assert set(cell["options"]) == set(ABLATION) and cell["options"]["swaps"] == ["placement"]
    assert cell["options"]["d_model"] == 32 and cell["options"]["out_dir"] == str(tmp_path / study.cells[1][0].name)
    assert cell["options"]["eval_batches"] == cell["settings"]["eval_batches"] == 3  # the flag reaches the runs
    args = build_parser().parse_args(shlex.split(cell["command"])[1:])
    assert record(Options(**_options(args))) == cell["options"]


def test_an_unknown_option_is_refused_naming_the_nearest(tmp_path: Path) -> None:
    from zoo.ablate import run_ablation

    with pytest.raises(ConfigError, match="run_ablation takes no option 'eval_evry'; did you mean eval_every"):
        run_ablation(out_dir=tmp_path, eval_evry=2)
    with pytest.raises(ConfigError, match="run_study takes no option 'scale'; did you mean scales"):
        run_study(out_dir=tmp_path, scale=[(16, 1)])


def test_an_empty_data_path_is_refused_not_read_as_the_current_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a folder that a '' read as '.' would take for the corpus
    assert main(["ablate", "--from", "gpt2-small", "--to", "gpt2-small", "--data", "", "-o", str(tmp_path / "o")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "an input path is empty ('')" in err and "manifest" not in err, err
    assert not (tmp_path / "o").exists()
