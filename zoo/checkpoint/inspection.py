"""Looking into checkpoints without loading weights: ``inspect`` one, list a directory's ``versions``.

``inspect`` runs every check ``load`` runs (format, digest, migrations, config, tensors
against the model the config describes) and reports what it found; a component whose
plugin is missing is reported, not an error.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from zoo.checkpoint.checks import check_dtypes, check_fit
from zoo.checkpoint.format import CheckpointInfo, TensorInfo, VersionInfo, format_of, json_field, parse_time, read
from zoo.checkpoint.hashing import dtype_name
from zoo.checkpoint.store import VERSION_NAME, open_file, path_arg, resolve, version_files
from zoo.errors import CheckpointError, checked_types
from zoo.nn.config import ModelConfig
from zoo.nn.factory import model_for
from zoo.nn.registry import Registry, default_registry


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
    file = resolve(path, version)
    ckpt = read(file, verify=verify, registry=registry)
    check_dtypes(ckpt.tensors, str(file), "zoo.load(path, dtype='fp32') converts every weight to one dtype")
    if isinstance(ckpt.config, ModelConfig):
        with torch.device("meta"):
            check_fit(ckpt, model_for(ckpt.config, registry), strict=True)
    is_directory = Path(path).is_dir()
    match = VERSION_NAME.fullmatch(file.name) if is_directory else None
    return CheckpointInfo(
        path=file,
        format=ckpt.format,
        zoo_version=ckpt.metadata.get("zoo.version"),
        created=parse_time(ckpt.metadata.get("zoo.created"), file),
        config=ckpt.config,
        components=ckpt.components,
        metadata=ckpt.user_metadata,
        tensors=[TensorInfo(n, dtype_name(t.dtype), tuple(t.shape)) for n, t in sorted(ckpt.tensors.items())],
        ties=ckpt.ties,
        digest_ok=ckpt.digest_ok,
        file_size=file.stat().st_size,
        version=int(match.group(1)) if match else None,
        versions=versions(path) if is_directory else None,
    )


@checked_types("directory")
def versions(directory: str | os.PathLike[str]) -> list[VersionInfo]:
    """The versions in a checkpoint directory, oldest first, read from their headers."""
    directory = path_arg(directory, "list versions of")
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is a file, not a checkpoint directory"
        raise CheckpointError(f"cannot list versions of {directory}: it {what}")
    found = []
    for number, file in sorted(version_files(directory).items()):
        metadata = open_file(file, tensors=False)[0]
        found.append(
            VersionInfo(
                version=number,
                path=file,
                created=parse_time(metadata.get("zoo.created"), file),
                zoo_version=metadata.get("zoo.version"),
                format=format_of(metadata, file),
                metadata=json_field(metadata, "zoo.metadata", file, dict) if "zoo.metadata" in metadata else {},
            )
        )
    return found
