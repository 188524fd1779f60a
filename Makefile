# kgrpc — see README.md. Every target sets up what it needs (a .venv with pinned versions).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# GPU=1 installs onnxruntime-gpu instead of the CPU onnxruntime (never both: same import package).
GPU    ?= 0
# The coordinator extra's onnxruntime is the CPU package: with GPU=1, onnxruntime-gpu (same
# import package) and train's onnx give the coordinator what it needs.
ifeq ($(GPU),1)
EXTRAS := gpu,train,dev
else
EXTRAS := inference,coordinator,train,dev
endif
PROTOS := $(wildcard protos/kgrpc/v1/*.proto)
STAMP  := $(VENV)/.installed-$(EXTRAS)
PYTEST_ARGS ?=

.PHONY: install proto check-proto test test-fast lint bench demo clients clean system-deps client-deps help

help:
	@echo "make install   create .venv with pinned dependencies (GPU=1 for onnxruntime-gpu)"
	@echo "make test      run the test suite (sets itself up)"
	@echo "make demo      run the whole self-play/train/gate loop locally on 9x9"
	@echo "make bench     run every benchmark, report in bench-out/"
	@echo "make proto     regenerate kgrpc/v1 from protos/"
	@echo "make lint      ruff"
	@echo "make clients   generate C++/Node.js/Go client code into clients/ (not committed)"

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS)]"
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# Optional system tools used by tests (GNU Go as a rules oracle). Best effort: tests skip without them.
system-deps:
	@command -v /usr/games/gnugo >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q gnugo >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q gnugo >/dev/null 2>&1)) \
	      || echo "note: could not install gnugo; the GNU Go oracle tests will be skipped"; \
	  else echo "note: gnugo not installed; the GNU Go oracle tests will be skipped"; fi; }

# Toolchains for the C++ and Node.js example clients (tests/test_clients_other_langs.py).
client-deps:
	@bash scripts/install-client-deps.sh

proto: $(STAMP)
	$(PY) -m kgrpc.protogen

check-proto: $(STAMP)
	$(PY) -m kgrpc.protogen --check

test: $(STAMP) system-deps client-deps
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check kgrpc inference trainer tests

bench: $(STAMP)
	$(VENV)/bin/kgrpc-bench all --out bench-out

demo: $(STAMP)
	$(VENV)/bin/kgrpc-cluster --board-size 9 --workers 2 --generations 4 --data-dir demo-data

clients: $(STAMP) client-deps
	bash scripts/gen-clients.sh

clean:
	rm -rf $(VENV) build *.egg-info bench-out demo-data clients
