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
//! - [`lock`]: the host-wide lock one migration driver holds per endpoint,
//!   so two drivers never fence each other's source.
//!
//! The `custos migrate` command composes these with its own printing and
//! its cold-verifier child process; an embedder composes them with
//! `custos_core::migration::workflow` directly.

pub mod lock;
pub mod ports;
