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
# The hot modules compiled with mypyc (setup.py: NATIVE, the same typed source), built in
# place beside their .py files by `make native`, which run, test, laws, histories and the
# benches depend on. It always runs: setuptools recompiles only what changed (about a second
# when nothing did), and it writes marekvs/_native.json, what was compiled from which source;
# at import a compiled module whose source changed since is never used (marekvs/_native.py).
# With no C compiler, or with MAREKVS_PURE=1, it records a pure-Python build instead and the
# modules run as Python.

.PHONY: run test laws histories bench bench-cluster bench-pubsub proto native clean lint

# the editable install itself stays pure (MAREKVS_PURE=1): `native` compiles, with the
# virtualenv's mypy (the one `make lint` runs)
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	MAREKVS_PURE=1 $(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# the gRPC modules of proto/*.proto, generated again into the source tree when a .proto is
# newer than them (setup.py's ``generate``, the step a package build runs; the editable
# install of $(STAMP) generates them first)
GEN_STAMP := marekvs/replication/gen/__init__.py
proto: $(GEN_STAMP)

$(GEN_STAMP): $(STAMP) $(wildcard proto/*.proto)
	@$(PY) -c 'import pathlib, setup; setup.generate(pathlib.Path(setup.GEN_DIR))'

native: $(STAMP)
	@$(PY) -W ignore setup.py -q build_ext --inplace

run: proto native
	$(PY) -m marekvs serve --port $(PORT) --data-dir $(DATA)

# the integration files that already pass whole against a node of two shard workers run a
# second time that way (MAREKVS_TEST_SHARDS=2, tests/helpers.py; docs/shards.md §9, slice 10):
# each new slice adds the files it makes pass
SHARDED_TESTS := tests/integration/test_differential.py tests/integration/test_differential_hll_bitmaps.py \
                 tests/integration/test_hashes_sets.py tests/integration/test_differential_hashes_sets.py \
                 tests/integration/test_differential_zsets.py tests/integration/test_differential_lists.py \
                 tests/integration/test_differential_streams.py tests/integration/test_lists.py \
                 tests/integration/test_bad_input.py tests/integration/test_differential_options.py \
                 tests/integration/test_acl.py tests/integration/test_clients.py tests/integration/test_sort.py \
                 tests/integration/test_transactions.py tests/integration/test_dump_restore.py \
                 tests/integration/test_scripting.py tests/integration/test_command_introspection.py \
                 tests/integration/test_streams.py tests/integration/test_streams_seeds.py \
                 tests/integration/test_zsets_clients.py tests/integration/test_redis_cli.py \
                 tests/integration/test_sweeper_collections.py tests/integration/test_durability.py \
                 tests/integration/test_fuzz.py tests/integration/test_full_disk.py \
                 tests/integration/test_kafka.py tests/integration/test_kafka_features.py \
                 tests/integration/test_kafka_clients.py tests/integration/test_kafka_cluster.py \
                 tests/integration/test_tls.py \
                 tests/integration/test_keyspace_passes.py tests/integration/test_monitor.py \
                 tests/integration/test_pubsub.py tests/integration/test_hll_bitmaps_redis.py \
                 tests/integration/test_replication_clock.py tests/integration/test_replication_tls.py \
                 tests/integration/test_replication_peer_input.py tests/integration/test_replication_membership.py \
                 tests/integration/test_replication_faults.py tests/integration/test_replication_hashes_sets.py \
                 tests/integration/test_replication_zsets.py tests/integration/test_replication_convergence.py \
                 tests/integration/test_transactions_cluster.py \
                 tests/integration/test_acl_cluster.py tests/integration/test_pubsub_cluster.py \
                 tests/integration/test_scripting_cluster.py tests/integration/test_hll_bitmaps_cluster.py \
                 tests/integration/test_lists_cluster.py tests/integration/test_streams_cluster.py \
                 tests/integration/test_histories_cluster.py tests/integration/test_antientropy.py \
                 tests/integration/test_collection_events.py
# (test_hll_bitmaps_keyspace.py, test_replication_restarts.py and test_antientropy_spark.py pass
# whole that way too, but take ~70, ~250 and ~250 s more: test_shards_failure.py restarts
# workers, and test_shards_antientropy.py runs the Spark job against a node of two workers)
# what differs by design on a node of several shard workers (docs/shards.md §8a): math.random's
# generator is one per worker; a script's writes carried to another worker are committed there
# as they run, so SHUTDOWN NOSAVE amid a busy script does not drop them; a BCAST tracking
# client's invalidations come in one message per worker (MSET a 1 b 2: two); a transaction
# over keys of several workers is a log entry per worker and step, not one, and a peer applies
# each worker's part as it comes (so it may see a transaction over keys of two workers half-applied)
SHARDED_DESELECT := --deselect tests/integration/test_scripting.py::test_math_random_is_redis_s_generator \
  --deselect tests/integration/test_scripting.py::test_a_script_that_wrote_is_unkillable_and_shutdown_nosave_drops_its_writes \
  --deselect "tests/integration/test_pubsub.py::test_client_tracking_as_redis[b'HELLO 3\\\\r\\\\nCLIENT TRACKING on BCAST NO]" \
  --deselect tests/integration/test_hll_bitmaps_redis.py::test_a_transaction_with_pfadd_and_a_rename_is_one_log_entry \
  --deselect tests/integration/test_transactions_cluster.py::test_a_peer_sees_a_transaction_whole_or_not_at_all

test: proto native
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; \
	  if [ $$rc -eq 0 ]; then echo "again against nodes of 2 shard workers: $(SHARDED_TESTS)"; \
	    MAREKVS_TEST_SHARDS=2 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(SHARDED_DESELECT) $(SHARDED_TESTS); \
	    rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; fi; exit $$rc

laws: proto native
	HYPOTHESIS_PROFILE=deep $(PY) -m pytest -q -p no:cacheprovider tests/merge_laws

# the history checker's long profile: many more and longer random histories, in process and
# on three real nodes, each node's final state compared with the reference model
histories: proto native
	@rm -f .histories.count
	HISTORY_PROFILE=long MAREKVS_HISTORY_COUNT_FILE=$(CURDIR)/.histories.count $(PY) -m pytest -q -p no:cacheprovider \
	  tests/history tests/integration/test_histories_cluster.py; rc=$$?; \
	  awk '{n[$$1]++; ops[$$1]+=$$2} END {for (k in n) printf "%s histories: %d (%d commands)\n", k, n[k], ops[k]}' .histories.count; \
	  rm -f .histories.count; exit $$rc

# the single-node table beside redis-server, then the shard workers' scaling table (shards 1,
# 2, 4, ... up to the machine's cores, beside redis-server: bench/bench_scaling.py)
bench: proto native
	$(PY) bench/bench_single.py
	$(PY) bench/bench_scaling.py --quiet

bench-cluster: proto native
	$(PY) bench/bench_cluster.py

bench-pubsub: proto native
	$(PY) bench/bench_pubsub.py

# ruff over everything; mypy (strict, configured in pyproject's [tool.mypy]) over the pure
# core, the keyspace and every compiled module.
lint: $(STAMP)
	$(PY) -m pip install -q ruff && $(PY) -m ruff check marekvs tests bench crates_ref
	$(PY) -m mypy

clean:
	rm -rf $(VENV) marekvs/replication/gen .pytest_cache build .mypy_cache marekvs/_native.json
	find marekvs -name '*.so' -delete
