//! A migration destination's administration: staging worlds, floors,
//! activation and the stored bundle.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::fence::Holder;
use custos_core::fence::WorldFence;
use custos_core::migration::control::*;
use custos_core::migration::{
    canonical_bytes, DataError, Destination, Name, Reservation, WorldFloor,
};
use custos_core::migration::{StagedControl, Status};
use custos_core::schema::{Field, LogicalType, Schema};
use custos_core::world::{Signature, WorldIdentity, WriterMode};
use custos_core::world::{WorldRecord, WorldSlot};
use custos_testkit::simulate::Fixture;

fn slot(id: &str, tick: u64, fence: WorldFence, tables: &[&str]) -> WorldSlot {
    let mut record = WorldRecord::active(
        WorldIdentity::new(id, format!("name {id}")),
        WriterMode::Resumable,
    );
    record.tick_head = tick;
    let schema = Schema::new(vec![Field::new("x", LogicalType::Bool, true)]);
    WorldSlot {
        record: Some(record),
        signatures: tables
            .iter()
            .map(|t| Signature::new(vec!["Pos".into()], schema.clone(), *t))
            .collect(),
        fence,
    }
}

fn fence(issued: u64, floor: u64) -> WorldFence {
    WorldFence {
        issued,
        floor,
        holder: (issued > 0).then(|| Holder::new("migration").unwrap()),
    }
}

fn snapshot() -> ControlSnapshot {
    let slots = [
        slot("w-b", 4, fence(7, 2), &["t2", "t1"]),
        slot("w-a", 9, WorldFence::default(), &["t1"]),
    ];
    ControlSnapshot::from_slots(&slots)
}

#[test]
fn export_is_sorted_drops_holders_and_round_trips_canonically() {
    let s = snapshot();
    let ids: Vec<_> = s
        .worlds
        .iter()
        .map(|w| w.identity.world_id.as_str())
        .collect();
    assert_eq!(ids, ["w-a", "w-b"]);
    let sigs: Vec<_> = s
        .signatures
        .iter()
        .map(|x| (x.world_id.as_str(), x.signature.table_id.as_str()))
        .collect();
    assert_eq!(sigs, [("w-a", "t1"), ("w-b", "t1"), ("w-b", "t2")]);
    assert_eq!(
        s.fences,
        vec![FenceRecord {
            world_id: "w-b".into(),
            issued: 7,
            floor: 2
        }]
    );
    assert!(!String::from_utf8(s.canonical())
        .unwrap()
        .contains("migration"));
    assert_eq!(s.records(), 6);
    assert_eq!(ControlSnapshot::decode(&s.canonical()).unwrap(), s);
    let mut pretty = serde_json::to_vec_pretty(&s).unwrap();
    assert!(
        ControlSnapshot::decode(&pretty).is_err(),
        "non-canonical accepted"
    );
    pretty.clear();
    // The digest binds every record: a tick head changed is another digest.
    let mut other = s.clone();
    other.worlds[0].tick_head += 1;
    assert_ne!(other.digest(), s.digest());
}

#[test]
fn a_snapshot_out_of_order_or_dangling_is_refused() {
    let mut s = snapshot();
    s.worlds.reverse();
    assert!(s.check().is_err());
    let mut s = snapshot();
    s.signatures[0].world_id = "w-zz".into();
    assert!(s.check().is_err());
    let mut s = snapshot();
    s.fences[0].world_id = "w-zz".into();
    assert!(s.check().is_err());
    let mut s = snapshot();
    s.format = 2;
    assert!(ControlSnapshot::decode(&s.canonical()).is_err());
}

fn floor(world: &str, floor: u64) -> WorldFloor {
    WorldFloor {
        world: Name::new(world).unwrap(),
        floor,
    }
}

#[test]
fn import_keeps_records_exactly_never_the_holder_and_floors_above_every_epoch() {
    let s = snapshot();
    let slots = import_slots(&s, &[floor("w-a", 3), floor("w-b", 5)]).unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0].record.as_ref(), Some(&s.worlds[0]));
    assert_eq!(slots[1].record.as_ref().unwrap().tick_head, 4);
    assert_eq!(slots[1].signatures.len(), 2);
    // w-a: the staged floor; w-b: the snapshot's issued 7 beats the staged 5.
    assert_eq!(
        slots[0].fence,
        WorldFence {
            issued: 0,
            floor: 3,
            holder: None
        }
    );
    assert_eq!(
        slots[1].fence,
        WorldFence {
            issued: 0,
            floor: 7,
            holder: None
        }
    );
    assert_eq!(
        slots[1].fence.current(),
        None,
        "nothing is current after import"
    );
    // A missing, duplicated or foreign floor is refused.
    for floors in [
        vec![floor("w-a", 3)],
        vec![floor("w-a", 3), floor("w-a", 4), floor("w-b", 1)],
        vec![floor("w-a", 3), floor("w-b", 1), floor("w-c", 1)],
    ] {
        assert_eq!(import_slots(&s, &floors).unwrap_err().reason(), "Invalid");
    }
}

