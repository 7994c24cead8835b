"""Hybrid families: layers whose token mixer is not attention, alternating with ones that attend.

- LFM2 (Liquid AI): Llama's pre-norm RMSNorm, rotary and SwiGLU; ``layer_types`` says which
  layers attend (grouped-query, with Qwen3's RMSNorm per head on q and k) and which mix by
  zoo-modern's ``short_conv`` (``out_proj(c * conv(b * h))``), read into ``layer_pattern``.
  Its ``embedding_norm`` is the final norm (transformers applies it after the last layer).
- Bamba (IBM): Llama's layers with zoo-modern's ``mamba2`` scan in place of attention but
  at ``attn_layer_indices`` (the ``mamba_*`` fields are the scan's options, one set for all
  scan layers), a SwiGLU MLP in every layer, rotary on half of each head (transformers
  fixes the share at 0.5 unless ``rope_parameters`` names one).
- Nemotron-H (NVIDIA): Mamba-2's layout (one RMSNorm and one mixer per layer, a shared-norm
  ``parallel`` layer), each layer by ``layers_block_type`` (or ``hybrid_override_pattern``'s
  M/*/-) a ``mamba2`` scan, grouped-query attention without positions, or attention
  ``none`` with a squared-ReLU MLP. Mixture-of-experts layers are refused.

The MLP's width follows LFM2's rule (``block_auto_adjust_ff_dim``): 2/3 of
``intermediate_size``, times ``block_ffn_dim_multiplier``, rounded up to
``block_multiple_of``; export writes the width itself with the rule off, so it is exact.
The released files' older names (``block_ff_dim``, ``tie_embedding``) win over the new
ones, as in transformers; the fields transformers never reads (``UNREAD``) are ignored.

One known difference, left padding with ``conv_bias`` (no released checkpoint has it):
transformers zeroes a padded position's input, so ``in_proj``'s bias still reaches the
real tokens through the convolution; ``short_conv`` zeroes b * h, so padding never does.
Unpadded and right-padded inputs, and every model without ``conv_bias``, are exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import REQUIRED, Count, Epsilon, F, Family, Fraction, ModelConfig, Positive, W
from zoo_modern.families.llama_like import LLAMA, LLAMA_ROTARY, ROPE, llama_read, mlp_hidden
from zoo_modern.families.readers import ACTIVATIONS, IGNORED, SIZES, Rotary, periodic, qknorm, refuse_unless
from zoo_modern.families.state_space import MAMBA2, mamba2_weights, unlimited

LAYER_TYPES = ("conv", "full_attention")
#: Fields of the released checkpoints' config.json that transformers' LFM2 never reads
#: (its sizes come from hidden_size, norm_eps and rope_parameters; its MLP is always SwiGLU).
UNREAD = (
    "block_dim block_norm_eps block_use_swiglu block_mlp_init_scale block_out_init_scale block_use_xavier_init "
    "conv_dim conv_dim_out conv_use_xavier_init num_heads theta use_pos_enc model_name"
).split()


def ff_width(hf: Mapping[str, Any], size: int) -> int:
    """The SwiGLU's hidden width of LFM2's config: ``size`` as given, or adjusted by its rule."""
    if not hf.get("block_auto_adjust_ff_dim", True):
        return size
    width = int(2 * size / 3)
    multiplier = hf.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is None:  # transformers then neither scales nor rounds
        return width
    multiple = int(hf.get("block_multiple_of") or 256)
    width = int(multiplier * width)
    return multiple * ((width + multiple - 1) // multiple)


def layer_types(hf: Mapping[str, Any], layers: int, where: str) -> list[str]:
    """Each layer's kind: ``layer_types``, else attention at ``full_attn_idxs`` (default all)."""
    types = hf.get("layer_types")
    if types is None:
        attends = hf.get("full_attn_idxs")
        attends = range(layers) if attends is None else attends
        types = ["full_attention" if i in attends else "conv" for i in range(layers)]
    return list(types)


