"""zoo-modern's Hugging Face families as tables (``zoo.plugin.Family``), sorted by lineage:

- ``gpt2_like``: GPT-Neo, OPT, GPTBigCode, BLOOM, MPT, BioGPT, GPT (OpenAI's first), XGLM, CTRL; GPT-2 itself is the
  built-in ``zoo.plugins.hf_gpt2``;
- ``llama_like``: Llama, Mistral, Qwen2, Qwen3, Gemma, OLMo 2, Phi-3, Granite, Cohere, StableLM, Starcoder2;
- ``llama_kin``: Ministral, CWM, Ministral 3, Seed-OSS, Helium, ERNIE 4.5, GLM, GLM-4, OLMo 3, Cohere 2, EXAONE 4, OLMo,
  HunYuan, HyperCLOVA X, Granite SWA, SmolLM3 (Llama's lineage, continued);
- ``ungated``: Arcee, Nemotron, Jais 2, NanoChat, Apertus, Persimmon, Apertus 1.5 (Llama's, with an ungated MLP);
- ``moe``: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, Granite-MoE (and Shared, SWA), ERNIE 4.5-MoE, HunYuan-MoE, Phi-3.5-MoE,
  FlexOlmo, MiniMax-M2; ``moe_kin``: Cohere 2-MoE (windows and dense layers beside the experts);
- ``deepseek``: DeepSeek-V3 and V2 (latent attention, grouped routing), GLM-4-MoE, dots.llm1, EXAONE-MoE,
  GLM-4 MoE Lite, Youtu and MiniCPM3 (latent attention over a dense MLP), Solar Open (V3's routing, Llama's attention);
- ``moe_2026``: HY3, Mellum, Flint, Kolibri 1, MiniCPM5-MoE, Aria (text);
- ``local_moe``: GPT-OSS (attention sinks, alternating windows, clamped experts), Llama 4 (chunked and NoPE layers);
- ``gemma``: Gemma 2, Gemma 3, VaultGemma (Gemma's, with scaled and capped scores over local/global layers);
- ``neox_like``: GPT-NeoX, GPT-J, CodeGen, Phi, Falcon, GPT-NeoX Japanese;
- ``hybrids``: LFM2, Bamba, Nemotron-H (short convolutions, Mamba-2 scans, between attention layers);
  ``hybrid_moe``: Granite-MoE-Hybrid, LFM2-MoE, Jamba (hybrids with routed experts);
- ``deltanet_hybrids``: Qwen3-Next, Qwen3.5, Qwen3.5-MoE, OLMo Hybrid (gated DeltaNet layers between attention layers);
- ``state_space``: Mamba-2, Mamba, Falcon-Mamba (a selective state-space scan in every layer, no attention);
- ``seq2seq_decoders``: BART, PLBart, MVP, TrOCR, mBART, Pegasus, Blenderbot, Marian (decoders read as causal LMs);
- ``dense_2026``: BitNet (unquantised), Cohere Compass (text), DiffLlama (Llama's lineage, 2025-2026); AFMoE (EXAONE-MoE's kin);

one registry of them, ``FAMILIES``, registered by ``zoo_modern.plugin``.
"""

from __future__ import annotations

from zoo.plugin import Converter, Family, converter
from zoo_modern.families import (
    deepseek,
    deltanet_hybrids,
    dense_2026,
    gemma,
    gpt2_like,
    hybrid_moe,
    hybrids,
    llama_kin,
    llama_like,
    local_moe,
    moe,
    moe_2026,
    moe_kin,
    neox_like,
    seq2seq_decoders,
    state_space,
    ungated,
)

FAMILIES: tuple[Family, ...] = (
    *llama_like.FAMILIES,
    *llama_kin.FAMILIES,
    *ungated.FAMILIES,
    *moe.FAMILIES,
    *moe_kin.FAMILIES,
    *deepseek.FAMILIES,
    *local_moe.FAMILIES,
)
FAMILIES += (*gpt2_like.FAMILIES, *neox_like.FAMILIES, *hybrids.FAMILIES, *state_space.FAMILIES, *gemma.FAMILIES)
FAMILIES += (*deltanet_hybrids.FAMILIES, *hybrid_moe.FAMILIES, *seq2seq_decoders.FAMILIES, *moe_2026.FAMILIES)
FAMILIES += dense_2026.FAMILIES
CONVERTERS: tuple[Converter, ...] = tuple(converter(family) for family in FAMILIES)
#: The presets zoo-modern ships (``presets/<name>.toml``): its own designs and released checkpoints.
PRESETS = tuple(
    (
        "gpt2-small-modern llama-style-small pythia-160m pythia-410m gpt-j-6b phi-2 stablelm-2-1.6b opt-125m "
        "santacoder bloom-560m falcon-7b mpt-7b llama-3.2-1b qwen3-0.6b gemma-2b olmo-2-1b phi-3-mini granite-3-2b "
        "command-r starcoder2-3b gemma-2-2b gemma-3-1b gpt-neo-125m smollm3-3b mixtral-8x7b qwen1.5-moe-a2.7b "
        "qwen3-30b-a3b olmoe-1b-7b deepseek-v2-lite deepseek-v3 lfm2-1.2b bamba-9b nemotron-h-8b mamba-codestral-7b "
        "mamba-2.8b falcon-mamba-7b ernie-4.5-0.3b"
    ).split()
)
