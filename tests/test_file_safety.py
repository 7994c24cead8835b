"""Files: the zoo never overwrites a user's files, and validates every file it reads.

Two classes of attack, each on real files (real symlinks, FIFOs, /dev/zero, real
concurrent processes for the lock):

- data loss: exports and run folders onto folders the zoo did not make, mixed folders
  after an export, writes through planted symbolic links, two writers on one folder,
  failed or killed exports;
- files read without validation: prepared-data manifests and shards, Hugging Face
  ``config.json`` / shard indexes / weights / vocabularies, nanoGPT checkpoints, ``--config``
  files and ``run.toml``, ``metrics.jsonl``, and inputs that are FIFOs or devices.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import zoo
from helpers import edit_in_place, error_line, not_a_regular_file, prepared_bytes, tiny, train_tokenizer
from zoo.checkpoint.owned import LOCK, MARKER, FolderLockedError, claim, owned_folder, read_marker
from zoo.cli import main
from zoo.errors import InputError, InteropError, ZooError
from zoo.files import open_append, read_json
from zoo.training import TrainSettings, train
from zoo.training.data import resolve_data
from zoo.training.manifest import MANIFEST, manifest_digest
from zoo.training.shards import open_data, prepare

# -- helpers --------------------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_folder(path: Path) -> dict[str, bytes]:
    """A folder of a user's own files, the way a Hugging Face download looks."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"mine": true}\n')
    (path / "model.safetensors").write_bytes(b"my weights")
    (path / "notes.txt").write_text("do not lose me")
    return snapshot(path)


def siblings(path: Path) -> list[str]:
    """Hidden staging or backup folders the zoo may have left beside ``path``."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.zoo-"))


# -- A. exports never touch a user's folder ------------------------------------------------------


def test_export_onto_a_users_folder_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    before = user_folder(tmp_path / "hf")
    with pytest.raises(InteropError, match=r"did not write.*overwrite=True"):
        zoo.to_hf(tiny(), tmp_path / "hf")
    assert snapshot(tmp_path / "hf") == before
    assert siblings(tmp_path / "hf") == []


def test_export_overwrite_replaces_a_sharded_folder_whole(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "generation_config.json"):
        (folder / name).write_bytes(b"old")
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    zoo.to_hf(tiny(), folder, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "config.json", "model.safetensors"]
    assert siblings(folder) == []
    back = zoo.from_hf(folder)
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(back(ids), tiny()(ids))


def test_export_replaces_its_own_unchanged_export_but_not_one_a_user_added_to(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    zoo.to_hf(tiny(), folder)
    first = read_marker(folder, InteropError)
    assert first is not None and first.kind == "hf-export" and first.files == ["config.json", "model.safetensors"]
    zoo.to_hf(tiny(n_layers=1), folder)  # its own output: replaced
    assert json.loads((folder / "config.json").read_text())["n_layer"] == 1
    (folder / "tokenizer.json").write_text("{}")  # the user adds a file
    before = snapshot(folder)
    with pytest.raises(InteropError, match=r"tokenizer\.json"):
        zoo.to_hf(tiny(), folder)
    assert snapshot(folder) == before


@pytest.mark.parametrize("marker", ["{", "[]", '{"format": 1}', '{"format": 2, "kind": "hf-export"}', "x" * 3_000_000])
def test_a_damaged_marker_is_refused_unless_overwrite(tmp_path: Path, marker: str) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / MARKER).write_text(marker)
    (folder / "config.json").write_text("{}")
    with pytest.raises(InteropError):
        zoo.to_hf(tiny(), folder)
    assert (folder / "config.json").read_text() == "{}"
    zoo.to_hf(tiny(), folder, overwrite=True)
    assert read_marker(folder, InteropError) is not None


def test_an_export_through_a_symlink_is_refused(tmp_path: Path) -> None:
    before = user_folder(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for overwrite in (False, True):
        with pytest.raises(InteropError, match="symbolic link"):
            zoo.to_hf(tiny(), tmp_path / "link", overwrite=overwrite)
    assert snapshot(tmp_path / "real") == before
    assert (tmp_path / "link").is_symlink()


def test_a_planted_marker_symlink_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"format": 1, "kind": "hf-export", "command": "x", "zoo_version": "1", "created": 0.0}')
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / MARKER).symlink_to(secret)
    with pytest.raises(InteropError, match="symbolic link"):
        zoo.to_hf(tiny(), folder)
    zoo.to_hf(tiny(), folder, overwrite=True)
    assert not (folder / MARKER).is_symlink()
    assert "command" in secret.read_text()  # the link's target was never written


def test_an_export_whose_parent_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InteropError, match="is a file"):
        zoo.to_hf(tiny(), tmp_path / "file" / "hf")
    with pytest.raises(InteropError, match="is a file"):
        zoo.to_hf(tiny(), tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"


def test_a_failed_export_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up while config.json is written (after the weights)."""
    import zoo.interop.hf as hf

    real = hf.write_atomically
    calls: list[Path] = []

    def fill_up(path: Path, write: Any, *rest: Any) -> Path:
        calls.append(path)
        if path.name == "config.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, write, *rest)

    monkeypatch.setattr(hf, "write_atomically", fill_up)
    with pytest.raises(InteropError, match="No space left"):
        zoo.to_hf(tiny(), tmp_path / "new" / "deeper" / "hf")
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []  # not even the parents made for it
    before = user_folder(tmp_path / "old")
    with pytest.raises(InteropError):
        zoo.to_hf(tiny(), tmp_path / "old", overwrite=True)
    assert snapshot(tmp_path / "old") == before and siblings(tmp_path / "old") == []


