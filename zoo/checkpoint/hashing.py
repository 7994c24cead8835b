"""The checkpoint digest: xxh3-128 over the header metadata and every tensor, without NumPy.

It catches damage (a flipped byte, two tensors swapped in the header), not forgery, at
memory speed. Tensor bytes are read through a ctypes view, so hashing (and the writer in
``zoo.checkpoint.store``, which uses the same view) needs no NumPy.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Mapping

import torch
import xxhash
from torch import Tensor

DIGEST_SCHEME = "xxh3_128"


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
        hasher.update(json.dumps([name, dtype_name(tensor.dtype), list(tensor.shape)]).encode())
        hasher.update(bytes_of(tensor))
    return f"{DIGEST_SCHEME}:{hasher.hexdigest()}"


def bytes_of(tensor: Tensor) -> memoryview:
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


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` as ``"float32"``: how checkpoints and messages name dtypes."""
    return str(dtype).removeprefix("torch.")
