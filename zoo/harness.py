"""lm-evaluation-harness on zoo models: ``zoo.evaluate_tasks`` and ``zoo eval MODEL --tasks``.

``ZooLM`` is an ``lm_eval`` model class, registered with lm-eval as ``"zoo"``
(``lm_eval.simple_evaluate(model="zoo", model_args="pretrained=PATH")`` once this module
is imported). It answers the three request types the harness asks of a model:

- ``loglikelihood``: the log-probability of each continuation after its context, and
  whether greedy decoding gives it; the pairs are tokenized by lm-eval's own
  ``TemplateLM`` (the context's trailing spaces move to the continuation, an empty
  context is the tokenizer's start token), as its ``hf`` model does;
- ``loglikelihood_rolling``: a text's log-likelihood in lm-eval's windows of ``max_seq_len``;
- ``generate_until``: greedy (or sampled) continuations, left-padded in batches, as the
  ``hf`` model makes them: each row ends at the model's end-of-sequence ids (its
  ``generation_config``'s, else its tokenizer's end-of-text, where ``zoo.generate_text``
  ends and what ``zoo.to_hf`` states in the export's ``config.json``), the tokens kept
  through that id are decoded skipping special tokens, and the text is cut at the first
  stop string (the task's, and the tokenizer's end-of-text as text). Every row
  generates ``max_gen_toks`` tokens unless all reach their end; cutting the text then
  gives the text the ``hf`` model's stopping at the string gives.

Requests run longest first, ``batch_size`` at a time, on the model's device; the numbers
equal lm-eval's ``hf`` model's on the ``zoo.to_hf`` export (tests/test_harness.py runs
both). lm-eval is the optional ``eval`` extra: ``pip install 'zoo-lm[eval]'``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.bounds import check_elements
from zoo.decoding import generate
from zoo.errors import ConfigError, InputError, check_flag, checked_types, printable, quoted
from zoo.nn.model import DecoderLM
from zoo.pipelines import eos_ids, load_with_tokenizer, model_tokenizer
from zoo.task_checks import check_generation, checked_tasks, refuse_task_code, task_data_error
from zoo.text.tokenizers import Tokenizer

NO_LM_EVAL = (
    "evaluating on tasks needs lm-evaluation-harness, which is not installed; install the eval extra: "
    "pip install 'zoo-lm[eval]'"
)

try:
    from lm_eval import simple_evaluate
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import register_model
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.models.utils import Collator, handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    HAVE_LM_EVAL = True
except ModuleNotFoundError as err:  # the module still imports (zoo's facade names it); using it says what to install
    if not (err.name or "").startswith("lm_eval"):
        raise
    HAVE_LM_EVAL = False
    TemplateLM = object

    def register_model(*names: str) -> Any:
        return lambda cls: cls


def require_lm_eval() -> None:
    """A ``ConfigError`` naming the eval extra unless lm-eval is installed."""
    if not HAVE_LM_EVAL:
        raise ConfigError(NO_LM_EVAL)


__all__ = ["ZooLM", "evaluate_tasks"]

#: Request = ((context, continuation) or None, context ids, continuation ids), as TemplateLM makes them.
Request = tuple[tuple[str, str] | None, list[int], list[int]]


@register_model("zoo")
class ZooLM(TemplateLM):  # type: ignore[misc]  # lm_eval ships no type information
    """A zoo decoder-only model as lm-eval's model: ``pretrained`` is a model, a zoo
    checkpoint, a Hugging Face folder or a hub id (``revision``, ``version`` pick as in
    ``zoo.load_model``); ``tokenizer`` as ``zoo.generate_text`` takes it (default: the
    model's own). ``batch_size`` sequences per forward; ``device`` moves the model
    (default: where it is, a loaded one on CUDA when there is one); ``max_length`` is the
    context (default ``max_seq_len``); ``max_gen_toks`` generated tokens when a task says
    none (256, lm-eval's default)."""

    def __init__(
        self,
        pretrained: nn.Module | str | os.PathLike[str],
        *,
        tokenizer: Tokenizer | str | os.PathLike[str] | None = None,
        batch_size: int | str | None = 8,
        device: str | torch.device | None = None,
        max_length: int | None = None,
        max_gen_toks: int = 256,
        revision: str | None = None,
        version: int | None = None,
        **unused: Any,
    ) -> None:
        require_lm_eval()
        super().__init__()
        if unused:
            raise InputError(
                f"the zoo model takes no {', '.join(sorted(unused))}; its arguments are pretrained, tokenizer, "
                f"batch_size, device, max_length, max_gen_toks, revision and version"
            )
        model, own = load_with_tokenizer(pretrained, revision=revision, version=version, carried=tokenizer is None)
        self.tok = model_tokenizer(model, pretrained, own, tokenizer)
        if device is None and not isinstance(pretrained, nn.Module) and torch.cuda.is_available():
            device = "cuda"
        self.model: DecoderLM = (model.to(device) if device is not None else model).eval()
        self.batch_size = _count(8 if batch_size in (None, "auto") else batch_size, "batch_size")
        self.max_length = _count(max_length or model.config.max_seq_len, "max_length")
        self.max_gen_toks = _count(max_gen_toks, "max_gen_toks")
        if self.tok.eot_token_id is None:
            raise ConfigError(
                f"the tokenizer {printable(self.tok.name)!r} has no end-of-text token, which lm-eval needs (to "
                f"start an empty context and end generations); pass one that has (tokenizer=..., --tokenizer)"
            )
        self._eot: int = self.tok.eot_token_id
        self._ends = eos_ids(self.model, self.tok)  # where a generation ends: the model's EOS ids, else the eot
        self._specials = self.tok.encode("")  # what encode adds to every text (a BOS), to leave out when asked
        self._chat: bool | str = True  # the template apply_chat_template uses (evaluate_tasks names it)

    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def prefix_token_id(self) -> int:
        start = self.tok.start_token_id
        return self._eot if start is None else start

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def tokenizer_name(self) -> str:
        return self.tok.name

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The tokenizer's chat template (``True``), or its template named ``chat_template``,
        as lm-eval's ``hf`` model picks it; None when none is asked for."""
        if chat_template is False or chat_template is None:
            return None
        found = getattr(self.tok, "chat_template", None)
        if isinstance(found, list):  # transformers' list of {"name", "template"}
            found = {item.get("name"): item.get("template") for item in found if isinstance(item, dict)}
        if isinstance(found, dict):
            name = chat_template if isinstance(chat_template, str) else "default"
            if not isinstance(found.get(name), str):
                raise InputError(
                    f"the tokenizer {quoted(self.tok.name)} has no chat template {quoted(name)}; it has "
                    f"{', '.join(map(quoted, sorted(map(str, found))))} (--apply-chat-template NAME)"
                )
            found = found[name]
        if not isinstance(found, str) or not found:
            raise InputError(
                f"the tokenizer {quoted(self.tok.name)} has no chat template (tokenizer_config.json's chat_template "
                f"or chat_template.jinja); drop --apply-chat-template (apply_chat_template=...)"
            )
        return found

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The conversation as the chat template writes it, as transformers renders it: the
        assistant's turn opened (``add_generation_prompt``), else its last message continued."""
        template = self.chat_template(self._chat)
        assert template is not None  # lm-eval asks only when a template applies
        special = getattr(self.tok, "special_tokens", {})
        return render_chat(template, chat_history, add_generation_prompt, special)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """The tokenizer's ids of ``string``; without the tokens it adds to every text (a BOS)
        when ``add_special_tokens`` is False, or when ``string`` already starts with its BOS."""
        ids = self.tok.encode(string)
        bos = self.tok.bos_token_id
        starts_with_bos = bos is not None and string.startswith(self.tok.decode([bos]))
        drop = add_special_tokens is False or (add_special_tokens is None and starts_with_bos)
        if drop and self._specials and ids[: len(self._specials)] == self._specials:
            ids = ids[len(self._specials) :]
        return ids

    def _loglikelihood_tokens(self, requests: list[Request], disable_tqdm: bool = False, **kwargs: Any) -> list[Any]:
        """Per request, (sum of the continuation's log-probabilities, is it the greedy choice),
        in batches of ``batch_size`` sorted longest first, each right-padded."""
        order = Collator(requests, sort_fn=lambda r: (-len(r[1] + r[2]), tuple(r[1] + r[2])))
        results: list[tuple[float, bool]] = []
        for chunk in order.get_batched(n=self.batch_size):
            rows = [(context + continuation)[-(self.max_length + 1) :][:-1] for _, context, continuation in chunk]
            width = max(len(row) for row in rows)
            batch = torch.tensor([row + [0] * (width - len(row)) for row in rows], device=self.device)
            logprobs = self._log_softmax(batch)
            for (_, _, continuation), row, scores in zip(chunk, rows, logprobs):
                targets = torch.tensor(continuation, device=self.device)
                picked = scores[len(row) - len(continuation) : len(row)]
                total = picked.gather(1, targets[:, None]).sum()
                results.append((float(total), bool((picked.argmax(-1) == targets).all())))
        return list(order.get_original(results))

    def _log_softmax(self, batch: Tensor) -> Tensor:
        """Log-probabilities of the next token at every position of ``batch`` (B, S): (B, S, V), float32."""
        check_elements(
            batch.numel() * self.model.config.vocab_size, 4, f"one batch's log-probabilities ({batch.shape[0]} rows "
            f"of {batch.shape[1]} tokens)", "--batch-size", key="", device=self.device, error=InputError,
        )  # fmt: skip
        with torch.no_grad():
            return F.log_softmax(self.model(batch).float(), dim=-1)

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Each text's log-likelihood, summed over lm-eval's disjoint windows of the context."""
        windows: list[Request] = []
        owners: list[int] = []
        for index, (text,) in enumerate(request.args for request in requests):
            rolling = get_rolling_token_windows(
                token_list=self.tok_encode(text),
                prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length,
                context_len=1,
            )
            for context, continuation in map(make_disjoint_window, rolling):
                windows.append((None, context, continuation))
                owners.append(index)
        totals = [0.0] * len(requests)
        for owner, (logprob, _) in zip(owners, self._loglikelihood_tokens(windows)):
            totals[owner] += logprob
        return totals

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Each context's continuation, cut at its stop strings; requests that share their
        generation settings run together, longest first, left-padded."""
        for task, settings in {request.task_name: request.args[1] for request in requests}.items():
            check_generation(task, settings)
        order = Collator(
            [request.args for request in requests],
            sort_fn=lambda r: (-len(self.tok_encode(r[0])), r[0]),
            group_by="gen_kwargs",
            group_fn=lambda r: r[1],
        )
        results: list[str] = []
        for chunk in order.get_batched(n=self.batch_size):
            contexts = [context for context, _ in chunk]
            results += self._generate(contexts, chunk[0][1])
        return list(order.get_original(results))

    def _generate(self, contexts: Sequence[str], settings: dict[str, Any]) -> list[str]:
        """Continuations of ``contexts``, all with one task's ``generation_kwargs``."""
        kwargs = dict(normalize_gen_kwargs(settings, self.max_gen_toks))
        until = handle_stop_sequences(kwargs.pop("until", None), eos=self.tok.decode([self._eot]))
        new_tokens = kwargs.pop("max_gen_toks")
        room = self.max_length - new_tokens
        if room < 1:
            raise InputError(
                f"the task asks for {new_tokens} new tokens, which leaves no room for a context in the model's "
                f"{self.max_length}; lower its max_gen_toks"
            )
        sampling: dict[str, Any] = {"do_sample": bool(kwargs.pop("do_sample", False))}
        if sampling["do_sample"]:
            sampling.update({key: kwargs[key] for key in ("temperature", "top_k", "top_p") if key in kwargs})
        if kwargs.get("repetition_penalty") is not None:  # the hf model passes it on, greedy or not
            sampling["repetition_penalty"] = kwargs["repetition_penalty"]
        rows = [self.tok_encode(context)[-room:] for context in contexts]
        width = max(len(row) for row in rows)
        pad = self._ends[0] if self._ends else self._eot
        ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows], device=self.device)
        mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], device=self.device)
        with torch.no_grad():
            out = generate(
                self.model, ids, new_tokens, attention_mask=mask, eos_token_id=self._ends, **sampling
            )  # fmt: skip
        texts = []
        for new in out[:, width:].tolist():
            # through the row's end (what follows is padding), its special tokens left out, as the hf model decodes
            end = next((i + 1 for i, token in enumerate(new) if token in self._ends), len(new))
            text = self.tok.decode(new[:end], skip_special_tokens=True)
            texts.append(postprocess_generated_text(text, until, None))
        return texts


