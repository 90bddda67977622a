# marekvs: every target sets up what it needs (virtualenv, packages, generated gRPC code).
# The interpreter of the virtualenv: the first of these that can make one. The system's
# python3.11 comes first: Debian and Ubuntu build it with profile-guided and link-time
# optimisation into one static binary, and marekvs's hot path runs ~10-15% faster on it
# than on a default source build (e.g. pyenv's: shared libpython, no PGO). README,
# "Performance", has the measurements. `make PYTHON=...` overrides.
PYTHON ?= $(firstword $(foreach p,/usr/bin/python3.11 python3.11 python3,$(shell command -v $(p) >/dev/null 2>&1 && $(p) -c 'import ensurepip, venv' >/dev/null 2>&1 && echo $(p))))
VENV   ?= .venv
PY     := $(VENV)/bin/python
# make test runs test files in parallel (pytest-xdist, one file per worker at a time): the
# suite waits on real servers most of the time, so two workers fit two cores
TEST_WORKERS ?= 2
PORT   ?= 6379
DATA   ?= ./data
STAMP  := $(VENV)/.installed

.PHONY: run test laws histories bench bench-cluster bench-pubsub proto clean lint

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

proto: $(STAMP)
	@if ls proto/*.proto >/dev/null 2>&1; then \
	  mkdir -p marekvs/replication/gen && \
	  $(PY) -m grpc_tools.protoc -Iproto --python_out=marekvs/replication/gen \
	    --grpc_python_out=marekvs/replication/gen proto/*.proto && \
	  sed -i -E 's/^import (\w+_pb2)/from . import \1/' marekvs/replication/gen/*_grpc.py && \
	  touch marekvs/replication/gen/__init__.py; fi

run: proto
	$(PY) -m marekvs serve --port $(PORT) --data-dir $(DATA)

test: proto
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

laws: proto
	HYPOTHESIS_PROFILE=deep $(PY) -m pytest -q -p no:cacheprovider tests/merge_laws

# the history checker's long profile: many more and longer random histories, in process and
# on three real nodes, each node's final state compared with the reference model
histories: proto
	@rm -f .histories.count
	HISTORY_PROFILE=long MAREKVS_HISTORY_COUNT_FILE=$(CURDIR)/.histories.count $(PY) -m pytest -q -p no:cacheprovider \
	  tests/history tests/integration/test_histories_cluster.py; rc=$$?; \
	  awk '{n[$$1]++; ops[$$1]+=$$2} END {for (k in n) printf "%s histories: %d (%d commands)\n", k, n[k], ops[k]}' .histories.count; \
	  rm -f .histories.count; exit $$rc

bench: proto
	$(PY) bench/bench_single.py

bench-cluster: proto
	$(PY) bench/bench_cluster.py

bench-pubsub: proto
	$(PY) bench/bench_pubsub.py

# ruff over everything; mypy (strict, configured in pyproject's [tool.mypy]) over the pure
# core and the keyspace.
lint: $(STAMP)
	$(PY) -m pip install -q ruff && $(PY) -m ruff check marekvs tests bench crates_ref
	$(PY) -m mypy

clean:
	rm -rf $(VENV) marekvs/replication/gen .pytest_cache
