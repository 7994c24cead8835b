"""lm-evaluation-harness on zoo models (zoo.harness, ``zoo eval --tasks``): the numbers
equal those of lm-eval's own ``hf`` model on the same weights exported with ``zoo.to_hf``.

The tasks are defined here, over local jsonl files (a multiple-choice task, a generation
task, a rolling log-likelihood task); nothing downloads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("transformers")

import zoo  # noqa: E402
from helpers import tiny, train_tokenizer  # noqa: E402
from zoo.checkpoint.tokenizer import embedded_record, folder_files  # noqa: E402
from zoo.cli import main  # noqa: E402

EOT = "<|endoftext|>"
TASKS = ("zoo_mc", "zoo_gen", "zoo_gen_penalty", "zoo_text")

MC = [
    {"question": "Romeo loves", "choices": ["Juliet", "the king", "a horse", "nothing"], "answer": 0},
    {"question": "To be, or not to", "choices": ["be", "sing", "run"], "answer": 0},
    {"question": "My lord,", "choices": [" I", " you", " we"], "answer": 1},  # leading spaces: the context's own
    {"question": "What light through yonder window ", "choices": ["breaks", "falls"], "answer": 0},
    {"question": "", "choices": ["First Citizen:", "Second Citizen:"], "answer": 1},  # empty context: the start token
    {"question": "Now is the winter of our", "choices": ["discontent", "joy", "summer", "lord"], "answer": 3},
]
GEN = [
    {"prompt": "First Citizen:\nBefore we proceed", "answer": " any further"},
    {"prompt": "ROMEO:", "answer": " I"},
    {"prompt": "Speak, speak.", "answer": "\n"},
    {"prompt": "KING", "answer": " RICHARD"},
    {"prompt": "O", "answer": "h"},
]
TEXT = [
    {"text": "All the world's a stage, and all the men and women merely players."},
    {"text": " ".join(["Friends, Romans, countrymen, lend me your ears; I come to bury Caesar."] * 6)},  # > one window
    {"text": "Good night, good night! Parting is such sweet sorrow."},
]


def _write_tasks(folder: Path, cache: Path) -> Path:
    """Three lm-eval task YAML files over jsonl files in ``folder``."""
    folder.mkdir(parents=True)
    common = {"dataset_path": "json", "test_split": "test"}
    specs: dict[str, dict[str, Any]] = {
        "zoo_mc": {
            "output_type": "multiple_choice",
            "doc_to_text": "{{question}}",
            "doc_to_choice": "{{choices}}",
            "doc_to_target": "{{answer}}",
            "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
        },
        "zoo_gen": {
            "output_type": "generate_until",
            "doc_to_text": "{{prompt}}",
            "doc_to_target": "{{answer}}",
            "generation_kwargs": {"until": ["\n", "."], "max_gen_toks": 6, "do_sample": False},
            "metric_list": [{"metric": "exact_match"}],
        },
        "zoo_gen_penalty": {  # transformers' repetition penalty, greedy
            "output_type": "generate_until",
            "doc_to_text": "{{prompt}}",
            "doc_to_target": "{{answer}}",
            "generation_kwargs": {
                "until": ["never said"],
                "max_gen_toks": 8,
                "do_sample": False,
                "repetition_penalty": 3.0,
            },
            "metric_list": [{"metric": "exact_match"}],
        },
        "zoo_gen_long": {  # no stop string it says: only where the model's text ends ends it
            "output_type": "generate_until",
            "doc_to_text": "{{prompt}}",
            "doc_to_target": "{{answer}}",
            "generation_kwargs": {"until": ["never said"], "max_gen_toks": 8, "do_sample": False},
            "metric_list": [{"metric": "exact_match"}],
        },
        "zoo_text": {
            "output_type": "loglikelihood_rolling",
            "doc_to_text": "",
            "doc_to_target": "{{text}}",
            "metric_list": [{"metric": "word_perplexity"}, {"metric": "byte_perplexity"}, {"metric": "bits_per_byte"}],
        },
    }
    data = {"zoo_mc": MC, "zoo_gen": GEN, "zoo_gen_long": GEN, "zoo_gen_penalty": GEN, "zoo_text": TEXT}
    for name, spec in specs.items():
        rows = folder / f"{name}.jsonl"
        rows.write_text("".join(json.dumps(row) + "\n" for row in data[name]))
        kwargs = {"data_files": {"test": str(rows)}, "cache_dir": str(cache)}
        (folder / f"{name}.yaml").write_text(json.dumps({"task": name, **common, "dataset_kwargs": kwargs, **spec}))
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny GPT-2 that carries a trained byte-level BPE: as a zoo checkpoint, and exported
    to a Hugging Face folder by ``zoo.to_hf`` alone (the tokenizer's files, and the
    end-of-sequence id where the zoo ends its text, the tokenizer's end-of-text)."""
    root = tmp_path_factory.mktemp("harness")
    tokenizer = train_tokenizer(root / "tokenizer", "bpe", vocab_size=300, eos_token=EOT, bos_token=EOT)
    vocab = zoo.tokenizer(tokenizer).vocab_size
    model = tiny(vocab_size=vocab, max_seq_len=48)
    model.tokenizer_record = embedded_record(folder_files(tokenizer))
    checkpoint = root / "model.safetensors"
    zoo.save(model, checkpoint)
    export = zoo.to_hf(model, root / "export")
    tasks = _write_tasks(root / "tasks", root / "datasets")
    return {"tokenizer": tokenizer, "checkpoint": checkpoint, "export": export, "tasks": tasks}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")