/// A reservation of the fixture plan, with `snapshot` as its control.
fn reserved(snapshot: &ControlSnapshot, status: Status) -> Destination {
    let fx = Fixture::new().unwrap();
    let mut plan = fx.plan(0, 3, 0);
    plan.control.snapshot_digest = snapshot.digest();
    plan.worlds[0].world = Name::new("w-a").unwrap();
    let mut w = plan.worlds[0].clone();
    w.world = Name::new("w-b").unwrap();
    plan.worlds.push(w);
    let floors = custos_core::migration::import_floors(&plan);
    Destination {
        reservation: Some(Reservation {
            plan_digest: plan.digest(),
            reserved_at: 1,
            status,
            objects: vec![true; plan.artifacts.objects.len()],
            tables: vec![custos_core::migration::TableState::Pending; plan.tables.len()],
            source_stability: None,
            control: Some(StagedControl {
                snapshot_digest: snapshot.digest(),
                floors,
            }),
            cold: None,
            receipt: None,
            plan,
        }),
    }
}

/// The floors the reservation of `d` staged.
fn staged_floors(d: &Destination) -> Vec<WorldFloor> {
    let reservation = d.reservation.as_ref().unwrap();
    reservation.control.clone().unwrap().floors
}

#[test]
fn staging_is_idempotent_and_another_bundle_conflicts() {
    let s = snapshot();
    let d = reserved(&s, Status::Reserved);
    let floors = staged_floors(&d);
    let bundle = decide_stage(&d, None, &s, &floors).unwrap().unwrap();
    assert_eq!(decide_stage(&d, Some(&bundle), &s, &floors).unwrap(), None);
    let mut other = bundle.clone();
    other.floors[0].floor += 1;
    assert_eq!(
        decide_stage(&d, Some(&other), &s, &floors)
            .unwrap_err()
            .reason(),
        "StagingConflict"
    );
    // A bundle the reservation does not record is refused.
    let mut changed = s.clone();
    changed.worlds[0].tick_head += 1;
    assert_eq!(
        decide_stage(&d, None, &changed, &floors)
            .unwrap_err()
            .reason(),
        "Invalid"
    );
}

#[test]
fn activation_needs_the_reserved_bundle_and_an_empty_destination() {
    let s = snapshot();
    let active = reserved(&s, Status::Activated);
    let floors = staged_floors(&active);
    let bundle = decide_stage(&reserved(&s, Status::Reserved), None, &s, &floors)
        .unwrap()
        .unwrap();
    let slots = decide_activation(&active, Some(&bundle), 0).unwrap();
    assert_eq!(slots.len(), 2);
    // Both worlds' floors are at least the plan's (manifest epochs included).
    for slot in &slots {
        assert!(slot.fence.floor >= 3, "{:?}", slot.fence);
    }
    assert_eq!(
        decide_activation(&active, None, 0).unwrap_err().reason(),
        "NotStaged"
    );
    assert_eq!(
        decide_activation(&active, Some(&bundle), 1)
            .unwrap_err()
            .reason(),
        "DestinationPopulated"
    );
    // A staged bundle that differs from the reserved one in its snapshot
    // alone, its floors alone, or its migration alone is not the staged one.
    type Change = fn(&mut StagedBundle);
    let changes: [(&str, Change); 3] = [
        ("snapshot", |b| b.snapshot.worlds[0].tick_head += 1),
        ("floors", |b| b.floors[0].floor += 1),
        ("migration", |b| {
            b.migration_id = Name::new("another").unwrap()
        }),
    ];
    for (what, change) in changes {
        let mut other = bundle.clone();
        change(&mut other);
        assert_eq!(
            decide_activation(&active, Some(&other), 0).map_err(|e| e.reason()),
            Err("NotStaged"),
            "a bundle with another {what}"
        );
    }
    let still_reserved = reserved(&s, Status::Reserved);
    assert_eq!(
        decide_activation(&still_reserved, Some(&bundle), 0)
            .unwrap_err()
            .reason(),
        "Invalid"
    );
}

#[test]
fn a_stored_reservation_that_does_not_verify_fails_closed() {
    let s = snapshot();
    let d = reserved(&s, Status::Reserved);
    let r = d.reservation.unwrap();
    let bytes = canonical_bytes(&r);
    assert_eq!(decode_reservation(&bytes).unwrap(), r);
    let mut tampered = r.clone();
    tampered.plan.control.records += 1;
    assert_eq!(
        decode_reservation(&canonical_bytes(&tampered))
            .unwrap_err()
            .reason(),
        "StoredEvidenceInvalid"
    );
    let pretty = serde_json::to_vec_pretty(&r).unwrap();
    assert_eq!(
        decode_reservation(&pretty).unwrap_err().reason(),
        "StoredEvidenceInvalid"
    );
    assert_eq!(
        decode_reservation(b"").unwrap_err().reason(),
        "StoredEvidenceInvalid"
    );
}

