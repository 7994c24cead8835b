"""lm-eval tasks that cannot run end in one line naming the task and the fix
(``zoo.task_checks``): data that is missing, damaged or not cached while offline, and
generation settings of the wrong type or range, each through ``zoo eval --tasks`` and
``zoo.evaluate_tasks``, on real task folders read by lm-eval and datasets."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("transformers")

import zoo  # noqa: E402
from helpers import tiny, train_tokenizer  # noqa: E402
from helpers_tasks import GENERATION, ending_error, task_folder  # noqa: E402
from zoo.checkpoint.tokenizer import embedded_record, folder_files  # noqa: E402
from zoo.cli import main  # noqa: E402

EOT = "<|endoftext|>"
PROMPTS = [{"prompt": "ROMEO:", "answer": " I"}, {"prompt": "KING", "answer": " RICHARD"}]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 carrying a trained byte-level BPE with an end-of-text token."""
    root = tmp_path_factory.mktemp("tasks")
    tokenizer = train_tokenizer(root / "tokenizer", "bpe", vocab_size=300, eos_token=EOT, bos_token=EOT)
    model = tiny(vocab_size=zoo.tokenizer(tokenizer).vocab_size, max_seq_len=48)
    model.tokenizer_record = embedded_record(folder_files(tokenizer))
    zoo.save(model, root / "model.safetensors")
    return root / "model.safetensors"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline; a log line of datasets' to a stream an earlier test closed (its handler keeps
    the stream of the test that made it) is dropped, not reported with a traceback."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    # datasets and huggingface_hub read these once, at import: where an earlier test imported
    # them online, they would try the network (and wait out its timeouts) despite the variables
    for module, names in (("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")), ("huggingface_hub.constants", ("HF_HUB_OFFLINE",))):  # fmt: skip
        if module in sys.modules:
            for name in names:
                monkeypatch.setattr(sys.modules[module], name, True)
    monkeypatch.setattr(logging, "raiseExceptions", False)


def _parquet(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rows.parquet").write_bytes(b"PAR1" + b"\0not parquet" * 40 + b"PAR1")
    return task_folder(root, "zoo_bad", data=root / "rows.parquet", dataset_path="parquet")


def _generation(**settings: Any) -> Callable[[Path], Path]:
    kwargs = {**GENERATION["generation_kwargs"], **settings}
    return lambda root: task_folder(root, "zoo_bad", PROMPTS, **{**GENERATION, "generation_kwargs": kwargs})


#: A task folder of one broken task, and what the one line says.
BROKEN: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "damaged-jsonl": (
        lambda root: task_folder(root, "zoo_bad", b'{"question": "a", "choices": ["b"], "answer": 0}\n{"q\xff\n'),
        ("the data of the task 'zoo_bad' is damaged (UnicodeDecodeError", "fix or replace its data file"),
    ),
    "damaged-parquet": (_parquet, ("the data of the task 'zoo_bad' is damaged (ArrowInvalid", "datasets cache")),
    "missing-data-file": (
        lambda root: task_folder(root, "zoo_bad", data=root / "absent.jsonl"),
        ("the task 'zoo_bad' cannot find its data", "absent.jsonl", "dataset_kwargs.data_files in its YAML"),
    ),
    "hub-dataset-offline": (
        lambda root: task_folder(root, "zoo_bad", dataset_path="zoo-tests/never-published", dataset_kwargs=None),
        ("the task 'zoo_bad' needs data from the Hugging Face hub", "HF_DATASETS_OFFLINE", "run it once online"),
    ),
    "temperature-hot": (
        _generation(do_sample=True, temperature="hot"),
        ("the task 'zoo_bad' sets generation_kwargs temperature to 'hot'", "a number >= 0", "task's YAML"),
    ),
    "top-k-text": (_generation(do_sample=True, top_k="many"), ("generation_kwargs top_k to 'many'", ">= 0")),
    "no-tokens": (_generation(max_gen_toks=0), ("generation_kwargs max_gen_toks to 0", "an integer >= 1")),
    "unknown-setting": (_generation(num_beams=2), ("'num_beams' of the task 'zoo_bad' are not ones", "fix its YAML")),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_task_is_one_line_naming_the_task_and_the_fix(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, needles = BROKEN[case]
    folder = make(tmp_path)
    argv = ["eval", str(checkpoint), "--tasks", "zoo_bad", "--include-path", str(folder), "--device", "cpu"]
    assert main([*argv, "--bootstrap-iters", "0"]) == 1
    ending_error(capsys.readouterr().err, *needles)
    with pytest.raises(zoo.InputError, match="the task 'zoo_bad'"):
        zoo.evaluate_tasks(checkpoint, "zoo_bad", include_path=folder, device="cpu", bootstrap_iters=0)


def test_a_damaged_cached_copy_of_a_tasks_data_names_the_task(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The data read once into the datasets cache, then that copy damaged: the next run names
    the task and the cache, not pyarrow's bare OSError."""
    folder = task_folder(tmp_path, "zoo_cached")
    argv = ["eval", str(checkpoint), "--tasks", "zoo_cached", "--include-path", str(folder), "--device", "cpu"]
    assert main([*argv, "--bootstrap-iters", "0"]) == 0
    capsys.readouterr()
    (copy,) = (tmp_path / "datasets").rglob("*.arrow")
    data = copy.read_bytes()
    copy.write_bytes(data[: len(data) // 2] + b"\xff" * (len(data) - len(data) // 2))
    assert main([*argv, "--bootstrap-iters", "0"]) == 1
    ending_error(
        capsys.readouterr().err, "the data of the task 'zoo_cached' is damaged", "delete its copy in the datasets cache"
    )


@pytest.mark.slow  # indexes lm-eval's own thousands of tasks
def test_a_built_in_task_not_cached_offline_names_the_variables(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(checkpoint), "--tasks", "lambada_openai", "--device", "cpu"]) == 1
    ending_error(
        capsys.readouterr().err, "the task 'lambada_openai' needs data from the Hugging Face hub", "HF_HUB_OFFLINE"
    )


def test_an_error_met_after_loading_names_every_task_it_may_be_of() -> None:
    """Met while lm-eval reads the documents, after every task loaded: the tasks it may be
    of are named; an error that is not about data (or the zoo's own) is left as it is."""
    from zoo.task_checks import task_data_error

    try:
        open("/no-such-folder/rows.jsonl")  # noqa: SIM115 - the real error, from the OS
    except FileNotFoundError as err:
        found = task_data_error(["zoo_a", "zoo_b"], err)
    assert found is not None and str(found).startswith("the task 'zoo_a' or 'zoo_b' cannot find its data")
    assert task_data_error("zoo_a", KeyError("question")) is None
    assert task_data_error("zoo_a", zoo.InputError("said already")) is None
