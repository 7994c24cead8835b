"""An adversarial pass over what `zoo probe` and the corpus readers (`zoo data prepare`,
`zoo train --data`, `zoo ablate --data`) take (issue 41, raw exceptions): every flag and
file a hostile user can give ends in one red ``error:`` line that names what is wrong
and the fix, or in a correct result; never a traceback, an "unexpected ..." bug report
or a hang, and no file of the user's is removed or rewritten."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers_inputs import PROBE, TINY_PROBE, cli, fingerprint, hostile_folder, manifest_tokens, time_limit

import zoo
from helpers import error_line
from zoo.probe import Design, corpus_batch, designs, probe_designs
from zoo.training import load_corpus, prepare, read_text, resolve_data, stdlib_corpus


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_folder(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(autouse=True)
def _own_data_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Text given to zoo train/eval --data is prepared in this test's folder, not the user's cache."""
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def untouched(hostile: Path) -> Any:
    """The hostile folder, checked after the test to hold exactly what it held before."""
    before = fingerprint(hostile)
    yield hostile
    assert fingerprint(hostile) == before, "a user's file was removed, rewritten or replaced"


def prepare_argv(*inputs: str, extra: tuple[str, ...] = ()) -> list[str]:
    return ["data", "prepare", *inputs, "-o", "{o}/out", "--tokenizer", "bytes", *extra]


TRAIN = ["train", "gpt2-small", *TINY_PROBE, "--steps", "1", "--batch-size", "1", "--tokenizer", "bytes"]

