//! Whole-identity migration composed over the local shells.
//!
//! The rules of a migration live in `custos_core::migration` (the machine,
//! the workflow that drives it one step at a time, the preflight and
//! destination rules); this crate supplies what the workflow runs over for
//! a local storage identity:
//!
//! - [`ports`]: the control catalog (SQLite), the Iceberg tables and the
//!   artifact objects of one endpoint, each opened lazily so that a refused
//!   preflight creates nothing anywhere;
//! - [`endpoint`]: one endpoint composed (both identities, its locality,
//!   its ports), the destination directory's listing for core's
//!   destination rule, and a migration [`endpoint::Job`] that hands the
//!   workflow its [`Migration`](custos_core::migration::workflow::Migration);
//! - [`lock`]: the host-wide lock one migration driver holds per endpoint,
//!   so two drivers never fence each other's source.
//!
//! The `custos migrate` command adds its own printing and its cold-verifier
//! child process; an embedder adds its own [`ColdVerifier`](custos_core::migration::workflow::ColdVerifier)
//! and runs the same workflow without the binary.

pub mod endpoint;
pub mod lock;
pub mod ports;
