"""Every example in README.md and docs/*.md runs, and shown output is compared.

Conventions (the docs' authors rely on them):

- ```python blocks run top to bottom, one namespace per file, in a temporary folder
  (the same folder for the whole file).
- ```console blocks: each ``$ cmd`` line runs in bash (this venv's bin first on PATH,
  in the file's folder); the lines after it, up to the next ``$`` line, are its expected
  stdout and stderr together. Lines are compared after collapsing runs of whitespace (and
  of a table rule's ``─``); blank lines are ignored; a line ``...`` matches any number of
  lines, and ``...`` inside a line matches any text. A command may exit non-zero only if
  its expected output shows an error (a line with ``error:``, any case).
  A plain ``zoo ARGS`` command (no shell syntax) runs in-process through
  ``zoo.cli.main`` for speed; everything else goes to bash.
- ```text, ```toml, ```bash and unlabelled blocks are not run.

One test per block, named ``file:line``. A block's test first runs the blocks before it
in its file if this process has not (under xdist a file's blocks may be split between
workers), so each test checks exactly its own block.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COLUMNS = "120"  # the terminal width the transcripts were taken at
RUN = {"python", "console"}
# Shell syntax that the in-process fast path does not handle.
SHELL = re.compile(r"[|&;<>()$`*?\[\]{}~!]")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path.name}:{self.line}"


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, in order (indented fences included)."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,})\s*([\w+-]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, lang = opening.groups()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{fence}\s*$", lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: a ``` block is never closed")
        blocks.append(Block(path, i + 1, lang.lower(), "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# -- console transcripts ------------------------------------------------------------


def parse_console(text: str) -> list[tuple[str, list[str]]]:
    """``$ cmd`` lines (a trailing backslash continues one) and the output shown after each."""
    commands: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if commands:
                commands[-1][1].append(line)
            elif line.strip():
                raise ValueError(f"console block: output before the first `$ ` line: {line!r}")
            i += 1
            continue
        command = line[2:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        commands.append((command, []))
        i += 1
    return commands


def normalise(text: str) -> list[str]:
    """Lines with runs of whitespace (and of ─) collapsed; blank lines dropped."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"─+", "─", " ".join(line.split()))
        if line:
            out.append(line)
    return out


def _line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")) + r"\Z", re.DOTALL)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` fits ``expected`` (already normalised), ``...`` lines as wildcards."""
    patterns = [None if line == "..." else _line_pattern(line) for line in expected]
    memo: dict[tuple[int, int], bool] = {}

    def fit(e: int, a: int) -> bool:
        if (e, a) not in memo:
            if e == len(patterns):
                result = a == len(actual)
            elif patterns[e] is None:
                result = any(fit(e + 1, k) for k in range(a, len(actual) + 1))
            else:
                pattern = patterns[e]
                assert pattern is not None
                result = a < len(actual) and bool(pattern.match(actual[a])) and fit(e + 1, a + 1)
            memo[(e, a)] = result
        return memo[(e, a)]

    return fit(0, 0)


def shows_error(expected: list[str]) -> bool:
    return any("error:" in line.lower() for line in expected)


def run_in_process(argv: list[str], cwd: Path) -> tuple[int, str]:
    """``zoo ARGS`` through ``zoo.cli.main``: same output as the script, without starting Python."""
    from zoo.cli import main

    buffer = io.StringIO()
    saved = (os.getcwd(), os.environ.get("COLUMNS"))
    os.chdir(cwd)
    os.environ["COLUMNS"] = COLUMNS
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            try:
                code = main(argv)
            except SystemExit as exit:  # argparse: --help, a usage error
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.chdir(saved[0])
        if saved[1] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved[1]
    return code, buffer.getvalue()


def run_in_bash(command: str, cwd: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ZOO_PLUGINS", "ZOO_DISABLE_PLUGINS")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", COLUMNS=COLUMNS, OMP_NUM_THREADS="1")
    done = subprocess.run(
        ["bash", "-c", command], check=False, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=600,
    )  # fmt: skip
    return done.returncode, done.stdout


