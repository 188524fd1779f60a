# kgrpc — see README.md. Every target sets up what it needs (a .venv with pinned versions).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# GPU=1 installs onnxruntime-gpu instead of the CPU onnxruntime (never both: same import package).
GPU    ?= 0
# The coordinator extra's onnxruntime is the CPU package: with GPU=1, onnxruntime-gpu (same
# import package), train's onnx and the metrics extra (aiohttp, prometheus_client) give the
# coordinator what it needs.
ifeq ($(GPU),1)
EXTRAS := gpu,train,metrics,dev
else
EXTRAS := inference,coordinator,train,dev
endif
PROTOS := $(wildcard protos/kgrpc/v1/*.proto)
STAMP  := $(VENV)/.installed-$(EXTRAS)
# The native core (native/, module kgrpc_native): NATIVE=0 skips it (no compiler needed; kgrpc
# then runs its pure-Python engine). Installed non-editable and rebuilt when a source changes,
# so no stale extension can stay behind.
NATIVE ?= 1
NATIVE_SRC := native/pyproject.toml native/CMakeLists.txt $(wildcard native/src/*)
ifeq ($(NATIVE),1)
NATIVE_STAMP := $(VENV)/.native-installed
else
NATIVE_STAMP := $(STAMP)
endif
PYTEST_ARGS ?=
# pytest-xdist processes for `make test` / `make test-fast` (1 = in this process).
TEST_JOBS ?= 2
ifeq ($(TEST_JOBS),1)
XDIST :=
else
XDIST := -n $(TEST_JOBS) --dist worksteal
endif

.PHONY: install proto check-proto test test-pg test-fast lint check-commits bench demo clients clean \
	system-deps client-deps help dist test-native-debug

help:
	@echo "make install   create .venv with pinned dependencies (GPU=1 for onnxruntime-gpu)"
	@echo "               and build the native core (NATIVE=0: pure Python only)"
	@echo "make test      run the test suite (sets itself up), then test-pg and, with the"
	@echo "               native core, test-native-debug's tests not marked slow"
	@echo "make test-fast the suite without the tests marked slow (about a minute)"
	@echo "make test-pg   the coordinator's tests again on a PostgreSQL index"
	@echo "make test-native-debug  the native differential tests on a build with its"
	@echo "               invariant checks on, the slow sweeps included (minutes)"
	@echo "make demo      run the whole self-play/train/gate loop locally on 9x9"
	@echo "make bench     run every benchmark, report in bench-out/"
	@echo "make dist      wheels and sdists of kgrpc and kgrpc-native (native/) into dist/"
	@echo "make proto     regenerate kgrpc/v1 from protos/"
	@echo "make lint      ruff"
	@echo "make check-commits  commit messages since BASE (default main) follow CONTRIBUTING.md"
	@echo "make clients   generate C++/Node.js/Go client code into clients/ (not committed)"

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS)]"
	@rm -f $(VENV)/.installed-*
	@touch $@

$(VENV)/.native-installed: $(STAMP) $(NATIVE_SRC)
	$(PIP) install -q -c constraints.txt scikit-build-core nanobind
	$(PIP) install -q --no-build-isolation --force-reinstall --no-deps ./native
	@touch $@

install: $(NATIVE_STAMP)

# System tools used by tests: GNU Go as a rules oracle (best effort: those tests skip without
# it) and Chromium for the dashboard's browser tests (they skip without it, but fail under CI).
system-deps:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q postgresql >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q postgresql >/dev/null 2>&1)) \
	      || echo "note: could not install postgresql; the PostgreSQL index tests will be skipped (failed under CI)"; \
	  else echo "note: postgresql not installed; the PostgreSQL index tests will be skipped (failed under CI)"; fi; }
	@command -v /usr/games/gnugo >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q gnugo >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q gnugo >/dev/null 2>&1)) \
	      || echo "note: could not install gnugo; the GNU Go oracle tests will be skipped"; \
	  else echo "note: gnugo not installed; the GNU Go oracle tests will be skipped"; fi; }
	@command -v /usr/bin/chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) \
	      || echo "note: could not install chromium; the browser tests will be skipped (failed under CI)"; \
	  else echo "note: chromium not installed; the browser tests will be skipped (failed under CI)"; fi; }

# Toolchains for the C++ and Node.js example clients (tests/test_clients_other_langs.py).
client-deps:
	@bash scripts/install-client-deps.sh

proto: $(STAMP)
	$(PY) scripts/protogen.py

check-proto: $(STAMP)
	$(PY) scripts/protogen.py --check

# --durations: the slowest tests in every log (CI's included), to keep the suite under 10 min.
test: $(NATIVE_STAMP) system-deps client-deps lint
	$(PY) -m pytest -q $(XDIST) --durations=20 $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-pg
ifeq ($(NATIVE),1)
	$(MAKE) --no-print-directory test-native-debug NATIVE_DEBUG_SELECT='-m "not slow"'
endif

# The index contract on PostgreSQL: the coordinator's own tests again, every coordinator
# they start on a fresh PostgreSQL database (tests/conftest.py, KGRPC_TEST_INDEX).
PG_CONTRACT := tests/test_coordinator_ingest.py tests/test_coordinator_ingest_storage.py \
	tests/test_coordinator_upload_payloads.py tests/test_coordinator_gating.py \
	tests/test_coordinator_models.py tests/test_coordinator_tasks.py tests/test_archive.py \
	tests/test_coordinator_ratings.py tests/test_coordinator_ownership.py \
	tests/test_coordinator_stats_cli.py tests/test_coordinator_matches.py \
	tests/test_coordinator_access.py
test-pg: $(NATIVE_STAMP) system-deps
	KGRPC_TEST_INDEX=postgresql $(PY) -m pytest -q $(XDIST) -m "not slow" $(PG_CONTRACT) $(PYTEST_ARGS)

# The native core built with its invariant checks on (KGRPC_NATIVE_DEBUG: KGN_DCHECK and
# asserts, -O1 -g) into build/native-debug, beside the release build in the venv (its CMake
# build folder native/build/debug is reused: a rebuild compiles what changed), and the
# differential tests against the Python reference run on it. `make test` runs those not marked
# slow (NATIVE_DEBUG_SELECT; about 30 s of build and 10 s of tests on 2 cores); this target
# alone runs them all, the slow sweeps too (about 3 minutes more).
NATIVE_DEBUG_DIR := build/native-debug
NATIVE_DEBUG_STAMP := $(NATIVE_DEBUG_DIR)/.built
NATIVE_DIFF_TESTS := tests/test_native_debug.py tests/test_native_board.py tests/test_gumbel.py \
	tests/test_native_replay.py tests/test_native_search.py tests/test_search_techniques.py
NATIVE_DEBUG_SELECT ?=
$(NATIVE_DEBUG_STAMP): $(STAMP) $(NATIVE_SRC)
	$(PIP) install -q -c constraints.txt scikit-build-core nanobind
	$(PIP) install -q --no-build-isolation --no-deps --upgrade --target $(NATIVE_DEBUG_DIR) \
		-C cmake.define.KGRPC_NATIVE_DEBUG=ON -C build-dir=build/debug ./native
	@touch $@
test-native-debug: $(NATIVE_DEBUG_STAMP)
	KGRPC_NATIVE_DEBUG_EXPECTED=1 PYTHONPATH=$(NATIVE_DEBUG_DIR) \
		$(PY) -m pytest -q $(XDIST) $(NATIVE_DEBUG_SELECT) $(NATIVE_DIFF_TESTS) $(PYTEST_ARGS)

test-fast: $(NATIVE_STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check kgrpc inference trainer tests scripts
	$(VENV)/bin/ruff format --check kgrpc inference trainer tests scripts

# Commit messages of this branch (BASE..HEAD, merges left out): see CONTRIBUTING.md.
BASE ?= main
check-commits:
	bash scripts/check-commit-msg.sh --range $(BASE)..HEAD

bench: $(NATIVE_STAMP)
	$(VENV)/bin/kgrpc-bench all --out bench-out

demo: $(STAMP)
	$(VENV)/bin/kgrpc-cluster --board-size 9 --workers 2 --generations 4 --data-dir demo-data

clients: $(STAMP) client-deps
	bash scripts/gen-clients.sh

# Wheels and sdists of kgrpc and of the native core into dist/: what a volunteer installs
# without a checkout (docs/worker.md, "Installing"). The native wheel is for this machine's
# Python and platform; its sdist builds wherever a C++17 compiler and CMake are.
dist: $(STAMP)
	$(PIP) install -q -c constraints.txt build scikit-build-core nanobind
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	$(PY) -m build --no-isolation --outdir dist native

clean:
	rm -rf $(VENV) build dist *.egg-info bench-out demo-data learn9-data clients native/build