def test_a_killed_exports_staging_folder_is_cleaned_by_the_next(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".hf.zoo-new-{int(dead.stdout)}-0123abcd"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    mine = tmp_path / f".hf.zoo-new-{os.getpid()}-0123abcd"  # a live process's: kept
    mine.mkdir()
    zoo.to_hf(tiny(), tmp_path / "hf")
    assert not stale.exists() and mine.exists()


def test_cli_convert_refuses_to_replace_a_file_without_overwrite(tmp_path: Path) -> None:
    zoo.to_hf(tiny(), tmp_path / "hf")
    mine = tmp_path / "mine.safetensors"
    mine.write_bytes(b"precious")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "-o", str(mine)]) == 1
    assert mine.read_bytes() == b"precious"
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "-o", str(mine), "--overwrite"]) == 0
    assert zoo.load(mine).config.n_layers == 2


def test_cli_convert_to_hf_refuses_a_users_folder_and_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zoo.save(tiny(), tmp_path / "m.safetensors")
    before = user_folder(tmp_path / "hf")
    assert main(["convert", "--to-hf", str(tmp_path / "m.safetensors"), "-o", str(tmp_path / "hf")]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(tmp_path / "hf") == before
    assert main(["convert", "--to-hf", str(tmp_path / "m.safetensors"), "-o", str(tmp_path / "hf"), "--overwrite"]) == 0
    assert "notes.txt" not in os.listdir(tmp_path / "hf")


# -- A. run folders: marker, lock, links ---------------------------------------------------------

HOLD = """
import sys
from pathlib import Path
from zoo.checkpoint.owned import claim
from zoo.errors import ZooError
held = claim(Path(sys.argv[1]), "train", "zoo train", error=ZooError)
print("held", flush=True)
sys.stdin.read()  # holds until the test closes this stdin or kills it: no sleep that a slow test could outlast
"""


def hold(folder: Path) -> subprocess.Popen[str]:
    """Another process that claims ``folder`` and keeps it."""
    command = [sys.executable, "-c", HOLD, str(folder)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_second_process_on_a_claimed_folder_gets_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = hold(folder)
    try:
        with pytest.raises(FolderLockedError, match=rf"in use: process {holder.pid} is writing"):
            claim(folder, "train", "zoo train", error=ZooError)
        with pytest.raises(FolderLockedError):  # nor can an export replace it
            zoo.to_hf(tiny(), folder, overwrite=True)
        with pytest.raises(FolderLockedError):  # nor another run with overwrite
            claim(folder, "train", "zoo train", error=ZooError, overwrite=True)
        assert folder.is_dir() and (folder / MARKER).is_file()
    finally:
        holder.kill()
        holder.communicate()  # closes its pipes
    with owned_folder(folder, "train", "zoo train", error=ZooError) as owned:  # free once the holder is gone
        assert not owned.fresh or list(folder.iterdir())


def test_two_processes_started_together_on_a_new_folder_one_wins(tmp_path: Path) -> None:
    """Two processes claim one new folder at once: one holds it (until this test lets it
    go), the other is told the folder is in use, whatever the order they reach it in."""
    script = HOLD.replace(
        'held = claim(Path(sys.argv[1]), "train", "zoo train", error=ZooError)',
        "try:\n    held = claim(Path(sys.argv[1]), 'train', 'zoo train', error=ZooError)\n"
        "except ZooError as err:\n    print('refused', err, flush=True); sys.exit(1)",
    )
    command = [sys.executable, "-c", script, str(tmp_path / "run")]
    runs = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        firsts = [run.stdout.readline() for run in runs if run.stdout is not None]  # each says held or refused
    finally:
        for run in runs:  # the holder holds until its stdin closes: no sleep decides the order
            if run.stdin is not None:
                run.stdin.close()
    outputs = [first + (run.stdout.read() if run.stdout else "") for first, run in zip(firsts, runs, strict=True)]
    codes = sorted(run.wait(timeout=60) for run in runs)
    assert codes == [0, 1], outputs
    assert sorted(out.split()[0] for out in outputs) == ["held", "refused"], outputs
    assert any(out.startswith("refused") and "in use" in out for out in outputs), outputs  # told why


@pytest.mark.skipif(os.name != "posix", reason="flock: the moment is made with POSIX locks")
def test_a_claim_meeting_a_half_written_marker_is_told_the_folder_is_in_use(tmp_path: Path) -> None:
    """The race of two runs on a new folder, made deterministic: the winner holds the lock
    and its marker is still a hidden temporary file; the loser is told the folder is in
    use, not that it holds a file the zoo did not write."""
    import fcntl

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / f".{MARKER}.half-written").write_text("{", encoding="utf-8")
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(FolderLockedError, match="is in use: a running zoo process holds it"):
            claim(folder, "train", "zoo train", error=ZooError)
    finally:
        os.close(fd)
    with pytest.raises(ZooError, match="did not write"):  # no one holds it: the stray file is foreign
        claim(folder, "train", "zoo train", error=ZooError)


def test_claims_refuse_folders_they_did_not_make(tmp_path: Path) -> None:
    before = user_folder(tmp_path / "mine")
    with pytest.raises(ZooError, match="did not write"):
        claim(tmp_path / "mine", "ablate", "zoo ablate", error=ZooError)
    assert snapshot(tmp_path / "mine") == before
    with owned_folder(tmp_path / "run", "train", "zoo train", error=ZooError) as owned:
        assert owned.fresh
    with pytest.raises(ZooError, match=r"made by zoo train \(train\)"):
        claim(tmp_path / "run", "ablate", "zoo ablate", error=ZooError)
    adopted = claim(tmp_path / "mine", "train", "zoo train", error=ZooError, adopt=lambda p: True)
    adopted.release()
    assert not adopted.fresh and snapshot(tmp_path / "mine").items() >= before.items()


def test_claim_overwrite_swaps_in_an_empty_folder(tmp_path: Path) -> None:
    user_folder(tmp_path / "mine")
    with owned_folder(tmp_path / "mine", "ablate", "zoo ablate", error=ZooError, overwrite=True) as owned:
        assert owned.fresh and sorted(os.listdir(tmp_path / "mine")) == [MARKER, LOCK]
    assert siblings(tmp_path / "mine") == []


def test_a_planted_lock_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK).symlink_to(target)
    with pytest.raises(ZooError, match="symbolic link"):
        claim(tmp_path / "run", "train", "zoo train", error=ZooError)
    assert target.read_text() == "keep"