def run_command(command: str, cwd: Path) -> tuple[int, str]:
    words = shlex.split(command, comments=True)
    unquoted = re.sub(r"'[^']*'", "", command).split("#")[0]  # single quotes are literal in bash
    if words and words[0] == "zoo" and not SHELL.search(unquoted):
        return run_in_process(words[1:], cwd)
    return run_in_bash(command, cwd)


def check_console(block: Block, cwd: Path) -> None:
    for command, shown in parse_console(block.text):
        expected = normalise("\n".join(shown))
        code, output = run_command(command, cwd)
        actual = normalise(output)
        where = f"{block.id}: $ {command}"
        if code != 0 and not shows_error(expected):
            pytest.fail(f"{where}\nexited {code}, and the transcript shows no error:\n{output}", pytrace=False)
        if not matches(expected, actual):
            diff = difflib.unified_diff(expected, actual, "transcript", "output", lineterm="", n=2)
            pytest.fail(
                f"{where}\noutput differs from the transcript (whitespace collapsed; `...` lines are "
                f"wildcards, so they show as removed):\n" + "\n".join(diff) + "\n--- the whole output\n"
                + "\n".join(actual),
                pytrace=False,
            )  # fmt: skip


def compile_block(block: Block) -> CodeType:
    """The block as code whose line numbers are the markdown file's, asserts explained as
    in a test module (pytest's rewriting), so a failure points at the line in the doc."""
    source = "\n" * block.line + block.text
    tree = ast.parse(source, str(block.path))
    try:
        from _pytest.assertion.rewrite import rewrite_asserts

        rewrite_asserts(tree, source.encode(), str(block.path))
    except ImportError:  # pytest's internals moved: plain asserts still fail, with less detail
        pass
    return compile(tree, str(block.path), "exec")


def run_python(block: Block, namespace: dict[str, Any], cwd: Path) -> None:
    code = compile_block(block)
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        exec(code, namespace)
    finally:
        os.chdir(saved)


# -- one session per file ------------------------------------------------------------


@dataclass
class DocSession:
    """The state one markdown file's blocks share: a namespace and a folder."""

    blocks: list[Block]
    folder: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__docs__"})
    done: int = 0  # blocks run so far, in order

    def run(self, index: int) -> None:
        """Run the blocks before ``index`` (quietly, as set-up), then block ``index``."""
        while self.done < index:
            block = self.blocks[self.done]
            self.done += 1
            try:
                self.execute(block)
            except BaseException as err:  # set-up for a later block: report it as such
                if isinstance(err, KeyboardInterrupt):
                    raise
                pytest.fail(f"an earlier block, {block.id}, fails: {err}", pytrace=False)
        self.done = index + 1
        self.execute(self.blocks[index])

    def execute(self, block: Block) -> None:
        if block.lang == "python":
            run_python(block, self.namespace, self.folder)
        else:
            check_console(block, self.folder)


_sessions: dict[Path, DocSession] = {}


def session_for(path: Path, tmp_path_factory: pytest.TempPathFactory) -> DocSession:
    if path not in _sessions:
        blocks = [b for b in parse_blocks(path) if b.lang in RUN]
        _sessions[path] = DocSession(blocks, tmp_path_factory.mktemp(path.stem))
    return _sessions[path]


def runnable() -> list[Any]:
    params = []
    for path in doc_files():
        blocks = [b for b in parse_blocks(path) if b.lang in RUN]
        for index, block in enumerate(blocks):
            group = "hub-gpt2" if HUB_DOCS.get(path.name) else path.name  # one worker builds the 124M hub copy
            params.append(pytest.param(path, index, id=block.id, marks=pytest.mark.xdist_group(group)))
    return params


# Docs whose blocks load openai-community/gpt2 by hub id run offline against a hub cache
# this test fills, in the client's own layout (tests/helpers.py): GPT-2 Small with random
# weights under that id (for README.md and interop.md), and GPT-2's tokenizer files.
HUB_DOCS = {"README.md": True, "interop.md": True, "generation.md": False}  # file -> needs the weights
_hub_homes: dict[bool, Path] = {}


def hub_home(tmp_path_factory: pytest.TempPathFactory, weights: bool) -> Path:
    if weights not in _hub_homes:
        from helpers import gpt2_hub_cache

        _hub_homes[weights] = gpt2_hub_cache(tmp_path_factory.mktemp("hub"), weights=weights)
    return _hub_homes[weights]