def hf_results(export: Path, tasks: Path, names: Sequence[str] = TASKS, **options: Any) -> dict[str, Any]:
    """lm-eval's ``hf`` model on a Hugging Face folder: the numbers to equal."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    with pytest.MonkeyPatch.context() as mp:
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            mp.setenv(name, "1")
        results = lm_eval.simple_evaluate(
            model="hf",
            model_args={"pretrained": str(export), "dtype": "float32"},
            tasks=list(names),
            task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
            device="cpu",
            batch_size=2,
            bootstrap_iters=0,
            log_samples=True,
            **options,
        )
    assert results is not None
    return dict(results)


@pytest.fixture(scope="module")
def reference(setup: dict[str, Path]) -> dict[str, Any]:
    return hf_results(setup["export"], setup["tasks"])


def _responses(results: dict[str, Any], task: str) -> list[Any]:
    return [sample["filtered_resps"] for sample in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def _assert_same(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for task in TASKS:
        assert set(ours[task]) == set(theirs[task]), task
        for key, value in theirs[task].items():
            if isinstance(value, float):
                assert ours[task][key] == pytest.approx(value, rel=1e-5, abs=1e-6), (task, key)
            else:
                assert ours[task][key] == value, (task, key)


@pytest.mark.parametrize("batch_size", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_zoo_model_answers_every_request_as_the_hf_model(
    setup: dict[str, Path], reference: dict[str, Any], batch_size: int
) -> None:
    """Per document: the multiple-choice log-likelihoods and greedy flags, the generated
    text, and the rolling log-likelihood; then every metric of every task."""
    results = zoo.evaluate_tasks(
        zoo.load(setup["checkpoint"]),
        TASKS,
        include_path=setup["tasks"],
        tokenizer=str(setup["tokenizer"]),
        batch_size=batch_size,
        bootstrap_iters=0,
        log_samples=True,
    )
    for task in ("zoo_mc", "zoo_text"):
        ours, theirs = _responses(results, task), _responses(reference, task)
        assert len(ours) == len(theirs) == len(MC if task == "zoo_mc" else TEXT)
        for mine, hf in zip(ours, theirs):
            values = [r[0] if isinstance(r, (list, tuple)) else r for r in mine]
            expected = [r[0] if isinstance(r, (list, tuple)) else r for r in hf]
            assert values == pytest.approx(expected, abs=1e-4)
    for task in ("zoo_gen", "zoo_gen_penalty"):
        assert _responses(results, task) == _responses(reference, task), task
        assert any(text != [""] for text in _responses(results, task))  # it did generate
    _assert_same(results["results"], reference["results"])


def test_zoo_eval_tasks_on_the_export_and_on_a_checkpoint(
    setup: dict[str, Path], reference: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI on the Hugging Face folder (its tokenizer found beside it) and on the zoo
    checkpoint (``--tokenizer``): lm-eval's results, the hf model's numbers."""
    common = ["--tasks", ",".join(TASKS), "--include-path", str(setup["tasks"]), "--bootstrap-iters", "0", "--json"]
    for source, extra in ((setup["export"], []), (setup["checkpoint"], ["--tokenizer", str(setup["tokenizer"])])):
        assert main(["eval", str(source), *common, *extra, "--device", "cpu"]) == 0
        shown = json.loads(capsys.readouterr().out)
        _assert_same(shown["results"], reference["results"])
    assert main(["eval", str(setup["export"]), "--tasks", "zoo_mc", "--include-path", str(setup["tasks"])]) == 0
    table = capsys.readouterr().out
    acc = reference["results"]["zoo_mc"]["acc,none"]
    assert "zoo_mc" in table and "acc_norm" in table and f"{acc:.4f}" in table


