# Every target creates .venv on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# This machine ships a CPU wheel of torch 2.13.0; the library itself declares a range.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-all bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
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
