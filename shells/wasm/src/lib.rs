//! custos-wasm — the Wasm shell of custos.
//!
//! Validates a release's component bytes and extracts its exported contract
//! without compiling or instantiating it.
//!
//! This crate is a placeholder until the release-catalog work lands; the
//! wasmparser and wasmtime dependencies arrive with it and stay in this crate.
