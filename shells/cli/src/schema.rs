//! `custos schema <kind>`: the JSON Schema (draft 2020-12) of a document a
//! user writes or reads, generated from the Rust types that decode or
//! encode it (custos-core's `schema` feature), pretty-printed on stdout.
//!
//! The schemas are checked in under `docs/schemas/<kind>.schema.json`; the
//! `schema` test holds them to this command's output and validates real
//! documents (and ones the decoders refuse) against them.
//!
//! A schema states what is simple to state: the fields, their types, the
//! identifier and digest patterns, the lengths and counts the decoders
//! bound. What it cannot say (a contract type's depth, the sort order of a
//! plan's sequences, a receipt's digest binding) its descriptions say.

use std::process::ExitCode;

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::migration::{Plan, StoredReceipt};
use custos_core::release::contract::Contract;
use custos_core::release::manifest::Manifest;

use crate::out::{self, Out};

/// The documents `custos schema` describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaKind {
    /// The release manifest `custos releases publish --manifest` reads.
    ReleaseManifest,
    /// The contract metadata `custos releases publish --contract` reads.
    Contract,
    /// The deployment manifest `custos deployments apply --manifest` reads.
    DeploymentManifest,
    /// The migration plan `custos migrate plan --json` prints (and `--out`
    /// writes, `custos migrate run --plan` reads).
    MigrationPlan,
    /// The receipt with its digest `custos migrate run --json` prints (and
    /// `--receipt` writes, `custos migrate verify --receipt` reads).
    Receipt,
}

impl SchemaKind {
    /// The generated schema.
    fn schema(self) -> schemars::Schema {
        match self {
            SchemaKind::ReleaseManifest => schemars::schema_for!(Manifest),
            SchemaKind::Contract => schemars::schema_for!(Contract),
            SchemaKind::DeploymentManifest => schemars::schema_for!(DeploymentManifest),
            SchemaKind::MigrationPlan => schemars::schema_for!(Plan),
            SchemaKind::Receipt => schemars::schema_for!(StoredReceipt),
        }
    }
}

/// Prints the schema of `kind` as pretty JSON and a newline.
pub fn print(out: &mut Out, kind: SchemaKind) -> std::io::Result<ExitCode> {
    let text = match serde_json::to_string_pretty(&kind.schema()) {
        Ok(text) => text,
        Err(e) => {
            out::err(format_args!("custos schema: cannot encode the schema: {e}"));
            return Ok(ExitCode::FAILURE);
        }
    };
    out.line(text)?;
    Ok(ExitCode::SUCCESS)
}
