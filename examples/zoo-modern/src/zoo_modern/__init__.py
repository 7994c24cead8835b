"""zoo-modern: post-2017 transformer parts for zoo, as a third-party plugin.

Nothing here is imported by zoo directly: zoo finds ``zoo_modern.plugin`` through the
entry point ``modern`` in group ``zoo`` (see this package's pyproject.toml).
"""

from zoo_modern.attention import GroupedQueryAttention
from zoo_modern.mlp import SwiGLU, swiglu_hidden
from zoo_modern.placement import Parallel, SandwichNorm
from zoo_modern.positions import ALiBi, Rotary, alibi_slopes

__version__ = "0.1.0"

__all__ = [
    "ALiBi",
    "GroupedQueryAttention",
    "Parallel",
    "Rotary",
    "SandwichNorm",
    "SwiGLU",
    "alibi_slopes",
    "swiglu_hidden",
]