#[test]
fn a_fence_line_is_kept_when_either_its_issued_or_its_floor_is_set() {
    let slots = [
        slot("w-a", 1, fence(3, 0), &[]),
        slot("w-b", 1, fence(0, 5), &[]),
        slot("w-c", 1, WorldFence::default(), &[]),
    ];
    let s = ControlSnapshot::from_slots(&slots);
    let lines: Vec<_> = s
        .fences
        .iter()
        .map(|f| (f.world_id.as_str(), f.issued, f.floor))
        .collect();
    assert_eq!(lines, [("w-a", 3, 0), ("w-b", 0, 5)]);
    s.check().unwrap();
}

#[test]
fn fence_lines_out_of_order_or_repeated_are_refused() {
    let slots = [
        slot("w-a", 1, fence(3, 1), &[]),
        slot("w-b", 1, fence(7, 2), &[]),
    ];
    let s = ControlSnapshot::from_slots(&slots);
    s.check().unwrap();
    let mut reversed = s.clone();
    reversed.fences.reverse();
    assert!(
        matches!(reversed.check(), Err(DataError::Invalid(m)) if m.contains("fences are not strictly"))
    );
    let mut repeated = s.clone();
    repeated.fences[1].world_id = repeated.fences[0].world_id.clone();
    assert!(
        matches!(repeated.check(), Err(DataError::Invalid(m)) if m.contains("fences are not strictly"))
    );
    assert!(ControlSnapshot::decode(&reversed.canonical()).is_err());
}

#[test]
fn a_reservation_and_a_staged_bundle_round_trip_through_their_encoders() {
    let s = snapshot();
    let d = reserved(&s, Status::Reserved);
    let r = d.reservation.unwrap();
    let bytes = encode_reservation(&r);
    assert_eq!(bytes, canonical_bytes(&r));
    assert_eq!(decode_reservation(&bytes).unwrap(), r);
    let bundle = StagedBundle {
        migration_id: r.plan.migration_id.clone(),
        snapshot: s.clone(),
        floors: r.control.clone().unwrap().floors,
    };
    let bytes = bundle.encode();
    assert_eq!(bytes, canonical_bytes(&bundle));
    assert_eq!(StagedBundle::decode(&bytes).unwrap(), bundle);
    assert!(StagedBundle::decode(&bytes[1..]).is_err());
}

/// Every digest a stored reservation holds is written as its bare 64 hex
/// digits, as builds before the one digest type wrote it — the cold
/// verification's too, which sits in a tuple — so reservations stored by
/// either read back.
#[test]
fn a_reservations_digests_are_stored_bare_the_cold_ones_too() {
    use custos_core::migration::{ColdEvidence, Digest, Resume};
    let s = snapshot();
    let mut r = reserved(&s, Status::Reserved).reservation.unwrap();
    let stability = Digest::of(b"stability");
    let cold = Digest::of(b"cold evidence");
    r.source_stability = Some(stability);
    r.cold = Some((
        ColdEvidence {
            plan_digest: r.plan_digest,
            worlds_discovered: 1,
            tables: Vec::new(),
            objects_verified: 0,
            resume: Resume::NotApplicable,
            worlds_missing: Vec::new(),
            objects_failed: Vec::new(),
        },
        cold,
    ));
    let bytes = encode_reservation(&r);
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(!text.contains("sha256:"), "{text}");
    assert!(text.contains(&format!("\"{}\"]", cold.hex())), "{text}");
    assert!(text.contains(&format!("\"{}\"", stability.hex())), "{text}");
    assert_eq!(decode_reservation(&bytes).unwrap(), r);
    // The prefixed form is not a stored reservation's.
    let prefixed = text.replace(&cold.hex(), &cold.to_string());
    assert!(decode_reservation(prefixed.as_bytes()).is_err());
}

#[test]
fn a_stored_receipt_reads_back_only_as_its_reservations_own() {
    let sim = custos_testkit::streams::migration::check_clean_run().unwrap();
    let r = sim.dest.reservation.unwrap();
    let stored = r.receipt.clone().unwrap();
    let bytes = stored.encode();
    assert_eq!(decode_stored_receipt(&bytes, &r), Ok(stored));
    // The same valid receipt bytes beside a reservation that holds no
    // receipt, or another one, fail closed.
    let mut none = r.clone();
    none.receipt = None;
    let mut other = r.clone();
    if let Some(s) = other.receipt.as_mut() {
        s.receipt.completed_at += 1;
    }
    for held in [none, other] {
        assert_eq!(
            decode_stored_receipt(&bytes, &held).unwrap_err().reason(),
            "StoredEvidenceInvalid"
        );
    }
}
