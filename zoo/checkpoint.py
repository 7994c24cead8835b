"""Checkpoints: safetensors files that carry their own config, kept in numbered versions.

A checkpoint is one safetensors file. Its header metadata (string values only) holds:

- ``zoo.format``: the layout version of this metadata (``FORMAT``). Older layouts are
  upgraded on load through the ``zoo_migrate_checkpoint`` hook; newer ones are refused.
- ``zoo.version`` and ``zoo.created``: the zoo that wrote it and when (ISO 8601, UTC).
- ``zoo.config``: the ``ModelConfig`` as JSON, every component option filled in.
- ``zoo.components``: per kind, the component's name and the plugin, distribution and
  version that provided it, so a missing plugin can be named on load.
- ``zoo.ties``: ``{alias: owner}`` of tied weights; only the owner's tensor is stored.
- ``zoo.metadata``: the caller's own metadata, a JSON object.
- ``zoo.digest``: xxh3-128 over all the other metadata and every tensor's name, dtype,
  shape and bytes. It catches damage (a flipped byte, two tensors swapped in the
  header), not forgery, at memory speed.

``save(model, "run.safetensors")`` writes that file; ``save(model, "run")`` adds the next
version ``run/v0001.safetensors``, ``run/v0002.safetensors``, ... and never overwrites
one. Writes go to a hidden temporary file in the same folder, are fsynced, and appear
under their final name in one step (``os.replace``, or ``os.link`` that fails if the
version exists, which is how concurrent savers get distinct versions).

Loading runs no code from the file: no pickle, components are looked up in the registry
by name, and the config is validated (``extra="forbid"``, size bounds) before the model
is built on the meta device. Tensors are memory-mapped and assigned as they are, so
peak memory stays near one copy of the weights. Every problem with the file is a
``CheckpointError`` naming the file.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import xxhash
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

from zoo import __version__
from zoo.config import ModelConfig, validate_config
from zoo.errors import (
    DISTRIBUTION,
    CheckpointError,
    ConfigError,
    RegistryError,
    UnknownComponentError,
    ZooError,
    is_distribution_name,
    is_version,
    printable,
    quoted,
)
from zoo.factory import device_arg, dtype_arg, initialize, materialize, model_for
from zoo.memory import allocating, fmt_bytes, model_bytes, require, tensor_bytes
from zoo.registry import KINDS, Registry, default_registry

if TYPE_CHECKING:
    from zoo.model import DecoderLM
    from zoo.seq2seq import EncoderDecoder

#: The metadata layout this zoo writes, and the newest it reads.
FORMAT = 1
DIGEST_SCHEME = "xxh3_128"
SUFFIX = ".safetensors"
_VERSION_NAME = re.compile(r"v([0-9]+)\.safetensors")
_REQUIRED = ("zoo.version", "zoo.created", "zoo.config", "zoo.components", "zoo.ties", "zoo.metadata")
#: How deep user metadata may nest (``{"a": {"b": 1}}`` is 2).
METADATA_DEPTH = 8
# The safetensors name of each dtype a checkpoint may hold (no float8: it cannot run a model).
_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}  # fmt: skip
_ALIGN = 64  # bytes; where the data section of a written file starts
_RUNNABLE_FLOATS = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16})


@dataclass(frozen=True)
class ComponentRecord:
    """Which component a checkpoint used for one kind, and who provided it at save time."""

    name: str
    plugin: str | None
    distribution: str | None
    version: str | None


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # "float32", "bfloat16", ...
    shape: tuple[int, ...]


@dataclass(frozen=True)
class VersionInfo:
    """One version in a checkpoint directory, as its header describes it."""

    version: int
    path: Path
    created: datetime | None
    zoo_version: str | None
    format: int
    metadata: dict[str, Any]


@dataclass(frozen=True)
class CheckpointInfo:
    """What ``zoo inspect`` shows: a checkpoint's header, checked like ``load`` checks it.

    ``config`` is a ``ModelConfig``, or the raw dict when a component's plugin is not
    installed (``components`` then says which distribution provides it).
    ``digest_ok`` is ``None`` when the digest was not checked.
    """

    path: Path
    format: int
    zoo_version: str | None
    created: datetime | None
    config: ModelConfig | dict[str, Any]
    components: dict[str, ComponentRecord]
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    ties: dict[str, str]
    digest_ok: bool | None
    file_size: int
    version: int | None = None  # the version number, for a file in a checkpoint directory
    versions: list[VersionInfo] | None = None  # every version, when a directory was given


@dataclass
class _Checkpoint:
    """A checkpoint file read and checked up to (not including) building its model."""

    path: Path
    format: int  # as written, before any migration
    metadata: dict[str, str]  # upgraded to FORMAT
    tensors: dict[str, Tensor]  # memory-mapped, not yet read
    config: ModelConfig | dict[str, Any]
    components: dict[str, ComponentRecord]
    ties: dict[str, str]
    user_metadata: dict[str, Any]
    digest_ok: bool | None = None
    missing_plugins: str | None = None  # what to install, when a component's plugin is missing

    def model_config(self) -> ModelConfig:
        """The validated config; an error naming the distributions of missing plugins."""
        if not isinstance(self.config, ModelConfig):
            raise CheckpointError(self.missing_plugins or f"cannot load {self.path}: its config is not validated")
        return self.config


# -- saving ----------------------------------------------------------------------------


def save(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
) -> Path:
    """Save ``model`` with its config; returns the file written.

    A ``path`` ending in ``.safetensors`` is written (replaced) atomically. Any other
    path is a checkpoint directory: the save adds its next version and never overwrites
    one. ``metadata`` is your own JSON-serialisable mapping (step, loss, ...), returned
    by ``versions()`` and ``inspect()``. Models wrapped by ``torch.compile`` or DDP are
    saved under their plain parameter names.
    """
    model = unwrap(model)
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise CheckpointError(
            f"cannot save a {type(model).__name__}: zoo.save saves zoo models, which carry "
            f"their ModelConfig as model.config (build one with zoo.build or zoo.load)"
        )
    path = path_arg(path, "save to")  # before the work of hashing the tensors
    registry = registry or default_registry()
    tensors, ties = _tensors_to_save(model, config, registry)
    _check_dtypes(tensors, "cannot save: the model", "convert it first with model.to(torch.float32) (or bf16, fp16)")
    header = {
        "zoo.format": str(FORMAT),
        "zoo.version": __version__,
        "zoo.created": datetime.now(UTC).isoformat(),
        "zoo.config": config.model_dump_json(),
        "zoo.components": json.dumps(_provenance(config, registry)),
        "zoo.ties": json.dumps(ties, sort_keys=True),
        "zoo.metadata": _user_metadata_json(metadata),
    }
    header["zoo.digest"] = digest(header, tensors)
    if path.suffix == SUFFIX:
        return _write_file(path, tensors, header)
    return _write_version(path, tensors, header)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside ``torch.compile`` (``_orig_mod``) and DDP/DataParallel (``module``)."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
        elif isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        else:
            return model


def _tensors_to_save(
    model: nn.Module, config: ModelConfig, registry: Registry
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The tensors to store (tied aliases left out) and the tie map ``{alias: owner}``.

    Checks the model against the one its config builds, so every file written loads.
    """
    state = model.state_dict()
    try:
        with torch.device("meta"):
            reference = model_for(config, registry)
    except RegistryError as err:
        raise CheckpointError(
            f"cannot save: {err} Pass the registry the model was built with: zoo.save(model, path, registry=...)"
        ) from err
    expected = reference.state_dict(keep_vars=True)
    ties = _tie_map(expected)
    meta = [name for name, tensor in state.items() if tensor.is_meta]
    if meta:
        raise CheckpointError(
            f"cannot save: {_names(meta)} are on the meta device and hold no values; "
            f"save a model built with zoo.build (not device='meta') or loaded with zoo.load"
        )
    problems = _compare(
        {k: v for k, v in state.items() if k not in ties}, {k: v for k, v in expected.items() if k not in ties}, ties
    )
    for alias, owner in ties.items():
        held, shared = state.get(alias), state.get(owner)
        if held is not None and shared is not None and held.data_ptr() != shared.data_ptr():
            problems.append(f"{alias} should be tied to {owner} but holds its own tensor; call model.tie_weights()")
    if problems:
        raise CheckpointError(
            "cannot save: the model does not match the model its config builds:\n  "
            + "\n  ".join(problems)
            + "\nzoo.save stores models whose structure follows model.config."
        )
    return {k: v.detach().contiguous() for k, v in state.items() if k not in ties}, ties


