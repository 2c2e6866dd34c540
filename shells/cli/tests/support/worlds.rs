//! Worlds and signature columns the catalog tests seed, the same in every
//! control catalog they write.

#![allow(dead_code)]

use custos_core::schema::{Field, LogicalType};
use custos_core::world::{WorldIdentity, WorldRecord, WriterMode};

/// A signed 64-bit integer.
pub fn int64() -> LogicalType {
    LogicalType::Int {
        bits: 64,
        signed: true,
    }
}

/// The key column of a signature table: `entity`, a signed 64-bit
/// integer, never null.
pub fn entity() -> Field {
    Field::new("entity", int64(), false)
}

/// World `w-live` ("the live one", of run `run-7`, no parent), active and
/// resumable.
pub fn live_world() -> WorldRecord {
    WorldRecord::active(
        WorldIdentity {
            world_id: "w-live".into(),
            name: "the live one".into(),
            run_id: Some("run-7".into()),
            parent_world_id: None,
        },
        WriterMode::Resumable,
    )
}

/// The arguments of `custos catalog show <uri> <world>` in namespace `ns`,
/// then `extra`.
pub fn show_args<'a>(uri: &'a str, world: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["catalog", "show", uri, world, "--namespace", "ns"];
    args.extend_from_slice(extra);
    args
}

/// The arguments of `custos catalog discover <uri>` in namespace `ns`, then
/// `extra`.
pub fn discover_args<'a>(uri: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["catalog", "discover", uri, "--namespace", "ns"];
    args.extend_from_slice(extra);
    args
}