def test_the_export_states_where_the_zoo_ends_its_text(setup: dict[str, Path]) -> None:
    """transformers reads the tokenizer's end-of-text from the export, not GPT2Config's 50256."""
    eot = zoo.tokenizer(setup["tokenizer"]).eot_token_id
    assert json.loads((setup["export"] / "config.json").read_text())["eos_token_id"] == eot is not None


@pytest.mark.parametrize("batch_size", [1, 3])
def test_generations_end_at_the_models_own_eos_as_the_hf_model_ends_them(
    setup: dict[str, Path], tmp_path: Path, batch_size: int
) -> None:
    """A model whose ``generation_config`` ends text at two ordinary tokens (as a hub model's
    does, apart from its tokenizer's end-of-text): each row ends there, the token itself
    decoded, as transformers stops there on the export; with no stop string to cut."""
    model = zoo.load(setup["checkpoint"])
    first = [model.tokenizer.encode(row["prompt"]) for row in GEN[:2]]
    said = [model.generate(torch.tensor([ids]), 8, eos_token_id=[])[0, len(ids) :].tolist() for ids in first]
    ends = [said[0][2], said[1][4]]  # tokens greedy decoding says early
    assert model.tokenizer.eot_token_id not in ends
    model.generation_config = {"eos_token_id": ends}
    export = zoo.to_hf(model, tmp_path / "export")
    theirs = hf_results(export, setup["tasks"], ["zoo_gen_long"])
    ours = zoo.evaluate_tasks(
        model, ["zoo_gen_long"], include_path=setup["tasks"], batch_size=batch_size, bootstrap_iters=0, log_samples=True
    )
    assert _responses(ours, "zoo_gen_long") == _responses(theirs, "zoo_gen_long")
    for tokens, (shown,) in zip(said, _responses(ours, "zoo_gen_long")):  # each through its end, the end shown
        end = next(i for i, token in enumerate(tokens) if token in ends)
        assert shown == model.tokenizer.decode(tokens[: end + 1]) != model.tokenizer.decode(tokens)