# (case, argv with {d} for the hostile folder and {o} for a fresh folder, needles of the error line)
REFUSED: list[tuple[str, list[str], tuple[str, ...]]] = [
    # zoo data prepare: text files
    ("prepare-empty", prepare_argv("{d}/empty.txt"), ("holds no text",)),
    ("prepare-binary", prepare_argv("{d}/binary.txt"), ("binary.txt", "not UTF-8")),
    ("prepare-nul", prepare_argv("{d}/nul.txt"), ("NUL bytes",)),
    ("prepare-latin1", prepare_argv("{d}/latin1.txt"), ("latin1.txt", "not UTF-8", "convert it")),
    ("prepare-short", prepare_argv("{d}/short.txt"), ("2 tokens", "--val-fraction")),
    ("prepare-fifo", prepare_argv("{d}/fifo.txt"), ("fifo.txt", "FIFO")),
    ("prepare-link-loop", prepare_argv("{d}/loop"), ("loop", "not a regular file")),
    ("prepare-empty-folder", prepare_argv("{d}/emptydir"), ("emptydir", "empty")),
    ("prepare-missing", prepare_argv("{d}/absent.txt"), ("absent.txt", "does not exist")),
    ("prepare-empty-path", prepare_argv(""), ("empty (''), which would read the current folder",)),
    # zoo data prepare: records
    ("jsonl-number", prepare_argv("{d}/number.jsonl"), ("line 1", "int, not text", "--field")),
    ("jsonl-null", prepare_argv("{d}/null.jsonl"), ("line 1", "NoneType, not text", "--field")),
    ("jsonl-nested", prepare_argv("{d}/nested.jsonl"), ("dict, not text", "--field")),
    ("jsonl-array", prepare_argv("{d}/array.jsonl"), ("not a JSON object",)),
    ("jsonl-absent-field", prepare_argv("{d}/absent.jsonl"), ("no field 'text'", "'body'", "--field")),
    ("jsonl-field-named", prepare_argv("{d}/absent.jsonl", extra=("--field", "title")), ("no field 'title'",)),
    ("jsonl-broken", prepare_argv("{d}/broken.jsonl"), ("line 2", "not valid JSON")),
    ("jsonl-deep", prepare_argv("{d}/deep.jsonl"), ("line 1", "not valid JSON")),
    ("jsonl-nan", prepare_argv("{d}/nan.jsonl"), ("line 1", "float, not text")),
    ("jsonl-bigint", prepare_argv("{d}/bigint.jsonl"), ("line 1", "not valid JSON")),
    ("jsonl-surrogate", prepare_argv("{d}/surrogate.jsonl"), ("surrogate.jsonl", "lone surrogate")),
    ("jsonl-nul", prepare_argv("{d}/nul.jsonl"), ("NUL bytes",)),
    ("jsonl-empty-record", prepare_argv("{d}/empty_record.jsonl"), ("holds no text",)),
    ("parquet-fake", prepare_argv("{d}/fake.parquet"), ("fake.parquet", "not a Parquet file")),
    ("field-empty", prepare_argv("{d}/plain.txt", extra=("--field", "")), ("--field",)),
    ("val-fraction-nan", prepare_argv("{d}/plain.txt", extra=("--val-fraction", "nan")), ("--val-fraction",)),
    ("val-fraction-inf", prepare_argv("{d}/plain.txt", extra=("--val-fraction", "inf")), ("--val-fraction",)),
    ("val-fraction-one", prepare_argv("{d}/plain.txt", extra=("--val-fraction", "1")), ("--val-fraction",)),
    ("val-fraction-tiny", prepare_argv("{d}/plain.txt", extra=("--val-fraction", "1e-300")), ("--val-fraction",)),
    ("tokenizer-missing", prepare_argv("{d}/plain.txt", extra=("--tokenizer", "{d}/nothing")), ("tokenizer",)),
    ("tokenizer-a-text", prepare_argv("{d}/plain.txt", extra=("--tokenizer", "{d}/plain.txt")), ("tokenizer",)),
    ("out-a-file", ["data", "prepare", "{d}/plain.txt", "-o", "{d}/keep.json"], ("keep.json",)),
    ("out-a-fifo", ["data", "prepare", "{d}/plain.txt", "-o", "{d}/fifo.txt"], ("fifo.txt",)),
    ("out-the-input", ["data", "prepare", "{d}/loopdir", "-o", "{d}/loopdir"], ("not an empty folder", "-o")),
    ("dataset-config-alone", ["data", "prepare", "-o", "{o}/out", "--dataset-config", "x"], ("--dataset",)),
    # zoo train --data and zoo ablate --data
    ("train-empty", [*TRAIN, "--seq-len", "8", "--data", "{d}/empty.txt", "-o", "{o}/run"], ("holds no text",)),
    ("train-empty-path", [*TRAIN, "--seq-len", "8", "--data", "", "-o", "{o}/run"], ("empty ('')",)),
    ("train-fifo", [*TRAIN, "--seq-len", "8", "--data", "{d}/fifo.txt", "-o", "{o}/run"], ("FIFO",)),
    ("train-latin1", [*TRAIN, "--seq-len", "8", "--data", "{d}/latin1.txt", "-o", "{o}/run"], ("not UTF-8",)),
    (
        "train-record-type",
        [*TRAIN, "--seq-len", "8", "--data", "{d}/number.jsonl", "-o", "{o}/run"],
        ("zoo data prepare",),
    ),  # fmt: skip
    (
        "train-too-few",
        [*TRAIN, "--seq-len", "64", "--data", "{d}/plain.txt", "-o", "{o}/run"],
        ("validation split", "--seq-len"),
    ),  # fmt: skip
    (
        "eval-too-few",
        ["eval", "{d}/good.safetensors", "--data", "{d}/plain.txt", "--tokenizer", "bytes", "--seq-len", "16"],
        ("validation split", "--seq-len"),
    ),  # fmt: skip
    ("eval-fifo", ["eval", "{d}/good.safetensors", "--data", "{d}/fifo.txt", "--tokenizer", "bytes"], ("FIFO",)),
    ("ablate-fifo", ["ablate", "--steps", "1", "--seeds", "1", "--data", "{d}/fifo.txt", "-o", "{o}/ab"], ("FIFO",)),
    (
        "ablate-binary",
        ["ablate", "--steps", "1", "--seeds", "1", "--data", "{d}/binary.txt", "-o", "{o}/ab"],
        ("not UTF-8",),
    ),  # fmt: skip
    (
        "ablate-empty",
        ["ablate", "--steps", "1", "--seeds", "1", "--data", "{d}/empty.txt", "-o", "{o}/ab"],
        ("too few",),
    ),  # fmt: skip
    # zoo probe: sizes
    ("probe-batch-0", [*PROBE, "--batch-size", "0"], ("--batch-size",)),
    ("probe-batch-negative", [*PROBE, "--batch-size", "-1"], ("--batch-size",)),
    ("probe-batch-huge", [*PROBE, "--batch-size", "100000000"], ("--batch-size", "lower")),
    ("probe-seq-1", [*PROBE, "--seq-len", "1"], ("--seq-len",)),
    ("probe-seq-negative", [*PROBE, "--seq-len", "-5"], ("--seq-len",)),
    ("probe-seq-past-table", [*PROBE, "--seq-len", "2000"], ("--seq-len 2000", "max_seq_len")),
    ("probe-seq-huge", [*PROBE, "--seq-len", "99999999999999999999999"], ("--seq-len",)),
    ("probe-seq-past-corpus", [*PROBE, "--set", "max_seq_len=1048576", "--seq-len", "1000000"], ("--seq-len",)),
    ("probe-gpt2-small-vocab", [*PROBE, "--tokenizer", "gpt2"], ("vocab_size", "--tokenizer bytes")),
    ("probe-loss-overflows", [*PROBE, "--set", "embedding_scale=1e38"], ("loss is nan", "out of range")),
    ("probe-gradients-overflow", [*PROBE, "--set", "logit_scale=1e38"], ("activations overflow", "in range")),
    ("probe-bytes-small-vocab", [*PROBE, "--set", "vocab_size=10"], ("vocab_size=256",)),
    # zoo probe: designs
    ("variant-word", [*PROBE, "--variant", "nonsense"], ("--variant", "FIELD=VALUE")),
    ("variant-no-key", [*PROBE, "--variant", "=3"], ("--variant", "FIELD=VALUE")),
    ("variant-bad-value", [*PROBE, "--variant", "n_layers=x"], ("n_layers",)),
    ("variant-unknown-field", [*PROBE, "--variant", "bogus=1"], ("bogus", "not a config field")),
    ("vary-empty", [*PROBE, "--vary", ""], ("--vary",)),
    ("vary-no-values", [*PROBE, "--vary", "n_layers="], ("--vary",)),
    ("vary-empty-value", [*PROBE, "--vary", "n_layers=1,"], ("--vary", "empty value")),
    ("vary-no-key", [*PROBE, "--vary", "=1,2"], ("--vary",)),
    ("vary-unknown-field", [*PROBE, "--vary", "bogus=1,2"], ("bogus",)),
    (
        "vary-huge-grid",
        [*PROBE, *(["--vary", "d_model=" + ",".join(["16"] * 100)] * 3)],
        ("1,000,000 designs", "--vary"),
    ),  # fmt: skip
    ("set-empty", [*PROBE, "--set", ""], ("--set",)),
    ("set-nan", [*PROBE, "--set", "dropout=nan"], ("finite",)),
    ("set-huge", [*PROBE, "--set", "n_layers=100000000"], ("n_layers",)),
    ("set-component", [*PROBE, "--set", "attention=bogus"], ("bogus",)),
    ("version-of-a-preset", [*PROBE, "--version", "3"], ("--version", "preset")),
    ("revision-of-a-preset", [*PROBE, "--revision", "main"], ("--revision", "preset")),
    ("unknown-preset", ["probe", "no-such-preset"], ("no-such-preset",)),
    ("empty-target", ["probe", ""], ("unknown preset ''",)),
    ("control-target", ["probe", "a\x1b[31mb"], ("\\x1b",)),
    # zoo probe: saved models
    ("ckpt-garbage", ["probe", "{d}/garbage.safetensors", "--seq-len", "8"], ("garbage.safetensors", "not a valid")),
    ("ckpt-truncated", ["probe", "{d}/truncated.safetensors", "--seq-len", "8"], ("truncated.safetensors",)),
    ("ckpt-a-text", ["probe", "{d}/plain.txt", "--seq-len", "8"], ("plain.txt",)),
    ("ckpt-fifo", ["probe", "{d}/fifo.txt", "--seq-len", "8"], ("fifo.txt", "FIFO")),
    ("ckpt-link-loop", ["probe", "{d}/loop", "--seq-len", "8"], ("loop",)),
    ("ckpt-no-versions", ["probe", "{d}/noversions", "--seq-len", "8"], ("no checkpoint versions",)),
    ("ckpt-empty-folder", ["probe", "{d}/emptydir", "--seq-len", "8"], ("no checkpoint versions",)),
    ("hf-broken-json", ["probe", "{d}/hf_broken", "--seq-len", "8"], ("config.json", "not valid JSON")),
    ("hf-not-object", ["probe", "{d}/hf_list", "--seq-len", "8"], ("config.json", "JSON object")),
    ("hf-not-utf8", ["probe", "{d}/hf_binary", "--seq-len", "8"], ("config.json", "not UTF-8")),
    ("ckpt-small-vocab", ["probe", "{d}/small_vocab.safetensors", "--seq-len", "8"], ("vocab_size >= 256", "its own")),
    ("ckpt-with-set", ["probe", "{d}/good.safetensors", "--set", "n_layers=2"], ("saved model", "--set")),
    ("ckpt-past-table", ["probe", "{d}/good.safetensors", "--seq-len", "100"], ("--seq-len 32",)),
    ("ckpt-version-of-a-file", ["probe", "{d}/good.safetensors", "--version", "9", "--seq-len", "8"], ("version",)),
    ("ckpt-revision", ["probe", "{d}/good.safetensors", "--revision", "x", "--seq-len", "8"], ("revision",)),
    # zoo probe: outputs
    ("out-missing-folder", [*PROBE, "-o", "{o}/no/x.json"], ("-o", "does not exist")),
    ("out-existing", [*PROBE, "-o", "{d}/keep.json"], ("keep.json", "--overwrite")),
    ("out-a-folder", [*PROBE, "-o", "{d}/emptydir"], ("-o", "folder")),
    ("out-a-fifo", [*PROBE, "-o", "{d}/fifo.txt"], ("-o", "FIFO")),
    ("out-a-link-loop", [*PROBE, "-o", "{d}/loop"], ("loop",)),
    ("out-empty", [*PROBE, "-o", ""], ("-o", "names no file")),
    (
        "out-over-its-input",
        ["probe", "{d}/good.safetensors", "-o", "{d}/good.safetensors", "--overwrite"],
        ("delete what it reads",),
    ),  # fmt: skip
    ("plot-unknown-format", [*PROBE, "--plot", "{o}/x.bogus"], ("--plot", ".bogus", ".png")),
    ("plot-no-suffix", [*PROBE, "--plot", "{o}/x"], ("--plot", ".png")),
    ("plot-json", [*PROBE, "--plot", "{o}/x.json"], ("--plot", ".json")),
    ("plot-missing-folder", [*PROBE, "--plot", "{o}/no/x.png"], ("--plot", "does not exist")),
    ("plot-same-as-out", [*PROBE, "--plot", "{o}/s.png", "-o", "{o}/s.png"], ("same file",)),
    ("plot-existing", [*PROBE, "--plot", "{d}/keep.json"], ("keep.json",)),
    ("plot-nothing", [*PROBE, "--metrics", "update", "--plot", "{o}/u.png"], ("nothing to plot", "--metrics")),
]


