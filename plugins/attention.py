"""Multi-head attention: ``sdpa`` (fused kernel, the default) and ``eager`` (the math).

Both are the zoo's ``Attention`` (``zoo.nn.attention``, offered by ``zoo.plugin``), which
covers multi-head, grouped-query and multi-query attention with ``n_kv_heads``; they
differ only in the kernel that turns q, k and v into per-head outputs. Another attention
component subclasses ``Attention`` or writes its own (``zoo.nn.contracts`` says what it
must promise).
"""

from __future__ import annotations

from zoo.plugin import EagerAttention, RegisterComponent, SdpaAttention, check_kv_heads, hookimpl


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("attention", "sdpa", SdpaAttention, check=check_kv_heads)
    register("attention", "eager", EagerAttention, check=check_kv_heads)
