# Every target creates .venv on first use; nothing else needs installing by hand.
PYTHON ?= python3
# bash for `set -o pipefail` in demo: a piped command still fails the target.
SHELL  := /bin/bash
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP  := $(VENV)/.installed-demo
DEMO_EXTRAS := text,plot,ablate
# The distributions are zoo-lm (this folder, imported as `zoo`) and zoo-lm-modern
# (examples/zoo-modern); `zoo` on the package index is an unrelated project.
# This machine ships a CPU wheel of torch 2.13.0; the library itself declares a range.
TORCH  ?= torch==2.13.0

.PHONY: demo lint test test-all bench study study-gpu probe-docs docs-flags clean

# One set-up, two sizes: `make demo` installs the core and the extras the demo uses (a first
# run on a fresh machine is quicker), `make test` everything the tests and linters need (dev).
define setup
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	# Earlier checkouts installed these as `zoo` and `zoo-modern`; two copies would clash.
	$(BIN)/python -m pip uninstall --quiet -y zoo zoo-modern 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -e ".[$(1)]"
	# The example third-party plugin, installed the way a user installs any plugin.
	if [ -f examples/zoo-modern/pyproject.toml ]; then $(BIN)/python -m pip install --quiet -e examples/zoo-modern; fi
	touch $(2)
endef

$(STAMP): pyproject.toml Makefile $(wildcard examples/*/pyproject.toml)
	$(call setup,dev,$(STAMP))

$(DEMO_STAMP): pyproject.toml Makefile $(wildcard examples/*/pyproject.toml)
	$(call setup,$(DEMO_EXTRAS),$(DEMO_STAMP))

# The main job: GPT-2 Small's parts, the swap toward the 2017 design, the 2017-vs-GPT-2
# comparison, a 2-seed ablation that trains each swap on 2 workers (its report in
# runs/demo/report.md), a look inside one checkpoint, then prepare, train, resume, evaluate.
demo: $(DEMO_STAMP)
	$(BIN)/zoo info gpt2-small
	$(BIN)/zoo compare gpt2-small gpt2-small --set-b placement=post --set-b position=sinusoidal --set-b activation=relu
	$(BIN)/zoo compare transformer-2017 gpt2-small
	$(BIN)/zoo ablate --from transformer-2017 --to gpt2-small --set d_model=48 --set n_layers=2 --set n_heads=4 \
		--seq-len 48 --steps 60 --batch-size 12 --lr 4e-3 --eval-every 15 --seeds 2 --workers 2 -o runs/demo
	$(BIN)/zoo inspect runs/demo/00-base-transformer-2017.safetensors
	# Training: prepare the bundled text, train a small GPT-2 for 20 steps (plain progress lines when piped),
	# resume it to 30 (run.toml holds its flags), evaluate it on its own data, draw its curves.
	rm -rf runs/demo-data runs/demo-train
	$(BIN)/zoo data prepare -o runs/demo-data --tokenizer bytes
	set -o pipefail; $(BIN)/zoo train gpt2-small --set n_layers=2 --set d_model=64 --set n_heads=4 --set vocab_size=256 \
		--set max_seq_len=128 --data runs/demo-data --out runs/demo-train --batch-size 8 --seq-len 64 --lr 3e-3 \
		--eval-every 10 --save-every 10 --steps 20 --log-every 5 2>&1 | cat
	$(BIN)/zoo train --out runs/demo-train --resume --steps 30
	$(BIN)/zoo eval runs/demo-train --seq-len 64
	$(BIN)/zoo plot runs/demo-train -o runs/demo-train/curves.png --overwrite  # train drew it already: draw it again

# The studies behind docs/ablation.md's generated section (see its "The answer so far"), each on
# the bundled text as bytes, 5 seeds, no dropout (every run sees each token about once):
# - ladder: every 2017 -> GPT-2 swap at two rungs, each variant at its own tuned rate;
# - modern: GPT-2 -> the zoo-modern Llama-style design, one swap at a time, tuned rates, a 30% warm-up
#   (at the default tenth, SwiGLU beside learned positions stalls near the bigram loss in most seeds);
# - warmup: post- vs pre-norm at 6 layers over a rate x warm-up grid (the interaction test);
# - extrapolation: GPT-2 with each position encoding, trained at 64 bytes, evaluated at 128 and 256.
# Each writes its region of docs/ablation.md (--docs) and docs/studies/NAME.json; finished
# runs in runs/NAME are reused, so an interrupted `make study` resumes.
STUDY_COMMON = --tokenizer bytes --set dropout=0.0 --seq-len 64 --batch-size 16 --eval-batches 8 --seeds 5 --workers 2
STUDY_TUNED = --steps 700 --eval-every 175 --lr 1e-2 --tune-lr --lr-grid 2.5e-3,5e-3,1e-2,2e-2 --set d_model=64 --set n_layers=2 --set n_heads=4
STUDY_LADDER ?= $(STUDY_COMMON) $(STUDY_TUNED) --scales 64x2,96x2 --swaps position,activation,placement,init,embedding_scale,embedding_scale+init
STUDY_MODERN ?= $(STUDY_COMMON) $(STUDY_TUNED) --warmup 210 --from gpt2-small --to gpt2-small-modern \
	--swaps attention,position,activation,norm,mlp,bias,mlp+position
