"""zoo-modern's Hugging Face families as tables (``zoo.plugin.Family``), sorted by lineage:

- ``gpt2_like``: GPT-Neo, OPT, GPTBigCode, BLOOM, MPT (GPT-2 itself is the built-in ``zoo.plugins.hf_gpt2``);
- ``llama_like``: Llama, Mistral, Qwen2, Qwen3, Gemma, OLMo 2, Phi-3, Granite, Cohere, StableLM, Starcoder2;
- ``neox_like``: GPT-NeoX, GPT-J, Phi, Falcon;

one registry of them, ``FAMILIES``, registered by ``zoo_modern.plugin``.
"""

from __future__ import annotations

from zoo.plugin import Converter, converter
from zoo_modern.families import gpt2_like, llama_like, neox_like

FAMILIES = (*llama_like.FAMILIES, *gpt2_like.FAMILIES, *neox_like.FAMILIES)
CONVERTERS: tuple[Converter, ...] = tuple(converter(family) for family in FAMILIES)