def test_the_model_is_registered_with_lm_eval(setup: dict[str, Path], reference: dict[str, Any]) -> None:
    """lm-eval finds the zoo's model class by name, with its arguments as a string."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    import zoo.harness  # noqa: F401  # registers "zoo"

    results = lm_eval.simple_evaluate(
        model="zoo",
        model_args=f"pretrained={setup['checkpoint']},tokenizer={setup['tokenizer']},batch_size=4",
        tasks=["zoo_mc"],
        task_manager=TaskManager(include_path=str(setup["tasks"]), include_defaults=False),
        bootstrap_iters=0,
    )
    assert results is not None
    assert results["results"]["zoo_mc"]["acc,none"] == reference["results"]["zoo_mc"]["acc,none"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_numbers_are_the_same(setup: dict[str, Path], reference: dict[str, Any]) -> None:
    results = zoo.evaluate_tasks(
        setup["checkpoint"],
        TASKS,
        include_path=setup["tasks"],
        tokenizer=str(setup["tokenizer"]),
        device="cuda",
        bootstrap_iters=0,
    )
    _assert_same(results["results"], reference["results"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(  # looked for among lm-eval's own tasks too: indexing them takes a minute
            ["--tasks", "no_such_task"], "lm-eval knows no task 'no_such_task'", marks=pytest.mark.slow
        ),
        (["--tasks", "zoo_mc", "--data", "somewhere"], "--data measure loss on data; --tasks runs lm-eval's tasks"),
        (["--tasks", "zoo_mc", "--split", "train"], "--split measure loss on data"),
    ],
)
def test_bad_task_requests_are_refused_with_the_fix(
    setup: dict[str, Path], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["eval", str(setup["export"]), "--include-path", str(setup["tasks"]), *argv]) == 1
    assert message in capsys.readouterr().err


def test_a_missing_include_path_is_refused(setup: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(zoo.InputError, match="is not a folder of task YAML files"):
        zoo.evaluate_tasks(setup["export"], "zoo_mc", include_path=tmp_path / "absent")


def test_without_lm_eval_the_eval_extra_is_named(
    setup: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """zoo.harness imports without lm-eval (the facade names evaluate_tasks); using it says what to install."""
    import zoo.harness

    monkeypatch.setattr(zoo.harness, "HAVE_LM_EVAL", False)
    with pytest.raises(zoo.ConfigError, match=r"pip install 'zoo-lm\[eval\]'"):
        zoo.evaluate_tasks(setup["export"], "zoo_mc")
    assert main(["eval", str(setup["export"]), "--tasks", "zoo_mc"]) == 1
    assert "install the eval extra: pip install 'zoo-lm[eval]'" in capsys.readouterr().err


def _task_with_code(folder: Path, cache: Path, sentinel: Path, *, tag: bool) -> Path:
    """A task folder whose one task names Python: ``utils.py`` (which would write
    ``sentinel`` when imported) beside a YAML that uses ``!function utils.f`` (``tag``),
    or beside it only."""
    folder.mkdir(parents=True)
    (folder / "utils.py").write_text(
        f"from pathlib import Path\nPath({str(sentinel)!r}).write_text('ran')\n\n\ndef f(doc):\n    return doc['question']\n"
    )
    rows = folder / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in MC[:2]))
    spec = {
        "task": "zoo_code",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(rows)}, "cache_dir": str(cache)},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{answer}}",
        "metric_list": [{"metric": "acc"}],
    }
    text = json.dumps({**spec, "doc_to_text": "{{question}}"})
    if tag:  # YAML, not JSON: the tag is YAML's
        text = text.rstrip("}") + ', "doc_to_text": !function utils.f}'
        text = text.replace('"doc_to_text": "{{question}}", ', "")
    (folder / "zoo_code.yaml").write_text(text)
    return folder


@pytest.mark.parametrize("tag", [True, False], ids=["function-tag", "py-beside"])
def test_task_code_runs_only_with_trust_task_code(
    setup: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], tag: bool
) -> None:
    """Without --trust-task-code: one line naming the task and the flag, and the folder's
    Python never imported (its sentinel file never written); with it, the task runs."""
    sentinel = tmp_path / "sentinel"
    folder = _task_with_code(tmp_path / "tasks", tmp_path / "datasets", sentinel, tag=tag)
    argv = ["eval", str(setup["export"]), "--tasks", "zoo_code", "--include-path", str(folder), "--device", "cpu"]
    assert main([*argv, "--bootstrap-iters", "0"]) == 1
    err = capsys.readouterr().err
    assert "the task 'zoo_code' from --include-path" in err and "--trust-task-code" in err
    assert "runs Python (utils.py beside zoo_code.yaml)" in err and len(err.strip().splitlines()) == 1
    assert not sentinel.exists()
    with pytest.raises(zoo.InputError, match="trust_task_code=True"):
        zoo.evaluate_tasks(setup["export"], "zoo_code", include_path=folder)
    assert not sentinel.exists()
    if tag:
        assert main([*argv, "--bootstrap-iters", "0", "--trust-task-code", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["results"]["zoo_code"]["acc,none"] in (0.0, 0.5, 1.0)
        assert sentinel.read_text() == "ran"


def test_tasks_without_code_need_no_trust(setup: dict[str, Path], tmp_path: Path) -> None:
    """A folder's task that names no Python runs without the flag (tests above do it too),
    and one that includes a file naming Python is refused."""
    sentinel = tmp_path / "sentinel"
    code = _task_with_code(tmp_path / "code", tmp_path / "datasets", sentinel, tag=True)
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "zoo_inc.yaml").write_text(json.dumps({"include": str(code / "zoo_code.yaml"), "task": "zoo_inc"}))
    with pytest.raises(zoo.InputError, match=r"the task 'zoo_inc' .* runs Python \(utils.py beside zoo_code.yaml\)"):
        zoo.evaluate_tasks(setup["export"], "zoo_inc", include_path=folder)
    assert not sentinel.exists()
    (folder / "zoo_inc.yaml").write_text(
        '{"include": "../code/zoo_code.yaml", "task": "zoo_fn", "doc_to_text": !function json.dumps}'
    )
    (code / "utils.py").unlink()
    with pytest.raises(zoo.InputError, match=r"the task 'zoo_fn' .* runs Python \(!function in zoo_inc.yaml\)"):
        zoo.evaluate_tasks(setup["export"], "zoo_fn", include_path=folder)
    (folder / "zoo_inc.yaml").write_text('{"include": "../code/zoo_code.yaml", "task": "zoo_fn"}')
    with pytest.raises(zoo.InputError, match=r"the task 'zoo_fn' .* runs Python \(!function in zoo_code.yaml\)"):
        zoo.evaluate_tasks(setup["export"], "zoo_fn", include_path=folder)


def _hf_files(export: Path, tasks: Path, out: Path, names: Sequence[str], **options: Any) -> dict[str, Any]:
    """What lm-eval's CLI writes for its ``hf`` model (``lm_eval run --model hf --output_path
    OUT --log_samples ...``): its own EvaluationTracker, called as its CLI calls it."""
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    tracker = EvaluationTracker(output_path=str(out))
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(export), "dtype": "float32"},
        tasks=list(names),
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        device="cpu",
        batch_size=2,
        bootstrap_iters=0,
        log_samples=True,
        evaluation_tracker=tracker,
        **options,
    )
    assert results is not None
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    return dict(results)


def _written(out: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The results file and each task's samples under an --output-path."""
    (results,) = out.glob("*/results_*.json")
    samples = {
        file.name.removeprefix("samples_").rpartition("_")[0]: [
            json.loads(line) for line in file.read_text().splitlines()
        ]
        for file in out.glob("*/samples_*.jsonl")
    }
    return json.loads(results.read_text()), samples


