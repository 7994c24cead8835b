"""State-space families, whose layers mix tokens by a recurrence: Mamba-2, Mamba, Falcon-Mamba."""

from __future__ import annotations

from family_cases import Family

CASES = [
    # 8 heads of 16 over hidden 64 * expand 2, one group; chunks of 8 (a prompt of 12 spans two)
    Family(
        "mamba2",
        "mamba2",
        "Mamba2Config",
        "Mamba2ForCausalLM",
        {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "state_size": 16,
            "head_dim": 16,
            "num_heads": 8,
            "n_groups": 1,
            "chunk_size": 8,
        },
    ),
    # two groups of heads sharing B and C, a kernel of 3 without bias, chunks of 5, a tied head
    Family(
        "mamba2-groups",
        "mamba2",
        "Mamba2Config",
        "Mamba2ForCausalLM",
        {
            "hidden_size": 32,
            "num_hidden_layers": 3,
            "state_size": 8,
            "head_dim": 8,
            "num_heads": 8,
            "n_groups": 2,
            "chunk_size": 5,
            "conv_kernel": 3,
            "use_conv_bias": False,
            "tie_word_embeddings": True,
        },
    ),
]

MAMBA = {"hidden_size": 32, "num_hidden_layers": 2, "state_size": 8}
CASES += [
    # 64 channels of 8 states, a time step of rank ceil(32 / 16) = 2, a tied head
    Family("mamba", "mamba", "MambaConfig", "MambaForCausalLM", MAMBA),
    # rank 5, a kernel of 3, biases on both projections, an untied head, three layers
    Family(
        "mamba-biased",
        "mamba",
        "MambaConfig",
        "MambaForCausalLM",
        {
            **MAMBA,
            "num_hidden_layers": 3,
            "time_step_rank": 5,
            "conv_kernel": 3,
            "use_bias": True,
            "tie_word_embeddings": False,
        },  # fmt: skip
    ),
    # B, C and dt normalised (epsilon 1e-3, so it counts), expand 3
    Family(
        "falcon-mamba",
        "falcon_mamba",
        "FalconMambaConfig",
        "FalconMambaForCausalLM",
        {**MAMBA, "expand": 3, "mixer_rms_eps": 1e-3, "tie_word_embeddings": False},
    ),
]
