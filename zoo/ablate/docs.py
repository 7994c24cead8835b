"""A study's results as a generated region of a Markdown page (``zoo ablate --docs FILE``):
its tables beside what the literature reports for the same swaps, its plots copied
next to the page and its results file as ``studies/NAME.json``, between markers that say the region is generated. Typing into the
region is pointless: the next run replaces it whole. The page is the user's: it is edited
in place or not at all (markers that do not mark one region, a read-only page or anything
but a regular file are refused before any training), and keeps its inode, mode and links."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

from zoo.ablate.advice import floor_sentence, next_step
from zoo.ablate.extrapolation import extrapolation_markdown
from zoo.ablate.ladder import StudyResult
from zoo.ablate.report import interaction_sentences, sensitivity_table, table
from zoo.ablate.results import AblationResult, md_block, md_code, md_row
from zoo.ablate.study_report import (
    cells_table,
    interactions_table,
    sweep_sentences,
    sweep_table,
    tuned_table,
    warmup_verdict,
)
from zoo.checkpoint.store import write_atomically, write_temporary
from zoo.errors import InputError, printable
from zoo.files import read_bytes

#: What the literature reports for a row, by its name (a pair's axes in any order), with how
#: its setting differs from these tiny models; "control" for the control row. Only papers
#: whose table, figure or section says it; a row without one says "none".
LITERATURE: dict[str, str] = {
    "position=learned": (
        "Vaswani et al. 2017, Table 3 row (E): learned positional embeddings instead of sinusoids give nearly "
        "identical results (their base encoder-decoder, WMT14 En-De translation, 100k steps; here a tiny "
        "decoder-only LM for a few hundred steps)"
    ),
    "activation=gelu_tanh": (
        "Shazeer 2020, Table 1: ReLU 1.997 vs GELU 1.983 held-out log-perplexity (T5-base pre-trained on C4 "
        "for 65k steps; here models thousands of times smaller, a few hundred steps on one small text)"
    ),
    "placement=pre": (
        "Xiong et al. 2020: post-LN needs learning-rate warm-up, pre-LN trains without it (BERT pre-training, "
        "IWSLT14 De-En and WMT14 En-De translation); a claim about warm-up, which the warm-up study's "
        "interaction tests, not this Δ at one warm-up"
    ),
    "init=gpt2": (
        "none measured: Radford et al. 2019, section 2.3, describes the change (residual layers' weights scaled "
        "at initialization by 1/√N, N the residual layers) without an ablation of it"
    ),
    "embedding_scale=none": (
        "none: an interaction with the 2017 init, not a change of its own: the 2017 design multiplies the "
        "embeddings by √d_model (Vaswani et al. 2017, section 3.4) beside its Xavier init, so this swap alone "
        "builds a model neither design uses; the paired row embedding_scale=none+init=gpt2 and its "
        "interaction measure it"
    ),
    "embedding_scale=none+init=gpt2": (
        "none: both swaps as the target makes them, together; the interaction says whether they add up "
        "(Radford et al. 2019, section 2.3, for GPT-2's init)"
    ),
    "head_output=logits": "none needed: the same loss computed another way (expect Δ ≈ 0)",
    "norm_eps=1e-05": "none",
    "position=alibi": (
        "Press et al. 2022 (ALiBi, WikiText-103): the claim is extrapolation to inputs longer than trained, "
        "not the loss at the training length this table measures"
    ),
    "gpt2-small": (
        "none for the whole change: Radford et al. 2019, section 2.3, lists GPT-2's changes (layer norm moved to "
        "the input of each sub-block, an extra final layer norm, residual layers' init scaled by 1/√N) without "
        "ablating them; Narang et al. 2021 (T5 code base, Tables 1 and 2; models far larger and trained far "
        "longer than these): most Transformer modifications do not transfer across implementations and "
        "applications"
    ),
    "mlp=swiglu": (
        "Shazeer 2020, Table 1: SwiGLU 1.944 vs GELU 1.983 held-out log-perplexity (T5-base on C4, 65k steps, "
        "the hidden size cut to 2/3 so the weights stay equal; here it rounds up to a multiple of 256, so at "
        "d_ff 256 the SwiGLU MLP holds 1.5x the base's MLP weights, trained a few hundred steps). This swap "
        "alone pairs SwiGLU with GPT-2's learned absolute positions, which neither design uses (T5 has relative "
        "position biases, Raffel et al. 2020, section 2.1; the Llama design rotary ones): the paired row "
        "mlp=swiglu+position=rotary and its interaction measure the pairing"
    ),
    "mlp=swiglu+position=rotary": (
        "none: both swaps as the Llama design makes them, together (Touvron et al. 2023, section 2.2); the "
        "interaction says whether they add up"
    ),
    "activation=silu": (
        "Shazeer 2020, Table 1: Swish (SiLU) 1.994 vs GELU 1.983 held-out log-perplexity (T5-base on C4 for 65k "
        "steps; here models thousands of times smaller, a few hundred steps on one small text)"
    ),
    "norm=rmsnorm": (
        "Narang et al. 2021, Table 1: RMS normalization is one of the few changes that improved on their vanilla "
        "Transformer (T5 code base; models far larger and trained far longer than these)"
    ),
    "bias=False": (
        "Chowdhery et al. 2022 (PaLM), section 2: no biases in dense layers or layer norms, for the training "
        "stability of large models; no loss comparison is given"
    ),
    "attention=gqa": (
        "Ainslie et al. 2023, Table 1: grouped-query attention uptrained from T5-XXL comes close to multi-head "
        "quality at nearly multi-query speed (summarisation, translation, QA; here trained from scratch)"
    ),
    "position=rotary": (
        "Su et al. 2021 (RoFormer), section 4: rotary positions match or beat the Transformer's in WMT14 En-De "
        "translation and BERT-style pre-training; Press et al. 2022, Figure 1 (WikiText-103): past the training "
        "length its perplexity rises, less steeply than sinusoids'"
    ),
    "position=sinusoidal": (
        "Press et al. 2022, Figure 1 (WikiText-103): sinusoidal positions' perplexity rises steeply past the "
        "training length; at the training length they are the 2017 baseline (Vaswani et al. 2017, section 3.5)"
    ),
    "position=none": (
        "Haviv et al. 2022 (WikiText-103 and the Pile): causal language models without positional encodings "
        "stay competitive, the causal mask leaking position; larger models than these"
    ),
    "gpt2-small-modern": (
        "none for the whole change: Touvron et al. 2023 (LLaMA), section 2.2, lists these choices "
        "(pre-normalization with RMSNorm, SwiGLU, rotary embeddings), each with its source, without ablating them"
    ),
    "control": "none: the base again at other seeds; its Δ is the spread of the base over seeds",
}

_BEGIN = "<!-- generated by `zoo ablate --docs` from {name}: do not edit; `make study` rewrites it -->"
_END = "<!-- end of the generated region {name} -->"
#: What a region of a page says until its study has run there (``make study`` replaces it).
NOT_RUN = (
    "Not run here yet: `make study` (`make study-gpu` for the GPU study) writes this region and its results, "
    "docs/studies/{name}.json."
)
#: Largest page ``--docs`` edits (read whole).
PAGE_LIMIT = 16 << 20
#: Seconds ``--docs`` waits for another process that holds the page's lock.
LOCK_WAIT = 30.0


def write_docs_region(page: Path, name: str, results: StudyResult | AblationResult) -> Path:
    """Write ``results`` into ``page`` between the markers of region ``name`` (appended at the
    end when the page has none); plots are copied to ``figures/<name>-*.png`` beside the page,
    and the results file to ``studies/<name>.json`` (``write_results_beside``).

    The page is edited in place (``_edit_in_place``), keeping its inode, mode and hard links;
    a symbolic link is written through to the page it names. A page whose markers are
    missing, repeated or out of order, a read-only page, or anything but a regular file is
    refused (``check_docs_page``) and left as it is."""
    target = check_docs_page(page, name)
    begin, end = _BEGIN.format(name=name), _END.format(name=name)

    def edited(text: str) -> str:
        span = _region(text, name, page)  # checked again: the page may have changed during the work
        body = region_markdown(results, _figures(target, name, results))
        block = f"{begin}\n\n{body.strip()}\n\n{end}"
        if span is not None:
            return f"{text[: span[0]]}{block}{text[span[1] :]}"
        return f"{text.rstrip()}\n\n{block}\n" if text else f"{block}\n"

    if not target.exists():
        _create(target, page, edited(""))
    else:
        _edit_in_place(target, page, edited)
    write_results_beside(target, name, results)
    return page


#: Largest results file ``--docs`` copies beside the page (an ablation.json holds every seed's curve).
RESULTS_LIMIT = 64 << 20


def placeholder_region(name: str) -> str:
    """The region ``name`` before its study has run: its markers around ``NOT_RUN``."""
    return f"{_BEGIN.format(name=name)}\n\n{NOT_RUN.format(name=name)}\n\n{_END.format(name=name)}\n"


def regions(text: str) -> dict[str, str]:
    """Every generated region of a page's ``text``: its body (between the markers) by name."""
    begin = re.escape(_BEGIN).replace(re.escape("{name}"), r"(?P<name>[A-Za-z0-9._-]+)")
    found = {}
    for match in re.finditer(begin, text):
        name = match["name"]
        end = text.find(_END.format(name=name), match.end())
        found[name] = text[match.end() : end] if end >= 0 else ""
    return found


