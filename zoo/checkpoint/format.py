"""What a checkpoint's header holds: the format, its records, building it, and reading it back.

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
  shape and bytes (``zoo.checkpoint.hashing``).

``read`` opens a file and checks all of it that can be checked without a model: the
format, the digest, migrations, every field, and the config (validated, ``extra="forbid"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torch import Tensor

from zoo._version import __version__
from zoo.checkpoint.hashing import DIGEST_SCHEME, digest
from zoo.checkpoint.store import open_file
from zoo.errors import (
    DISTRIBUTION,
    CheckpointError,
    ConfigError,
    RegistryError,
    UnknownComponentError,
    is_distribution_name,
    is_version,
    quoted,
)
from zoo.nn.config import ModelConfig, validate_config
from zoo.nn.registry import KINDS, Registry

#: The metadata layout this zoo writes, and the newest it reads.
FORMAT = 2
#: Format steps that change no layout of the zoo's own, only a plugin's parameters, so a
#: file without those needs no plugin to take the step: 1 -> 2, zoo-modern's MoE stores
#: its experts stacked (zoo-modern migrates such files).
PLUGIN_STEPS = frozenset({1})
_REQUIRED = ("zoo.version", "zoo.created", "zoo.config", "zoo.components", "zoo.ties", "zoo.metadata")
#: How deep user metadata may nest (``{"a": {"b": 1}}`` is 2).
METADATA_DEPTH = 8


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
class Checkpoint:
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


# -- building a header -----------------------------------------------------------------


def build_header(
    config: ModelConfig,
    tensors: Mapping[str, Tensor],
    ties: Mapping[str, str],
    metadata: Mapping[str, Any] | None,
    registry: Registry,
) -> dict[str, str]:
    """The header metadata of a new checkpoint, ``zoo.digest`` over it and ``tensors`` included."""
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
    return header


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


# -- reading a header ------------------------------------------------------------------


def read(file: Path, *, verify: bool, registry: Registry) -> Checkpoint:
    """Open, check the format, verify, migrate, parse and validate one checkpoint file."""
    metadata, tensors = open_file(file)
    written_format = format_of(metadata, file)
    digest_ok = _verify(file, metadata, tensors, written_format) if verify else None
    if written_format < FORMAT:
        metadata, tensors = _migrate(file, metadata, tensors, written_format, registry)
    absent = [key for key in _REQUIRED if key not in metadata]
    if absent:
        raise CheckpointError(
            f"{file} is damaged: its metadata lacks {', '.join(absent)}. "
            f"Restore it from a copy, or load another version."
        )
    parse_time(metadata["zoo.created"], file)  # a damaged time is damage here too
    config_data = json_field(metadata, "zoo.config", file, dict)
    components = _component_records(json_field(metadata, "zoo.components", file, dict), file)
    ties = json_field(metadata, "zoo.ties", file, dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in ties.items()):
        raise CheckpointError(f"{file} is damaged: zoo.ties must map tensor names to tensor names")
    missing = _missing_plugins(config_data, components, registry, file)
    config: ModelConfig | dict[str, Any] = config_data
    if not missing:
        config = _validate(config_data, registry, file)
    return Checkpoint(
        path=file,
        format=written_format,
        metadata=metadata,
        tensors=tensors,
        config=config,
        components=components,
        ties=ties,
        user_metadata=json_field(metadata, "zoo.metadata", file, dict),
        digest_ok=digest_ok,
        missing_plugins=missing,
    )


def format_of(metadata: Mapping[str, str], file: Path) -> int:
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
    returned; a step no plugin handles is an error, unless it is one of ``PLUGIN_STEPS``.
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
        if not handled and step not in PLUGIN_STEPS:
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


def json_field(metadata: Mapping[str, str], key: str, file: Path, kind: type) -> Any:
    """Metadata ``key`` parsed as JSON of type ``kind``; damage is a ``CheckpointError``."""
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
        values: list[Any] = [record.get(f) for f in fields]  # each a str or None, as checked above
        records[kind] = ComponentRecord(*values)
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


def parse_time(raw: str | None, file: Path) -> datetime | None:
    """``zoo.created`` as a datetime (``None`` when absent); damage is a ``CheckpointError``."""
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError as err:
        raise CheckpointError(f"{file} is damaged: zoo.created is {raw[:40]!r}, not a time") from err
