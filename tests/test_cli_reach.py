"""What users meet at the command line (issue 42): ``zoo generate`` reaches every option
of ``zoo.generate_text``; a subcommand's bad flag shows that subcommand's usage; every
``--json`` is JSON alone on stdout; ``zoo train RUN --resume``; HF exports carry their
special token ids."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import TINY_ABLATION, subcommands, tiny
from zoo.cli import main
from zoo.cli.parsers.generate import API_FLAGS, NOT_FLAGS
from zoo.pipelines import generate_text
from zoo.training import bundled_corpus

COMMANDS = subcommands()


# -- zoo generate: every keyword of generate_text ---------------------------------------------


def test_every_generate_text_keyword_is_a_flag_or_says_why_not() -> None:
    keywords = {n for n, p in inspect.signature(generate_text).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert set(API_FLAGS) | set(NOT_FLAGS) == keywords  # a new keyword needs a flag, or a reason
    assert not set(API_FLAGS) & set(NOT_FLAGS) and all(reason.strip() for reason in NOT_FLAGS.values())
    actions = {flag: a for a in COMMANDS["generate"]._actions for flag in a.option_strings}
    for keyword, flag in API_FLAGS.items():
        assert flag in actions, (keyword, flag)
        assert actions[flag].dest == ("sample" if keyword == "do_sample" else keyword), (keyword, flag)


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny model over a vocabulary of 256 (the bytes tokenizer), saved with zoo.save."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gen") / "tiny256.safetensors"
    zoo.save(
        zoo.build("gpt2-small", vocab_size=256, n_layers=1, d_model=16, n_heads=2, max_seq_len=64, dropout=0.0), path
    )
    return str(path)


BEAMS_ENDING = (["--num-beams", "2", "--eos-token-id", "92,41"], {"num_beams": 2, "eos_token_id": [92, 41]})

#: (flags under test, the keywords they stand for, the flags and keywords of the run they change)
NEW_FLAGS: list[tuple[list[str], dict[str, Any], tuple[list[str], dict[str, Any]]]] = [
    (["--num-beams", "3"], {"num_beams": 3}, ([], {})),
    (["--num-beams", "3", "--num-return-sequences", "2"], {"num_beams": 3, "num_return_sequences": 2}, ([], {})),
    (["--length-penalty=-2"], {"length_penalty": -2.0}, BEAMS_ENDING),
    (["--early-stopping"], {"early_stopping": True}, BEAMS_ENDING),
    (["--early-stopping", "true"], {"early_stopping": True}, BEAMS_ENDING),
    (["--min-new-tokens", "3"], {"min_new_tokens": 3}, (["--eos-token-id", "41"], {"eos_token_id": [41]})),
    (["--stop", "\\"], {"stop_strings": ["\\"]}, ([], {})),
    (["--stop", "\\", "--stop", ")"], {"stop_strings": ["\\", ")"]}, ([], {})),
    (["--eos-token-id", "41"], {"eos_token_id": [41]}, ([], {})),
    (
        ["--eos-token-id", "92", "--eos-token-id", "41"],
        {"eos_token_id": [92, 41]},
        (["--num-beams", "2"], {"num_beams": 2}),
    ),
    (["--eos-token-id", "92,41"], {"eos_token_id": [92, 41]}, (["--num-beams", "2"], {"num_beams": 2})),
]


@pytest.mark.parametrize(
    ("flags", "keywords", "base"), NEW_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_each_new_generate_flag_does_what_its_keyword_does(
    tiny_bytes: str,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    keywords: dict[str, Any],
    base: tuple[list[str], dict[str, Any]],
) -> None:
    base_flags, base_keywords = base
    before = generate_text(tiny_bytes, "ab", max_new_tokens=12, **base_keywords)
    expected = generate_text(tiny_bytes, "ab", max_new_tokens=12, **base_keywords, **keywords)
    assert expected != before  # the keyword changes the text on this model, so the flag must too
    argv = ["generate", tiny_bytes, "--prompt", "ab", "--max-new-tokens", "12", "--no-echo", "--raw"]
    capsys.readouterr()
    assert main([*argv, *base_flags, *flags]) == 0
    out = capsys.readouterr().out
    if isinstance(expected, list):
        assert out == "".join(f"[{i}/{len(expected)}] {text}\n" for i, text in enumerate(expected, 1))
    else:
        assert out == expected + "\n"


#: Flags whose keyword gives this model's default text (so no change to see): the same text as the API's.
SAME_TEXT = [
    (["--no-stop-at-eot"], {"stop_at_eot": False}),
    ([*BEAMS_ENDING[0], "--early-stopping", "false"], {**BEAMS_ENDING[1], "early_stopping": False}),
    ([*BEAMS_ENDING[0], "--early-stopping", "never"], {**BEAMS_ENDING[1], "early_stopping": "never"}),
    (["--min-new-tokens", "0"], {"min_new_tokens": 0}),
]


@pytest.mark.parametrize(("flags", "keywords"), SAME_TEXT, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_generate_flags_give_their_keywords_text(
    tiny_bytes: str, capsys: pytest.CaptureFixture[str], flags: list[str], keywords: dict[str, Any]
) -> None:
    expected = generate_text(tiny_bytes, "ab", max_new_tokens=12, **keywords)
    argv = ["generate", tiny_bytes, "--prompt", "ab", "--max-new-tokens", "12", "--no-echo", "--raw", *flags]
    assert main(argv) == 0
    assert capsys.readouterr().out == expected + "\n"


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--eos-token-id", "4,x"], "comma list"),
        (["--eos-token-id", "-3"], "0 or more"),
        (["--early-stopping", "soon"], "invalid choice"),
        (["--min-new-tokens", "-1"], "must be 0 or more"),
        (["--eos-token-id", "4", "--no-stop-at-eot"], "not allowed with"),
    ],
)
def test_bad_generate_flags_are_usage_errors(
    tiny_bytes: str, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["generate", tiny_bytes, "--prompt", "ab", *flags])
    assert caught.value.code == 2
    assert needle in capsys.readouterr().err


def test_generate_text_refuses_eos_ids_with_stop_at_eot_false(tiny_bytes: str) -> None:
    with pytest.raises(zoo.ZooError, match="not both"):
        generate_text(tiny_bytes, "ab", eos_token_id=3, stop_at_eot=False)
    with pytest.raises(zoo.ZooError, match="token id or a list"):
        generate_text(tiny_bytes, "ab", eos_token_id="3")  # type: ignore[arg-type]


# -- a subcommand's bad flag: that subcommand's usage -----------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("bad", ["--nope", "--nope=3"])
def test_a_bad_flag_shows_the_subcommands_usage(command: str, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*command.split(), bad])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: zoo {command} "), err  # the subcommand's usage, not zoo's own
    assert f"zoo {command}: error: unrecognized arguments: {bad} (see `zoo {command} --help`)" in err


def test_a_bad_flag_among_good_ones_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "x", "--prompt", "y", "--max-new-tok", "3", "--nope"])  # an abbreviation is no bad flag
    err = capsys.readouterr().err
    assert err.startswith("usage: zoo generate ") and "unrecognized arguments: --nope (see" in err


def test_a_bad_flag_of_zoo_itself_shows_zoos_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--nope"])
    err = capsys.readouterr().err
    assert err.startswith("usage: zoo [-h]") and "zoo: error: unrecognized arguments: --nope" in err


# -- zoo train RUN --resume --------------------------------------------------------------------

#: A tiny run on the bundled corpus: a second or two of CPU.
TINY_TRAIN = ["--set", "n_layers=1", "--set", "d_model=16", "--set", "n_heads=2", "--set", "vocab_size=256"]
TINY_TRAIN += ["--set", "max_seq_len=32", "--seq-len", "16", "--batch-size", "2", "--eval-batches", "1", "--quiet"]


def test_train_run_resume_continues_the_run_in_that_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["train", "gpt2-small", *TINY_TRAIN, "--steps", "2", "--eval-every", "2", "-o", str(run)]) == 0
    assert [v.metadata["training"]["step"] for v in zoo.versions(run)] == [2]
    capsys.readouterr()
    assert main(["train", str(run), "--resume", "--steps", "4", "--json"]) == 0  # the short form: RUN, no -o
    summary = json.loads(capsys.readouterr().out)
    assert summary["step"] == 4 and Path(summary["checkpoint"]).parent == run
    assert [v.metadata["training"]["step"] for v in zoo.versions(run)] == [2, 4]  # the same run, not a new one
    assert not (tmp_path / "run" / "run").exists()


def test_train_resume_of_a_folder_without_a_run_says_how(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["train", str(tmp_path / "empty"), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "holds no run.toml" in err and "zoo train RUN --resume" in err and "-o/--out" in err


# -- every --json: JSON alone on stdout -------------------------------------------------------

#: A command that forwards its flags (``zoo bench``) has no --json of its own; its benchmarks do.
FORWARDED_JSON = {"bench"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What the --json commands read: a tiny checkpoint, a text file, and a 2-step run."""
    root = tmp_path_factory.mktemp("json")
    torch.manual_seed(0)
    zoo.save(
        zoo.build("gpt2-small", vocab_size=256, n_layers=1, d_model=16, n_heads=2, max_seq_len=32),
        root / "m.safetensors",
    )
    (root / "text.txt").write_text(bundled_corpus()[:4000], encoding="utf-8")
    assert main(["train", "gpt2-small", *TINY_TRAIN, "--steps", "2", "--eval-every", "2", "-o", str(root / "run")]) == 0
    return {
        "root": str(root),
        "ckpt": str(root / "m.safetensors"),
        "text": str(root / "text.txt"),
        "run": str(root / "run"),
    }