def write_results_beside(page: Path, name: str, results: StudyResult | AblationResult) -> Path:
    """``studies/<name>.json`` beside ``page``: the ablation.json (or, for a study, the
    study.json) the tool wrote, byte for byte, written atomically, so a reader and a test
    can check every number of the region against it."""
    data = read_bytes(results.results_path, InputError, "results file", limit=RESULTS_LIMIT)
    target = page.parent / "studies" / f"{name}.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return write_atomically(target, lambda file: file.write_bytes(data), InputError)
    except OSError as err:
        raise InputError(
            f"cannot write {printable(str(target))} beside --docs {printable(str(page))}: {err.strerror or err}; "
            f"make its folder writable or pass another --docs FILE"
        ) from err


def _create(target: Path, page: Path, text: str) -> None:
    """A new page holding ``text``, written atomically."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, lambda file: file.write_text(text, encoding="utf-8"), InputError)
    except OSError as err:
        raise InputError(
            f"cannot write --docs {printable(str(page))}: {err.strerror or err}; pass another --docs FILE"
        ) from err


def check_docs_page(page: Path, name: str) -> Path:
    """The page ``--docs page`` writes (the file a symbolic link names), checked before any
    work: a regular, writable UTF-8 file (or none yet) whose region ``name`` is absent or
    marked once, begin before end; an ``InputError`` naming the line and the fix otherwise."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise InputError(f"a docs region is named after the --out folder; {name!r} has characters a name cannot")
    target = _target(page)
    _check_folders_beside(target)
    if target.exists() or target.is_symlink():
        fd = _open_page(target, page)
        try:
            _region(_read_page(fd, page), name, page)
        finally:
            os.close(fd)
    return target


