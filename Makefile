# Every target creates .venv on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The distributions are zoo-lm (this folder, imported as `zoo`) and zoo-lm-modern
# (examples/zoo-modern); `zoo` on the package index is an unrelated project.
# This machine ships a CPU wheel of torch 2.13.0; the library itself declares a range.
TORCH  ?= torch==2.13.0

.PHONY: demo lint test test-all bench study clean

$(STAMP): pyproject.toml Makefile $(wildcard examples/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	# Earlier checkouts installed these as `zoo` and `zoo-modern`; two copies would clash.
	$(BIN)/python -m pip uninstall --quiet -y zoo zoo-modern 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The example third-party plugin, installed the way a user installs any plugin.
	if [ -f examples/zoo-modern/pyproject.toml ]; then $(BIN)/python -m pip install --quiet -e examples/zoo-modern; fi
	touch $(STAMP)

# The main job: GPT-2 Small's parts, the swap toward the 2017 design, the 2017-vs-GPT-2
# comparison, a 2-seed ablation that trains each swap on 2 workers (its report in
# runs/demo/report.md), a look inside one checkpoint, then prepare, train, resume, evaluate.
demo: $(STAMP)
	$(BIN)/zoo info gpt2-small
	$(BIN)/zoo compare gpt2-small gpt2-small --set-b placement=post --set-b position=sinusoidal --set-b activation=relu
	$(BIN)/zoo compare transformer-2017 gpt2-small
	$(BIN)/zoo ablate --from transformer-2017 --to gpt2-small --d-model 48 --layers 2 --heads 4 \
		--seq-len 48 --steps 60 --batch 12 --lr 4e-3 --eval-every 15 --seeds 2 --workers 2 --out runs/demo
	$(BIN)/zoo inspect runs/demo/00-base-transformer-2017.safetensors
	# Training: prepare the bundled text, train a small GPT-2 for 20 steps, resume it to 30, evaluate.
	rm -rf runs/demo-data runs/demo-train
	$(BIN)/zoo data prepare -o runs/demo-data --tokenizer bytes
	$(BIN)/zoo train gpt2-small --set n_layers=2 --set d_model=64 --set n_heads=4 --set vocab_size=256 --set max_seq_len=128 \
		--data runs/demo-data --out runs/demo-train --batch-size 8 --seq-len 64 --lr 3e-3 --eval-every 10 --save-every 10 --steps 20
	$(BIN)/zoo train gpt2-small --set n_layers=2 --set d_model=64 --set n_heads=4 --set vocab_size=256 --set max_seq_len=128 \
		--data runs/demo-data --out runs/demo-train --batch-size 8 --seq-len 64 --lr 3e-3 --eval-every 10 --save-every 10 --steps 30 --resume
	$(BIN)/zoo eval runs/demo-train --data runs/demo-data --seq-len 64

# The study behind docs/ablation.md's generated section (about 25 minutes on 2 CPU cores):
# a scale ladder of every 2017 -> GPT-2 swap, and post- vs pre-norm with and without warm-up
# at 6 layers. Each writes its results into docs/ablation.md between markers (--docs);
# finished runs in runs/study* are reused, so an interrupted `make study` resumes.
STUDY_LADDER ?= --scales 32x2,64x2,96x3 --tokens-per-param 1.5 --batch 8 --seeds 3 --workers 2
STUDY_WARMUP ?= --d-model 64 --layers 6 --heads 4 --steps 200 --lr 1e-2 --eval-every 25 --swaps placement \
	--warmup-sweep 0,50 --seeds 3 --workers 2
study: $(STAMP)
	$(BIN)/zoo ablate $(STUDY_LADDER) --out runs/study --docs docs/ablation.md
	$(BIN)/zoo ablate $(STUDY_WARMUP) --out runs/study-warmup --docs docs/ablation.md

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

clean:
	rm -rf $(VENV) build *.egg-info