#: What a results file says of the tasks (the rest says which model, when, on which machine).
TASK_KEYS = ("results", "configs", "versions", "n-shot", "higher_is_better", "n-samples", "task_hashes")


def _as_float(text: object) -> float | None:
    """A number lm-eval wrote as text (``filtered_resps``: ``'-11.1105...'``), else None."""
    try:
        return float(text) if isinstance(text, str) and text.strip() not in ("", "nan") else None
    except ValueError:
        return None


def _same_numbers(ours: object, theirs: object, where: str) -> None:
    if _as_float(ours) is not None and _as_float(theirs) is not None:  # the float rule, for numbers written out
        _same_numbers(_as_float(ours), _as_float(theirs), where)
    elif isinstance(theirs, float) and isinstance(ours, float):
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6), where
    elif isinstance(theirs, dict) and isinstance(ours, dict):
        assert set(ours) == set(theirs), where
        for key in theirs:
            _same_numbers(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, list) and isinstance(ours, list):
        assert len(ours) == len(theirs), where
        for i, (mine, hf) in enumerate(zip(ours, theirs)):
            _same_numbers(mine, hf, f"{where}[{i}]")
    else:
        assert ours == theirs, where


def test_zoo_eval_writes_the_results_file_lm_evals_hf_model_writes(
    setup: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`zoo eval --tasks` with lm-eval's spellings (--num_fewshot, --limit, --output_path,
    --log_samples, --seed, --batch_size): the results file and the samples files equal
    those lm-eval's CLI writes for its hf model on the export, number for number."""
    names = ["zoo_mc", "zoo_gen"]
    seeds = {"random_seed": 3, "numpy_random_seed": 3, "torch_random_seed": 3, "fewshot_random_seed": 3}
    _hf_files(setup["export"], setup["tasks"], tmp_path / "hf", names, num_fewshot=1, limit=3, **seeds)
    common = ["--tasks", ",".join(names), "--include-path", str(setup["tasks"]), "--bootstrap-iters", "0"]
    lm_eval_flags = ["--num_fewshot", "1", "--limit", "3", "--seed", "3", "--batch_size", "3", "--log_samples"]
    argv = ["eval", str(setup["export"]), *common, *lm_eval_flags, "--output_path", str(tmp_path / "zoo")]
    assert main([*argv, "--device", "cpu", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    theirs, their_samples = _written(tmp_path / "hf")
    ours, our_samples = _written(tmp_path / "zoo")
    assert Path(shown["results-file"]) == next((tmp_path / "zoo").glob("*/results_*.json"))
    assert theirs["n-shot"] == {"zoo_mc": 1, "zoo_gen": 1} and theirs["n-samples"]["zoo_mc"]["effective"] == 3
    for key in TASK_KEYS:
        _same_numbers(ours[key], theirs[key], key)
    assert set(our_samples) == set(their_samples) == set(names)
    for task in names:
        for mine, hf in zip(our_samples[task], their_samples[task], strict=True):
            for key in ("doc_id", "doc_hash", "prompt_hash", "target_hash", "arguments", "filtered_resps", "target"):
                _same_numbers(mine[key], hf[key], f"{task}.{key}")
    assert ours["config"]["limit"] == 3 and ours["config"]["fewshot_seed"] == 3


def test_limit_as_a_fraction_and_output_path_errors(setup: dict[str, Path], tmp_path: Path) -> None:
    """lm-eval's --limit 0.5 takes half of each task; a results file that cannot be written is an error."""
    results = zoo.evaluate_tasks(setup["export"], "zoo_mc", include_path=setup["tasks"], limit=0.5, bootstrap_iters=0)
    assert results["n-samples"]["zoo_mc"]["effective"] == len(MC) // 2
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(zoo.ConfigError, match="could not write its results under --output-path"):
        zoo.evaluate_tasks(setup["export"], "zoo_mc", include_path=setup["tasks"], limit=1, output_path=blocker / "x")
    for bad in ({"limit": 1.5}, {"seed": [1, 2]}, {"seed": "1"}, {"num_fewshot": -1}):
        with pytest.raises(zoo.InputError):
            zoo.evaluate_tasks(setup["export"], "zoo_mc", include_path=setup["tasks"], **bad)  # type: ignore[arg-type]


def test_the_model_is_declared_where_lm_evals_discovery_reads() -> None:
    """The installed zoo declares ZooLM under lm-eval's model entry-point group."""
    import importlib.metadata

    import zoo.harness

    (entry,) = [e for e in importlib.metadata.entry_points(group="lm_eval.models") if e.name == "zoo"]
    assert entry.value == "zoo.harness:ZooLM" and entry.load() is zoo.harness.ZooLM


def test_lm_eval_discovers_the_model() -> None:
    """Where the installed lm-eval discovers backends from that group, `--model zoo`
    resolves to ZooLM in a fresh process that never imports zoo itself (lm-eval 0.4.13
    has no discovery yet: skipped there, as docs/evaluation.md says)."""
    import inspect
    import subprocess
    import sys

    import lm_eval.api.registry

    if "entry_points(" not in inspect.getsource(lm_eval.api.registry):
        pytest.skip(f"lm-eval {lm_eval.__version__} does not discover models from entry points")
    code = "from lm_eval.api.registry import get_model; c = get_model('zoo'); print(c.__module__, c.__name__)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["zoo.harness", "ZooLM"]


CHAT = (
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}> {{ m['content'] | trim }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.mark.parametrize("where", ["tokenizer_config.json", "chat_template.jinja"])
def test_a_chat_template_applies_as_in_the_hf_model(setup: dict[str, Path], tmp_path: Path, where: str) -> None:
    """--apply_chat_template: the tokenizer's template (in its config, or transformers 5's
    own file) around each request, carried through the checkpoint and the export; the
    numbers and generations equal the hf model's on the export."""
    import shutil

    folder = tmp_path / "tokenizer"
    shutil.copytree(setup["tokenizer"], folder)
    if where == "chat_template.jinja":
        (folder / where).write_text(CHAT)
    else:
        settings = json.loads((folder / where).read_text())
        (folder / where).write_text(json.dumps({**settings, "chat_template": CHAT}))
    model = zoo.load(setup["checkpoint"])
    model.tokenizer_record = embedded_record(folder_files(folder))
    export = zoo.to_hf(model, tmp_path / "export")
    names = ["zoo_mc", "zoo_gen"]
    theirs = hf_results(export, setup["tasks"], names, apply_chat_template=True)
    ours = zoo.evaluate_tasks(
        model, names, include_path=setup["tasks"], bootstrap_iters=0, log_samples=True, apply_chat_template=True
    )
    (first,) = [s for s in ours["samples"]["zoo_mc"] if s["doc_id"] == 0]
    assert first["arguments"][0][0].startswith(EOT + "<user> Romeo loves\n<assistant>")
    assert _responses(ours, "zoo_gen") == _responses(theirs, "zoo_gen")
    for mine, hf in zip(_responses(ours, "zoo_mc"), _responses(theirs, "zoo_mc")):
        assert [r[0] for r in mine] == pytest.approx([r[0] for r in hf], abs=1e-4)
    with pytest.raises(zoo.InputError, match="has no chat template 'other'|chat template"):
        zoo.evaluate_tasks(setup["checkpoint"], "zoo_mc", include_path=setup["tasks"], apply_chat_template=True)


def test_eval_help_names_the_trust_flag_and_lm_evals_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "-h"])
    shown = " ".join(capsys.readouterr().out.split())
    for said in ("--trust-task-code", "names Python", "confirm_run_unsafe_code", "--num_fewshot", "--output_path"):
        assert said in shown, said


def test_a_group_of_tasks_that_name_python_is_refused(setup: dict[str, Path], tmp_path: Path) -> None:
    """A group (or a tag) over a task whose folder holds Python is refused by the group's name."""
    sentinel = tmp_path / "sentinel"
    _task_with_code(tmp_path / "tasks" / "code", tmp_path / "datasets", sentinel, tag=True)
    (tmp_path / "tasks" / "group.yaml").write_text(json.dumps({"group": "zoo_group", "task": ["zoo_code"]}))
    with pytest.raises(zoo.InputError, match=r"the task 'zoo_group' .* runs Python \(utils.py beside zoo_code.yaml\)"):
        zoo.evaluate_tasks(setup["export"], "zoo_group", include_path=tmp_path / "tasks")
    assert not sentinel.exists()