def _check_folders_beside(page: Path) -> None:
    """The folders ``--docs`` writes beside the page (``figures/``, ``studies/``) are folders
    or absent: a file of that name is refused before the runs, not after them."""
    for folder in (page.parent / "figures", page.parent / "studies"):
        if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
            raise InputError(
                f"--docs {printable(str(page))} puts its {folder.name} in {printable(str(folder))}, which is a file, "
                f"not a folder; move or rename that file, or pass --docs a page in another folder"
            )


def _target(page: Path) -> Path:
    """``page``, or the file it names when it is a symbolic link (which must exist)."""
    if not page.is_symlink():
        return page
    target = Path(os.path.realpath(page))
    if not target.is_file():
        raise InputError(
            f"--docs {printable(str(page))} is a symbolic link to {printable(str(target))}, which is not a file; "
            f"the zoo writes a page through a link only to a page that exists: create it, or pass the page itself"
        )
    return target


def _open_page(target: Path, page: Path) -> int:
    """A read-write descriptor of the regular, writable file ``target`` (``page`` as given)."""
    shown = printable(str(page))
    flags = os.O_RDWR | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags)
    except IsADirectoryError as err:
        raise InputError(f"--docs {shown} is a folder; give the Markdown page to write (a file)") from err
    except PermissionError as err:
        raise InputError(
            f"--docs {shown} is not writable by you; make it writable or pass another --docs FILE"
        ) from err
    except OSError as err:
        raise InputError(f"cannot open --docs {shown}: {err.strerror or err}; pass another --docs FILE") from err
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file (a device, FIFO or socket); give the Markdown page to write"
    elif not info.st_mode & 0o222:
        problem = (
            f"is read-only (mode {stat.S_IMODE(info.st_mode):04o}); the zoo does not rewrite a page made read-only: "
            f"make it writable (chmod u+w) or pass another --docs FILE"
        )
    if problem is not None:
        os.close(fd)
        raise InputError(f"--docs {shown} {problem}")
    os.set_blocking(fd, True)
    return fd


