"""State-space families: layers that mix tokens by a recurrence, without attention.

- Mamba-2 (state-spaces, Codestral Mamba): RMSNorm, then zoo-modern's ``mamba2`` mixer, in every
  layer (``parallel`` with a shared norm, MLP ``none``), no positions, a final RMSNorm.
- Mamba and Falcon-Mamba (TII): Mamba-2's layout with the S6 ``mamba`` mixer (no heads: ``n_heads``
  is 1); Falcon-Mamba RMS-normalises B, C and the time step (``bcdt_norm``).

One known difference, left padding with ``use_bias`` (no released checkpoint has it):
transformers zeroes a padded position's input, so ``in_proj``'s bias still reaches the
real tokens through the convolution; ``mamba2`` zeroes the convolution's input, so padding
never does. Unpadded and right-padded inputs, and every model without ``use_bias``, are exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from zoo.plugin import REQUIRED, Count, Epsilon, F, Family, ModelConfig, W, linear
from zoo_modern.families.readers import IGNORED, refuse_unless

#: Fields transformers' Mamba-2 reads only to initialise weights, or only in half precision.
INIT_ONLY = "time_step_rank time_step_min time_step_max time_step_floor rescale_prenorm_residual residual_in_fp32"
INIT_ONLY += " time_step_init_scheme time_step_scale"
MIXER = "mamba2"
#: (0, inf) as config.json holds it: transformers 5 writes infinity as {"__float__": "Infinity"}.
UNLIMITED = ([0.0, math.inf], [0.0, {"__float__": "Infinity"}], [0, math.inf], [0, {"__float__": "Infinity"}])


def scan_heads(config: ModelConfig) -> int:
    """The mixer's heads: ``expand * d_model / head_dim`` (``num_heads`` of config.json)."""
    return int(config.attention.options.get("expand", 2) * config.d_model // config.head_dim)


def mamba2_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The heads as transformers checks them, and a time step without limits."""
    d, options = fields["d_model"], fields["attention"]
    heads, expand = fields["n_heads"], options["expand"]
    why = f"hidden_size * expand = {d * expand} is num_heads * head_dim in Mamba-2"
    refuse_unless(heads * options["head_dim"] == d * expand, where, "num_heads", heads, why)
    refuse_unless(heads % options["n_groups"] == 0, where, "n_groups", options["n_groups"], "it divides num_heads")
    unlimited(hf, where)
    refuse_unless(d % heads == 0, where, "num_heads", heads, f"the zoo's heads divide hidden_size={d}")
    return {**fields, "max_seq_len": hf.get("max_position_embeddings") or 1 << 20}


def mamba2_blockers(config: ModelConfig, arch: str) -> list[str]:
    """Heads other than the scan's (hook_z's, written as num_heads), or a scan not ``expand`` times as wide."""
    inner = config.attention.options.get("d_inner")
    if inner is not None and inner != config.attention.options.get("expand", 2) * config.d_model:
        return [f"a scan of d_inner={inner}, not expand * hidden_size ({arch} has no other width)"]
    if config.n_heads != scan_heads(config):
        return [f"{config.n_heads} heads where the mamba2 mixer has {scan_heads(config)} ({arch}'s num_heads is both)"]
    return []


def option(name: str, default: Any) -> Any:
    return lambda config: config.attention.options.get(name, default)


def proj_bias(config: ModelConfig) -> bool:
    """Biases on in_proj and out_proj: the mixer's option, else the config's bias (as the mixer reads it)."""
    value = config.attention.options.get("proj_bias")
    return config.bias if value is None else bool(value)


def mamba2_weights(at: str, scans: Callable[[ModelConfig], bool] = lambda c: True) -> dict[str, W]:
    """A ``mamba2`` mixer's weights under ``at`` (``mixer.``), in the layers where ``scans`` holds."""

    def both(*tests: Callable[[ModelConfig], bool]) -> Callable[[ModelConfig], bool]:
        return lambda config: all(test(config) for test in tests)

    names = {f"attn.{p}": W(f"{at}{p}", when=scans) for p in ("A_log", "D", "dt_bias", "norm.weight")}
    return names | {
        "attn.in_proj.weight": W(f"{at}in_proj.weight", when=scans),
        "attn.in_proj.bias": W(f"{at}in_proj.bias", when=both(scans, proj_bias)),
        "attn.conv.weight": W(f"{at}conv1d.weight", when=scans),
        "attn.conv.bias": W(f"{at}conv1d.bias", when=both(scans, option("conv_bias", True))),
        "attn.out_proj.weight": W(f"{at}out_proj.weight", when=scans),
        "attn.out_proj.bias": W(f"{at}out_proj.bias", when=both(scans, proj_bias)),
    }


def unlimited(hf: Mapping[str, Any], where: str) -> None:
    """Refuse a ``time_step_limit`` other than (0, inf): the zoo's scan does not clamp."""
    limit = hf.get("time_step_limit")
    ok = limit is None or (isinstance(limit, list | tuple) and list(limit) in UNLIMITED)
    refuse_unless(ok, where, "time_step_limit", limit, "the zoo's mamba2 does not clamp its time steps")