def filled(argv: list[str], hostile: Path, out: Path) -> list[str]:
    return [a.replace("{d}", str(hostile)).replace("{o}", str(out)) for a in argv]


@pytest.mark.parametrize(("argv", "needles"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_hostile_input_is_one_error_line(
    argv: list[str], needles: tuple[str, ...], untouched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if any("parquet" in a for a in argv) and "fake" not in "".join(argv):
        pytest.importorskip("pyarrow")
    assert cli(filled(argv, untouched, tmp_path)) == 1
    error_line(capsys, *needles)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize(
    ("name", "needle"),
    [("numbers", "--field"), ("nulls", "--field"), ("struct", "--field"), ("absent", "--field")]
    + [("binary", "--field"), ("corrupt", "is damaged")],
)
def test_a_parquet_file_of_no_text_or_damaged_is_one_error_line(
    name: str, needle: str, untouched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow")
    assert cli(filled(prepare_argv(f"{{d}}/{name}.parquet"), untouched, tmp_path)) == 1
    error_line(capsys, f"{name}.parquet", needle)
    assert not (tmp_path / "out").exists()


def test_a_damaged_dataset_is_one_error_line(
    untouched: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A page damaged in a dataset's data file, met while streaming its records: a read error
    naming the dataset (it read as an error writing the output folder)."""
    pytest.importorskip("datasets")
    pytest.importorskip("pyarrow")
    for name, value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("HF_HOME", str(tmp_path / "hf"))):
        monkeypatch.setenv(name, value)
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "train.parquet").write_bytes((untouched / "corrupt.parquet").read_bytes())
    argv = ["data", "prepare", "--dataset", str(tmp_path / "dataset"), "-o", str(tmp_path / "out")]
    assert cli([*argv, "--tokenizer", "bytes"]) == 1
    error_line(capsys, "dataset", "is damaged", "--dataset")
    assert not (tmp_path / "out").exists()


def text_tokens(folder: Path, text: str) -> tuple[int, int]:
    """What the same text, as one plain file, prepares into (bytes, the default split)."""
    (folder / "same.txt").write_text(text, encoding="utf-8", newline="")
    return manifest_tokens(Path(prepare([folder / "same.txt"], folder / "same", tokenizer="bytes", workers=1).path))


def test_a_byte_order_mark_and_crlf_are_read_as_text_is(untouched: Path, tmp_path: Path) -> None:
    """A leading BOM marks the encoding (it is no text, and no JSON); CRLF ends a record's line; a
    record's other fields may hold anything JSON as Python writes it."""
    text = "hello world, this is a line of text.\n" * 40
    assert cli(filled(prepare_argv("{d}/bom.txt"), untouched, tmp_path)) == 0
    assert manifest_tokens(tmp_path / "out") == text_tokens(tmp_path, text)  # the BOM's 3 bytes are not tokens
    for name in ("bom", "crlf", "other_fields"):  # other fields are not read: NaN and long numbers, as Python writes
        out = tmp_path / f"{name}-out"
        assert cli(["data", "prepare", str(untouched / f"{name}.jsonl"), "-o", str(out), "--tokenizer", "bytes"]) == 0
        assert sum(manifest_tokens(out)) == 50 * len("hello world")


def test_a_folder_with_a_link_loop_and_a_probe_of_odd_but_valid_flags_succeed(
    untouched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(filled(prepare_argv("{d}/loopdir"), untouched, tmp_path)) == 0  # the loop is not followed
    assert sum(manifest_tokens(tmp_path / "out")) == len("hello world, this is a line of text.\n" * 40)
    capsys.readouterr()
    assert cli([*PROBE, "--metrics", "residual,,", "--json"]) == 0  # an empty name between commas is no name
    assert '"probes"' in capsys.readouterr().out
    assert cli(["probe", str(untouched / "two_models"), "--seq-len", "8", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["probes"]
    assert result["update_ratio"] is None and "versions 1 and 2 are different models" in result["notes"][0]


# (case, a call of the API, what its ZooError says)
API: list[tuple[str, Callable[[], object], str]] = [
    ("designs-a-str", lambda: designs("gpt2-small"), "targets must be a sequence of strings"),  # type: ignore[arg-type]
    ("designs-a-number", lambda: designs([5]), "targets must be"),  # type: ignore[list-item]
    ("designs-sets-a-str", lambda: designs(["gpt2-small"], sets="n_layers=1"), "sets must be"),  # type: ignore[arg-type]
    ("designs-variant-none", lambda: designs(["gpt2-small"], variants=[None]), "variants must be"),  # type: ignore[list-item]
    ("designs-vary-number", lambda: designs(["gpt2-small"], vary=[3]), "vary must be"),  # type: ignore[list-item]
    ("designs-variant-word", lambda: designs(["gpt2-small"], variants=["nonsense"]), "FIELD=VALUE"),
    ("designs-version-str", lambda: designs(["gpt2-small"], version="3"), "version must be"),  # type: ignore[arg-type]
    ("designs-seed-negative", lambda: designs(["gpt2-small"], seed=-1), "seed=-1"),
    ("designs-seed-huge", lambda: designs(["gpt2-small"], seed=1 << 70), "2\\*\\*64"),
    ("probe-designs-a-str", lambda: probe_designs("gpt2-small"), "found must be Designs"),  # type: ignore[arg-type]
    ("probe-designs-numbers", lambda: probe_designs([5]), "found must be Designs"),  # type: ignore[list-item]
    ("corpus-batch-str", lambda: corpus_batch(256, "4", 8), "batch_size must be"),  # type: ignore[arg-type]
    ("corpus-batch-float", lambda: corpus_batch(256, 1, 2.5), "seq_len must be"),  # type: ignore[arg-type]
    ("corpus-batch-none", lambda: corpus_batch(None, 1, 8), "vocab_size must be"),  # type: ignore[arg-type]
    ("load-corpus-surrogate", lambda: load_corpus("ab\ud800" * 50, tokenizer="bytes"), "lone surrogate"),
    ("load-corpus-fraction-str", lambda: load_corpus("ab" * 50, val_fraction="0.1"), "val_fraction='0.1'"),  # type: ignore[arg-type]
    ("load-corpus-source", lambda: load_corpus("ab", tokenizer="bytes", source=5), "source must be"),  # type: ignore[arg-type]
    ("load-corpus-too-short", lambda: load_corpus("abc", tokenizer="bytes"), "too few"),
    ("stdlib-limit-str", lambda: stdlib_corpus("x"), "limit must be"),  # type: ignore[arg-type]
    ("stdlib-limit-negative", lambda: stdlib_corpus(-1), "limit=-1"),
    ("resolve-data-number", lambda: resolve_data(5), "data must be"),
    ("resolve-data-bytes", lambda: resolve_data(b"text"), "data must be"),
    ("resolve-data-empty-path", lambda: resolve_data(""), "empty"),
    ("read-text-a-number", lambda: read_text(5), "path must be"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "match"), [c[1:] for c in API], ids=[c[0] for c in API])
def test_a_wrong_argument_of_the_api_is_a_zoo_error(call: Callable[[], object], match: str) -> None:
    with time_limit(30), pytest.raises(zoo.ZooError, match=match):
        call()


def test_probe_designs_still_takes_designs_and_a_loaded_target_with_a_version() -> None:
    (design,) = designs(["gpt2-small"], sets=["n_layers=1", "d_model=16", "n_heads=2", "vocab_size=256"])
    assert isinstance(design, Design)
    (result,) = probe_designs(iter([design]), batch_size=1, seq_len=8, tokenizer="bytes")
    assert result.layers == 1
    assert probe_designs([]) == []