def test_appends_never_go_through_a_link_or_onto_a_non_file(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "metrics.jsonl").symlink_to(target)
    with pytest.raises(ZooError, match="symbolic link"):
        open_append(tmp_path / "metrics.jsonl", ZooError)
    assert target.read_text() == "keep"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ZooError, match="not a regular file"):
        open_append(tmp_path / "fifo", ZooError)
    with open_append(tmp_path / "new.jsonl", ZooError) as handle:
        handle.write("{}\n")
    assert (tmp_path / "new.jsonl").read_text() == "{}\n"


# -- B. prepared data -------------------------------------------------------------------------------


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question. " * 40)
    return prepare([text], tmp_path / "data", tokenizer="bytes", val_fraction=0.1).path  # type: ignore[return-value]


def edit_manifest(folder: Path, change: Any, *, sign: bool = True) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    change(manifest)
    if sign:  # the digest is integrity, not authenticity: an attacker re-signs
        manifest["digest"] = manifest_digest(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_a_prepared_folder_opens_and_records_quick_digests(prepared: Path) -> None:
    data = open_data(prepared)
    assert data.tokenizer == "bytes" and data.train.tokens > 0
    shard = json.loads((prepared / MANIFEST).read_text())["splits"]["train"]["shards"][0]
    assert shard["sample"].startswith("xxh3_128:")


def test_a_missing_or_folder_manifest_is_never_read_as_text(prepared: Path) -> None:
    (prepared / MANIFEST).unlink()
    for attempt in (
        lambda: open_data(prepared),
        lambda: resolve_data(prepared),
        lambda: prepare([prepared], prepared.parent / "again"),
    ):
        with pytest.raises(InputError, match=r"manifest|prepared folder"):
            attempt()
    (prepared / MANIFEST).mkdir()
    for attempt in (lambda: open_data(prepared), lambda: resolve_data(prepared)):
        with pytest.raises(InputError, match="folder"):
            attempt()
    assert not (prepared.parent / "again").exists()


def test_prepare_refuses_a_prepared_folder_as_input(prepared: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="prepared folder"):
        prepare([tmp_path], tmp_path / "out", tokenizer="bytes")  # a folder holding a prepared folder
    with pytest.raises(InputError, match="prepared folder"):
        prepare([prepared], tmp_path / "out2", tokenizer="bytes")


def test_binary_files_are_not_text(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"a\x00b\x00c\x00" * 100)
    with pytest.raises(InputError, match="NUL"):
        prepare([tmp_path / "blob.bin"], tmp_path / "out", tokenizer="bytes")


@pytest.mark.parametrize("device", ["/dev/zero", "fifo"])
def test_a_manifest_that_is_a_device_or_fifo_is_refused_without_reading(prepared: Path, device: str) -> None:
    (prepared / MANIFEST).unlink()
    not_a_regular_file(prepared / MANIFEST, device)
    start = time.monotonic()
    with pytest.raises(InputError, match="regular file"):
        open_data(prepared)
    assert time.monotonic() - start < 5


def test_a_huge_manifest_is_refused_by_size(prepared: Path) -> None:
    with open(prepared / MANIFEST, "a") as handle:
        handle.truncate(64 << 20)  # sparse: 64 MiB without writing them
    with pytest.raises(InputError, match="bytes, more than"):
        open_data(prepared)


@pytest.mark.parametrize(
    "name", ["../escape.bin", "/etc/passwd", "sub/../../x.bin", "", "a\\b.bin", "sub/train.bin", 7]
)
def test_shard_names_stay_inside_their_folder(prepared: Path, name: Any) -> None:
    (prepared.parent / "escape.bin").write_bytes(b"\x00" * 10_000)

    def rename(manifest: dict[str, Any]) -> None:
        manifest["splits"]["train"]["shards"][0]["file"] = name

    edit_manifest(prepared, rename)
    with pytest.raises(InputError, match=r"file name|outside|malformed"):
        open_data(prepared)


MALFORMED = [
    ("tokens as a string", lambda m: m["splits"]["train"]["shards"][0].update(tokens="10")),
    ("tokens as a float", lambda m: m["splits"]["train"]["shards"][0].update(tokens=10.5)),
    ("negative bytes", lambda m: m["splits"]["val"].update(bytes=-5)),
    ("zero bytes", lambda m: m["splits"]["val"].update(bytes=0)),
    ("vocab as a bool", lambda m: m.update(vocab_size=True)),
    ("vocab over uint16", lambda m: m.update(vocab_size=70_000)),
    ("bytes tokenizer with vocab 1000", lambda m: m.update(vocab_size=1000)),
    ("unknown tokenizer", lambda m: m.update(tokenizer="<b>html</b>")),
    ("dtype int8", lambda m: m.update(dtype="int8")),
    ("splits a list", lambda m: m.update(splits=[1, 2])),
    ("shards a dict", lambda m: m["splits"]["train"].update(shards={"file": "x"})),
    ("no shards", lambda m: m["splits"]["train"].update(shards=[], tokens=0)),
    ("split tokens disagree", lambda m: m["splits"]["train"].update(tokens=m["splits"]["train"]["tokens"] + 1)),
    ("bad digest", lambda m: m["splits"]["train"]["shards"][0].update(digest="md5:00")),
    ("val_fraction 2", lambda m: m.update(val_fraction=2.0)),
    ("no val split", lambda m: m["splits"].pop("val")),
]


@pytest.mark.parametrize("change", [c for _, c in MALFORMED], ids=[n for n, _ in MALFORMED])
def test_a_re_signed_malformed_manifest_is_an_input_error(prepared: Path, change: Any) -> None:
    edit_manifest(prepared, change)
    with pytest.raises(InputError, match="malformed"):
        open_data(prepared)


@pytest.mark.parametrize(
    "text",
    [
        '{"format": Infinity}',
        '{"format": 1e400}',
        '{"format": NaN}',
        "[" * 100_000,
        '{"a": ' * 40 + "1" + "}" * 40,
        "\xff\xfe",
    ],
)
def test_unparseable_manifests_are_input_errors(prepared: Path, text: str) -> None:
    (prepared / MANIFEST).write_bytes(
        text.encode("utf-8", errors="surrogateescape") if text != "\xff\xfe" else b"\xff\xfe"
    )
    with pytest.raises(InputError):
        open_data(prepared)


def test_a_same_size_shard_from_other_data_is_caught_by_default(prepared: Path, tmp_path: Path) -> None:
    shard = prepared / "train-00000.bin"
    size = shard.stat().st_size
    shard.write_bytes(bytes(reversed(shard.read_bytes())))
    assert shard.stat().st_size == size
    with pytest.raises(InputError, match="not the one this folder was prepared with"):
        open_data(prepared)


def test_old_manifests_without_quick_digests_check_the_full_digest(prepared: Path) -> None:
    def drop(manifest: dict[str, Any]) -> None:
        for split in manifest["splits"].values():
            for shard in split["shards"]:
                del shard["sample"]

    edit_manifest(prepared, drop)
    open_data(prepared)
    shard = prepared / "val-00000.bin"
    shard.write_bytes(b"\x01\x00" * (shard.stat().st_size // 2))
    with pytest.raises(InputError, match="damaged"):
        open_data(prepared)


def test_the_raw_text_cache_keys_on_content_not_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "corpus.txt"
    text.write_text("a" * 2000)
    stamp = text.stat()
    first = resolve_data(text, tokenizer="bytes", val_fraction=0.1)
    text.write_text("b" * 2000)  # same size, then the old mtime back (cp -p, rsync -t)
    os.utime(text, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    second = resolve_data(text, tokenizer="bytes", val_fraction=0.1)
    assert int(first.train.shards[0][0]) == ord("a") and int(second.train.shards[0][0]) == ord("b")


@pytest.mark.parametrize("reader", ["tokenizer", "text prepared with it"])
def test_a_tokenizer_edited_in_place_is_never_served_from_a_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """A tokenizer folder edited with its files' sizes and mtimes kept: every cache of
    something made with it (the built tokenizer, text prepared with it) keys on content."""
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / "cache"))
    folder = train_tokenizer(tmp_path / "tok")
    text = tmp_path / "corpus.txt"
    text.write_text("hike " * 400)

    def first_token() -> int:
        if reader == "tokenizer":
            return zoo.tokenizer(str(folder)).encode("h")[0]
        return int(resolve_data(text, tokenizer=str(folder), val_fraction=0.1).train.shards[0][0])

    before = first_token()
    edit_in_place(folder / "tokenizer.json", {'\n      "h": ': '\n      "k": '})  # "h" and "k" trade ids
    after = first_token()
    assert after != before and after == zoo.tokenizer(str(folder)).encode("h")[0]


def test_a_built_in_tokenizer_is_keyed_by_its_name_whatever_the_folder_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder named ``bytes`` with tokenizer files in the current folder is not the
    built-in tokenizer: text prepared with ``bytes`` is found in the cache from any folder."""
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "corpus.txt").write_text("hello " * 300)
    first = resolve_data(tmp_path / "corpus.txt", tokenizer="bytes", val_fraction=0.1)
    train_tokenizer(tmp_path / "here" / "bytes")
    monkeypatch.chdir(tmp_path / "here")
    again = resolve_data(tmp_path / "corpus.txt", tokenizer="bytes", val_fraction=0.1)
    assert first.path is not None and again.path == first.path


@pytest.mark.parametrize("cache", ["file", "file/below"])
def test_a_bad_data_cache_is_an_input_error_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / cache))
    (tmp_path / "corpus.txt").write_text("hello " * 300)
    with pytest.raises(InputError, match="ZOO_DATA_CACHE"):
        resolve_data(tmp_path / "corpus.txt", tokenizer="bytes", val_fraction=0.1)


@pytest.mark.parametrize("out", ["file/below", "link"])
def test_prepare_outputs_under_a_file_or_through_a_link_are_refused(tmp_path: Path, out: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "corpus.txt").write_text("hello " * 300)
    with pytest.raises(InputError, match=r"is a file|symbolic link"):
        prepare([tmp_path / "corpus.txt"], tmp_path / out, tokenizer="bytes", val_fraction=0.1)
    assert list((tmp_path / "elsewhere").iterdir()) == []


# -- B. Hugging Face folders ---------------------------------------------------------------------


@pytest.fixture
def gpt2_folder(tmp_path: Path) -> Path:
    return zoo.to_hf(tiny(), tmp_path / "hf")


def edit_config(folder: Path, change: Any) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


GPT2_CONFIGS = [
    ("heads a list", lambda c: c.update(n_head=[4])),
    ("zero heads", lambda c: c.update(n_head=0)),
    ("negative layers", lambda c: c.update(n_layer=-2)),
    ("width 32.7", lambda c: c.update(n_embd=32.7)),
    ("width 32.0", lambda c: c.update(n_embd=32.0)),
    ("width as a string", lambda c: c.update(n_embd="32")),
    ("layers a bool", lambda c: c.update(n_layer=True)),
    ("dropout 3", lambda c: c.update(attn_pdrop=3.0)),
    ("epsilon 0", lambda c: c.update(layer_norm_epsilon=0)),
    ("activation a dict", lambda c: c.update(activation_function={"name": "gelu"})),
    ("tie as a string", lambda c: c.update(tie_word_embeddings="yes")),
    ("vocab 2**40", lambda c: c.update(vocab_size=2**40)),
    ("pruned heads a string", lambda c: c.update(pruned_heads="all")),
]


@pytest.mark.parametrize("change", [c for _, c in GPT2_CONFIGS], ids=[n for n, _ in GPT2_CONFIGS])
def test_gpt2_config_fields_are_typed(gpt2_folder: Path, change: Any) -> None:
    edit_config(gpt2_folder, change)
    with pytest.raises(InteropError, match="config.json"):
        zoo.from_hf(gpt2_folder)


@pytest.mark.parametrize(
    "text",
    [
        '{"n_head": Infinity}',
        '{"n_embd": 1e400}',
        '{"n_head": NaN}',
        '{"a": ' * 50 + "1" + "}" * 50,
        "[" * 200_000 + "]" * 200_000,
        "[1, 2]",
        '"gpt2"',
    ],
)
def test_unparseable_or_deep_config_json_is_an_interop_error(gpt2_folder: Path, text: str) -> None:
    (gpt2_folder / "config.json").write_text(text)
    with pytest.raises(InteropError):
        zoo.from_hf(gpt2_folder)


def test_a_config_json_folder_or_device_is_refused(gpt2_folder: Path) -> None:
    (gpt2_folder / "config.json").unlink()
    (gpt2_folder / "config.json").symlink_to("/dev/zero")
    with pytest.raises(InteropError):
        zoo.from_hf(gpt2_folder)


LLAMA_CONFIGS = [
    ("rope_parameters a list", lambda c: c.update(rope_parameters=[1, 2])),
    ("rope_scaling a string", lambda c: c.update(rope_scaling="linear")),
    ("rope_theta a string", lambda c: c.update(rope_theta="1e4")),
    ("rope_theta negative", lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": -1.0})),
    ("heads 0", lambda c: c.update(num_attention_heads=0)),
    ("kv heads a list", lambda c: c.update(num_key_value_heads=[2])),
    ("hidden 32.7", lambda c: c.update(hidden_size=32.7)),
    ("layer_types a string", lambda c: c.update(layer_types="full")),
    ("sliding_window a string", lambda c: c.update(sliding_window="none")),
    ("no hidden_size", lambda c: c.pop("hidden_size")),
]


@pytest.mark.parametrize("change", [c for _, c in LLAMA_CONFIGS], ids=[n for n, _ in LLAMA_CONFIGS])
def test_llama_config_fields_are_typed(tmp_path: Path, change: Any) -> None:
    pytest.importorskip("zoo_modern")
    model = tiny("llama-style-small", n_heads=4, attention={"name": "gqa", "n_kv_heads": 2})
    folder = zoo.to_hf(model, tmp_path / "llama")
    zoo.from_hf(folder)  # the unedited export loads
    edit_config(folder, change)
    with pytest.raises(InteropError, match="config.json"):
        zoo.from_hf(folder)


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/passwd", "sub/../../outside.safetensors"])
def test_shard_index_names_stay_inside_the_folder(gpt2_folder: Path, name: str) -> None:
    (gpt2_folder.parent / "outside.safetensors").write_bytes((gpt2_folder / "model.safetensors").read_bytes())
    (gpt2_folder / "model.safetensors").unlink()
    (gpt2_folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wte.weight": name}}))
    with pytest.raises(InteropError, match="outside its folder"):
        zoo.from_hf(gpt2_folder)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.bool])
def test_integer_or_bool_weights_are_refused_naming_the_tensor(gpt2_folder: Path, dtype: torch.dtype) -> None:
    from safetensors.torch import load_file

    tensors = load_file(gpt2_folder / "model.safetensors")
    tensors["transformer.h.0.ln_1.weight"] = tensors["transformer.h.0.ln_1.weight"].to(dtype)
    save_file(tensors, gpt2_folder / "model.safetensors")
    with pytest.raises(InteropError, match=r"h\.0\.ln_1\.weight.*floating point"):
        zoo.from_hf(gpt2_folder)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_unless_allowed(gpt2_folder: Path, value: float) -> None:
    from safetensors.torch import load_file

    tensors = load_file(gpt2_folder / "model.safetensors")
    tensors["transformer.h.1.mlp.c_fc.weight"][3, 5] = value
    save_file(tensors, gpt2_folder / "model.safetensors")
    with pytest.raises(InteropError, match=r"h\.1\.mlp\.c_fc\.weight.*1 NaN or infinite.*allow_nonfinite=True"):
        zoo.from_hf(gpt2_folder)
    model = zoo.from_hf(gpt2_folder, allow_nonfinite=True)
    assert not torch.isfinite(model.blocks[1].mlp.up.weight).all()


@pytest.mark.parametrize(
    "vocab",
    ["[" * 100_000 + "]" * 100_000, "[1, 2, 3]", '{"a": "b"}', '{"a": -1}', '{"a": 1.5}', '{"a": {"b": 1}}', "nope"],
)
def test_a_malformed_vocab_json_is_an_interop_error(tmp_path: Path, vocab: str) -> None:
    pytest.importorskip("tiktoken")
    from zoo.text.loading import tokenizer

    (tmp_path / "vocab.json").write_text(vocab)
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(InteropError, match="vocab.json|vocabulary|tokenizer"):
        tokenizer(tmp_path)


# -- B. nanoGPT checkpoints ---------------------------------------------------------------------


def nanogpt_checkpoint(path: Path, model_args: dict[str, Any], state: dict[str, torch.Tensor]) -> Path:
    torch.save({"model": state, "model_args": model_args, "iter_num": 0}, path)
    return path


def test_stride_zero_tensors_are_refused_before_any_allocation(tmp_path: Path) -> None:
    args = {"n_layer": 1, "n_head": 4, "n_embd": 4096, "block_size": 1024, "vocab_size": 50304, "bias": False}
    huge = torch.zeros(1).expand(50304, 4096)  # 824 MB as a view of 4 bytes
    ckpt = nanogpt_checkpoint(tmp_path / "ckpt.pt", args, {"transformer.wte.weight": huge})
    assert ckpt.stat().st_size < 10_000
    with pytest.raises(InteropError, match=r"wte\.weight.*storage"):
        zoo.from_nanogpt(ckpt)


@pytest.mark.parametrize(
    "args",
    [{"n_embd": 32.7}, {"n_head": 0}, {"n_layer": "2"}, {"bias": "yes"}, {"dropout": 2.0}, {"block_size": [64]}],
)
def test_nanogpt_model_args_are_typed(tmp_path: Path, args: dict[str, Any]) -> None:
    base = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 64, "bias": True, "dropout": 0.0}
    ckpt = nanogpt_checkpoint(tmp_path / "ckpt.pt", {**base, **args}, {"transformer.wte.weight": torch.zeros(64, 32)})
    with pytest.raises(InteropError, match="model_args"):
        zoo.from_nanogpt(ckpt)


# -- the read helpers themselves --------------------------------------------------------------


def test_read_json_refuses_folders_devices_and_links_when_asked(tmp_path: Path) -> None:
    with pytest.raises(ZooError, match="folder"):
        read_json(tmp_path, ZooError)
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    (tmp_path / "real.json").write_text("{}")
    assert read_json(tmp_path / "link.json", ZooError) == {}
    with pytest.raises(ZooError, match="symbolic link"):
        read_json(tmp_path / "link.json", ZooError, follow=False)
    with pytest.raises(ZooError, match="digits"):
        (tmp_path / "big.json").write_text("1" * 5000)
        read_json(tmp_path / "big.json", ZooError)


# -- files read without validation: config files, run.toml, config.json, metrics.jsonl, FIFOs --------

OVERRIDES = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32, dropout=0.0)
SETTINGS = TrainSettings(steps=2, batch_size=2, seq_len=16, eval_every=2, eval_batches=1, save_every=2, threads=1)
MODEL = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
MODEL += ["--set", "max_seq_len=32", "--set", "dropout=0.0"]
FLAGS = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--eval-batches", "1"]
FLAGS += ["--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 8_000)


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run (one version, its state, metrics.jsonl); copy it before editing."""
    out = tmp_path_factory.mktemp("run") / "run"
    train("gpt2-small", data, SETTINGS, out=out, overrides=OVERRIDES)
    return out


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail a test that blocks (a FIFO read, /dev/zero) after 10 s instead of hanging the suite."""

    def stop(*_: Any) -> None:
        raise TimeoutError("blocked on a read")

    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - xdist runs tests in main
        yield
        return
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


CONFIG_FILES = [
    ("bad UTF-8", b"steps = 2\n\xff\xfe\n", "not UTF-8"),
    ("nested past the stack", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "not a config file"),
    ("an integer of 100,000 digits", b"steps = " + b"9" * 100_000 + b"\n", "not a config file"),
    ("over the size limit", b"# " + b"x" * (2 << 20) + b"\n", "bytes, more than"),
]


@pytest.mark.parametrize("content,needle", [c[1:] for c in CONFIG_FILES], ids=[c[0] for c in CONFIG_FILES])
def test_a_damaged_config_file_is_one_error_line(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str
) -> None:
    (tmp_path / "run.toml").write_bytes(content)
    args = ["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "r"), *FLAGS]
    args += ["--config", str(tmp_path / "run.toml")]
    assert main(args) == 1
    error_line(capsys, needle)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_a_config_file_that_is_not_a_regular_file_is_refused_without_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, alarm: None
) -> None:
    config = not_a_regular_file(tmp_path / "study.toml", kind)
    start = time.monotonic()
    assert main(["ablate", "--config", str(config), "-o", str(tmp_path / "abl")]) == 1
    assert time.monotonic() - start < 5  # refused on sight, not after a blocked read
    error_line(capsys, "config file", "regular file" if kind != "folder" else "folder")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_checkpoint_that_is_a_device_or_fifo_is_named_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, alarm: None
) -> None:
    """Not "empty (0 bytes)", the size a device reports: what it is, for inspect and load."""
    file = not_a_regular_file(tmp_path / "model.safetensors", kind)
    assert main(["inspect", str(file)]) == 1
    error_line(capsys, "regular file")
    with pytest.raises(zoo.CheckpointError, match="not a regular file"):
        zoo.load(file)


def test_a_resumed_runs_damaged_run_toml_is_one_error_line(
    run: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "run.toml").write_bytes(b"steps = " + b"[" * 3000 + b"]" * 3000)
    assert main(["train", "--resume", "-o", str(out), "--data", str(data)]) == 1
    error_line(capsys, "run.toml")


@pytest.fixture
def hf_folder(tmp_path: Path) -> Path:
    return zoo.to_hf(tiny(), tmp_path / "hf")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[" * 100_000 + "]" * 100_000, "nests"),
        ('{"n_embd": 32, "x": ' * 40 + "1" + "}" * 40, "nests"),
        ('{"n_head": Infinity}', "Infinity"),
        ("\ufeff{}", "not valid JSON"),
    ],
)
@pytest.mark.parametrize("command", ["info", "compare"])
def test_zoo_info_and_compare_read_a_config_json_through_the_validated_reader(
    hf_folder: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str, command: str
) -> None:
    (hf_folder / "config.json").write_text(text, encoding="utf-8")
    argv = ["info", str(hf_folder)] if command == "info" else ["compare", str(hf_folder), "gpt2-small"]
    assert main(argv) == 1
    error_line(capsys, "config.json", needle)


def test_a_shard_index_nested_past_the_stack_is_an_interop_error(hf_folder: Path) -> None:
    from zoo.errors import InteropError
    from zoo.interop.hub import _shards

    index = hf_folder / "model.safetensors.index.json"
    index.write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InteropError, match="shard index"):
        _shards(index)


METRICS_DAMAGE = [
    ("bad UTF-8", b"\xff\xfe\n"),
    ("nested past the stack", b"[" * 100_000 + b"\n"),
    ("a step without a loss", b'{"step": 9, "lr": 0.001}\n'),
    ("a dict for a loss", b'{"step": 9, "loss": {"a": 1}, "lr": 0.001}\n'),
    ("a string for lr", b'{"step": 9, "loss": 1.0, "lr": "high"}\n'),
    ("a val loss of 1e400", b'{"step": 9, "loss": 1.0, "lr": 0.001, "val_loss": 1e400}\n'),
    ("a bool step", b'{"step": true, "loss": 1.0, "lr": 0.001}\n'),
    ("a line of 1 MiB", b'{"step": 9, "loss": 1.0, "lr": 0.001, "x": "' + b"y" * (1 << 20) + b'"}\n'),
]


@pytest.mark.parametrize("damage", [d for _, d in METRICS_DAMAGE], ids=[n for n, _ in METRICS_DAMAGE])
def test_zoo_plot_skips_damaged_metrics_lines(run: Path, tmp_path: Path, damage: bytes) -> None:
    from zoo.training.curves import read_metrics

    out = tmp_path / "run"
    shutil.copytree(run, out)
    with open(out / "metrics.jsonl", "ab") as handle:
        handle.write(damage)
    assert [row["step"] for row in read_metrics(out)] == [1, 2]
    assert main(["plot", str(out), "-o", str(tmp_path / "curves.png")]) == 0


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_zoo_plot_refuses_a_metrics_file_that_is_not_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, alarm: None
) -> None:
    (tmp_path / "run").mkdir()
    not_a_regular_file(tmp_path / "run" / "metrics.jsonl", kind)
    assert main(["plot", str(tmp_path / "run"), "-o", str(tmp_path / "c.png")]) == 1
    error_line(capsys, "regular file", "zoo train")


# -- inputs that are not files ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["data prepare", "train", "eval"])
def test_a_fifo_given_as_data_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, alarm: None
) -> None:
    os.mkfifo(tmp_path / "in.txt")
    zoo.save(tiny(vocab_size=256), tmp_path / "m.safetensors")
    argv = {
        "data prepare": [
            "data",
            "prepare",
            str(tmp_path / "in.txt"),
            "-o",
            str(tmp_path / "p"),
            "--tokenizer",
            "bytes",
        ],
        "train": ["train", "gpt2-small", *MODEL, "--data", str(tmp_path / "in.txt"), "-o", str(tmp_path / "r"), *FLAGS],
        "eval": ["eval", str(tmp_path / "m.safetensors"), "--data", str(tmp_path / "in.txt"), "--seq-len", "16"],
    }[command]
    assert main(argv) == 1
    error_line(capsys, "is not a regular file or folder (a FIFO")