def render_chat(
    template: str, messages: list[dict[str, str]], add_generation_prompt: bool, special: dict[str, Any]
) -> str:
    """``template`` (Jinja) over ``messages`` in a sandbox, with transformers' settings and
    helpers; without ``add_generation_prompt`` the text ends where the last message does
    (transformers' ``continue_final_message``)."""
    import jinja2.ext
    import jinja2.sandbox

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda f: datetime.now().strftime(f))
    try:
        text = env.from_string(template).render(
            messages=messages, tools=None, documents=None, add_generation_prompt=add_generation_prompt, **special
        )
    except jinja2.exceptions.TemplateError as err:
        raise InputError(f"the tokenizer's chat template fails on a request: {printable(str(err))[:200]}") from err
    if not add_generation_prompt and messages:
        last = messages[-1]["content"]
        at = text.rfind(last.strip())
        if at >= 0:
            kept = len(last.lstrip()) if text[at : at + len(last.lstrip())] == last else len(last.strip())
            text = text[: at + kept]
    return text


def _count(value: object, name: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)  # from lm-eval's model_args string
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _task_manager(names: Sequence[str], include_path: str | os.PathLike[str] | None, trust_task_code: bool) -> Any:
    """lm-eval's index of tasks: the folder's alone when it holds every task named (indexing
    lm-eval's own thousands of tasks takes a minute), else lm-eval's with the folder's.
    Indexing reads the YAML files without importing their Python; a task of the folder's
    that names Python is refused here, before lm-eval loads it, unless ``trust_task_code``."""
    tasks = checked_tasks()
    if include_path is not None:
        folder = tasks(include_path=str(include_path), include_defaults=False)
        if not trust_task_code:
            refuse_task_code(folder.task_index, names, Path(include_path))
        if all(name in folder.all_tasks for name in names):
            return folder
    return tasks(include_path=None if include_path is None else str(include_path))


