# Every target creates .venv on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# This machine ships a CPU wheel of torch 2.13.0; the library itself declares a range.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-all bench clean

$(STAMP): pyproject.toml Makefile $(wildcard examples/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# The example third-party plugin, installed the way a user installs any plugin.
	if [ -f examples/zoo-modern/pyproject.toml ]; then $(BIN)/python -m pip install --quiet -e examples/zoo-modern; fi
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m zoo.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m ""

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