def lfm2_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The layer pattern of convolutions and attention, the MLP's width, the head size."""
    d, heads = fields["d_model"], fields["n_heads"]
    why = f"the zoo's head_dim is hidden_size / num_attention_heads = {d // heads}"
    refuse_unless(hf.get("head_dim") in (None, d // heads), where, "head_dim", hf.get("head_dim"), why)
    kernel = hf.get("conv_L_cache", 3)
    why = "a short convolution reads 2 positions or more"
    refuse_unless(type(kernel) is int and kernel >= 2, where, "conv_L_cache", kernel, why)
    conv = {"attention": {"name": "short_conv", "kernel_size": kernel, "conv_bias": bool(hf.get("conv_bias"))}}
    kinds = layer_types(hf, fields["n_layers"], where)
    pattern = periodic([conv if kind == "conv" else {} for kind in kinds])
    width = ff_width(hf, hf.get("block_ff_dim") or fields["d_ff"])  # transformers' older names win
    tied = hf.get("tie_embedding")
    fields = fields if tied is None else {**fields, "tie_embeddings": bool(tied)}
    return {**fields, "d_ff": width, "mlp": {**fields["mlp"], "hidden": width}, "layer_pattern": [] if pattern == [{}] else pattern}  # fmt: skip


def convolves(config: ModelConfig) -> bool:
    return config.attention.name == "short_conv"


def attends(config: ModelConfig) -> bool:
    return not convolves(config)


def conv_option(config: ModelConfig, option: str, default: Any) -> Any:
    """``option`` of the first convolution layer (``default`` if none convolves)."""
    for i in range(config.n_layers):
        if convolves(config.layer(i)):
            return config.layer(i).attention.options.get(option, default)
    return default


def conv_bias(config: ModelConfig) -> bool:
    return bool(conv_option(config, "conv_bias", False))


def lfm2_blockers(config: ModelConfig, arch: str) -> list[str]:
    """A pattern that changes anything but the mixer, or convolutions that differ."""
    blockers: list[str] = []
    convs = set()
    for i in range(config.n_layers):
        changes, layer = config.layer_changes(i), config.layer(i)
        if set(changes) - {"attention"}:
            blockers.append(f"layer {i} changes {', '.join(sorted(set(changes) - {'attention'}))} ({arch} has one design)")  # fmt: skip
        elif convolves(layer):
            options = layer.attention.options
            convs.add((options.get("kernel_size", 3), bool(options.get("conv_bias"))))
        elif "attention" in changes:
            blockers.append(f"layer {i}'s attention differs from the model's ({arch} has one attention)")
    if len(convs) > 1:
        blockers.append(f"convolutions of more than one kernel_size/conv_bias ({arch} has one conv_L_cache)")
    return blockers


def hybrid_bias(config: ModelConfig) -> bool:
    return convolves(config) and conv_bias(config)


CONV = "conv.{}."
ATTN = "self_attn."
LFM2 = Family(
    architecture="Lfm2ForCausalLM",
    model_type="lfm2",
    description="LFM2: short gated convolutions between QK-norm grouped-query attention layers, SwiGLU",
    prefix="model.",
    embedding="embed_tokens.weight",
    fields={
        **SIZES,
        "intermediate_size": F("d_ff", REQUIRED, Count, out=mlp_hidden),
        "block_auto_adjust_ff_dim": F("", True, bool, out=lambda c: False),  # export writes the width itself
        "block_ffn_dim_multiplier": F("", None, Positive, out=lambda c: 1.0),
        "block_multiple_of": F("", None, Count, out=lambda c: 256),
        "num_key_value_heads": F("attention.n_kv_heads", 8, Count),
        "head_dim": F("", None, Count),
        "max_position_embeddings": F("max_seq_len", 128000, Count),
        "norm_eps": F("norm_eps", 1e-5, Epsilon),
        **ROPE,
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "layer_types": F(
            "", None, out=lambda c: ["conv" if convolves(c.layer(i)) else "full_attention" for i in range(c.n_layers)]
        ),  # fmt: skip
        "full_attn_idxs": F("", None),
        "conv_L_cache": F("", None, Count, out=lambda c: conv_option(c, "kernel_size", 3)),
        "conv_bias": F("", None, bool, out=conv_bias),
        "block_ff_dim": F("", None, Count),  # the released files' name of intermediate_size
        "tie_embedding": F("", None, bool),  # and of tie_word_embeddings
        **{name: IGNORED for name in UNREAD},
    },
    zoo={"bias": False, "attention": qknorm("head")}
    | {"norm": "rmsnorm", "placement": "pre", "position": "rotary", "mlp": {"name": "swiglu"}, "init": "gpt2"},
    layer={
        "attn_residual.norm.weight": "operator_norm.weight",
        "attn.qkv.weight": W(ATTN + "{}_proj.weight", "concat", "qkv", when=attends),
        "attn.out.weight": W(ATTN + "out_proj.weight", when=attends),
        "attn.q_norm.weight": W(ATTN + "q_layernorm.weight", when=attends),
        "attn.k_norm.weight": W(ATTN + "k_layernorm.weight", when=attends),
        **{f"attn.{p}.weight": W(CONV.format(p) + "weight", when=convolves) for p in ("in_proj", "conv", "out_proj")},
        **{f"attn.{p}.bias": W(CONV.format(p) + "bias", when=hybrid_bias) for p in ("in_proj", "conv", "out_proj")},
        "mlp_residual.norm.weight": "ffn_norm.weight",
        **{
            f"mlp.{zoo}.weight": f"feed_forward.{hf}.weight"
            for zoo, hf in (("gate", "w1"), ("up", "w3"), ("down", "w2"))
        },  # fmt: skip
    },
    top={**LLAMA.top, "final_norm.weight": "embedding_norm.weight"},
    skip=("rotary_emb.inv_freq", "rotary_emb.original_inv_freq"),
    engine_features=frozenset({"layer_pattern"}),
    layer_kinds=LAYER_TYPES,
    read=(lfm2_read, LLAMA_ROTARY.read),
    write=(LLAMA_ROTARY.write,),
    blockers=(LLAMA_ROTARY.blockers, lfm2_blockers),
)


# -- Mamba-2 hybrids -------------------------------------------------------------------------

#: The zoo's ``mamba2`` options and Bamba's config.json names of them (Nemotron-H's below).
BAMBA_SCAN = {"d_state": "mamba_d_state", "expand": "mamba_expand", "n_groups": "mamba_n_groups", "conv_kernel": "mamba_d_conv"}  # fmt: skip
BAMBA_SCAN |= {"chunk_size": "mamba_chunk_size", "conv_bias": "mamba_conv_bias", "proj_bias": "mamba_proj_bias"}
BAMBA_DEFAULTS = {"d_state": 256, "expand": 2, "n_groups": 1, "conv_kernel": 4, "chunk_size": 256}
BAMBA_DEFAULTS |= {"conv_bias": True, "proj_bias": False}


def scan_spec(
    hf: Mapping[str, Any], where: str, names: Mapping[str, str], heads: str, head_dim: Any, free: bool = False
) -> dict[str, Any]:
    """The ``mamba2`` spec of a hybrid's scan layers from its fields ``names`` (zoo option ->
    config.json field, read by the converter's table first), checked as transformers checks
    them; ``free``: the scan is ``heads * head_dim`` wide, whatever ``expand`` says (Nemotron-H)."""
    spec = {"name": "mamba2", "head_dim": head_dim} | {option: hf[name] for option, name in names.items()}
    inner, n = spec["expand"] * hf["hidden_size"], hf[heads]
    if free and n * head_dim != inner:
        spec["d_inner"] = inner = n * head_dim
    refuse_unless(n * head_dim == inner, where, heads, n, f"{heads} * head_dim is hidden_size * expand = {inner}")
    refuse_unless(n % spec["n_groups"] == 0, where, names["n_groups"], spec["n_groups"], f"it divides {heads}={n}")
    unlimited(hf, where)
    return spec


def scans(config: ModelConfig) -> bool:
    return config.attention.name == "mamba2"


def attends_mamba(config: ModelConfig) -> bool:
    return not scans(config)


def scan_option(config: ModelConfig, option: str, default: Any) -> Any:
    """``option`` of the first scan layer's mixer (``default`` if no layer scans)."""
    for i in range(config.n_layers):
        if scans(config.layer(i)):
            options = config.layer(i).attention.options
            if option == "head_dim":  # the mixer's default: d_model / n_heads
                return options.get("head_dim") or config.d_model // config.n_heads
            return options.get(option, default)
    return default


def scan_blockers(config: ModelConfig, arch: str) -> list[str]:
    """A pattern that changes anything but the mixer, or scan layers whose options differ."""
    blockers, seen = [], set()
    for i in range(config.n_layers):
        changes, layer = config.layer_changes(i), config.layer(i)
        if set(changes) - {"attention"}:
            blockers.append(f"layer {i} changes {', '.join(sorted(set(changes) - {'attention'}))} ({arch} has one design)")  # fmt: skip
        elif scans(layer):
            seen.add(tuple(sorted(layer.attention.options.items())))
            inner, expand = layer.attention.options.get("d_inner"), layer.attention.options.get("expand", 2)
            if inner is not None and inner != expand * config.d_model:
                blockers.append(f"a scan of d_inner={inner}, not expand * hidden_size ({arch} has no other width)")
        elif "attention" in changes:
            blockers.append(f"layer {i}'s attention differs from the model's ({arch} has one attention)")
    if len(seen) > 1:
        blockers.append(f"scan layers whose mamba2 options differ ({arch} has one set of mamba_* fields)")
    return blockers


def scan_layers(hf: Mapping[str, Any], fields: dict[str, Any], where: str, attends: Any) -> dict[str, Any]:
    """Scans (the ``mamba_*`` fields) in every layer but those ``attends`` lists."""
    hf = {**{name: BAMBA_DEFAULTS[o] for o, name in BAMBA_SCAN.items()}, "mamba_n_heads": 128, **{k: v for k, v in hf.items() if v is not None}}  # fmt: skip
    d_head = hf.get("mamba_d_head", "auto")
    d_head = hf["mamba_expand"] * fields["d_model"] // hf["mamba_n_heads"] if d_head == "auto" else d_head
    refuse_unless(type(d_head) is int and d_head > 0, where, "mamba_d_head", d_head, "a whole number of channels or 'auto'")  # fmt: skip
    scan = {
        "attention": scan_spec({**hf, "hidden_size": fields["d_model"]}, where, BAMBA_SCAN, "mamba_n_heads", d_head)
    }
    layers = fields["n_layers"]
    ok = isinstance(attends, list) and all(type(i) is int and 0 <= i < layers for i in attends)
    refuse_unless(ok, where, "attn_layer_indices", attends, f"layer numbers below num_hidden_layers={layers}")
    pattern = periodic([{} if i in attends else scan for i in range(layers)])
    return {**fields, "layer_pattern": [] if pattern == [{}] else pattern}


def bamba_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Scans in every layer but ``attn_layer_indices``; rotary on half of each head, as
    transformers fixes it (a top-level ``partial_rotary_factor`` is overridden there too)."""
    fields = scan_layers(hf, fields, where, hf.get("attn_layer_indices") or [])
    half = fields["d_model"] // fields["n_heads"] // 2
    turned = hf.get("attn_rotary_emb") or half
    refuse_unless(turned == half, where, "attn_rotary_emb", turned, f"transformers turns half of each head: {half}")
    return BAMBA_ROTARY.read({k: v for k, v in hf.items() if k != "partial_rotary_factor"}, fields, where)


def bamba_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    attends = [i for i in range(config.n_layers) if not scans(config.layer(i))]
    out = {name: scan_option(config, option, BAMBA_DEFAULTS[option]) for option, name in BAMBA_SCAN.items()}
    out["mamba_proj_bias"] = config.bias if out["mamba_proj_bias"] is None else out["mamba_proj_bias"]
    head_dim = scan_option(config, "head_dim", 64)
    heads = out["mamba_expand"] * config.d_model // head_dim
    return {**hf, **out, "mamba_d_head": head_dim, "mamba_n_heads": heads, "attn_layer_indices": attends}


BAMBA_ROTARY = Rotary(share=0.5, partial=True)
MAMBA_FIELDS = {
    name: F("", None, bool if option.endswith("bias") else Count) for option, name in BAMBA_SCAN.items()
} | {"mamba_n_heads": F("", None, Count), "mamba_d_head": F("", None)}
# Bamba extends Llama: Mamba-2 scans in place of attention except at attn_layer_indices,
# rotary on half of each head; the SwiGLU MLP (feed_forward) in every layer.
BAMBA = LLAMA.derive(
    "BambaForCausalLM",
    model_type="bamba",
    description="Bamba: Mamba-2 scans and grouped-query attention layers interleaved, SwiGLU in every layer",
    fields={
        **MAMBA_FIELDS,
        "attn_layer_indices": F("", None),
        "attn_rotary_emb": F("", None, Count),  # the released files' rotary width, read by bamba_read
        "time_step_limit": IGNORED,  # read by scan_spec: (0, inf) only
        "rms_norm_eps": F("norm_eps", 1e-5, Epsilon),
        "max_position_embeddings": F("max_seq_len", 262144, Count),
        "num_key_value_heads": F("attention.n_kv_heads", 8, Count),
        "num_logits_to_keep": IGNORED,  # how many positions generate() computes logits for
        "use_mamba_kernels": IGNORED,  # which code path runs the scan, not what it computes
        "z_loss_coefficient": F.must(0.0, "the zoo's loss has no z-loss term", float),
        "pretraining_tp": None,
    },
    fresh=("layer", "read", "write", "blockers"),
    layer={
        "attn_residual.norm.weight": "input_layernorm.weight",
        "attn.qkv.weight": W("self_attn.{}_proj.weight", "concat", "qkv", when=attends_mamba),
        "attn.out.weight": W("self_attn.o_proj.weight", when=attends_mamba),
        **mamba2_weights("mamba.", scans),
        "mlp_residual.norm.weight": "pre_ff_layernorm.weight",
        **{f"mlp.{p}.weight": f"feed_forward.{p}_proj.weight" for p in ("gate", "up", "down")},
    },
    top={"final_norm.weight": "final_layernorm.weight"},
    engine_features=frozenset({"layer_pattern"}),
    read=(llama_read, bamba_read),
    write=(BAMBA_ROTARY.write, bamba_write),
    blockers=(BAMBA_ROTARY.blockers, scan_blockers),
)


#: Nemotron-H's names of the scan's options; the names of its older config.json files.
NEMOTRON_SCAN = {"d_state": "ssm_state_size", "expand": "expand", "n_groups": "n_groups", "conv_kernel": "conv_kernel"}
NEMOTRON_SCAN |= {"chunk_size": "chunk_size", "conv_bias": "use_conv_bias", "proj_bias": "use_bias"}
NEMOTRON_DEFAULTS = {"ssm_state_size": 128, "expand": 2, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128}
NEMOTRON_DEFAULTS |= {"use_conv_bias": True, "use_bias": False, "mamba_num_heads": 128, "mamba_head_dim": 64}
LEGACY = {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand"}
LEGACY |= {"mamba_chunk_size": "chunk_size", "mamba_conv_bias": "use_conv_bias", "mamba_dt_limit": "time_step_limit"}
#: config.json's layer kinds (``hybrid_override_pattern``'s letters) and each one's layer pattern entry.
NEMOTRON_KINDS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
MLP_LAYER = {"attention": "none", "mlp": "standard"}


def nemotron_kinds(hf: Mapping[str, Any], where: str) -> list[str]:
    """Each layer's kind: ``layers_block_type``, else ``hybrid_override_pattern``'s letters."""
    types: Any = hf.get("layers_block_type")
    field = "layers_block_type"
    if types is None:
        pattern: Any = hf.get("hybrid_override_pattern")
        field = "hybrid_override_pattern"
        ok = isinstance(pattern, str) and bool(pattern) and set(pattern) <= set(NEMOTRON_KINDS)
        refuse_unless(ok, where, field, pattern, "a string of M (Mamba-2), * (attention) and - (MLP)")
        types = [NEMOTRON_KINDS[letter] for letter in pattern]
    ok = isinstance(types, list) and bool(types) and all(isinstance(kind, str) for kind in types)
    ok = ok and set(types) <= set(NEMOTRON_KINDS.values())
    refuse_unless(ok, where, field, types, "layer kinds of 'linear_attention', 'full_attention' and 'mlp'")
    refuse_unless("moe" not in types, where, field, types, "mixture-of-experts layers are not modelled here yet")
    return list(types)


def nemotron_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The layer pattern of scans, attention and MLPs; the scans' options (older names win, as in transformers)."""
    kv = hf.get("num_key_value_heads", 8) or fields["n_heads"]  # null: one per query head, as transformers has it
    hf = {**NEMOTRON_DEFAULTS, **{k: v for k, v in hf.items() if v is not None}}
    hf |= {new: hf[old] for old, new in LEGACY.items() if old in hf}
    kinds = nemotron_kinds(hf, where)
    scan = {"attention": scan_spec(hf, where, NEMOTRON_SCAN, "mamba_num_heads", hf["mamba_head_dim"], free=True)}
    entries: dict[str, dict[str, Any]] = {"linear_attention": scan, "full_attention": {}, "mlp": MLP_LAYER}
    pattern = periodic([entries[kind] for kind in kinds])
    attention = {**fields["attention"], "n_kv_heads": kv}
    named = hf.get("attention_head_dim", attention["head_dim"])  # the released files' name; transformers reads head_dim
    refuse_unless(named == attention["head_dim"], where, "attention_head_dim", named, f"transformers' heads are head_dim={attention['head_dim']} wide")  # fmt: skip
    return {**fields, "n_layers": len(kinds), "attention": attention, "layer_pattern": [] if pattern == [{}] else pattern}  # fmt: skip


def nemotron_kind(config: ModelConfig, index: int) -> str:
    """Layer ``index``'s kind as config.json names it, or why Nemotron-H has none such."""
    changes, layer = config.layer_changes(index), config.layer(index)
    if not changes:
        return "full_attention"
    if set(changes) == {"attention"} and scans(layer):
        return "linear_attention"
    if layer.attention.name == "none" and layer.mlp.name == "standard" and set(changes) <= {"attention", "mlp"}:
        return "mlp"
    return f"layer {index} changes {', '.join(sorted(changes))} (not a Mamba-2, attention or MLP layer)"


def nemotron_blockers(config: ModelConfig, arch: str) -> list[str]:
    kinds = [nemotron_kind(config, i) for i in range(config.n_layers)]
    blockers = [f"{kind} ({arch})" for kind in kinds if kind not in NEMOTRON_KINDS.values()]
    return blockers + [b for b in scan_blockers(config, arch) if "scan layers" in b]


def nemotron_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    out = {name: scan_option(config, option, NEMOTRON_DEFAULTS[name]) for option, name in NEMOTRON_SCAN.items()}
    out["use_bias"] = config.bias if out["use_bias"] is None else out["use_bias"]
    head_dim = scan_option(config, "head_dim", 64)
    heads = (scan_option(config, "d_inner", None) or out["expand"] * config.d_model) // head_dim
    kinds = [nemotron_kind(config, i) for i in range(config.n_layers)]
    return {**hf, **out, "mamba_head_dim": head_dim, "mamba_num_heads": heads, "layers_block_type": kinds}


def attends_only(config: ModelConfig) -> bool:
    return config.attention.name == "qknorm"


def mlp_only(config: ModelConfig) -> bool:
    return config.attention.name == "none"


#: Fields of Nemotron-H's mixtures of experts and multi-token prediction, unread without such layers.
MOE_UNREAD = (
    "n_routed_experts n_shared_experts moe_intermediate_size moe_shared_expert_intermediate_size moe_latent_size "
    "moe_shared_expert_overlap num_experts_per_tok routed_scaling_factor n_group topk_group norm_topk_prob "
    "output_router_logits mtp_layers_block_type mtp_hybrid_override_pattern"
).split()
# Nemotron-H extends Mamba-2: each layer one norm and one mixer, a scan, grouped-query attention
# without positions, or a squared-ReLU MLP, by layers_block_type (or hybrid_override_pattern).
NEMOTRON_H = MAMBA2.derive(
    "NemotronHForCausalLM",
    model_type="nemotron_h",
    description="Nemotron-H: Mamba-2 scans, attention without positions and squared-ReLU MLP layers, one per layer",
    fresh=("read", "write", "blockers"),
    fields={
        **{name: None for name in ("num_heads", "state_size", "hidden_act", "use_bias", "use_conv_bias")},
        **{name: F("", None, bool if name.startswith("use") else Count) for name in NEMOTRON_DEFAULTS},
        **{name: F("", None) for name in (*LEGACY, "layers_block_type", "hybrid_override_pattern")},
        "num_hidden_layers": F("", None, Count, out=lambda c: c.n_layers),  # transformers counts the kinds
        "num_attention_heads": F("n_heads", 32, Count),
        "num_key_value_heads": F("attention.n_kv_heads", None, Count),  # read by nemotron_read: default 8
        "head_dim": F("attention.head_dim", 128, Count, out=lambda c: c.head_dim),
        "attention_head_dim": F("", None, Count),  # read by nemotron_read: it must agree with head_dim
        "intermediate_size": F("d_ff", 21504, Count),
        "mlp_hidden_act": F("activation", "relu2", str, {"relu2": "relu2", **ACTIVATIONS}),
        "mamba_hidden_act": F.must("silu", "Mamba-2's convolution is followed by SiLU in the zoo", str),
        "attention_bias": F.must(False, "biases on q/k/v/o projections are not modelled for this family", bool),
        "mlp_bias": F.must(False, "biases in the MLP layers are not modelled for this family", bool),
        "attention_dropout": F("dropout.attention", 0.0, Fraction),
        "hidden_dropout": IGNORED,  # transformers' Nemotron-H never applies it
        "num_nextn_predict_layers": F.must(0, "multi-token prediction layers are not modelled", int),
        **{name: IGNORED for name in ("mamba_proj_bias", "mamba_ssm_cache_dtype", "use_mamba_kernels", *MOE_UNREAD)},
        "num_logits_to_keep": IGNORED,
        "max_position_embeddings": F("max_seq_len", 4096, Count),
    },
    zoo={"attention": qknorm("none")},
    layer={
        **{name: None for name in MAMBA2.layer if name.startswith("attn.")},
        "attn.qkv.weight": W("mixer.{}_proj.weight", "concat", "qkv", when=attends_only),
        "attn.out.weight": W("mixer.o_proj.weight", when=attends_only),
        **mamba2_weights("mixer.", scans),
        "mlp.up.weight": W("mixer.up_proj.weight", when=mlp_only),
        "mlp.down.weight": W("mixer.down_proj.weight", when=mlp_only),
    },
    engine_features=frozenset({"layer_pattern"}),
    read=(nemotron_read,),
    write=(nemotron_write,),
    blockers=(nemotron_blockers,),
)

FAMILIES = (LFM2, BAMBA, NEMOTRON_H)