#: lm-eval's seeds (``--seed 0,1234,1234,1234``): Python's, numpy's, torch's, the few-shot sampler's.
SEEDS = ("random_seed", "numpy_random_seed", "torch_random_seed", "fewshot_random_seed")
DEFAULT_SEEDS = (0, 1234, 1234, 1234)


@checked_types()
def evaluate_tasks(
    model_or_path: nn.Module | str | os.PathLike[str],
    tasks: str | Iterable[str],
    *,
    include_path: str | os.PathLike[str] | None = None,
    tokenizer: Tokenizer | str | os.PathLike[str] | None = None,
    batch_size: int = 8,
    device: str | None = None,
    limit: int | float | None = None,
    num_fewshot: int | None = None,
    bootstrap_iters: int = 100000,
    log_samples: bool = False,
    output_path: str | os.PathLike[str] | None = None,
    apply_chat_template: bool | str = False,
    seed: int | Sequence[int | None] | None = None,
    trust_task_code: bool = False,
    revision: str | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    """Run lm-eval's ``tasks`` (names, or a comma-separated string) on the model, through
    ``lm_eval.simple_evaluate`` and ``ZooLM``; returns lm-eval's results dictionary
    (``["results"][task][metric + ",none"]``). The options mean what lm-eval's own do:
    ``include_path``: a folder of task YAML files beside lm-eval's own; ``limit``: the
    first N documents of each task (a fraction below 1: that share of them);
    ``bootstrap_iters``: resamples for the standard errors lm-eval bootstraps (0: none);
    ``log_samples``: each document's requests and answers (``["samples"]``);
    ``output_path``: where lm-eval's ``EvaluationTracker`` writes its results file
    (``PATH/MODEL/results_DATE.json``, and ``samples_TASK_DATE.jsonl`` with
    ``log_samples``; ``["results_file"]`` names it); ``apply_chat_template``: the tokenizer's chat template (or the one
    named) around each request; ``seed``: one int for lm-eval's four seeds, or four
    (Python, numpy, torch, few-shot; None leaves one unset), default lm-eval's.

    A task of ``include_path`` whose YAML names Python (``!function utils.f``, a task
    ``class``, a ``.py`` file beside it) runs that Python: it is refused unless
    ``trust_task_code=True``, which also passes lm-eval's ``confirm_run_unsafe_code``
    (the tasks lm-eval marks ``unsafe_code``, which run the model's code)."""
    require_lm_eval()
    for flag, name in ((log_samples, "log_samples"), (trust_task_code, "trust_task_code")):
        check_flag(flag, name)
    if not isinstance(apply_chat_template, (bool, str)):
        raise InputError(
            f"apply_chat_template must be True or False, or the name of one of the tokenizer's chat templates; "
            f"got {type(apply_chat_template).__name__} {quoted(apply_chat_template, 60)}"
        )
    _count(batch_size, "batch_size")
    _check_counts(limit, num_fewshot, bootstrap_iters)
    seeds = _seeds(seed)
    names = _task_names(tasks)
    if include_path is not None and not Path(include_path).is_dir():
        raise InputError(f"include_path {printable(str(include_path))!r} is not a folder of task YAML files")
    lm = ZooLM(  # first, as simple_evaluate orders it: a bad model is refused before the tasks are indexed
        model_or_path, tokenizer=tokenizer, batch_size=batch_size, device=device, revision=revision, version=version
    )
    lm._chat = apply_chat_template if isinstance(apply_chat_template, str) else True
    lm.chat_template(apply_chat_template)  # refused here, not after the tasks load
    manager = _task_manager(names, include_path, trust_task_code)
    missing = [name for name in names if name not in manager.all_tasks]
    if missing:
        raise InputError(
            f"lm-eval knows no task {', '.join(map(repr, map(printable, missing)))}; list them with "
            f"`lm_eval ls tasks`, or give a folder of task YAML files (include_path=..., --include-path DIR)"
        )
    named = {} if isinstance(model_or_path, nn.Module) else {"pretrained": str(model_or_path)}
    tracker = EvaluationTracker(output_path=str(output_path)) if output_path is not None else None
    results = _run(
        lm,
        names,
        manager,
        tracker,
        model_args=named,
        limit=limit,
        num_fewshot=num_fewshot,
        bootstrap_iters=bootstrap_iters,
        log_samples=log_samples,
        apply_chat_template=apply_chat_template,
        confirm_run_unsafe_code=trust_task_code,
        **dict(zip(SEEDS, seeds)),
    )
    if output_path is not None:
        _save(tracker, results, log_samples, Path(output_path))
    return results


def _check_counts(limit: object, num_fewshot: object, bootstrap_iters: object) -> None:
    if not (isinstance(limit, float) and 0 < limit < 1):  # lm-eval's fraction of each task
        _at_least(limit, "limit", 1, " (or a fraction below 1)")
    _at_least(num_fewshot, "num_fewshot", 0)
    _at_least(bootstrap_iters, "bootstrap_iters", 0, nullable=False)


def _at_least(value: object, name: str, least: int, more: str = "", *, nullable: bool = True) -> None:
    if (value is not None or not nullable) and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        raise InputError(f"{name} must be an integer >= {least}{more}{' or None' if nullable else ''}, got {value!r}")


def _seeds(seed: object) -> tuple[int | None, ...]:
    """lm-eval's four seeds from ``seed``: None (its defaults), one int (all four), or four."""
    if seed is None:
        return DEFAULT_SEEDS
    values = [seed] * len(SEEDS) if isinstance(seed, int) else seed
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, Sequence)
        or len(values) != len(SEEDS)
        or any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in values)
    ):
        raise InputError(
            f"seed is one integer for lm-eval's four seeds, or four integers or None ({', '.join(SEEDS)}), "
            f"got {printable(repr(seed))[:80]}"
        )
    return tuple(values)