#: Each command with --json, and a quick run of it (``{root}`` and friends from ``world``).
JSON_RUNS: dict[str, list[str]] = {
    "list": ["list", "gpt2-*"],
    "components": ["components"],
    "plugins": ["plugins"],
    "info": ["info", "gpt2-small"],
    "compare": ["compare", "gpt2-small", "gpt2-medium"],
    "inspect": ["inspect", "{ckpt}"],
    "probe": ["probe", "{ckpt}", "--tokenizer", "bytes", "--seq-len", "16", "--batch-size", "2"],
    "data prepare": ["data", "prepare", "{text}", "-o", "{root}/prepared", "--tokenizer", "bytes"],
    "train": ["train", "gpt2-small", *TINY_TRAIN, "--steps", "2", "--eval-every", "2", "-o", "{root}/run2"],
    "eval": ["eval", "{run}", "--batches", "1", "--batch-size", "2"],
    "ablate": ["ablate", *TINY_ABLATION, "--seeds", "2", "--out", "{root}/ablation"],
    "bench": ["bench", "workers", "--rung", "16x1", "--plans", "1x1", "--steps", "5", "--rounds", "1"],
}


def test_every_json_command_has_a_run_here() -> None:
    with_json = {c for c, p in COMMANDS.items() if any("--json" in a.option_strings for a in p._actions)}
    assert with_json and set(JSON_RUNS) == with_json | FORWARDED_JSON