MAMBA2 = Family(
    architecture="Mamba2ForCausalLM",
    model_type="mamba2",
    description="Mamba-2: a selective state-space scan (SSD) and a gated RMSNorm in every layer, no attention, no MLP",
    prefix="backbone.",
    embedding="embeddings.weight",
    fields={
        "vocab_size": F("vocab_size", REQUIRED, Count),
        "hidden_size": F("d_model", 4096, Count),
        "num_hidden_layers": F("n_layers", 64, Count),
        "num_heads": F("n_heads", 128, Count, out=scan_heads),
        "head_dim": F("attention.head_dim", 64, Count, out=lambda c: c.head_dim),
        "state_size": F("attention.d_state", 128, Count),
        "expand": F("attention.expand", 2, Count),
        "n_groups": F("attention.n_groups", 8, Count),
        "conv_kernel": F("attention.conv_kernel", 4, Count),
        "chunk_size": F("attention.chunk_size", 256, Count),
        "use_bias": F("attention.proj_bias", False, bool, out=proj_bias),
        "use_conv_bias": F("attention.conv_bias", True, bool, out=option("conv_bias", True)),
        "layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon),
        "hidden_act": F.must("silu", "Mamba-2's convolution is followed by SiLU in the zoo", str),
        "tie_word_embeddings": F("tie_embeddings", False, bool),
        "max_position_embeddings": F("", None, Count, out=lambda c: c.max_seq_len),
        "time_step_limit": IGNORED,  # read by mamba2_read: (0, inf) only
        # Codestral Mamba's file names its norms; transformers reads neither: RMSNorm, gated before it norms.
        "rms_norm": F.must(True, "transformers' Mamba-2 norms by RMSNorm only", bool),
        "norm_before_gate": IGNORED,
        **{name: IGNORED for name in INIT_ONLY.split()},
    },
    zoo={"bias": False, "attention": {"name": MIXER}, "norm": "rmsnorm", "position": "none", "mlp": "none"}
    | {"placement": {"name": "parallel", "shared_norm": True}, "init": "gpt2"},
    layer={"attn_residual.norm.weight": "norm.weight", **mamba2_weights("mixer.")},
    top={"tok_emb.weight": "embeddings.weight", "final_norm.weight": "norm_f.weight", "head.weight": "lm_head.weight"},
    read=(mamba2_read,),
    blockers=(mamba2_blockers,),
)


def dt_rank(config: ModelConfig) -> int:
    """The mixer's time-step rank: its option, else ceil(d_model / 16) (transformers' "auto")."""
    return int(config.attention.options.get("dt_rank") or math.ceil(config.d_model / 16))


def mamba_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The time step's rank ("auto": ceil(d / 16), the mixer's default); a scan reads any length."""
    rank = hf.get("time_step_rank", "auto")
    refuse_unless(rank == "auto" or (type(rank) is int and rank > 0), where, "time_step_rank", rank, "a whole number > 0 or 'auto'")  # fmt: skip
    options = fields["attention"] | ({} if rank == "auto" else {"dt_rank": rank})
    return {**fields, "attention": options, "max_seq_len": hf.get("max_position_embeddings") or 1 << 20}


def plain_scan(config: ModelConfig, arch: str) -> list[str]:
    """Falcon-Mamba's norms of B, C and the time step, where the family has none."""
    return [f"a mamba mixer with bcdt_norm ({arch} does not normalise B, C and dt)"] if config.attention.options.get("bcdt_norm") else []  # fmt: skip


#: Fields transformers' Mamba reads only to initialise weights or to pick its scan's code path.
MAMBA_UNREAD = "time_step_scale time_step_init_scheme use_mambapy use_associative_scan intermediate_size"
# Mamba extends Mamba-2: the S6 scan (``mamba``: x_proj to a low-rank time step, B and C;
# dt_proj; A per channel and state) in every layer, no heads, no groups, no chunks.
MAMBA = MAMBA2.derive(
    "MambaForCausalLM",
    model_type="mamba",
    description="Mamba: a selective state-space scan (S6) in every layer, no attention, no MLP",
    fields={
        **{name: None for name in ("num_heads", "head_dim", "n_groups", "chunk_size", "time_step_limit")},
        "hidden_size": F("d_model", 768, Count),
        "num_hidden_layers": F("n_layers", 32, Count),
        "state_size": F("attention.d_state", 16, Count),
        "time_step_rank": F("", None, out=dt_rank),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        **{name: IGNORED for name in MAMBA_UNREAD.split()},
    },
    zoo={"attention": {"name": "mamba"}, "n_heads": 1},
    fresh=("layer", "read", "blockers"),
    layer={
        "attn_residual.norm.weight": "norm.weight",
        **linear({"attn.in_proj": "mixer.in_proj"}, proj_bias),
        **linear({"attn.conv": "mixer.conv1d"}, option("conv_bias", True)),
        **{f"attn.{p}": f"mixer.{p}" for p in ("x_proj.weight", "dt_proj.weight", "dt_proj.bias", "A_log", "D")},
        **linear({"attn.out_proj": "mixer.out_proj"}, proj_bias),
    },
    read=(mamba_read,),
    blockers=(plain_scan,),
)

# Falcon-Mamba extends Mamba: B, C and the time step RMS-normalised (no weights) before use.
FALCON_MAMBA = MAMBA.derive(
    "FalconMambaForCausalLM",
    model_type="falcon_mamba",
    description="Falcon-Mamba: Mamba's S6 scan with B, C and the time step RMS-normalised",
    fields={"mixer_rms_eps": F("attention.bcdt_eps", 1e-6, Epsilon), "use_falcon_mambapy": IGNORED},
    zoo={"attention": {"name": "mamba", "bcdt_norm": True}},
    fresh=("blockers",),
    blockers=(),
)

FAMILIES = (MAMBA2, MAMBA, FALCON_MAMBA)