def _read_page(fd: int, page: Path) -> str:
    """The UTF-8 text of the open page, at most ``PAGE_LIMIT`` bytes of it."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks, size = [], 0
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > PAGE_LIMIT:
            raise InputError(
                f"--docs {printable(str(page))} is more than {PAGE_LIMIT:,} bytes; it is not a Markdown page "
                f"the zoo edits: pass another --docs FILE"
            )
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"--docs {printable(str(page))} is not UTF-8 text ({err.reason} at byte {err.start}); "
            f"the zoo edits Markdown pages only: pass another --docs FILE"
        ) from err


def _region(text: str, name: str, page: Path) -> tuple[int, int] | None:
    """Where region ``name`` lies in ``text`` (from its begin marker to past its end marker),
    None when the page has neither marker; refuses a marker missing, repeated or out of order,
    naming its line, since replacing a guess would overwrite the user's own text."""
    markers = {"begin": _BEGIN.format(name=name), "end": _END.format(name=name)}
    found = {role: [m.start() for m in re.finditer(re.escape(marker), text)] for role, marker in markers.items()}
    if not found["begin"] and not found["end"]:
        return None

    def line(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    where = f"--docs {printable(str(page))}: the generated region {name}"
    for role, offsets in found.items():
        if len(offsets) > 1:
            lines = ", ".join(str(line(offset)) for offset in offsets)
            raise InputError(
                f"{where} has its {role} marker on lines {lines}; keep one region (delete the other's lines, "
                f"markers included), then run again"
            )
    if not found["end"]:
        raise InputError(
            f"{where} begins on line {line(found['begin'][0])} but its end marker is missing; put the line "
            f"{markers['end']} back where the region ends (the text after it is yours and is kept), then run again"
        )
    if not found["begin"]:
        raise InputError(
            f"{where} ends on line {line(found['end'][0])} but its begin marker is missing; put the line "
            f"{markers['begin']} back where the region begins, or delete the end marker, then run again"
        )
    start, stop = found["begin"][0], found["end"][0]
    if stop < start:
        raise InputError(
            f"{where} has its end marker (line {line(stop)}) before its begin marker (line {line(start)}); "
            f"put them in order around the region, or delete both, then run again"
        )
    return start, stop + len(markers["end"])


def _edit_in_place(target: Path, page: Path, edited: Callable[[str], str]) -> None:
    """Replace the contents of the existing page ``target`` with ``edited(its text)``, in
    its own inode (mode, owner and hard links kept), under an exclusive lock.

    The text is read and checked through the descriptor that is written, so what was
    checked is what is edited. Until the new text is written and fsynced, the old one is
    kept in a hidden file beside the page (``write_temporary``), so a crash midway leaves
    it there; space is allocated first, so a full disk fails before anything changes."""
    fd = _open_page(target, page)
    try:
        _lock(fd, page)
        old = _read_page(fd, page)
        new = edited(old).encode("utf-8")
        try:
            backup = write_temporary(target.parent, target.name, lambda file: file.write_text(old, encoding="utf-8"))
        except OSError as err:
            raise InputError(
                f"cannot keep a copy of --docs {printable(str(page))} beside it while it is rewritten: "
                f"{err.strerror or err}; make its folder writable or pass another --docs FILE"
            ) from err
        try:
            _rewrite(fd, new)
        except OSError as err:
            restored = _restored(fd, old.encode("utf-8"))
            if restored:
                backup.unlink()
            kept = "the page is as it was" if restored else f"its text before this run is in {printable(str(backup))}"
            raise InputError(
                f"cannot write --docs {printable(str(page))}: {err.strerror or err}; {kept}: make room for it "
                f"(disk space, file-size limit), or pass another --docs FILE"
            ) from err
        backup.unlink()
    finally:
        os.close(fd)


def _lock(fd: int, page: Path) -> None:
    """An exclusive ``flock`` on the page, waited for at most ``LOCK_WAIT`` seconds."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise InputError(
                    f"--docs {printable(str(page))} is locked by another process writing it; wait for it to finish, "
                    f"then run again"
                ) from None
            time.sleep(0.1)


def _restored(fd: int, data: bytes) -> bool:
    """Whether the page's old ``data`` could be written back after a failed rewrite."""
    try:
        _rewrite(fd, data)
    except OSError:
        return False
    return True


#: What ``posix_fallocate`` fails with where a filesystem cannot allocate ahead (it is then written as it can).
_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}