@pytest.mark.parametrize("command", sorted(JSON_RUNS))
def test_json_is_alone_on_stdout(command: str, world: dict[str, str], capfd: pytest.CaptureFixture[str]) -> None:
    argv = [word.format(**world) for word in JSON_RUNS[command]]
    capfd.readouterr()
    assert main([*argv, "--json"]) == 0
    out = capfd.readouterr().out
    json.loads(out)  # the whole of stdout: nothing before or after the JSON
    assert out.lstrip()[:1] in "[{"


# -- the HF export's special token ids --------------------------------------------------------


def _record(model: zoo.DecoderLM, record: dict[str, Any] | None) -> zoo.DecoderLM:
    model.tokenizer_record = record
    return model


#: (what, the model, the bos, eos and pad its export states)
EXPORTS = [
    ("gpt2 vocabulary", lambda: tiny("gpt2-small", vocab_size=50257), (50256, 50256, 50256)),
    ("llama on gpt2's", lambda: tiny("llama-style-small", vocab_size=50257), (50256, 50256, 50256)),  # not Llama's 1, 2
    ("recorded gpt2", lambda: _record(tiny("gpt2-small", vocab_size=50304), {"name": "gpt2"}), (50256, 50256, 50256)),
    ("bytes", lambda: tiny("gpt2-small", vocab_size=256), (None, None, None)),
]


@pytest.mark.parametrize(("what", "make", "ids"), EXPORTS, ids=[e[0] for e in EXPORTS])
def test_the_hf_export_states_bos_eos_and_pad(what: str, make: Any, ids: tuple[Any, ...], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = make()
    out = zoo.to_hf(model, tmp_path / "hf")
    stated = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert (stated["bos_token_id"], stated["eos_token_id"], stated["pad_token_id"]) == ids
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)  # transformers' own loader reads them back
    assert (loaded.config.bos_token_id, loaded.config.eos_token_id, loaded.config.pad_token_id) == ids
    generation = loaded.generation_config
    assert (generation.bos_token_id, generation.eos_token_id, generation.pad_token_id) == ids


def test_the_ids_a_model_states_win_and_pad_is_its_first_eos(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = tiny("gpt2-small", vocab_size=50257)
    model.generation_config = {"eos_token_id": [7, 9]}
    out = zoo.to_hf(model, tmp_path / "hf")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert (loaded.config.bos_token_id, loaded.config.eos_token_id, loaded.config.pad_token_id) == (50256, [7, 9], 7)


# -- zoo eval RUN: the run's trained context --------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "seq_len", "said"),
    [
        ([], 16, "the --seq-len the run trained at"),  # the run trained at 16; the model holds 32
        (["--seq-len", "8"], 8, None),
    ],
)
def test_eval_of_a_run_defaults_to_its_trained_context(
    world: dict[str, str], capsys: pytest.CaptureFixture[str], flags: list[str], seq_len: int, said: str | None
) -> None:
    capsys.readouterr()
    assert main(["eval", world["run"], "--batches", "1", "--batch-size", "2", *flags, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["seq_len"] == seq_len and shown["seq_len_from"] == ("trained" if said else "--seq-len")
    assert main(["eval", world["run"], "--batches", "1", "--batch-size", "2", *flags]) == 0
    title = " ".join(capsys.readouterr().out.split())
    assert f"seq_len {seq_len} ({said})" in title if said else f"seq_len {seq_len}" in title and "(" not in title


def test_eval_of_a_model_not_trained_here_uses_its_max_seq_len(
    world: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(Path(world["root"]) / "prepared-eval")
    assert main(["data", "prepare", world["text"], "-o", data, "--tokenizer", "bytes"]) == 0
    capsys.readouterr()
    assert (
        main(
            ["eval", world["ckpt"], "--data", data, "--split", "train", "--batches", "1", "--batch-size", "1", "--json"]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["seq_len"] == 32 and shown["seq_len_from"] == "max_seq_len"  # the checkpoint's max_seq_len
