# custos — developer entry points. Every target works on a fresh machine with
# only the Rust toolchain (cargo-fuzz is installed on demand by fuzz-smoke).
CARGO ?= cargo
# Keep build artefacts outside the clone so repeat runs are incremental.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/custos-target

.PHONY: check check-deep test lint fmt fuzz-smoke fuzz-deep mutants bench explore ci doc loom servers crash-deep torture

## The main job: every model checked to its CI bound, every mutant killed.
## Built in release mode with no shell features, so it never compiles the
## heavy shells (iceberg, wasmtime).
check:
	$(CARGO) run --release --locked -p custos --no-default-features -- check

## The deep bound.
check-deep:
	$(CARGO) run --release --locked -p custos --no-default-features -- check --deep

## The real components the tests start themselves (PostgreSQL's server
## binaries, libfaketime), installed from Debian's packages when missing.
servers:
	@bash .ci/servers

## Every test of the workspace: unit, property, conformance, model CI bound,
## architecture, fuzz-corpus replay, PostgreSQL on a private cluster.
## (Benchmarks are compiled by `lint` and run by `bench`, never here: no
## timing in tests.)
test: servers
	$(CARGO) test --locked --workspace --lib --bins --tests
	$(CARGO) test --locked --workspace --doc
	$(CARGO) test --locked -p custos-wasm --features wasmtime --tests

## Formatting and clippy, warnings as errors; then a second clippy pass over
## library and binary code only, under lint/library/clippy.toml (no function
## over 70 lines).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked -p custos-wasm --all-targets --features wasmtime -- -D warnings
	CLIPPY_CONF_DIR=$(CURDIR)/lint/library $(CARGO) clippy --locked --workspace --lib --bins -- -D warnings
	CLIPPY_CONF_DIR=$(CURDIR)/lint/library $(CARGO) clippy --locked -p custos-wasm --lib --features wasmtime -- -D warnings

fmt:
	$(CARGO) fmt --all

## The API docs a user reads (`target/doc`), warnings as errors.
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --workspace --no-deps

## libFuzzer for a bounded time per target (no sanitizer on stable).
FUZZ_SECONDS ?= 20
fuzz-smoke:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for t in $$($(CARGO) fuzz list); do \
	  $(CARGO) fuzz run -s none $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

## Every fuzz target to ten million executions (FUZZ_RUNS to change), the
## grown corpora minimised in place for `cargo test` to replay; prints
## executions and seconds per target. Not in CI (hours on two cores).
FUZZ_RUNS ?= 10000000
fuzz-deep:
	FUZZ_RUNS=$(FUZZ_RUNS) bash .ci/fuzz-deep

## Mutation score of custos-core: cargo-mutants over the rule modules, run
## against core's own tests, the conformance suites on memory and the
## models at their CI bound; prints caught / missed / unviable / timeout
## per module (docs/proofs/README.md has the last figures). Not in CI.
MUTANTS_FILES ?= core/src/lease.rs core/src/fence.rs core/src/ledger.rs core/src/ledger/ core/src/custody.rs core/src/world.rs core/src/release/protocol.rs core/src/release/lifecycle.rs core/src/migration.rs core/src/migration/
mutants:
	MUTANTS_FILES="$(MUTANTS_FILES)" bash .ci/mutants

## Crash states, deep: every combination of every recorded protocol trace
## (release publication and lifecycle, deployment mutations, artifact puts)
## with every torn sector boundary, over longer histories; prints the
## distinct states per protocol. `cargo test` runs a bounded sample.
crash-deep:
	CUSTOS_CRASH_DEEP=1 $(CARGO) test --locked -p custos-fs --release \
	  --test crash_states --test release_crash_states \
	  --test deployment_crash_states --test artifacts_crash_states -- --nocapture

## SIGKILL torture: each store's kill test (the test re-executes itself as
## a child that prints what was acknowledged; the parent SIGKILLs it at a
## random moment, reopens and checks every acknowledged operation), one
## store after another, in release mode; each prints
## `torture <store>: N SIGKILLs, A acknowledged operations checked, L lost`
## and fails unless L is 0. `cargo test` runs 24 kills each.
TORTURE_ITERATIONS ?= 1000
TORTURE_TESTS = custos-sqlite:crash custos-sqlite:ledger_kill custos-sqlite:control_kill \
  custos-fs:release_sigkill custos-fs:deployment_sigkill custos:migrate_kill
torture:
	@for t in $(TORTURE_TESTS); do \
	  echo "== torture $$t"; \
	  CUSTOS_TORTURE_ITERATIONS=$(TORTURE_ITERATIONS) \
	  $(CARGO) test --release --locked -p $${t%%:*} --test $${t##*:} -- --nocapture || exit 1; \
	done

## loom: every interleaving of the release repository's in-memory side
## (writer mutex, pending gate, index adoption, readers). Its own target
## directory, so the --cfg loom build never evicts the normal one.
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(HOME)/.cache/custos-target-loom \
	  $(CARGO) test --locked -p custos-fs --release --test loom -- --nocapture

## Benchmarks report ratios against a physical baseline measured in the same run.
bench: servers
	$(CARGO) bench --locked --workspace

## Serve the Explorer for one model: make explore MODEL=lease
MODEL ?= lease
explore:
	$(CARGO) run --release --locked -p custos --no-default-features -- explore $(MODEL)

## What CI runs: lint, the README's test command, the API docs with
## warnings as errors (a broken intra-doc link fails), then loom.
ci: lint test doc loom