def _provenance(config: ModelConfig, registry: Registry) -> dict[str, dict[str, str | None]]:
    """Per kind: the component name and the plugin, distribution and version behind it."""
    records = {}
    for kind in KINDS:
        spec = getattr(config, kind, None)
        if spec is None:
            continue
        try:
            plugin = registry.get(kind, spec.name).plugin
        except RegistryError as err:
            raise CheckpointError(
                f"cannot save: {err} Pass the registry the model was built with: zoo.save(model, path, registry=...)"
            ) from err
        records[kind] = {
            "name": spec.name,
            "plugin": plugin.name,
            "distribution": plugin.distribution,
            "version": plugin.version,
        }
    return records


def _check_dtypes(tensors: Mapping[str, Tensor], who: str, fix: str) -> None:
    """One floating-point dtype among ``tensors``, and one a model can run in."""
    floats: dict[torch.dtype, list[str]] = {}
    for name, tensor in tensors.items():
        if tensor.is_floating_point():
            floats.setdefault(tensor.dtype, []).append(name)
    odd = sorted((d for d in floats if d not in _RUNNABLE_FLOATS), key=str)
    if odd:
        raise CheckpointError(
            f"{who} holds {_dtype_name(odd[0])} tensors ({_names(floats[odd[0]])}); a zoo model runs in "
            f"float32, bfloat16, float16 or float64, not float8: {fix}"
        )
    if len(floats) > 1:
        mixed = "; ".join(f"{_dtype_name(d)}: {_names(n, limit=3)}" for d, n in sorted(floats.items(), key=str))
        raise CheckpointError(
            f"{who} mixes floating-point dtypes ({mixed}), so its layers cannot multiply each other's outputs; {fix}"
        )