def _rewrite(fd: int, data: bytes) -> None:
    """``data`` as the whole contents of the open file ``fd``, fsynced."""
    if data:
        try:  # no space, or a file-size limit, fails here, before anything changes
            os.posix_fallocate(fd, 0, len(data))
        except OSError as err:
            if err.errno not in _NO_FALLOCATE:
                raise
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.ftruncate(fd, len(data))
    os.fsync(fd)


def _figures(page: Path, name: str, results: StudyResult | AblationResult) -> dict[str, str]:
    """Copy the results' plots beside ``page``; their paths relative to it, by role."""
    if isinstance(results, StudyResult):
        plots = {"scale": results.scale_plot_path, "sweep": results.sweep_plot_path}
    else:
        plots = {"deltas": results.delta_plot_path, "diagnostics": results.diagnostics_plot_path}
    shown = {}
    for role, source in plots.items():
        if source is None or not source.is_file():
            continue
        target = page.parent / "figures" / f"{name}-{role}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, _copier(source.read_bytes()), InputError)
        shown[role] = target.relative_to(page.parent).as_posix()
    return shown


def _copier(data: bytes) -> Callable[[Path], object]:
    return lambda file: file.write_bytes(data)


def region_markdown(results: StudyResult | AblationResult, figures: dict[str, str]) -> str:
    """The region's Markdown: the command, the tables with the literature's claims, the plots."""
    if isinstance(results, StudyResult):
        return _study_region(results, figures)
    return _ablation_region(results, figures)


def _pair_key(name: str) -> str:
    """A row's name with a pair's parts in a fixed order: ``b+a`` and ``a+b`` are one row."""
    return "+".join(sorted(name.split("+")))


