"""Checkpoints: safetensors files that carry their own config, kept in numbered versions.

A checkpoint is one safetensors file whose header metadata holds the format number,
the writer, the config, the components and who provided them, the tied weights, your
own metadata and a digest over everything (``zoo.checkpoint.format`` lists the keys).
``zoo.digest`` is xxh3-128 over the other metadata and every tensor's name, dtype,
shape and bytes: it catches damage (a flipped byte, two tensors swapped in the header),
not forgery, at memory speed.

``save(model, "run.safetensors")`` writes that file; ``save(model, "run")`` adds the next
version ``run/v0001.safetensors``, ``run/v0002.safetensors``, ... and never overwrites
one. Writes go to a hidden temporary file in the same folder, are fsynced, and appear
under their final name in one step (``zoo.checkpoint.store``).

Loading runs no code from the file: no pickle, components are looked up in the registry
by name, and the config is validated (``extra="forbid"``, size bounds) before the model
is built on the meta device. Tensors are memory-mapped and assigned as they are, so
peak memory stays near one copy of the weights. Every problem with the file is a
``CheckpointError`` naming the file.

The modules, bottom to top: ``hashing`` (the digest), ``store`` (files, atomic writes,
versions), ``format`` (header records, building, reading, migration), ``fit`` (a model
against a file's tensors), ``io`` (``save``, ``load``) and ``inspection`` (``inspect``,
``versions``).

Every name loads on first use (``zoo._lazy``): the torch-free modules (``records``) are read
without the rest, as ``zoo generate -h``'s ``--revision`` check reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zoo._lazy import lazy_names

if TYPE_CHECKING:  # the names below load on first use
    from zoo.checkpoint.format import FORMAT, CheckpointInfo, ComponentRecord, TensorInfo, VersionInfo
    from zoo.checkpoint.hashing import digest
    from zoo.checkpoint.inspection import inspect, versions
    from zoo.checkpoint.io import load, save, unwrap
    from zoo.checkpoint.store import path_arg, write_atomically

_LAZY = {
    **dict.fromkeys(
        ("FORMAT", "CheckpointInfo", "ComponentRecord", "TensorInfo", "VersionInfo"), "zoo.checkpoint.format"
    ),
    "digest": "zoo.checkpoint.hashing",
    **dict.fromkeys(("inspect", "versions"), "zoo.checkpoint.inspection"),
    **dict.fromkeys(("load", "save", "unwrap"), "zoo.checkpoint.io"),
    **dict.fromkeys(("path_arg", "write_atomically"), "zoo.checkpoint.store"),
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "save",
    "load",
    "versions",
    "inspect",
    "unwrap",
    "digest",
    "path_arg",
    "write_atomically",
    "FORMAT",
    "VersionInfo",
    "CheckpointInfo",
    "ComponentRecord",
    "TensorInfo",
]