def _task_names(tasks: object) -> list[str]:
    """Task names from names, or from one string of them separated by commas."""
    if isinstance(tasks, (bytes, bytearray)) or not isinstance(tasks, (str, Iterable)):
        raise InputError(f"tasks are task names, or one string of them separated by commas; got {type(tasks).__name__}")
    listed = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    if not all(isinstance(name, str) for name in listed):
        raise InputError("tasks are task names (strings), or one string of them separated by commas")
    names = [name.strip() for name in listed if name.strip()]
    if not names:
        raise InputError("name at least one task, e.g. tasks='hellaswag' (zoo eval MODEL --tasks hellaswag)")
    return names


def _run(lm: ZooLM, names: list[str], manager: Any, tracker: Any, **options: Any) -> dict[str, Any]:
    """``simple_evaluate`` on the loaded model, lm-eval's refusal of unsafe tasks as the zoo's."""
    try:
        results = simple_evaluate(model=lm, tasks=names, task_manager=manager, evaluation_tracker=tracker, **options)
    except Exception as err:
        found = task_data_error(names, err)  # met while reading the documents, after loading
        if found is not None:
            raise found from err
        if not isinstance(err, ValueError) or "marked as unsafe" not in str(err):
            raise
        raise InputError(
            f"{printable(str(err).partition('.')[0])}: it runs the code the model writes; run it only in a "
            f"sandbox you trust: add --trust-task-code (trust_task_code=True, lm-eval's confirm_run_unsafe_code)"
        ) from err
    if results is None:  # pragma: no cover - only ranks other than 0 of a distributed run get None
        raise InputError("lm-eval returned no results")
    return dict(results)