_LITERATURE_BY_KEY = {_pair_key(name): text for name, text in LITERATURE.items()}


def literature(name: str, axis: str) -> str:
    """What the literature says for the row ``name`` (of ``axis``), or "none"; a component's
    options do not change its source (``attention=gqa(n_kv_heads=4)`` reads ``attention=gqa``)."""
    if axis == "control":
        return _LITERATURE_BY_KEY["control"]
    key = _pair_key(name)
    return _LITERATURE_BY_KEY.get(key) or _LITERATURE_BY_KEY.get(_pair_key(re.sub(r"\([^)]*\)", "", name)), "none")


def _ablation_region(result: AblationResult, figures: dict[str, str]) -> str:
    header, rows = table(result, compact=True)
    lines = [
        *md_block(result.command, "bash"),
        "",
        "| " + " | ".join([*header, "literature"]) + " |",
        "|" + "---|" + "---:|" * (len(header) - 1) + "---|",
    ]
    for run, row in zip(result.rows(), rows):
        lines.append(md_row([*row, "" if run.axis == "base" else literature(run.name, run.axis)]))
    lines += ["", *(f"- {line[0].upper()}{line[1:]}." for line in interaction_sentences(result, md_code))]
    floor = floor_sentence(result)
    lines += ["", f"{floor[0].upper() + floor[1:]}." if floor else "One seed: no noise floor.", ""]
    lines += sensitivity_table(result)
    lines += extrapolation_markdown(result)
    for role, path in figures.items():
        lines += [f"![{role}]({path})", ""]
    lines += [f"Next step: {next_step(result)}.", ""]
    return "\n".join(lines)


def _study_region(study: StudyResult, figures: dict[str, str]) -> str:
    lines = [*md_block(study.command, "bash"), "", *cells_table_plain(study), ""]
    if study.tuned:
        lines += [
            "Each variant's rate, tuned per cell by a short sweep (**on edge**: the lowest or highest its sweep "
            "trained, so its best may lie beyond):",
            "",
            *tuned_table(study),
            "",
        ]
        last = study.cells[-1]
        sensitivity = sensitivity_table(last[1])
        if sensitivity:
            lines += [f"At {last[0].rung.name}:", "", *sensitivity]
    trends = study.trends()
    if trends:
        header = ["row", *(r.name for r in study.rungs), "trend", "literature"]
        lines += ["| " + " | ".join(header) + " |", "|---|" + "---:|" * len(study.rungs) + "---|---|"]
        for t in trends:
            if t.lr != study.rates[0] or t.warmup != study.warmups[0]:
                continue
            cells = [
                d.format(4, sign=True) + (" *" if _marked(study, r, t.name) else "") for r, d in zip(t.rungs, t.deltas)
            ]
            lines.append("| " + " | ".join([t.name, *cells, t.word, literature(t.name, t.axis)]) + " |")
        lines += [
            "",
            "Δ vs base (paired over seeds, ± 95% CI); `*`: significant after the correction. The trend reads "
            "corrected results only: *flips*, both ends marked on opposite sides; *grows*/*shrinks*, the change "
            "from the first rung to the last significant (Welch) after the correction over every row's trend; "
            "*not shown after correction*, either only before it; else *flat within noise*.",
            "",
        ]
    lines += interactions_table(study)
    if study.swept:
        lines += [*sweep_table(study), "", *sweep_sentences(study), ""]
        verdict = warmup_verdict(study)
        lines += [f"**{verdict}**", ""] if verdict else []
    for role, path in figures.items():
        lines += [f"![{role}]({path})", ""]
    return "\n".join(lines)


def _marked(study: StudyResult, rung: str, name: str) -> bool:
    result = study.cell(rung)
    return any(run.name == name and run.significant for run in result.rows())


def cells_table_plain(study: StudyResult) -> list[str]:
    """The study's cells table without links to cell reports (the page lives elsewhere)."""
    return [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line) for line in cells_table(study)]
