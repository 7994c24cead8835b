"""What a tokenizer record read from a file may hold: the one check every reader applies.

A checkpoint's metadata (``"tokenizer"``, or a run's ``training.tokenizer``) is written by
whoever wrote the file, so a record names no path: only a tokenizer the zoo has built in
(``{"name": "gpt2"}``), a hub id ``ORG/NAME`` with a git ref or commit as its revision
(read from the hub cache, never as a local folder of that name), files kept in the run's
own ``tokenizer/`` folder under the plain names a tokenizer's files have, or the files
embedded. Anything else is refused (``checked_record``) when the record is used, not when
the model loads, so a tokenizer the user passes (``--tokenizer``) still works.

The hub's names (``check_revision``, ``is_hub_name``) live here, below ``zoo.interop``,
so that the checkpoint layer applies the same rule the hub client does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from zoo.errors import InteropError, RecordError, printable, quoted

__all__ = ["NAMES", "check_revision", "checked_record", "is_hub_name"]

NAMES = ("gpt2", "bytes")  # the tokenizers the zoo has built in
#: The files of a tokenizer folder the zoo keeps, reads and writes (``tokenizer.json``, or
#: GPT-2's ``vocab.json`` and ``merges.txt``, with the settings beside them; or nanoGPT's
#: ``meta.pkl``): the only names a record's files have.
FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "meta.pkl",  # nanoGPT's character-level vocabulary (zoo.text.chars reads it without unpickling objects)
    "chat_template.jinja",  # where transformers 5 keeps a tokenizer's chat template
)
# A repository id: NAME or ORG/NAME, letters, digits, '-', '_', '.' (no '..', no leading '.').
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What git's check-ref-format refuses in a ref name: control characters, space, ~^:?*[\
# and DEL, '..', '@{', '//', a component starting with '.' or ending with '.lock'.
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|(?:^|/)\.|\.lock(?:/|$)")
REF_LIMIT = 255  # characters; a branch or tag name is far shorter
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DESCRIPTION = re.compile(r"^[A-Za-z0-9][\w-]{0,63}$")  # "tokens": what in-memory data records
#: The fields each kind of record may hold beside its own (``source``: where a run's kept
#: files came from, shown, never read; ``folder``: set by ``zoo.load``, never read from a file).
KINDS = {"name": (), "hub": ("revision",), "files": ("source", "folder"), "embedded": ()}
FIX = (
    "Pass the tokenizer yourself (--tokenizer NAME_OR_FOLDER, or tokenizer=...), drop the record "
    "(model.tokenizer_record = None) or fix it in the checkpoint"
)


def is_hub_name(text: object) -> TypeGuard[str]:
    """Whether ``text`` is a hub id ``ORG/NAME``, by its spelling alone (not whether a
    local folder of that name exists: a record's hub id is never read as a folder)."""
    return (isinstance(text, str) and "/" in text and ".." not in text and not text.endswith((".", "-"))) and bool(
        HUB_ID.match(text)
    )


def check_revision(revision: object) -> str | None:
    """``revision`` if it is a branch or tag name git accepts or a commit (or ``None``,
    the default branch), else an ``InteropError``: a revision names a file under the
    cache's ``refs/``, so ``../..``, an absolute path or a shell command is refused."""
    if revision is None or (isinstance(revision, str) and COMMIT.match(revision)):
        return revision
    if not isinstance(revision, str):
        raise InteropError(f"revision must be a branch, tag or commit name (a string), got a {type(revision).__name__}")
    if (
        not revision
        or len(revision) > REF_LIMIT
        or _BAD_REF.search(revision)
        or revision.startswith("/")
        or revision.endswith(("/", "."))
        or revision == "@"
        or not revision.isprintable()
    ):
        raise InteropError(
            f"revision {printable(revision, 80)!r} is not a branch, tag or commit name (a git ref name: no "
            f"spaces, '..', leading '/' or '.', or any of ~^:?*[\\); give one the repository has, e.g. 'main' "
            f"or a 40-character commit"
        )
    return revision


def checked_record(record: object, where: str) -> dict[str, Any]:
    """``record`` (a string is ``{"name": ...}``) if it names no path (see the module),
    else a ``RecordError`` naming the field and the fix. A ``name`` that is a plain
    word, not a built-in (``"tokens"``, in-memory data's description), loads nothing."""
    if isinstance(record, str):
        record = {"name": record}
    if not isinstance(record, Mapping):
        raise _refused(where, "tokenizer", record, "not a record (a JSON object)")
    kinds = [kind for kind in KINDS if kind in record]
    if len(kinds) != 1:
        raise _refused(where, "tokenizer", dict(record), f"a record holds one of {', '.join(KINDS)}")
    kind = kinds[0]
    extra = sorted(str(key) for key in record if key != kind and key not in KINDS[kind])
    if extra:
        raise _refused(where, f"tokenizer.{extra[0]}", record[extra[0]], f"a {kind!r} record holds no such field")
    value = record[kind]
    if kind == "name":
        if not (isinstance(value, str) and (value in NAMES or is_hub_name(value) or _DESCRIPTION.match(value))):
            raise _refused(where, "tokenizer.name", value, f"not a built-in tokenizer ({', '.join(NAMES)}) or ORG/NAME")
    elif kind == "hub":
        if not is_hub_name(value):
            raise _refused(where, "tokenizer.hub", value, "not a hub id ORG/NAME (a record never names a folder)")
        try:
            check_revision(record.get("revision"))
        except InteropError as err:
            raise _refused(where, "tokenizer.revision", record.get("revision"), str(err)) from err
    elif kind == "files":
        if not isinstance(value, Mapping) or not value:
            raise _refused(where, "tokenizer.files", value, "not a mapping of file name -> sha256")
        for name, digest in value.items():
            if name not in FILE_NAMES:
                raise _refused(
                    where, "tokenizer.files", name, f"not a tokenizer file's plain name ({', '.join(FILE_NAMES)})"
                )
            if not (isinstance(digest, str) and _SHA256.match(digest)):
                raise _refused(where, f"tokenizer.files.{name}", digest, "not a sha256 (64 hex digits)")
    elif not isinstance(value, Mapping) or not value or any(name not in FILE_NAMES for name in value):
        bad = next((name for name in value if name not in FILE_NAMES), value) if isinstance(value, Mapping) else value
        raise _refused(where, "tokenizer.embedded", bad, f"embeds files only under {', '.join(FILE_NAMES)}")
    return dict(record)


def _refused(where: str, field: str, value: object, why: str) -> RecordError:
    shown = quoted(value, 80) if isinstance(value, str) else printable(repr(value), 80)
    return RecordError(
        f"{printable(where)}: its metadata {field} is {shown}: {why}; a tokenizer record names no path. {FIX}"
    )