def _metadata_depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (a scalar is 0), without recursion; stops past ``limit``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _user_metadata_json(metadata: Mapping[str, Any] | None) -> str:
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise CheckpointError(f"metadata must be a mapping with string keys, got {type(metadata).__name__}")
    if _metadata_depth(metadata, METADATA_DEPTH) > METADATA_DEPTH:
        raise CheckpointError(
            f"metadata nests more than {METADATA_DEPTH} levels deep; keep it flat "
            f"(step, loss, notes as strings and numbers)"
        )
    try:
        return json.dumps(dict(metadata), sort_keys=True)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"metadata must be JSON-serialisable (strings, numbers, lists, dicts): {err}") from err


def _write_file(path: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> Path:
    """Write ``path`` atomically: a temporary file, fsync, rename over, fsync the folder."""
    if path.is_dir():
        raise CheckpointError(f"cannot save to {path}: it is a directory; give a file name or drop the {SUFFIX} suffix")
    directory = _make_directory(path.parent, path)
    temporary = _write_temporary(directory, path, tensors, header)
    try:
        os.replace(temporary, path)
    except OSError as err:
        temporary.unlink(missing_ok=True)
        raise CheckpointError(f"cannot save to {path}: {err}") from err
    _fsync_directory(directory)
    return path


def _write_version(directory: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> Path:
    """Add the next version to ``directory``; concurrent savers each get their own number.

    ``os.link`` publishes the finished temporary file under the version's name and fails
    if that name exists, so a version is never overwritten and never seen half-written.
    """
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(
            f"cannot save to {directory}: it is a file, not a checkpoint directory; "
            f"give a directory path, or a path ending in {SUFFIX} for a single file"
        )
    _make_directory(directory, directory)
    temporary = _write_temporary(directory, directory / "version", tensors, header)
    try:
        while True:
            found = _version_files(directory)
            final = directory / _version_name(max(found, default=0) + 1)
            try:
                os.link(temporary, final)
                break
            except FileExistsError:
                continue  # another process took this number; take the next one
    except OSError as err:
        raise CheckpointError(
            f"cannot add a version to {directory}: {err}. zoo adds versions with hard links; "
            f"on a filesystem without them, save to a path ending in {SUFFIX}"
        ) from err
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_directory(directory)
    return final


def _make_directory(directory: Path, target: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CheckpointError(f"cannot save to {target}: cannot create folder {directory}: {err}") from err
    return directory


def _write_temporary(directory: Path, target: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> Path:
    """The checkpoint written to a fsynced temporary file in ``directory`` (``write_temporary``)."""
    try:
        return write_temporary(directory, target.name, lambda file: write_safetensors(file, tensors, header))
    except (OSError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"cannot save to {target}: {type(err).__name__}: {err}") from err


def write_safetensors(file: Path, tensors: Mapping[str, Tensor], metadata: Mapping[str, str]) -> None:
    """Write ``tensors`` and string ``metadata`` to ``file`` in the safetensors format.

    Written here rather than by ``safetensors.torch.save_file``, which needs NumPy: the
    header (little-endian u64 length, JSON padded with spaces so the data starts at a
    multiple of 64 bytes), then each tensor's bytes, widest dtype first so every tensor
    starts aligned to its item size. Memory-mapped on load, tensors then sit as
    allocated ones do, so SIMD kernels take the same path and results match bit for bit.
    """
    order = sorted(tensors, key=lambda name: (-tensors[name].element_size(), name))
    entries: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in order:
        tensor = tensors[name]
        if tensor.dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name} has dtype {_dtype_name(tensor.dtype)}, which a checkpoint cannot hold")
        size = tensor.numel() * tensor.element_size()
        entries[name] = {
            "dtype": _SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-(8 + len(header)) % _ALIGN)  # the data starts aligned, as freshly allocated tensors do
    with open(file, "wb") as handle:
        handle.write(len(header).to_bytes(8, "little"))
        handle.write(header)
        for name in order:
            handle.write(_bytes_of(tensors[name]))


def write_temporary(directory: Path, name: str, write: Callable[[Path], object]) -> Path:
    """``write(file)`` to a hidden temporary file in ``directory`` named after ``name``,
    then fsync it; returns the file. On any error the file is removed and the error
    propagates.

    The file gets the mode the umask gives new files: it is created first to learn
    that mode, because ``mkstemp`` gives 0600 and safetensors writes through a 0600
    temporary of its own that it renames over this one.
    """
    unique = f".{os.getpid()}-{secrets.token_hex(4)}.tmp"
    room = _name_max(directory) - len(unique.encode()) - 1
    stem = name.encode()[: max(room, 0)].decode(errors="ignore")  # whole characters, so it fits
    temporary = directory / f".{stem}{unique}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        mode = os.fstat(fd).st_mode & 0o777
        os.close(fd)
        write(temporary)
        os.chmod(temporary, mode)
        _fsync(temporary)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """Write ``path`` in one step: ``write_temporary`` in its folder, rename it over
    ``path``, fsync the folder. Errors propagate; no temporary file is left behind."""
    temporary = write_temporary(path.parent, path.name, write)
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return path


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; Windows cannot open folders)."""
    if os.name == "posix":
        _fsync(directory)


# -- the digest ------------------------------------------------------------------------


def digest(metadata: Mapping[str, str], tensors: Mapping[str, Tensor]) -> str:
    """``"xxh3_128:<hex>"`` over ``metadata`` (all but ``zoo.digest``) and each tensor.

    Tensors go in name order, each as its name, dtype and shape followed by its bytes,
    so a flipped byte, an edited header value and two tensors swapped all change it.
    """
    hasher = xxhash.xxh3_128()
    fields = {key: value for key, value in metadata.items() if key != "zoo.digest"}
    hasher.update(json.dumps(fields, sort_keys=True).encode())
    for name in sorted(tensors):
        tensor = tensors[name]
        hasher.update(json.dumps([name, _dtype_name(tensor.dtype), list(tensor.shape)]).encode())
        hasher.update(_bytes_of(tensor))
    return f"{DIGEST_SCHEME}:{hasher.hexdigest()}"


def _bytes_of(tensor: Tensor) -> memoryview:
    """A zero-copy byte view of a CPU tensor (one copy for tensors on other devices).

    Made with ctypes rather than ``.numpy()``, so saving and hashing need no NumPy; the
    view holds a reference to the tensor, whose memory it reads.
    """
    flat = tensor.detach().cpu().contiguous()
    size = flat.numel() * flat.element_size()
    if size == 0:
        return memoryview(b"")
    buffer = (ctypes.c_ubyte * size).from_address(flat.data_ptr())
    buffer.tensor = flat  # type: ignore[attr-defined]  # keeps the memory alive with the view
    return memoryview(buffer)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -- reading ---------------------------------------------------------------------------


def load(
    path: str | os.PathLike[str],
    *,
    version: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    strict: bool = True,
    verify: bool = True,
    registry: Registry | None = None,
) -> DecoderLM | EncoderDecoder:
    """Load a model from a checkpoint file, or from a directory's newest (or ``version``).

    The model comes back in eval mode, on ``device`` (default CPU), with floating-point
    weights converted to ``dtype`` if given (fp32, bf16, fp16). ``verify=False`` skips
    the digest (the bytes are then not read until used). ``strict=False`` ignores
    unexpected tensors and initialises missing ones with the config's init scheme;
    shape and dtype mismatches are always errors.
    """
    registry = registry or default_registry()
    target_dtype = dtype_arg(dtype, CheckpointError)
    target_device = device_arg(device, CheckpointError)
    ckpt = _read(_resolve(path, version), verify=verify, registry=registry)
    config = ckpt.model_config()
    _check_dtypes(
        ckpt.tensors
        if target_dtype is None
        else {n: t for n, t in ckpt.tensors.items() if t.dtype not in _RUNNABLE_FLOATS},
        str(ckpt.path),
        "load it with one dtype for every weight, e.g. zoo.load(path, dtype='fp32')",
    )
    with torch.device("meta"):
        model = model_for(config, registry)
    missing = _check_fit(ckpt, model, strict=strict)
    # One dtype for buffers the file does not hold: the requested one, else the file's.
    model_dtype = target_dtype or _single_float_dtype(ckpt.tensors.values())
    if model_dtype is not None:
        model.to(model_dtype)
    needed = model_bytes(model)
    _check_allocation(ckpt, model, missing, converting=target_dtype is not None)
    # Uninitialised storage (no pages touched), non-persistent buffers rebuilt; the
    # file's memory-mapped tensors then replace the parameters without a copy.
    with allocating(needed, f"cannot load {ckpt.path}", CheckpointError):
        materialize(model, "cpu")
        if missing:
            initialize(model, config, registry)
    expected = model.state_dict(keep_vars=True)
    state = {
        name: tensor.to(target_dtype) if target_dtype and tensor.is_floating_point() else tensor
        for name, tensor in ckpt.tensors.items()
        if name in expected
    }
    try:
        model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as err:
        raise CheckpointError(f"cannot load {ckpt.path}: {err}") from err
    model.tie_weights()
    _check_ties_hold(model, ckpt)
    if target_device is not None and target_device.type != "cpu":
        model.to(target_device)
    return cast("DecoderLM | EncoderDecoder", model.eval())


def inspect(
    path: str | os.PathLike[str],
    *,
    version: int | None = None,
    verify: bool = True,
    registry: Registry | None = None,
) -> CheckpointInfo:
    """A checkpoint's header, config, components, tensors and (for a directory) versions.

    Runs the checks ``load`` runs, without loading weights, and raises the same
    ``CheckpointError`` on damage. A component whose plugin is missing is not an error
    here: the config is then returned as a dict.
    """
    registry = registry or default_registry()
    file = _resolve(path, version)
    ckpt = _read(file, verify=verify, registry=registry)
    _check_dtypes(ckpt.tensors, str(file), "zoo.load(path, dtype='fp32') converts every weight to one dtype")
    if isinstance(ckpt.config, ModelConfig):
        with torch.device("meta"):
            _check_fit(ckpt, model_for(ckpt.config, registry), strict=True)
    is_directory = Path(path).is_dir()
    match = _VERSION_NAME.fullmatch(file.name) if is_directory else None
    return CheckpointInfo(
        path=file,
        format=ckpt.format,
        zoo_version=ckpt.metadata.get("zoo.version"),
        created=_parse_time(ckpt.metadata.get("zoo.created"), file),
        config=ckpt.config,
        components=ckpt.components,
        metadata=ckpt.user_metadata,
        tensors=[TensorInfo(n, _dtype_name(t.dtype), tuple(t.shape)) for n, t in sorted(ckpt.tensors.items())],
        ties=ckpt.ties,
        digest_ok=ckpt.digest_ok,
        file_size=file.stat().st_size,
        version=int(match.group(1)) if match else None,
        versions=versions(path) if is_directory else None,
    )


def versions(directory: str | os.PathLike[str]) -> list[VersionInfo]:
    """The versions in a checkpoint directory, oldest first, read from their headers."""
    directory = path_arg(directory, "list versions of")
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is a file, not a checkpoint directory"
        raise CheckpointError(f"cannot list versions of {directory}: it {what}")
    found = []
    for number, file in sorted(_version_files(directory).items()):
        metadata = _open(file, tensors=False)[0]
        found.append(
            VersionInfo(
                version=number,
                path=file,
                created=_parse_time(metadata.get("zoo.created"), file),
                zoo_version=metadata.get("zoo.version"),
                format=_format_of(metadata, file),
                metadata=_json_field(metadata, "zoo.metadata", file, dict) if "zoo.metadata" in metadata else {},
            )
        )
    return found


def path_arg(
    path: object, action: str, error: type[ZooError] = CheckpointError, what: str = "a file or directory path"
) -> Path:
    """``path`` as a Path; ``error`` for a non-path or an empty string."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise error(f"cannot {action} {quoted(path)}: give {what} as a str or Path (use '.' for the current directory)")
    path = Path(path)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > _name_max(path.parent if part == path.name else Path(".")):
            raise error(
                f"cannot {action} {quoted(str(path), 80)}: the name {quoted(part, 40)} is {size} bytes long, "
                f"more than the {_name_max(Path('.'))} bytes a file name may have here; use a shorter name"
            )
    if len(os.fsencode(path)) >= 4096:
        raise error(f"cannot {action} {quoted(str(path), 80)}: the path is longer than 4096 bytes")
    return path


def _name_max(directory: Path) -> int:
    """The longest file name (in bytes) the filesystem of ``directory`` allows."""
    for folder in (directory, *directory.parents):
        try:
            return int(os.pathconf(folder, "PC_NAME_MAX"))
        except (OSError, ValueError, AttributeError):
            continue
    return 255


def _resolve(path: str | os.PathLike[str], version: int | None) -> Path:
    """The file to read: ``path`` itself, or a version of the directory ``path``."""
    path = path_arg(path, "load")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise CheckpointError(f"version must be a positive integer, got {version!r}")
    if path.is_dir():
        found = _version_files(path)
        if not found:
            hint = ""
            if (path / "config.json").exists():
                hint = " It looks like a Hugging Face model folder: load it with zoo.from_hf."
            raise CheckpointError(
                f"{path} holds no checkpoint versions (files named v0001{SUFFIX}, ...); "
                f"zoo.save(model, {str(path)!r}) creates them.{hint}"
            )
        if version is None:
            return found[max(found)]
        if version not in found:
            raise CheckpointError(f"{path} has no version {version}; its versions are {_numbers(sorted(found))}")
        return found[version]
    if version is not None:
        raise CheckpointError(
            f"version={version} selects a version of a checkpoint directory, but {path} is not a directory"
        )
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: no such file or directory")
    return path


def _read(file: Path, *, verify: bool, registry: Registry) -> _Checkpoint:
    """Open, check the format, verify, migrate, parse and validate one checkpoint file."""
    metadata, tensors = _open(file)
    written_format = _format_of(metadata, file)
    digest_ok = _verify(file, metadata, tensors, written_format) if verify else None
    if written_format < FORMAT:
        metadata, tensors = _migrate(file, metadata, tensors, written_format, registry)
    absent = [key for key in _REQUIRED if key not in metadata]
    if absent:
        raise CheckpointError(
            f"{file} is damaged: its metadata lacks {', '.join(absent)}. "
            f"Restore it from a copy, or load another version."
        )
    _parse_time(metadata["zoo.created"], file)  # a damaged time is damage here too
    config_data = _json_field(metadata, "zoo.config", file, dict)
    components = _component_records(_json_field(metadata, "zoo.components", file, dict), file)
    ties = _json_field(metadata, "zoo.ties", file, dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in ties.items()):
        raise CheckpointError(f"{file} is damaged: zoo.ties must map tensor names to tensor names")
    missing = _missing_plugins(config_data, components, registry, file)
    config: ModelConfig | dict[str, Any] = config_data
    if not missing:
        config = _validate(config_data, registry, file)
    return _Checkpoint(
        path=file,
        format=written_format,
        metadata=metadata,
        tensors=tensors,
        config=config,
        components=components,
        ties=ties,
        user_metadata=_json_field(metadata, "zoo.metadata", file, dict),
        digest_ok=digest_ok,
        missing_plugins=missing,
    )


def _open(file: Path, *, tensors: bool = True) -> tuple[dict[str, str], dict[str, Tensor]]:
    """The header metadata and the memory-mapped tensors of a safetensors file."""
    try:
        if file.stat().st_size == 0:
            raise CheckpointError(f"{file} is empty (0 bytes): not a checkpoint; it was never written or was truncated")
        with safe_open(file, framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            found = {name: handle.get_tensor(name) for name in handle.keys()} if tensors else {}
    except SafetensorError as err:
        raise CheckpointError(
            f"{file} is not a valid safetensors file ({err}); it is damaged, truncated or "
            f"not a checkpoint. Restore it from a copy, or load another version."
        ) from err
    except (TypeError, ValueError) as err:  # a dtype or shape torch cannot represent
        raise CheckpointError(f"{file} holds a tensor torch cannot read ({err}); the file is damaged") from err
    except OSError as err:
        raise CheckpointError(f"cannot read {file}: {err}") from err
    return metadata, found


def _format_of(metadata: Mapping[str, str], file: Path) -> int:
    """``zoo.format`` as an int; refuses a newer format, naming the zoo that wrote it."""
    raw = metadata.get("zoo.format")
    if raw is None:
        raise CheckpointError(
            f"{file} is not a zoo checkpoint: its metadata has no zoo.format. A Hugging Face "
            f"GPT-2 file loads with zoo.from_hf; other files were not written by zoo.save."
        )
    if not re.fullmatch(r"0|[1-9][0-9]{0,8}", raw):
        raise CheckpointError(f"{file} is damaged: zoo.format is {quoted(raw, 40)}, not a format number")
    number = int(raw)
    if number > FORMAT:
        writer = metadata.get("zoo.version")
        writer = writer if is_version(writer) else "an unknown version"
        raise CheckpointError(
            f"{file} is in checkpoint format {number}, written by zoo {writer}; this zoo "
            f"({__version__}) reads formats up to {FORMAT}. Upgrade zoo: pip install -U {DISTRIBUTION}"
        )
    return number


def _verify(file: Path, metadata: Mapping[str, str], tensors: Mapping[str, Tensor], written_format: int) -> bool:
    """Check ``zoo.digest``. A file without a valid digest never passes, whatever format
    it claims: marking a file as an old format must not skip the check."""
    stored = metadata.get("zoo.digest")
    if stored is None:
        why = (
            f"it is marked as the older format {written_format}, which zoo never wrote without a digest"
            if written_format < FORMAT
            else "its metadata lacks zoo.digest"
        )
        raise CheckpointError(
            f"{file} cannot be verified: {why}, so its contents cannot be checked. Restore it "
            f"from a copy, or load it unverified at your own risk (verify=False)."
        )
    if not stored.startswith(f"{DIGEST_SCHEME}:"):
        raise CheckpointError(f"{file} is damaged: zoo.digest {quoted(stored, 60)} is not an {DIGEST_SCHEME} digest")
    if digest(metadata, tensors) != stored:
        raise CheckpointError(
            f"{file} is damaged: its contents do not match the digest stored when it was "
            f"saved (a changed byte, tensor or header value). Restore it from a copy or load "
            f"another version; verify=False would load the altered contents."
        )
    return True


def _migrate(
    file: Path, metadata: dict[str, str], tensors: dict[str, Tensor], written_format: int, registry: Registry
) -> tuple[dict[str, str], dict[str, Tensor]]:
    """Upgrade an older format one step at a time through ``zoo_migrate_checkpoint``.

    At each step every plugin's hook runs in load order, each on what the previous one
    returned; a step no plugin handles is an error.
    """
    impls = registry.hook.zoo_migrate_checkpoint.get_hookimpls()
    plugins = [impl.plugin for impl in impls]
    for step in range(written_format, FORMAT):
        handled = False
        for impl in impls:
            only = registry.pm.subset_hook_caller(
                "zoo_migrate_checkpoint", [p for p in plugins if p is not impl.plugin]
            )
            try:
                results = only(metadata=dict(metadata), tensors=dict(tensors), from_format=step)
            except Exception as err:  # a plugin's bug, reported with its name
                raise CheckpointError(
                    f"cannot load {file}: plugin {impl.plugin_name!r} failed to migrate it from "
                    f"format {step} to {step + 1}: {type(err).__name__}: {err}"
                ) from err
            for result in results:
                metadata, tensors = _migration_result(result, impl.plugin_name, file, step)
                handled = True
        if not handled:
            writer = metadata.get("zoo.version")
            raise CheckpointError(
                f"{file} is in checkpoint format {step} (written by zoo "
                f"{writer if is_version(writer) else 'of an unknown version'}) and no installed plugin "
                f"migrates format {step} to {step + 1}. Install the plugin that provides this "
                f"migration, or load the file with the zoo version that wrote it and save it again."
            )
        metadata["zoo.format"] = str(step + 1)
    return metadata, tensors


def _migration_result(result: Any, plugin: str, file: Path, step: int) -> tuple[dict[str, str], dict[str, Tensor]]:
    ok = (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], Mapping)
        and isinstance(result[1], Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in result[0].items())
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in result[1].items())
    )
    if not ok:
        raise CheckpointError(
            f"cannot load {file}: plugin {plugin!r} migrated format {step} but returned "
            f"{type(result).__name__}; zoo_migrate_checkpoint must return (metadata: dict[str, str], "
            f"tensors: dict[str, Tensor]) or None"
        )
    return dict(result[0]), dict(result[1])


