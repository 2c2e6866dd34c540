//! The migration stream checker: environment operations (steps under
//! faults, crashes, restarts, a second driver, an intruder, source drift,
//! and forced out-of-order steps of a confused driver) applied to the
//! simulation of [`crate::simulate`] around the real machine,
//! with every rule of its monitor
//! ([`rule`](crate::simulate::rule)) checked after every operation.

use super::{violation, Violation};
use crate::simulate::{broken_names, Budget, Driver, Fault, Fixture, Machine, Sim, SimOp};

/// The budget the stream checker runs under: generous, every fault
/// everywhere.
pub const STREAM_BUDGET: Budget = Budget {
    crashes: 6,
    faults: 6,
    drifts: 2,
    second_driver: true,
    intruder: true,
    lose_everywhere: true,
};

/// Runs a stream of environment operations (including forced, out-of-order
/// steps of a confused driver) through the real machine and checks, after
/// every operation, every rule of
/// [`rule`](crate::simulate::rule). Operations that are not possible
/// in the current world, or beyond [`STREAM_BUDGET`], are skipped.
pub fn check_migration_stream(ops: &[SimOp]) -> Result<(), Violation> {
    check_migration_stream_with(Machine::REAL, ops)
}

/// [`check_migration_stream`] over any machine.
pub fn check_migration_stream_with(m: Machine, ops: &[SimOp]) -> Result<(), Violation> {
    let fx = fixture()?;
    let mut sim = Sim::new(&fx);
    let mut enabled = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let allowed = match op {
            SimOp::Force(..) => true,
            _ => {
                enabled.clear();
                sim.enabled(&m, &STREAM_BUDGET, &mut enabled);
                enabled.contains(op)
            }
        };
        if !allowed {
            continue;
        }
        sim.apply(&fx, &m, *op);
        if sim.broken != 0 {
            let detail = format!("{op:?} broke {:?}", broken_names(sim.broken));
            return Err(broken(&sim, step, detail));
        }
    }
    Ok(())
}

/// Runs the workflow to completion with no faults and checks every rule
/// after every step; returns the final world. Used by tests and as a smoke
/// check of the fixture.
pub fn check_clean_run() -> Result<Sim, Violation> {
    let fx = fixture()?;
    let mut sim = Sim::new(&fx);
    for step in 0..64 {
        if !matches!(sim.drivers[0], Driver::Running(_)) {
            break;
        }
        sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::None));
        if sim.broken != 0 {
            let detail = format!("{:?}", broken_names(sim.broken));
            return Err(broken(&sim, step, detail));
        }
    }
    Ok(sim)
}

/// Decodes `data` as an operation stream (with `arbitrary`) and runs
/// [`check_migration_stream`]. Undecodable tails are ignored.
#[cfg(feature = "arbitrary")]
pub fn check_migration_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 512;
    check_migration_stream(&super::decode_ops::<SimOp>(data, MAX_OPS))
}

fn fixture() -> Result<Fixture, Violation> {
    Fixture::new().map_err(|e| violation("fixture-valid", 0, e.to_string()))
}

/// The violation of the first rule the monitor saw broken.
fn broken(sim: &Sim, step: usize, detail: String) -> Violation {
    let first = broken_names(sim.broken).first().copied();
    violation(first.unwrap_or("unknown"), step, detail)
}
