"""The options of an ablation and of a study, one field each, kept apart from the training
so that building the command line imports none of it; with the default scales, seed counts
and sweep offsets, the row orders, and the ``--scales`` parser.

Each field of ``Options`` (``run_ablation``'s keyword arguments) and ``StudyOptions``
(``run_study``'s own) carries a ``Flag``: its help, how ``zoo ablate`` spells it, and how
the command line reads it. From the fields come ``zoo ablate``'s flags and the defaults its
``-h`` states (``zoo.cli.ablate``, and from ``-h`` docs/ablation.md's table, ``make
docs-flags``), the command that repeats a run (``command``) and the options a record keeps
(``record``). Adding an option is two edits: its field here, and its use.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from zoo.ablate.stats import CORRECTIONS, DEFAULT_CORRECTION
from zoo.errors import ConfigError, InputError

#: The default scale: each of the nine runs of transformer-2017 -> gpt2-small takes a
#: few seconds of one CPU core (GPT-2 tokens with a 1024 + 256 vocabulary, or bytes).
DEFAULT_SCALE: dict[str, Any] = {
    "d_model": 64,
    "layers": 2,
    "heads": 4,
    "seq_len": 64,
    "steps": 150,
    "batch": 16,
    "lr": 3e-3,
    "eval_every": 25,
}
#: The scale of ``make demo``: the same runs, a fraction of the steps.
DEMO_SCALE: dict[str, Any] = {
    "d_model": 48,
    "layers": 2,
    "heads": 4,
    "seq_len": 48,
    "steps": 60,
    "batch": 12,
    "lr": 4e-3,
    "eval_every": 15,
}
#: Seeds per variant by default: the fewest that give an interval worth reading.
DEFAULT_SEEDS = 3
#: ``tune_lr``'s default grid: the learning rate times these (log-spaced, factor 2).
LR_GRID_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
#: When a variant's best rate is the lowest or highest its sweep trained, the sweep trains one
#: more rate past that edge (at the grid's spacing), at most this many times per side; a best
#: rate still on the edge after them is flagged (``AblationRun.on_edge``).
EDGE_EXTENSIONS = 2
#: ``tune_lr``'s default budget: this fraction of the steps, one seed.
TUNE_FRACTION = 0.25
#: The sweep's seed is the first seed plus this: not a compared seed, and the same
#: whatever the number of seeds (so adding seeds reuses the sweep).
TUNE_SEED_OFFSET = 1000
#: The tail of the training tokens a sweep run is scored on (and never trains on): a rate is
#: never chosen on the validation windows the tables report.
TUNE_HELD_OUT = 0.1
#: The sweep's best short runs that train again for the full budget; the full-length best wins.
FINALISTS = 2
#: The control (the base again) trains at seeds ``seed + CONTROL_SEED_OFFSET + i``, an
#: independent stream set beside the base's seed ``seed + i``: its Δ is the base's spread over seeds.
CONTROL_SEED_OFFSET = 2000

#: The orders of the table's rows (``AblationResult.rows``).
ORDERS = ("effect", "plan")
#: Where an ablation's runs train: here (``--workers`` processes) or as Ray tasks (``zoo.ablate.cluster``).
LAUNCHERS = ("local", "ray")


#: The kinds of value a flag takes, each read by the command line its own way (``zoo.cli.ablate.KIND_ARGUMENTS``).
KINDS = (
    "text", "choice", "count", "int", "float", "seed", "switch", "vocab", "path", "out",
    "rates", "axes", "optional-axes", "scales", "warmups", "factors",
)  # fmt: skip


@dataclass(frozen=True)
class Flag:
    """How an option is a flag of ``zoo ablate``.

    ``help`` says what it sets; ``-h`` adds ``(default VALUE)``, or ``(default: SHOWN)``
    when ``shown`` says it in words (and for ``-o``, the command line's own default).
    ``flag``: its spelling, by default ``--`` and the name with dashes; ``--set FIELD`` for a
    model field set with ``--set FIELD=N``. ``kind`` (one of ``KINDS``) says how the command
    line reads it, ``choices`` what it may be, ``old`` an older spelling still read. The
    repeat command names every option whose value is not None or False, ``none`` spelling a
    None that means something (``all``), unless the option ``when`` names is false;
    ``spell`` writes a value the plain way (numbers, comma-separated lists) cannot.
    """

    help: str
    flag: str = ""
    kind: str = "text"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    shown: str | None = None
    old: str = ""
    none: str = ""
    when: str = ""
    spell: Callable[[Any], str] | None = None


def option(default: Any = MISSING, *, help: str, **flag: Any) -> Any:
    """A field of the options, with how it is a flag (``Flag``)."""
    metadata = {"flag": Flag(help, **flag)}
    return field(metadata=metadata) if default is MISSING else field(default=default, metadata=metadata)


def flag_of(f: Field[Any]) -> Flag:
    flag: Flag = f.metadata["flag"]
    return flag


def flag_name(f: Field[Any]) -> str:
    """The flag an option is given by: ``--seq-len`` for ``seq_len``, or its own spelling."""
    return flag_of(f).flag or "--" + f.name.replace("_", "-")


def shown_default(f: Field[Any]) -> str:
    """The default as ``-h`` states it: ``(default 150)``, ``(default: a tenth of --steps)``."""
    flag = flag_of(f)
    return f"(default: {flag.shown})" if flag.shown is not None else f"(default {spell(f.default)})"


def spell(value: Any) -> str:
    """A value as a flag takes it: numbers as ``%g`` (in full where that would round them),
    lists comma-separated."""
    if isinstance(value, float):
        text = f"{value:g}"
        return text if float(text) == value else repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(spell(item) for item in value)
    return str(value)


def _spell_scales(scales: list[tuple[int, int]]) -> str:
    return ",".join(f"{d}x{n}" for d, n in scales)


def _spell_warmups(warmups: list[int | None]) -> str:
    return ",".join("auto" if w is None else str(w) for w in warmups)


@dataclass(frozen=True, kw_only=True)
class Options:
    """Every option of an ablation: ``run_ablation``'s keyword arguments, ``zoo ablate``'s
    flags (see ``run_ablation`` for what each does)."""

    base: str = option("transformer-2017", help="the base", flag="--from", metavar="PRESET")
    target: str = option("gpt2-small", help="the target", flag="--to", metavar="PRESET")
    d_model: int = option(
        DEFAULT_SCALE["d_model"], help="the shared width", flag="--set d_model", kind="count", old="--d-model"
    )
    layers: int = option(
        DEFAULT_SCALE["layers"], help="the shared depth", flag="--set n_layers", kind="count", old="--layers"
    )
    heads: int = option(
        DEFAULT_SCALE["heads"], help="the shared heads", flag="--set n_heads", kind="count", old="--heads"
    )
    dropout: float | None = option(
        None, help="the dropout both sides train with", flag="--set dropout", kind="float", shown="each preset's own"
    )
    seq_len: int = option(DEFAULT_SCALE["seq_len"], help="tokens per sequence", kind="count", metavar="N")
    steps: int = option(DEFAULT_SCALE["steps"], help="steps per run", kind="count", metavar="N")
    batch: int = option(
        DEFAULT_SCALE["batch"], help="sequences per step", flag="--batch-size", kind="count", metavar="N", old="--batch"
    )
    lr: float = option(DEFAULT_SCALE["lr"], help="peak learning rate", kind="float", metavar="LR")
    eval_every: int = option(
        DEFAULT_SCALE["eval_every"], help="validation loss every N steps", kind="count", metavar="N"
    )
    seeds: int = option(DEFAULT_SEEDS, help="runs per variant", kind="count", metavar="N")
    seed: int = option(0, help="the first seed; seeds run N, N+1, ...", flag="--seed", kind="seed", metavar="N")
    workers: int = option(1, help="runs trained at once, one process each", kind="count", metavar="N")
    tokenizer: str = option(
        "auto",
        help="the text file's tokens",
        kind="choice",
        choices=("auto", "gpt2", "bytes"),
        shown="auto, gpt2 if its files are installed (the text extra), else bytes",
        when="from_text",
    )
    max_chars: int | None = option(
        None, help="train on the first N characters only", kind="count", metavar="N", shown="all of the text"
    )
    threads: int | None = option(1, help="torch CPU threads per run", kind="count", metavar="N")
    order: str = option("effect", help="table rows by effect size or in plan order", kind="choice", choices=ORDERS)
    device: str = option("cpu", help="cuda: one GPU per worker", kind="choice", choices=("cpu", "cuda"))
    correction: str = option(
        DEFAULT_CORRECTION,
        help="family-wise correction over the table's tests; `*` follows the adjusted p",
        kind="choice",
        choices=CORRECTIONS,
    )
    warmup: int | None = option(
        None, help="learning-rate warm-up steps", kind="int", metavar="N", shown="a tenth of --steps"
    )
    launcher: str = option(
        "local",
        help="local: the runs train here, --workers at once; ray: each run is a Ray task on the cluster ray.init "
        "finds (RAY_ADDRESS, else a local one), the out folder on a shared file system",
        kind="choice",
        choices=LAUNCHERS,
    )
    eval_batches: int = option(
        4,
        help="validation batches per evaluation, each of --batch-size sequences: more give a steadier final loss",
        kind="count",
        metavar="N",
    )
    vocab_limit: int | None = option(
        1024,
        help="GPT-2 tokens: keep the N most frequent, spell the rest as bytes",
        kind="vocab",
        metavar="N|all",
        none="all",
        when="from_text",
    )
    data: str | os.PathLike[str] | None = option(
        None,
        help="a text file, a folder prepared by `zoo data prepare`, or python-stdlib: a second corpus every "
        "machine has, the Python standard library's own source (its first MiB)",
        kind="path",
        metavar="FILE|DIR",
        shown="the bundled Shakespeare",
    )
    read_unlearned: bool = option(
        False,
        help="mark and test rows that do not beat the bigram reference too (a study of how fast designs start "
        "to learn, not of what they are worth)",
        kind="switch",
        shown="such a row is shown as did not learn, never marked, and in no interaction or trend",
    )
    tune_lr: bool = option(
        False, help="sweep a learning rate per variant, train each at its best", kind="switch", shown="one --lr for all"
    )
    tune_fraction: float = option(
        TUNE_FRACTION, help="the sweep's share of the steps", kind="float", metavar="FRACTION", when="tune_lr"
    )
    lr_grid: list[float] | None = option(
        None,
        help="the rates --tune-lr sweeps (implies it)",
        kind="rates",
        metavar="R,R,...",
        shown="--lr times 0.25, 0.5, 1, 2",
    )
    path: bool | list[str] | None = option(
        None,
        help="a cumulative path (base, +swap 1, +swaps 1-2, ..., target) instead of single swaps; optionally its order",
        kind="optional-axes",
        metavar="AXIS,AXIS,...",
        shown="single swaps",
    )
    swaps: list[str] | None = option(
        None,
        help="train only these swaps (all: every single swap); AXIS=VALUE swaps the base's component of that "
        "kind to a registered one (e.g. position=rotary,position=alibi: one row each; options after colons: "
        "mlp=swiglu:multiple_of=1), or a field to a value (embedding_scale=sqrt_d_model); AXIS+AXIS is one row "
        "with both swapped at once (its parts may name values), and with both single swaps in the table the "
        "report tests their interaction",
        kind="axes",
        metavar="AXIS,AXIS,...",
        shown="every single swap",
    )
    eval_lengths: list[int] | None = option(
        None,
        help="length extrapolation: also evaluate every run at these multiples of --seq-len (e.g. 2,4); "
        "learned positions are N/A past their table",
        kind="factors",
        metavar="N,N,...",
        shown="--seq-len alone",
    )
    out_dir: Path = option(
        help="output folder; run again on it, it trains only unfinished runs",
        flag="-o",
        kind="out",
        metavar="DIR",
        shown="runs/ablation",
    )

    def __post_init__(self) -> None:
        normalise(self)
        if self.lr_grid is not None:
            object.__setattr__(self, "tune_lr", True)  # a grid asks for the sweep

    @property
    def on_path(self) -> bool:
        return self.path is not None and self.path is not False

    @property
    def prepared(self) -> bool:
        """Whether ``data`` names a prepared folder (which brings its tokenizer)."""
        return self.data is not None and Path(self.data).is_dir()

    @property
    def from_text(self) -> bool:
        """Whether the runs tokenise a text (the options of a text file apply)."""
        return not self.prepared

    def command(self) -> str:
        """The ``zoo ablate`` command line that repeats these options."""
        return shlex.join(["zoo", "ablate", *flag_words(self)])


@dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """The options of a study over a grid (``run_study``'s own, the flags of ``zoo ablate``'s
    study group): a scale ladder, its budget, rate and warm-up sweeps."""

    scales: list[tuple[int, int]] | None = option(
        None,
        help="a scale ladder of d_model x layers, heads at the head size of --set d_model / n_heads "
        "(e.g. 64x2,128x4,192x6)",
        kind="scales",
        metavar="DxL,DxL,...",
        shown="one scale, no ladder",
        spell=_spell_scales,
    )
    tokens_per_param: float | None = option(
        None,
        help="each rung trains RATIO tokens per non-embedding parameter of the base",
        kind="float",
        metavar="RATIO",
        shown="--steps for every rung",
    )
    flops_per_run: float | None = option(
        None, help="each run trains FLOPS FLOPs", kind="float", metavar="FLOPS", shown="--steps"
    )
    lr_sweep: list[float] | None = option(
        None,
        help="train every variant at each rate for the full budget",
        kind="rates",
        metavar="LR,LR,...",
        shown="--lr alone",
    )
    warmup_sweep: list[int | None] | None = option(
        None,
        help="train every variant at each warm-up",
        kind="warmups",
        metavar="N,N,...",
        shown="--warmup alone",
        spell=_spell_warmups,
    )

    def __post_init__(self) -> None:
        normalise(self)


#: Every option of ``run_ablation``, each a flag of ``zoo ablate``.
FLAG_OPTIONS = tuple(f.name for f in fields(Options))

AnyOptions = Options | StudyOptions
T = TypeVar("T", Options, StudyOptions)


def normalise(options: AnyOptions) -> None:
    """Sequences as lists (a scale as a pair), the output folder as a path: options given
    either way compare equal."""
    for f, flag in option_fields(options):
        value = getattr(options, f.name)
        if isinstance(value, (list, tuple)):
            object.__setattr__(options, f.name, [tuple(v) for v in value] if flag.kind == "scales" else list(value))
        elif flag.kind == "out" and value is not None:
            object.__setattr__(options, f.name, Path(value))


def make_options(kind: type[T], given: Mapping[str, Any], what: str) -> T:
    """``kind`` from keyword arguments (``what`` takes them); an unknown name is refused."""
    refuse_unknown(given, [f.name for f in fields(kind)], what)
    return kind(**given)


def refuse_unknown(given: Mapping[str, Any], names: list[str], what: str) -> None:
    """An option not among ``names`` is refused, naming the nearest."""
    unknown = [name for name in given if name not in names]
    if unknown:
        near = difflib.get_close_matches(unknown[0], names, n=2)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        raise ConfigError(f"{what} takes no option {unknown[0]!r}{hint} (its options: {', '.join(names)})")


def with_options(function: Callable[..., Any], *kinds: type[AnyOptions]) -> Callable[..., Any]:
    """``function`` (which takes ``**options``) with a signature that names them: a keyword
    per field of ``kinds`` with its default, for ``help()``, ``inspect`` and editors."""
    own = inspect.signature(function)
    named = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in named}
    for kind in kinds:
        for f in fields(kind):
            if f.name not in taken:
                default = inspect.Parameter.empty if f.default is MISSING else f.default
                named.append(
                    inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type)
                )
                taken.add(f.name)
    function.__signature__ = own.replace(parameters=named)  # type: ignore[attr-defined]
    function.__namespace__ = globals()  # type: ignore[attr-defined]  # the fields' types, for checked_types
    return function


def split_options(given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keyword arguments as a study's own options and the ablation options of its cells."""
    study = {f.name for f in fields(StudyOptions)}
    return {k: v for k, v in given.items() if k in study}, {k: v for k, v in given.items() if k not in study}


def option_fields(options: AnyOptions | type[AnyOptions]) -> Iterator[tuple[Field[Any], Flag]]:
    """Every option's field and its flag, in order."""
    for f in fields(options):
        yield f, flag_of(f)


def flag_words(options: AnyOptions, skip: tuple[str, ...] = ()) -> list[str]:
    """The flags that give ``options`` on ``zoo ablate``'s command line (but ``skip``)."""
    words: list[str] = []
    for f, flag in option_fields(options):
        value = getattr(options, f.name)
        if f.name in skip or (flag.when and not getattr(options, flag.when)):
            continue
        if value is None and flag.none:
            text = flag.none
        elif value is None or value is False:
            continue
        elif value is True:
            words.append(flag_name(f))
            continue
        else:
            text = (flag.spell or spell)(value)
        name, _, model_field = flag_name(f).partition(" ")
        words += [name, f"{model_field}={text}"] if model_field else [name, text]
    return words


def record(options: AnyOptions) -> dict[str, Any]:
    """``options`` as a record keeps them: every option by name, as JSON."""
    return {f.name: _json(getattr(options, f.name)) for f in fields(options)}


def _json(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_json(item) for item in value]
    return value


def study_command(ablation: Options, study: StudyOptions) -> str:
    """The ``zoo ablate`` command that repeats a study: the ablation's flags, the study's,
    then its output folder."""
    words = [*flag_words(ablation, skip=("out_dir",)), *flag_words(study), "-o", str(ablation.out_dir)]
    return shlex.join(["zoo", "ablate", *words])


_SCALE = re.compile(r"\s*(\d+)\s*x\s*(\d+)\s*")


def parse_scales(text: str) -> list[tuple[int, int]]:
    """``"64x2,128x4"`` -> ``[(64, 2), (128, 4)]`` (d_model x layers)."""
    pairs = []
    for part in text.split(","):
        match = _SCALE.fullmatch(part)
        if not match:
            raise InputError(f"a scale is D_MODELxLAYERS such as 64x2, got {part.strip()!r} (--scales 64x2,128x4)")
        pairs.append((int(match[1]), int(match[2])))
    return pairs
