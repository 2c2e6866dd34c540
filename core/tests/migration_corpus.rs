//! Replays the checked-in migration fuzz corpus through the same simulation
//! the fuzz target runs, so CI covers it where libFuzzer cannot run; and
//! checks that the seeds reach what their names say.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test] fns

use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use custos_core::migration::Status;
use custos_testkit::simulate::{seen, Fixture, Machine, Sim, SimOp};
use custos_testkit::streams::migration::{check_migration_bytes, STREAM_BUDGET};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/migration")
}

#[test]
fn migration_corpus_replays_clean() {
    let mut files = 0;
    for entry in std::fs::read_dir(corpus()).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = check_migration_bytes(&data) {
            panic!("{}: {v}", path.display());
        }
        files += 1;
    }
    assert!(files >= 8, "corpus migration has only {files} inputs");
}

/// Runs a seed the way `check_migration_stream` does and returns the final
/// world.
fn replay(name: &str) -> Sim {
    let data = std::fs::read(corpus().join(name)).unwrap();
    let mut u = Unstructured::new(&data);
    let fx = Fixture::new().unwrap();
    let mut sim = Sim::new(&fx);
    let mut enabled = Vec::new();
    while !u.is_empty() {
        let Ok(op) = SimOp::arbitrary(&mut u) else {
            break;
        };
        enabled.clear();
        sim.enabled(&Machine::REAL, &STREAM_BUDGET, &mut enabled);
        if matches!(op, SimOp::Force(..)) || enabled.contains(&op) {
            sim.apply(&fx, &Machine::REAL, op);
        }
        assert_eq!(sim.broken, 0, "{name}");
    }
    sim
}

fn status(sim: &Sim) -> Option<Status> {
    sim.dest.reservation.as_ref().map(|r| r.status)
}

#[test]
fn seeds_reach_what_they_name() {
    assert_eq!(status(&replay("seed-00-clean")), Some(Status::Completed));
    for k in 0..12 {
        let name = format!("seed-{:02}-crash-at-step-{k}", k + 1);
        let sim = replay(&name);
        assert_eq!(status(&sim), Some(Status::Completed), "{name}");
        assert!(sim.crashed_at & (1 << k) != 0, "{name}");
    }
    let sim = replay("seed-14-ambiguous-landed");
    assert!(sim.seen & seen::AMBIGUOUS_CONVERGED != 0);
    assert_eq!(status(&sim), Some(Status::Completed));
    let sim = replay("seed-15-ambiguous-lost");
    assert!(sim.seen & seen::AMBIGUOUS_RETRIED != 0);
    assert_eq!(
        status(&replay("seed-16-drift-before-recheck")),
        Some(Status::Invalidated)
    );
    assert!(replay("seed-17-second-driver").seen & seen::SECOND_RESUMED != 0);
    assert!(replay("seed-20-lost-complete-reply").seen & seen::RETRY_RECEIPT != 0);
}
