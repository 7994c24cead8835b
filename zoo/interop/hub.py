"""Hub ids to local folders, through ``huggingface_hub`` (the ``hub`` extra).

``snapshot("openai-community/gpt2")`` returns the folder of a cached snapshot holding
only what the zoo reads: ``config.json``, the weights (``model.safetensors``, or its
index and the shards it lists; ``pytorch_model.bin`` files only where a repository has
no safetensors) and the tokenizer files. The cache is the client's own (``HF_HOME``,
``HF_HUB_CACHE``), read first: a complete snapshot is used without the network.
``HF_HUB_OFFLINE=1`` never touches the network; a token comes from the environment
(``HF_TOKEN``) or the client's login. Every failure of the client becomes an
``InteropError`` that names the id, the cache folder searched and how to fetch it.

The cache is a closed world: a revision is a git ref name or a commit before it is
used (``check_revision``), and every path read from the cache (``refs/REVISION``, the
snapshot folder, every file in it) must lie inside the repository's cache folder once
links are resolved, as the client's own layout does (``confined_snapshot``). Network
waits are bounded (``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT``; 10 s if unset)
and a timeout is an ``InteropError``. Commands shown to paste are quoted (``zoo.errors.command``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.checkpoint.records import COMMIT as _COMMIT
from zoo.checkpoint.records import check_revision
from zoo.errors import InteropError, command, printable
from zoo.files import read_json, read_text

__all__ = [
    "CONFIG_FILES",
    "TOKENIZER_FILES",
    "cache_folder",
    "check_revision",
    "confined_snapshot",
    "is_hub_id",
    "local_or_snapshot",
    "network_timeout",
    "offline",
    "snapshot",
]

CONFIG_FILES = ("config.json", "generation_config.json")
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)
INSTALL_HINT = "install the hub extra: pip install 'zoo-lm[hub]'"
NEEDS = ("model", "config", "tokenizer")
# A repository id: NAME or ORG/NAME, letters, digits, '-', '_', '.' (no '..', no leading '.').
_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
_TRUE = {"1", "on", "yes", "true"}
DEFAULT_TIMEOUT = 10  # seconds the hub may take to answer, as the client's default


def is_hub_id(text: object, *, bare: bool = False) -> bool:
    """Whether ``text`` reads as a hub id rather than a path: ``ORG/NAME`` (or, with
    ``bare``, a legacy ``NAME`` such as ``gpt2``), and no file or folder of that name."""
    if not isinstance(text, str) or ".." in text or text.endswith((".", "-")) or Path(text).exists():
        return False
    return bool(_ID.match(text)) and (bare or "/" in text)


def cache_folder() -> Path:
    """The hub cache the client reads and fills: ``HF_HUB_CACHE``, else ``HF_HOME/hub``,
    else the client's default (``~/.cache/huggingface/hub``); read at each call."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    try:
        from huggingface_hub import constants
    except ImportError:
        return Path("~/.cache/huggingface/hub").expanduser()
    return Path(constants.HF_HUB_CACHE)


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the network (read at each call)."""
    value = os.environ.get("HF_HUB_OFFLINE")
    if value is not None:
        return value.strip().lower() in _TRUE
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.HF_HUB_OFFLINE)


def local_or_snapshot(
    path_or_id: str | os.PathLike[str], revision: str | None = None, *, need: str = "model", bare: bool = False
) -> tuple[Path, str | None]:
    """A local folder as it is, or a hub id's snapshot folder; with the id's resolved
    commit (``None`` for a folder). ``need`` is what the snapshot must hold (see
    ``snapshot``); ``bare`` takes a name without an organisation (``gpt2``) as an id too."""
    if not isinstance(path_or_id, (str, os.PathLike)) or not str(path_or_id):
        raise InteropError(
            f"expected a Hugging Face folder or a hub id such as 'openai-community/gpt2', got {path_or_id!r}; "
            f"give a folder path or an id"
        )
    check_revision(revision)
    if is_hub_id(path_or_id, bare=bare):
        assert isinstance(path_or_id, str)
        try:
            folder = snapshot(path_or_id, revision, need=need)
        except InteropError as err:  # it may have been meant as a path
            raise InteropError(f"{err} (no local file or folder {path_or_id!r} exists either)") from err
        return folder, folder.name
    if revision is not None:
        raise InteropError(
            f"revision={revision!r} picks a version of a hub id, but {printable(str(path_or_id))!r} is a "
            f"local path; drop revision, or pass an id such as 'openai-community/gpt2'"
        )
    return Path(path_or_id), None


def snapshot(repo_id: str, revision: str | None = None, *, need: str = "model") -> Path:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (a branch, tag or commit;
    default ``main``), downloading only the missing files the zoo needs: for ``need``
    ``"model"`` config, weights and tokenizer files, for ``"config"`` config and
    tokenizer files, for ``"tokenizer"`` the tokenizer files."""
    if need not in NEEDS:
        raise InteropError(f"need={need!r}: one of {', '.join(map(repr, NEEDS))}")
    if not isinstance(repo_id, str) or not _ID.match(repo_id):
        raise InteropError(
            f"{printable(str(repo_id))!r} is not a hub id: expected ORG/NAME such as 'openai-community/gpt2'"
        )
    check_revision(revision)
    hub = _client()
    cache = cache_folder()
    where = _describe(repo_id, revision)
    folder = _cached(hub, repo_id, revision, cache)
    if folder is not None and not _missing(folder, need):
        return folder
    if offline():
        missing = _missing(folder, need) if folder is not None else None
        raise InteropError(
            f"{where} is not in the hub cache {cache}"
            + (f" (its snapshot lacks {', '.join(missing)})" if missing else "")
            + f", and HF_HUB_OFFLINE is set, so it cannot be downloaded. {_fetch_hint(repo_id, revision)}"
        )
    return _download(hub, repo_id, revision, cache, need)


