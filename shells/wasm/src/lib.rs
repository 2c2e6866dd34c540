//! custos-wasm — the Wasm shell of custos.
//!
//! Publication-time inspection of a release's component bytes, which never
//! prepares or instantiates the component: [`inspect()`] validates
//! the bytes with `wasmparser` — its features pinned to the preparation
//! engine's ([`engine_features`]) — and extracts the exported [`Contract`]:
//! interfaces with their functions, top-level functions, every parameter and
//! result as a recursive [`ValType`] (core's contract metadata types,
//! `custos_core::release::contract`). [`WasmInspector`] implements core's
//! `ComponentInspector` port with it. Registration neither compiles nor
//! instantiates: nothing in the default build can.
//!
//! The type structure is bounded while it is walked, before anything
//! recursive is built, with core's `MAX_TYPE_DEPTH` (32, the root counting
//! one) and `MAX_TYPE_NODES` (16,384 across the whole contract).
//! [`check_declared_exports`] holds the manifest's declared exports to the
//! extracted ones.
//!
//! Behind the `wasmtime` feature (off by default), the `prepare` module is
//! the separate preparation step: `Preparer::prepare` compiles with an
//! engine and returns an engine-version-scoped `PreparationStamp`.

pub mod contract;
pub mod declared;
pub mod inspect;
#[cfg(feature = "wasmtime")]
pub mod prepare;

use custos_core::release::contract::{ComponentInspector, ComponentRejected};

pub use contract::{
    canonical_bytes, digest, Case, Contract, Field, Function, Interface, Param, Shape, ValType, Wit,
};
pub use declared::{check_declared_exports, DeclaredExportsError};
pub use inspect::{engine_features, inspect, InspectError, REMOVED_FEATURES};

/// Core's component-inspection port, implemented with [`inspect()`]: the
/// release repository takes it at open (the cli wires the two). Always
/// extracts: returns `Some(contract)` or the refusal's message.
#[derive(Clone, Copy, Debug, Default)]
pub struct WasmInspector;

impl ComponentInspector for WasmInspector {
    fn inspect(&self, component: &[u8]) -> Result<Option<Contract>, ComponentRejected> {
        inspect(component).map(Some).map_err(|e| ComponentRejected {
            reason: e.to_string(),
        })
    }
}

fn depth_and_nodes(t: &ValType) -> (u32, u64) {
    let mut depth = 0;
    let mut nodes = 1;
    for c in t.children() {
        let (d, n) = depth_and_nodes(c);
        depth = depth.max(d);
        nodes += n;
    }
    (depth + 1, nodes)
}

/// The contract a fuzz target checks on arbitrary bytes: [`inspect()`] returns
/// (never panics); an accepted contract is within the type bounds, core's
/// explicit-stack measure agrees with a recursive one over the built types,
/// inspection is deterministic, and the contract's own export names satisfy
/// [`check_declared_exports`]. `Err` describes the violated property.
pub fn check_inspector(bytes: &[u8]) -> Result<(), String> {
    let Ok(contract) = inspect(bytes) else {
        return Ok(());
    };
    if !wasmparser::Parser::is_component(bytes) {
        return Err("accepted bytes without a component header".to_string());
    }
    let shape = contract.shape();
    shape
        .check()
        .map_err(|e| format!("accepted an out-of-bounds contract: {e}"))?;
    let mut depth = 0;
    let mut nodes = 0u64;
    for t in contract.roots() {
        let (d, n) = depth_and_nodes(t);
        depth = depth.max(d);
        nodes += n;
    }
    if (depth, nodes) != (shape.depth, shape.nodes) {
        return Err(format!(
            "core's shape {shape:?} differs from the built types ({depth}, {nodes})"
        ));
    }
    match inspect(bytes) {
        Ok(again) if canonical_bytes(&again) == canonical_bytes(&contract) => {}
        _ => return Err("inspection is not deterministic".to_string()),
    }
    check_declared_exports(&contract.export_names(), &contract)
        .map_err(|e| format!("own export names refused: {e}"))
}
