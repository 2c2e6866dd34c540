# custos — developer entry points. Every target works on a fresh machine with
# only the Rust toolchain (cargo-fuzz is installed on demand by fuzz-smoke).
CARGO ?= cargo
# Keep build artefacts outside the clone so repeat runs are incremental.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/custos-target

.PHONY: check check-deep test lint fmt fuzz-smoke bench explore ci doc loom servers crash-deep

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

## Formatting and clippy, warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked -p custos-wasm --all-targets --features wasmtime -- -D warnings

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

## Crash states, deep: every combination of every recorded protocol trace
## (release publication and lifecycle, deployment mutations, artifact puts)
## with every torn sector boundary, over longer histories; prints the
## distinct states per protocol. `cargo test` runs a bounded sample.
crash-deep:
	CUSTOS_CRASH_DEEP=1 $(CARGO) test --locked -p custos-fs --release \
	  --test crash_states --test release_crash_states \
	  --test deployment_crash_states --test artifacts_crash_states -- --nocapture

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