# -- the client ------------------------------------------------------------------------


def _client() -> Any:
    try:
        import huggingface_hub
    except ImportError as err:
        raise InteropError(f"loading a model by hub id needs the package huggingface_hub; {INSTALL_HINT}") from err
    return huggingface_hub


def _describe(repo_id: str, revision: str | None) -> str:
    return f"{repo_id!r}" + (f" at revision {printable(revision)!r}" if revision else "")


def _fetch_hint(repo_id: str, revision: str | None) -> str:
    fetch = command("hf", "download", repo_id, *(["--revision", revision] if revision else []))
    return (
        f"Fetch it once with the network (unset HF_HUB_OFFLINE and run this again, or {fetch}), "
        f"point HF_HOME at a cache that holds it, or pass a local folder"
    )


def _cached(hub: Any, repo_id: str, revision: str | None, cache: Path) -> Path | None:
    """The snapshot folder the cache holds for ``revision``, or None; refused (see
    ``confined_snapshot``) when its ref or snapshot leads outside the cache."""
    _check_layout(repo_id, revision, cache)
    try:
        found = hub.snapshot_download(
            repo_id, revision=revision, cache_dir=str(cache), local_files_only=True, allow_patterns=["config.json"]
        )
    except Exception:  # not cached (LocalEntryNotFoundError and relatives): ask the network
        return None
    return confined_snapshot(repo_id, Path(found), cache)


# -- the cache is a closed world ------------------------------------------------------------


def _repo_folder(repo_id: str, cache: Path) -> Path:
    """Where the client keeps ``repo_id``: ``CACHE/models--ORG--NAME``."""
    return cache / ("models--" + repo_id.replace("/", "--"))