def _json_field(metadata: Mapping[str, str], key: str, file: Path, kind: type) -> Any:
    try:
        value = json.loads(metadata[key])
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"{file} is damaged: metadata {key} is not valid JSON ({err})") from err
    if not isinstance(value, kind):
        raise CheckpointError(
            f"{file} is damaged: metadata {key} should be a JSON {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _component_records(data: dict[str, Any], file: Path) -> dict[str, ComponentRecord]:
    records = {}
    for kind, record in data.items():
        fields = ("name", "plugin", "distribution", "version")
        if not isinstance(record, dict) or not all(isinstance(record.get(f), (str, type(None))) for f in fields):
            raise CheckpointError(f"{file} is damaged: zoo.components[{quoted(kind, 40)}] is not a component record")
        records[kind] = ComponentRecord(*(record.get(f) for f in fields))
    return records


def _missing_plugins(
    config: Mapping[str, Any], components: Mapping[str, ComponentRecord], registry: Registry, file: Path
) -> str | None:
    """What to install for configured components the registry lacks, per distribution
    recorded at save time; ``None`` when all are there. A component name that the
    record contradicts, or an unknown one with no record, is damage and raises."""
    missing: dict[tuple[str | None, str | None, str | None], list[str]] = {}  # (plugin, dist, version)
    for kind in KINDS:
        spec = config.get(kind)
        name = spec.get("name") if isinstance(spec, dict) else spec
        if not isinstance(name, str):
            continue  # absent (the default) or malformed: validation reports it
        record = components.get(kind)
        if record is not None and record.name != name:
            raise CheckpointError(
                f"{file} is damaged: its config names the {kind} component {quoted(name)} but its "
                f"zoo.components record names {quoted(record.name)}"
            )
        try:
            registry.get(kind, name)
        except UnknownComponentError as err:
            if record is None:
                raise CheckpointError(f"cannot load {file}: {err}") from err
            missing.setdefault((record.plugin, record.distribution, record.version), []).append(
                f"{kind} {quoted(name)}"
            )
    if not missing:
        return None
    lines = []
    for (plugin, distribution, version), parts in missing.items():
        what = f"{' and '.join(parts)} {'come' if len(parts) > 1 else 'comes'} from"
        if distribution and is_distribution_name(distribution):
            wrote = f" ({version} wrote this checkpoint)" if is_version(version) else ""
            lines.append(
                f"{what} the distribution {distribution} (plugin {quoted(plugin)}), which is not "
                f"installed or failed to load: pip install {distribution}{wrote}"
            )
        elif distribution:
            lines.append(
                f"{what} a distribution the file names {quoted(distribution)} (plugin {quoted(plugin)}), "
                f"which is not a valid distribution name; find and install the plugin that provides it"
            )
        else:
            lines.append(
                f"{what} plugin {quoted(plugin)}, which is not an installed distribution: pass a "
                f"registry that includes it, zoo.load(path, registry=zoo.Registry(plugins=[...]))"
            )
    return f"cannot load {file}: its " + "; its ".join(lines)


def _validate(data: dict[str, Any], registry: Registry, file: Path) -> ModelConfig:
    try:
        return validate_config(data, registry=registry, source=f"config in {file}")
    except (ConfigError, RegistryError) as err:
        raise CheckpointError(f"cannot load {file}: {err}") from err
    except (TypeError, ValueError, RecursionError) as err:  # pydantic on exotic input
        raise CheckpointError(f"cannot load {file}: its config is invalid: {err}") from err


def _check_fit(ckpt: _Checkpoint, model: nn.Module, *, strict: bool) -> list[str]:
    """Compare the file's tensors with the model's; returns the missing names.

    Missing, unexpected and mismatched tensors are listed together in one error
    (missing and unexpected ones only when ``strict``).
    """
    expected = model.state_dict(keep_vars=True)
    ties = _tie_map(expected)
    stored = {name: tensor for name, tensor in expected.items() if name not in ties}
    problems = _compare(ckpt.tensors, stored, ties, strict=strict)
    if strict and ckpt.ties != ties:
        problems.append(
            f"tied weights: the file ties {quoted(ckpt.ties) if ckpt.ties else 'nothing'}, the model ties {ties or 'nothing'}"
        )
    if problems:
        fix = " load(..., strict=False) ignores unexpected tensors and initialises missing ones." if strict else ""
        raise CheckpointError(
            f"{ckpt.path} does not fit the model its config describes:\n  "
            + "\n  ".join(problems)
            + f"\nThe file is damaged or was edited.{fix}"
        )
    return sorted(set(stored) - set(ckpt.tensors))


def _compare(
    found: Mapping[str, Tensor], expected: Mapping[str, Tensor], ties: Mapping[str, str], *, strict: bool = True
) -> list[str]:
    """Missing, unexpected, and wrongly shaped or typed tensors, one line per group."""
    problems = []
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if strict and missing:
        problems.append(f"missing: {_names(missing)}")
    if strict and unexpected:
        tied = [name for name in unexpected if name in ties]
        note = f" ({_names(tied)} should be stored once, as the weight tied to it)" if tied else ""
        problems.append(f"unexpected: {_names(unexpected)}{note}")
    mismatched = []
    for name in sorted(set(found) & set(expected)):
        have, want = found[name], expected[name]
        if tuple(have.shape) != tuple(want.shape):
            mismatched.append(f"{name} has shape {tuple(have.shape)}, expected {tuple(want.shape)}")
        elif have.is_floating_point() != want.is_floating_point() or (
            not want.is_floating_point() and have.dtype != want.dtype
        ):
            kind = "a floating-point dtype" if want.is_floating_point() else _dtype_name(want.dtype)
            mismatched.append(f"{name} has dtype {_dtype_name(have.dtype)}, expected {kind}")
    if mismatched:
        problems.append(f"mismatched: {_names(mismatched, separator='; ')}")
    return problems


#: What ``load(strict=False)`` initialises without question when the file covers less.
_MISSING_ALLOWANCE = 256 << 20


def _check_allocation(ckpt: _Checkpoint, model: nn.Module, missing: list[str], *, converting: bool) -> None:
    """Refuse, before anything is allocated, a load that would allocate more than the
    file accounts for (``strict=False`` with a config far larger than its tensors) or
    more than this machine has free."""
    expected = model.state_dict(keep_vars=True)
    absent = tensor_bytes(expected[name] for name in missing)
    covered = tensor_bytes(ckpt.tensors[name] for name in expected if name in ckpt.tensors)
    if absent > max(covered, _MISSING_ALLOWANCE):
        raise CheckpointError(
            f"cannot load {ckpt.path} with strict=False: its config describes a model of "
            f"{fmt_bytes(model_bytes(model))}, of which the file holds {fmt_bytes(covered)}; loading would "
            f"allocate and initialise {fmt_bytes(absent)} of missing weights ({len(missing)} tensors). "
            f"The file is damaged or not this model's checkpoint; to start such a model from scratch, "
            f"use zoo.build(config)."
        )
    require(absent + (covered if converting else 0), "cpu", f"loading {ckpt.path}", CheckpointError)


def _check_ties_hold(model: nn.Module, ckpt: _Checkpoint) -> None:
    state = model.state_dict(keep_vars=True)
    broken = [alias for alias, owner in ckpt.ties.items() if state.get(alias) is not state.get(owner)]
    if broken:
        raise CheckpointError(
            f"cannot load {ckpt.path}: after model.tie_weights(), {_names(broken)} are not tied "
            f"to their owners; the model class's tie_weights() does not follow its config"
        )


def _tie_map(state: Mapping[str, Tensor]) -> dict[str, str]:
    """``{alias: owner}`` for entries of a ``state_dict(keep_vars=True)`` that are one tensor."""
    owners: dict[int, str] = {}
    ties = {}
    for name, tensor in state.items():
        owner = owners.setdefault(id(tensor), name)
        if owner != name:
            ties[name] = owner
    return ties


def _single_float_dtype(tensors: Any) -> torch.dtype | None:
    dtypes = {t.dtype for t in tensors if t.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def _parse_time(raw: str | None, file: Path) -> datetime | None:
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError as err:
        raise CheckpointError(f"{file} is damaged: zoo.created is {raw[:40]!r}, not a time") from err


def _version_files(directory: Path) -> dict[int, Path]:
    """``{number: path}`` of the versions in ``directory`` (temporary files excluded).

    Two files claiming one number (``v1.safetensors`` and ``v0001.safetensors``) are an
    error naming both: which of them is "version 1" would depend on the listing order.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError as err:
        raise CheckpointError(f"cannot list checkpoint directory {directory}: {err}") from err
    found: dict[int, Path] = {}
    for name in names:
        match = _VERSION_NAME.fullmatch(name)
        if match:
            number = int(match.group(1))
            if number in found:
                raise CheckpointError(
                    f"{directory} has two files for version {number}: {found[number].name} and {name}. "
                    f"Rename or remove one; zoo names versions {_version_name(number)}"
                )
            found[number] = directory / name
    return found


def _version_name(number: int) -> str:
    return f"v{number:04d}{SUFFIX}"


def _names(names: list[str], limit: int = 10, separator: str = ", ") -> str:
    shown = separator.join(printable(name) for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _numbers(numbers: list[int]) -> str:
    if len(numbers) <= 12:
        return ", ".join(map(str, numbers))
    return f"{numbers[0]} to {numbers[-1]} ({len(numbers)} in all)"


__all__ = [
    "save",
    "load",
    "versions",
    "inspect",
    "unwrap",
    "digest",
    "FORMAT",
    "VersionInfo",
    "CheckpointInfo",
    "ComponentRecord",
    "TensorInfo",
]
