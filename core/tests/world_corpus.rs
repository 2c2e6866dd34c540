//! Replays the checked-in control-catalog fuzz corpus (`fuzz/corpus/world/`)
//! through the checker the fuzz target runs, so CI covers it where libFuzzer
//! cannot run; and runs random streams through it as a property test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use custos_core::world::{decide, Decision, Outcome, Request, WorldError, WorldSlot, WorldStatus};
use custos_testkit::streams::world::{
    check_world_bytes, check_world_stream, check_world_stream_with, WorldOp,
};
use proptest::prelude::*;

#[test]
fn world_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/world");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(v) = check_world_bytes(&data) {
            panic!("{}: {v}", path.display());
        }
        files += 1;
    }
    assert!(files >= 8, "corpus world has only {files} inputs");
}

fn op() -> impl Strategy<Value = WorldOp> {
    prop_oneof![
        (0u8..2, 0u8..2, 0u8..3).prop_map(|(world, variant, mode)| WorldOp::Register {
            world,
            variant,
            mode
        }),
        (0u8..2, 0u8..2, 0u8..3, 0u8..8).prop_map(|(world, variant, mode, tick)| {
            WorldOp::Retire {
                world,
                variant,
                mode,
                tick,
            }
        }),
        (0u8..2, 0u8..8).prop_map(|(world, tick)| WorldOp::Advance { world, tick }),
        (0u8..2, 0u8..2, 0u8..2, 0u8..4).prop_map(|(world, table, schema, forge)| {
            WorldOp::Sign {
                world,
                table,
                schema,
                forge,
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn random_world_streams_hold_every_rule(ops in proptest::collection::vec(op(), 0..64)) {
        if let Err(v) = check_world_stream(&ops) {
            panic!("{v}");
        }
    }
}

/// A mutant that lets a delayed registration resurrect a destroyed world.
fn resurrecting(state: &WorldSlot, req: &Request) -> Result<Decision, WorldError> {
    if let (Request::Register { record }, Some(r)) = (req, &state.record) {
        if r.status == WorldStatus::Destroyed && r.same_identity(record) {
            let mut next = state.clone();
            next.record = Some(record.clone());
            return Ok(Decision {
                outcome: Outcome::Registered { created: true },
                effects: custos_core::world::effects(state, &next),
                next,
                changed: true,
            });
        }
    }
    decide(state, req)
}

/// A mutant that lets a signature be replaced in place.
fn overwriting(state: &WorldSlot, req: &Request) -> Result<Decision, WorldError> {
    if let Request::RegisterSignature { signature, .. } = req {
        if let Some(i) = state
            .signatures
            .iter()
            .position(|s| s.table_id == signature.table_id)
        {
            if signature.validate().is_ok() && &state.signatures[i] != signature {
                let mut next = state.clone();
                next.signatures[i] = signature.clone();
                return Ok(Decision {
                    outcome: Outcome::SignatureRegistered { created: true },
                    effects: custos_core::world::effects(state, &next),
                    next,
                    changed: true,
                });
            }
        }
    }
    decide(state, req)
}

/// A mutant whose decision records a signature in its slot but hands the
/// backend no row to write for it.
fn unwritten(state: &WorldSlot, req: &Request) -> Result<Decision, WorldError> {
    let mut d = decide(state, req)?;
    d.effects
        .retain(|e| !matches!(e, custos_core::world::Effect::PutSignature { .. }));
    Ok(d)
}

#[test]
fn the_checker_catches_broken_deciders() {
    // The tombstone must win over a delayed registration.
    let resurrect = [
        WorldOp::Register {
            world: 0,
            variant: 0,
            mode: 1,
        },
        WorldOp::Retire {
            world: 0,
            variant: 0,
            mode: 1,
            tick: 0,
        },
        WorldOp::Register {
            world: 0,
            variant: 0,
            mode: 1,
        },
    ];
    check_world_stream(&resurrect).unwrap();
    let v = check_world_stream_with(resurrecting, &resurrect).unwrap_err();
    assert_eq!(v.step, 2);
    assert_eq!(v.invariant, "destroyed is monotonic");
    // A recorded descriptor never changes.
    let overwrite = [
        WorldOp::Register {
            world: 1,
            variant: 1,
            mode: 0,
        },
        WorldOp::Sign {
            world: 1,
            table: 0,
            schema: 0,
            forge: 1,
        },
        WorldOp::Sign {
            world: 1,
            table: 0,
            schema: 1,
            forge: 1,
        },
    ];
    check_world_stream(&overwrite).unwrap();
    let v = check_world_stream_with(overwriting, &overwrite).unwrap_err();
    assert_eq!(v.step, 2);
    assert_eq!(v.invariant, "a recorded signature never changes");
    // What a decision records, its effects write.
    let v = check_world_stream_with(unwritten, &overwrite).unwrap_err();
    assert_eq!(v.step, 1);
    assert_eq!(v.invariant, "the effects write the decided slot");
}