@pytest.mark.parametrize(("path", "index"), runnable())
def test_doc_block(
    path: Path, index: int, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path.name in HUB_DOCS:
        monkeypatch.setenv("HF_HOME", str(hub_home(tmp_path_factory, HUB_DOCS[path.name])))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    session = session_for(path, tmp_path_factory)
    if session.done > index:  # run again from the start: a fresh namespace and folder
        del _sessions[path]
        session = session_for(path, tmp_path_factory)
    session.run(index)


# -- the collector itself -------------------------------------------------------------


def write_doc(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(body)
    return path


def run_all(path: Path, tmp_path: Path) -> None:
    blocks = [b for b in parse_blocks(path) if b.lang in RUN]
    session = DocSession(blocks, tmp_path)
    for index in range(len(blocks)):
        session.run(index)


FENCE = "```"


def test_the_collector_fails_on_a_wrong_expected_output(tmp_path: Path) -> None:
    good = write_doc(tmp_path, f"{FENCE}console\n$ echo hello   world\nhello world\n{FENCE}\n")
    run_all(good, tmp_path)
    bad = write_doc(tmp_path, f"{FENCE}console\n$ echo hello\ngoodbye\n{FENCE}\n")
    with pytest.raises(pytest.fail.Exception, match="output differs"):
        run_all(bad, tmp_path)
    missing = write_doc(tmp_path, f"{FENCE}console\n$ echo one; echo two\none\n{FENCE}\n")
    with pytest.raises(pytest.fail.Exception, match="output differs"):
        run_all(missing, tmp_path)


def test_the_collector_fails_on_a_wrong_zoo_output_in_process(tmp_path: Path) -> None:
    good = write_doc(tmp_path, f"{FENCE}console\n$ zoo list gpt2-xl\n...\ngpt2-xl ... 1,557,611,200 ...\n{FENCE}\n")
    run_all(good, tmp_path)  # in-process
    bad = write_doc(tmp_path, f"{FENCE}console\n$ zoo list gpt2-xl\n...\ngpt2-xl ... 1,557,611,201 ...\n{FENCE}\n")
    with pytest.raises(pytest.fail.Exception, match="output differs"):
        run_all(bad, tmp_path)


def test_a_failing_command_passes_only_where_the_transcript_shows_the_error(tmp_path: Path) -> None:
    shown = write_doc(tmp_path, f"{FENCE}console\n$ zoo info no-such-preset\nerror: ...\n{FENCE}\n")
    run_all(shown, tmp_path)
    hidden = write_doc(tmp_path, f"{FENCE}console\n$ zoo info no-such-preset\n...\n{FENCE}\n")
    with pytest.raises(pytest.fail.Exception, match="exited 1, and the transcript shows no error"):
        run_all(hidden, tmp_path)
    bash = write_doc(tmp_path, f"{FENCE}console\n$ false\n{FENCE}\n")
    with pytest.raises(pytest.fail.Exception, match="exited 1"):
        run_all(bash, tmp_path)


def test_python_blocks_share_a_namespace_and_folder_and_failures_name_the_block(tmp_path: Path) -> None:
    doc = write_doc(
        tmp_path,
        f"# t\n\n{FENCE}python\nx = 2\nopen('f.txt', 'w').write('hi')\n{FENCE}\n\n"
        f"{FENCE}text\nnot run\n{FENCE}\n{FENCE}console\n$ cat f.txt\nhi\n{FENCE}\n"
        f"{FENCE}python\nassert x == 2\nassert x == 3\n{FENCE}\n",
    )  # fmt: skip
    blocks = [b for b in parse_blocks(doc) if b.lang in RUN]
    assert [(b.lang, b.line) for b in blocks] == [("python", 3), ("console", 11), ("python", 15)]
    session = DocSession(blocks, tmp_path)
    session.run(0)
    session.run(1)
    with pytest.raises(AssertionError) as failure:
        session.run(2)
    entry = failure.traceback[-1]  # the failing line of the markdown file, its value explained
    assert (Path(entry.path), entry.lineno + 1) == (doc, 17) and "assert 2 == 3" in str(failure.value)


def test_wildcards() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "b"], ["a", "b"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert not matches(["a"], ["a", "b"])
    assert matches(["size ... MiB"], ["size 2.1 MiB"])
    assert not matches(["size ... MiB"], ["size 2.1 GiB"])
    assert normalise("  a   b\n\n ─────  c \n") == ["a b", "─ c"]


def test_every_doc_has_examples_and_only_known_fences() -> None:
    for path in doc_files():
        blocks = parse_blocks(path)
        unknown = {b.lang for b in blocks} - {"python", "console", "text", "toml", "bash", ""}
        assert not unknown, f"{path.name}: fences {unknown} are neither run nor declared not-run"
    assert sum(b.lang in RUN for path in doc_files() for b in parse_blocks(path)) >= 20


def test_readme_stays_short_and_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, "README.md is the front page: move reference material to docs/"
    first = parse_blocks(ROOT / "README.md")[0]
    commands = [line.split("#")[0].strip() for line in first.text.splitlines() if line.strip().startswith("make")]
    assert commands == ["make demo", "make test"]


def test_relative_links_resolve() -> None:
    broken = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_the_layout_in_design_md_names_every_module_of_zoo() -> None:
    """Every module and package of zoo/ is named, and every entry names one that exists;
    ``name.py`` and ``name/`` are the same entry, so a module may become a package."""
    layout = next(b.text for b in parse_blocks(ROOT / "docs" / "design.md") if b.text.startswith("pyproject.toml"))
    lines = layout.splitlines()
    section = lines[lines.index(next(x for x in lines if x.startswith("zoo/"))) + 1 :]
    section = section[: next(i for i, x in enumerate(section) if not x.startswith(" "))]
    named = {m.group(1) for m in re.finditer(r"(?:^|\s)(\w+)(?:\.py|/)(?=[\s:;,)]|$)", "\n".join(section))}
    entries = [p for p in (ROOT / "zoo").iterdir() if p.name != "__main__.py" and not p.name.startswith((".", "_"))]
    names = {p.stem for p in entries if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")}
    missing = sorted(names - named)
    assert not missing, f"docs/design.md's layout does not name {missing} (as name.py or name/): add them"
    first_column = {m.group(1) for x in section if (m := re.match(r"^  (\w+)(?:\.py|/)\s", x))}
    stale = sorted(first_column - names - {"__init__"})
    assert not stale, f"docs/design.md's layout names {stale}, which zoo/ no longer has: remove them"


def test_install_commands_name_the_distributions_in_pyproject() -> None:
    import tomllib

    names = {tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]}
    names |= {tomllib.loads(p.read_text())["project"]["name"] for p in (ROOT / "examples").glob("*/pyproject.toml")}
    installs = [
        line
        for path in doc_files()
        for block in parse_blocks(path)
        if block.lang in ("bash", "console")
        for line in block.text.splitlines()
        if re.match(r"^\$?\s*pip install ", line)
    ]
    assert installs
    for line in installs:  # e.g. pip install 'zoo[text]'
        for arg in shlex.split(line.lstrip("$ "), comments=True)[2:]:
            name = re.split(r"[\[<>=!~ ]", arg)[0]
            if name.startswith("zoo") and "/" not in arg:  # ours by name (not torch, not a path)
                assert name in names, f"{line!r}: {arg} is not one of {sorted(names)}"


def test_the_readmes_sig_legend_states_the_tools_rule() -> None:
    """The table marks `*` by the adjusted p (``AblationRun.significant``), not by the Δ
    interval excluding 0: `make demo`'s own table has rows whose interval excludes 0 and
    that are unmarked, which the README's legend must not contradict."""
    from zoo.ablate.stats import DEFAULT_CORRECTION

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    legend = " ".join(next(p for p in text.split("\n- ") if "`sig` is `*`" in p).split())
    assert "adjusted" in legend and "below 0.05" in legend, legend
    assert f"{DEFAULT_CORRECTION.capitalize()}'s by default" in legend, legend
    assert "`*` when the Δ interval excludes 0" not in legend, legend