STUDY_WARMUP ?= $(STUDY_COMMON) --set d_model=32 --set n_layers=6 --set n_heads=2 --steps 400 --eval-every 100 \
	--swaps placement --lr-sweep 3e-3,1e-2 --warmup-sweep 0,40
STUDY_EXTRAPOLATION ?= $(STUDY_COMMON) $(STUDY_TUNED) --from gpt2-small --to gpt2-small-modern \
	--swaps position=sinusoidal,position=rotary,position=alibi,position=none --eval-lengths 2,4
# The GPU study (`make study-gpu`: one CUDA GPU; about ten minutes on an H100-class one by estimate, not yet run): the
# ladder's swaps at four rungs spanning 32x in non-embedding parameters (98K to 3.1M), each variant at its
# own tuned rate, with the sinusoid+scale pair (sinusoids meet the embeddings at the scale the 2017 design
# gives them), on the bundled text as bytes (it travels with the checkout); it writes docs/studies/gpu.json.
STUDY_GPU ?= --tokenizer bytes --set dropout=0.0 --seq-len 128 --batch-size 32 --eval-batches 8 --seeds 3 \
	--steps 1500 --eval-every 375 --lr 3e-3 --tune-lr --lr-grid 1e-3,3e-3,1e-2 --set d_model=64 --set n_layers=2 \
	--set n_heads=4 --scales 64x2,128x2,128x4,256x4 --swaps position,activation,placement,embedding_scale,position+embedding_scale --device cuda
study-gpu: $(STAMP)
	$(BIN)/zoo ablate $(STUDY_GPU) --out runs/gpu --docs docs/ablation.md

study: $(STAMP)
	$(BIN)/zoo ablate $(STUDY_LADDER) --out runs/ladder --docs docs/ablation.md
	$(BIN)/zoo ablate $(STUDY_MODERN) --out runs/modern --docs docs/ablation.md
	$(BIN)/zoo ablate $(STUDY_WARMUP) --out runs/warmup --docs docs/ablation.md
	$(BIN)/zoo ablate $(STUDY_EXTRAPOLATION) --out runs/extrapolation --docs docs/ablation.md

# Hygiene, run by `make test` before the tests: lint, format, types ([tool.mypy]) and the
# import layers ([tool.importlinter] in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest -n 2 -q

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m ""

bench: $(STAMP)
	$(BIN)/python -m bench

# The figures of docs/probe.md: generated by `zoo probe`, committed (too slow for `make test`'s docs run).
PROBE_SMALL := --set d_model=64 --set n_heads=4 --set d_ff=256 --set vocab_size=256 --set max_seq_len=128
probe-docs: $(STAMP)
	$(BIN)/zoo probe gpt2-small $(PROBE_SMALL) --variant init=gpt2 --variant init.scale_residual=false \
		--variant init=torch --vary n_layers=12,24,48 --metrics residual \
		-o docs/figures/probe-residual-scaling.json --plot docs/figures/probe-residual-scaling.png --overwrite
	$(BIN)/zoo probe transformer-2017 $(PROBE_SMALL) --set n_layers=12 --variant placement=post --variant placement=pre \
		--metrics grad,residual -o docs/figures/probe-post-vs-pre.json --plot docs/figures/probe-post-vs-pre.png --overwrite

# docs/ablation.md's table of the flags of `zoo ablate`, from its -h (tests/test_ablate_options.py says when it is stale).
docs-flags: $(STAMP)
	$(BIN)/python -c 'from pathlib import Path; from zoo.cli.ablate import write_flags_table; write_flags_table(Path("docs/ablation.md"))'

clean:
	rm -rf $(VENV) build *.egg-info