def _save(tracker: Any, results: dict[str, Any], log_samples: bool, output_path: Path) -> None:
    """lm-eval's own files, by its ``EvaluationTracker`` as its CLI writes them: the results
    (without the samples) and, with ``log_samples``, each task's samples; ``results`` keeps
    what the API returns. The tracker logs a failure to write instead of raising: a file
    that is not there after it is a ``ConfigError`` naming the path."""
    samples = copy.deepcopy(results.get("samples")) if log_samples else None
    shown = {key: value for key, value in results.items() if key != "samples"}
    tracker.save_results_aggregated(results=shown, samples=samples)
    if samples is not None:
        for task in shown["configs"]:
            tracker.save_results_samples(task_name=task, samples=samples[task])
    date = getattr(tracker, "date_id", None)
    folder = (
        output_path.parent
        if output_path.suffix == ".json"
        else output_path / str(tracker.general_config_tracker.model_name_sanitized)
    )
    name = f"{output_path.stem}_{date}.json" if output_path.suffix == ".json" else f"results_{date}.json"
    if date is None or not (folder / name).is_file():
        raise ConfigError(
            f"lm-eval could not write its results under --output-path {quoted(str(output_path))}; give a folder "
            f"you can write to"
        )
    results["results_file"] = str(folder / name)