def _escape(repo_id: str, cache: Path, path: Path, why: str | None = None) -> InteropError:
    """The error for a cache entry that is not the client's layout: by default, one that
    leads outside its repository's folder."""
    repo = printable(str(_repo_folder(repo_id, cache)), None)
    if why is None:
        try:
            why = f"leads to {printable(str(path.resolve()), None)}, outside its folder {repo}"
        except (OSError, RuntimeError):
            why = f"is a link loop, not a file inside its folder {repo}"
    return InteropError(
        f"the hub cache entry of {repo_id!r} is not the client's layout: {printable(str(path), None)} {why}, "
        f"so the zoo does not read it. Delete that cache entry "
        f"({command('rm', '-r', _repo_folder(repo_id, cache))}) and download it again"
    )


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path``, every link resolved, lies in the (resolved) folder ``root``."""
    try:
        return path.resolve(strict=False).is_relative_to(root)
    except (OSError, RuntimeError):  # a link loop, a name too long: not the client's layout
        return False


def _check_layout(repo_id: str, revision: str | None, cache: Path) -> None:
    """Before the client reads or writes the cache: the repository's folder lies in the
    cache, its ``refs``, ``blobs`` and ``snapshots`` in it, and ``refs/REVISION`` (for a
    branch or tag), if there, is a file in it that holds a commit, as the client writes it."""
    repo = _repo_folder(repo_id, cache)
    if os.path.lexists(repo) and not _inside(repo, cache.resolve()):
        raise _escape(repo_id, cache, repo)
    root = repo.resolve()
    ref = repo / "refs" / (revision or "main")
    for path in (repo / "refs", repo / "blobs", repo / "snapshots", ref):
        if os.path.lexists(path) and not _inside(path, root):
            raise _escape(repo_id, cache, path)
    if (revision is not None and _COMMIT.match(revision)) or not os.path.lexists(ref):
        return
    try:
        text = read_text(ref, InteropError, "hub cache ref", limit=256).strip()
    except InteropError as err:
        raise _escape(repo_id, cache, ref, f"cannot be read as a ref ({err})") from err
    if not _COMMIT.match(text):
        raise _escape(
            repo_id, cache, ref, f"holds {printable(text, 60)!r}, not a commit (it may lead outside its folder)"
        )


def confined_snapshot(repo_id: str, folder: Path, cache: Path) -> Path:
    """``folder`` (a snapshot of ``repo_id`` the client returned), once the folder and
    every file and folder in it, links resolved, lie inside the repository's cache folder
    (the client's snapshots are relative links into ``../../blobs``); else an
    ``InteropError`` naming the path and the fix. Every reader of a snapshot gets its
    folder from here, so none follows a link out of the cache."""
    repo = _repo_folder(repo_id, cache)
    if not _inside(repo, cache.resolve()):
        raise _escape(repo_id, cache, repo)
    root = repo.resolve()
    if not _inside(folder, root / "snapshots"):
        raise _escape(repo_id, cache, folder)
    seen, stack = set(), [folder]
    while stack:  # every entry, through linked folders too (each seen once: no loops)
        current = stack.pop()
        real = current.resolve()
        if real in seen:
            continue
        seen.add(real)
        try:
            entries = list(os.scandir(current))
        except OSError as err:
            raise _escape(repo_id, cache, current, f"cannot be listed ({printable(err.strerror)})") from err
        for entry in entries:
            path = Path(entry.path)
            if not _inside(path, root):
                raise _escape(repo_id, cache, path)
            if entry.is_dir():
                stack.append(path)
    return folder


def _missing(folder: Path, need: str) -> list[str]:
    """What a snapshot still lacks for ``need``, by file name."""
    if need == "tokenizer":
        has = (folder / "tokenizer.json").is_file() or all((folder / f).is_file() for f in ("vocab.json", "merges.txt"))
        return [] if has else ["tokenizer.json"]
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    if need == "config":
        return missing
    for index_name, single in (("model.safetensors.index.json", "model.safetensors"), (PICKLES[1], PICKLES[0])):
        if (folder / single).is_file():
            return missing
        index = folder / index_name
        if index.is_file():
            return missing + [s for s in _shards(index) if not (folder / s).is_file()]
    return [*missing, "model.safetensors"]


def _shards(index: Path) -> list[str]:
    try:
        weight_map = read_json(index, InteropError, "shard index")["weight_map"]
        names = sorted({str(v) for v in weight_map.values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InteropError(f"cannot read the shard index {index}: {err}; it needs a 'weight_map'") from err
    bad = [n for n in names if "/" in n or "\\" in n or n.startswith(".")]
    if bad:
        raise InteropError(f"{index} names shard files outside its folder: {', '.join(map(repr, bad[:3]))}")
    return names


def _download(hub: Any, repo_id: str, revision: str | None, cache: Path, need: str) -> Path:
    """Fetch config, tokenizer and weights in stages, so only one weight format comes."""
    first = ([] if need == "tokenizer" else list(CONFIG_FILES)) + list(TOKENIZER_FILES)
    first += list(SAFETENSORS) if need == "model" else []
    _answers(hub, repo_id, revision, cache)
    folder = _fetch(hub, repo_id, revision, cache, first)
    commit = folder.name  # every later stage reads the same commit
    if need == "model":
        if not (folder / SAFETENSORS[0]).is_file():
            if (folder / SAFETENSORS[1]).is_file():
                _fetch(hub, repo_id, commit, cache, _shards(folder / SAFETENSORS[1]))
            else:  # no safetensors at all: the legacy pickles, read with weights_only=True
                _fetch(hub, repo_id, commit, cache, list(PICKLES))
                if (folder / PICKLES[1]).is_file():
                    _fetch(hub, repo_id, commit, cache, _shards(folder / PICKLES[1]))
    missing = _missing(folder, need)
    if missing:
        what = "tokenizer" if need == "tokenizer" else "model"
        raise InteropError(
            f"{_describe(repo_id, revision)} has no {' or '.join(missing)}: it is not a {what} the zoo can "
            f"load (a causal LM saved by transformers has config.json, model.safetensors and tokenizer.json)"
        )
    return folder


def _fetch(hub: Any, repo_id: str, revision: str | None, cache: Path, patterns: Sequence[str]) -> Path:
    try:
        found = hub.snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=str(cache),
            allow_patterns=list(patterns),
            etag_timeout=network_timeout(),
        )
    except MemoryError:
        raise
    except Exception as err:  # the client's errors, mapped by kind
        raise _client_error(err, repo_id, revision, cache) from err
    return confined_snapshot(repo_id, Path(found), cache)


def network_timeout() -> float:
    """Seconds to wait for the hub to answer a request: ``HF_HUB_ETAG_TIMEOUT`` (the
    client's own variable) if set, else 10 (its default); read at each call."""
    text = os.environ.get("HF_HUB_ETAG_TIMEOUT", "").strip()
    if not text:
        return float(DEFAULT_TIMEOUT)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 24 * 3600:
        raise InteropError(
            f"HF_HUB_ETAG_TIMEOUT={printable(text, 40)!r} is not a number of seconds in (0, 86400]; set it to "
            f"one (e.g. 10), or unset it for the default of {DEFAULT_TIMEOUT} s"
        )
    return value


def _answers(hub: Any, repo_id: str, revision: str | None, cache: Path) -> None:
    """Ask the hub for ``repo_id`` at ``revision`` once, bounded by ``network_timeout``,
    before the client's own calls (some of which wait without bound, or retry for
    minutes): a hub that never answers is an ``InteropError`` within the timeout."""
    try:
        hub.HfApi().repo_info(repo_id, revision=revision or "main", timeout=network_timeout())
    except MemoryError:
        raise
    except Exception as err:  # the client's errors, mapped by kind
        raise _client_error(err, repo_id, revision, cache) from err


def _timed_out(err: BaseException) -> bool:
    """Whether ``err`` or what caused it is a network timeout (httpx's ``*Timeout``)."""
    seen: BaseException | None = err
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or type(seen).__name__.endswith("Timeout"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _client_error(err: Exception, repo_id: str, revision: str | None, cache: Path) -> InteropError:
    """The ``InteropError`` for an error of the client: by its kind, a timeout, or else
    the hub unreachable or the cache not writable."""
    where = _describe(repo_id, revision)
    kind = type(err).__name__
    detail = printable(str(err).splitlines()[0] if str(err) else kind)[:300]
    if kind == "GatedRepoError":
        return InteropError(
            f"{where} is gated: accept its terms on the hub, then set HF_TOKEN (or `hf auth login`) ({detail})"
        )
    if kind == "RepositoryNotFoundError":
        return InteropError(
            f"{where}: no such model on the hub, or it is private (set HF_TOKEN for a private one). "
            f"Check the id (ORG/NAME, e.g. 'openai-community/gpt2'); cache searched: {cache}"
        )
    if kind == "RevisionNotFoundError":
        return InteropError(
            f"{where}: the repository has no such revision; give a branch, tag or commit it has "
            f"(default: main). Cache searched: {cache}"
        )
    if _timed_out(err):
        endpoint = printable(getattr(_client().constants, "ENDPOINT", "the hub"), 200)
        return InteropError(
            f"the hub at {endpoint} did not answer within {network_timeout():g} s while fetching {where}: check "
            f"the network (and HF_ENDPOINT), raise HF_HUB_ETAG_TIMEOUT (and HF_HUB_DOWNLOAD_TIMEOUT) for a slow "
            f"link, or set HF_HUB_OFFLINE=1 to read only the cache {cache}. {_fetch_hint(repo_id, revision)}"
        )
    return InteropError(
        f"cannot download {where} into the hub cache {cache}: {kind}: {detail}. The hub is unreachable from "
        f"here, or the cache is not writable. {_fetch_hint(repo_id, revision)}"
    )
