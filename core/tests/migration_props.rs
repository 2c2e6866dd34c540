//! Property tests of the migration plan and receipt (canonical round trips,
//! digest sensitivity to every field) and of random migration environments
//! through the real machine — plus a check that the stream checker catches a
//! broken machine, so it is not vacuous.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test] fns

use custos_core::migration::{
    self, CommitReply, Decision, Digest, MigrationError, Name, NormalizedUri, Outcome, Plan,
    Request, State, StorageIdentity, StoredReceipt,
};
use custos_testkit::simulate::{self, Fault, Forced, Machine, SimOp};
use custos_testkit::streams::migration::{
    check_clean_run, check_migration_stream, check_migration_stream_with,
};
use proptest::prelude::*;

fn fixture() -> simulate::Fixture {
    simulate::Fixture::new().unwrap()
}

fn digest() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest)
}

/// A valid plan with randomized contents.
fn plan() -> impl Strategy<Value = Plan> {
    (
        "[a-z][a-z0-9-]{0,15}",
        "[a-z]{1,8}",
        1u64..1000,
        proptest::collection::vec(0u64..1000, 0..4),
        any::<u64>(),
        any::<u64>(),
        digest(),
        digest(),
        any::<bool>(),
    )
        .prop_map(
            |(id, dir, epoch, manifests, rows, snap, d1, d2, resumable)| {
                let fx = fixture();
                let mut p = fx.plan(0, epoch, 0);
                p.migration_id = Name::new(id).unwrap();
                p.destination = StorageIdentity::new(
                    &format!("file:///dest-{dir}/warehouse"),
                    p.destination.namespace(),
                    p.destination.backend(),
                )
                .unwrap();
                p.worlds[0].manifest_writer_epochs = manifests;
                p.worlds[0].resumable = resumable;
                p.tables[1].source.rows = rows;
                p.tables[1].source.snapshot = snap;
                p.tables[1].source.content_digest = d1;
                p.tables[1].destination_content_digest = d1;
                p.tables[0].destination_content_digest = d2;
                p
            },
        )
}

/// Changes one field of a plan (selected by `k`) to a different value.
fn perturb_plan(p: &mut Plan, k: u8) {
    let flip = |d: &mut Digest| d.0[0] ^= 1;
    match k % 16 {
        0 => p.format += 1,
        1 => p.migration_id = Name::new(format!("{}x", p.migration_id)).unwrap(),
        2 => {
            let s = &p.source;
            let ns = format!("{}x", s.namespace());
            p.source = StorageIdentity::new(s.location(), &ns, s.backend()).unwrap()
        }
        3 => {
            let d = &p.destination;
            let backend = format!("{}x", d.backend());
            p.destination = StorageIdentity::new(d.location(), d.namespace(), &backend).unwrap()
        }
        4 => {
            p.source_artifact_root =
                NormalizedUri::parse(&format!("{}/x", p.source_artifact_root)).unwrap()
        }
        5 => flip(&mut p.control.snapshot_digest),
        6 => p.control.records = p.control.records.wrapping_add(1),
        7 => p.worlds[0].source_epoch = p.worlds[0].source_epoch.wrapping_add(1),
        8 => p.worlds[0].manifest_writer_epochs.push(1),
        9 => p.worlds[0].resumable = !p.worlds[0].resumable,
        10 => p.tables[1].source.rows = p.tables[1].source.rows.wrapping_add(1),
        11 => p.tables[1].source.snapshot = p.tables[1].source.snapshot.wrapping_add(1),
        12 => flip(&mut p.tables[1].source.schema_fingerprint),
        13 => flip(&mut p.tables[0].destination_content_digest),
        14 => p.artifacts.occurrences = p.artifacts.occurrences.wrapping_add(1),
        _ => p.artifacts.objects[0].xxh3_64 ^= 1,
    }
}

fn receipt() -> StoredReceipt {
    let sim = check_clean_run().unwrap();
    sim.dest.reservation.unwrap().receipt.unwrap()
}

fn perturb_receipt(s: &mut StoredReceipt, k: u8) {
    let r = &mut s.receipt;
    let flip = |d: &mut Digest| d.0[31] ^= 0x80;
    match k % 16 {
        0 => r.format += 1,
        1 => r.migration_id = Name::new("other").unwrap(),
        2 => r.version = Name::new("custos-9").unwrap(),
        3 => r.started_at += 1,
        4 => r.completed_at += 1,
        5 => flip(&mut r.source_fingerprint),
        6 => flip(&mut r.destination_fingerprint),
        7 => flip(&mut r.plan_digest),
        8 => flip(&mut r.source_stability_digest),
        9 => r.tables[0].destination_snapshot += 1,
        10 => r.tables[1].rows += 1,
        11 => r.artifacts.verified_bytes += 1,
        12 => flip(&mut r.artifacts.inventory_digest),
        13 => r.control.fence_floors += 1,
        14 => flip(&mut r.cold_verification.evidence_digest),
        _ => r.cold_verification.resume = migration::Resume::NotApplicable,
    }
}

fn sim_op() -> impl Strategy<Value = SimOp> {
    let fault = prop_oneof![
        6 => Just(Fault::None),
        1 => Just(Fault::LoseReply),
        1 => Just(Fault::CrashBeforeRecord),
        1 => Just(Fault::CrashAfterRecord),
        1 => Just(Fault::AmbiguousLanded),
        1 => Just(Fault::AmbiguousLost),
    ];
    let forced = prop_oneof![
        Just(Forced::Validate),
        Just(Forced::Plan),
        Just(Forced::Reserve),
        Just(Forced::CopyObject),
        (0u8..2).prop_map(Forced::CopyTable),
        (0u8..2).prop_map(Forced::VerifyTable),
        Just(Forced::Recheck),
        Just(Forced::StageControl),
        Just(Forced::Activate),
        Just(Forced::ColdVerify),
        Just(Forced::Complete),
    ];
    prop_oneof![
        12 => (0u8..2, fault).prop_map(|(d, f)| SimOp::Step(d, f)),
        2 => (0u8..2, forced).prop_map(|(d, f)| SimOp::Force(d, f)),
        1 => (0u8..2).prop_map(SimOp::Crash),
        2 => (0u8..2).prop_map(SimOp::Start),
        1 => Just(SimOp::Drift),
        1 => any::<bool>().prop_map(SimOp::Intrude),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn plan_round_trips_canonically(p in plan()) {
        prop_assert_eq!(p.check(), Ok(()));
        let bytes = p.canonical();
        let back = Plan::decode(&bytes).unwrap();
        prop_assert_eq!(back.canonical(), bytes);
        prop_assert_eq!(back.digest(), p.digest());
        prop_assert_eq!(back, p);
    }

    #[test]
    fn any_plan_field_change_changes_the_digest(p in plan(), k in any::<u8>()) {
        let mut q = p.clone();
        perturb_plan(&mut q, k);
        prop_assert_ne!(&q, &p);
        prop_assert_ne!(q.digest(), p.digest());
    }

    #[test]
    fn any_receipt_field_change_changes_the_digest_and_fails_decode(k in any::<u8>()) {
        let stored = receipt();
        prop_assert_eq!(StoredReceipt::decode(&stored.encode()), Ok(stored.clone()));
        let mut t = stored.clone();
        perturb_receipt(&mut t, k);
        prop_assert_ne!(t.receipt.digest(), stored.receipt.digest());
        // The stored digest no longer binds the changed receipt: refused.
        prop_assert!(StoredReceipt::decode(&t.encode()).is_err());
        // Resealed, it round-trips canonically.
        let resealed = StoredReceipt::seal(t.receipt.clone());
        if resealed.receipt.check().is_ok() {
            prop_assert_eq!(StoredReceipt::decode(&resealed.encode()), Ok(resealed));
        }
    }

    #[test]
    fn uris_with_credentials_never_construct(
        user in "[a-z]{1,6}", host in "[a-z]{1,6}", path in "[a-z]{1,6}", q in "[a-z=]{1,6}"
    ) {
        let u1 = NormalizedUri::parse(&format!("file://{user}@{host}/{path}"));
        prop_assert!(u1.is_err());
        let u2 = NormalizedUri::parse(&format!("file://{user}:pw@{host}/{path}"));
        prop_assert!(u2.is_err());
        let u3 = NormalizedUri::parse(&format!("file:///{path}?{q}"));
        prop_assert!(u3.is_err());
        let u4 = NormalizedUri::parse(&format!("file:///{path}#{q}"));
        prop_assert!(u4.is_err());
        let u5 = NormalizedUri::parse(&format!("file:///{path}"));
        prop_assert!(u5.is_ok());
    }

    #[test]
    fn random_migration_environments_keep_every_rule(
        ops in proptest::collection::vec(sim_op(), 0..160)
    ) {
        prop_assert_eq!(check_migration_stream(&ops), Ok(()));
    }
}

/// A machine that appends again after an ambiguous commit.
fn blind(s: &State, r: &Request) -> Result<Decision, MigrationError> {
    let d = migration::decide(s, r)?;
    if matches!(
        r,
        Request::TableCommitted {
            reply: CommitReply::Ambiguous,
            ..
        }
    ) && d.outcome == Outcome::InspectFirst
    {
        return Ok(Decision {
            outcome: Outcome::Append,
            next: d.next,
        });
    }
    Ok(d)
}

#[test]
fn the_stream_checker_catches_a_blind_reappend() {
    let ops: Vec<SimOp> = (0..4)
        .map(|_| SimOp::Step(0, Fault::None))
        .chain([SimOp::Step(0, Fault::AmbiguousLanded)])
        .collect();
    assert_eq!(check_migration_stream(&ops), Ok(()));
    let m = Machine {
        decide: blind,
        next: migration::next_step,
    };
    let v = check_migration_stream_with(m, &ops).unwrap_err();
    assert_eq!(v.invariant, "table-appended-twice");
}
