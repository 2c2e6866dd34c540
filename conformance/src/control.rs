//! The control-catalog conformance suite: registration,
//! the four retirement cases, monotonic destruction, discovery of every
//! world ever registered, read-only descriptors, the advisory tick head,
//! archetype signatures and writer fences (resume acquires a
//! strictly higher epoch, non-resumable worlds fail closed unfenced, a
//! stale writer commits nothing), through the [`ControlCatalog`] port.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use crate::Place;
use custos_core::fence::{Holder, WorldFence};
use custos_core::schema::{Field, LogicalType, Schema, TimeUnit};
use custos_core::world::{
    check_mutable_resume, ControlCatalog, FencePurpose, Outcome, Request, Retirement, Signature,
    WorldIdentity, WorldRecord, WorldStatus, WriterMode,
};

/// A cleanup-only record for `world_id`, with a run and a parent.
pub fn record(world_id: &str, mode: WriterMode) -> WorldRecord {
    WorldRecord::active(
        WorldIdentity {
            world_id: world_id.into(),
            name: format!("name of {world_id}"),
            run_id: Some("run-1".into()),
            parent_world_id: Some("parent-0".into()),
        },
        mode,
    )
}

/// A signature over a schema with nested types.
pub fn signature(table_id: &str, components: &[&str]) -> Signature {
    let schema = Schema::new(vec![
        Field::new(
            "entity_id",
            LogicalType::Int {
                bits: 64,
                signed: true,
            },
            false,
        ),
        Field::new("name", LogicalType::Utf8 { large: true }, true),
        Field::new(
            "pos",
            LogicalType::Struct(vec![
                Field::new("x", LogicalType::Float { bits: 64 }, false),
                Field::new("y", LogicalType::Float { bits: 64 }, false),
            ]),
            true,
        ),
        Field::new(
            "tags",
            LogicalType::List {
                large: false,
                item: Box::new(Field::new("item", LogicalType::Utf8 { large: false }, true)),
            },
            true,
        ),
        Field::new(
            "at",
            LogicalType::Timestamp {
                unit: TimeUnit::Microsecond,
                tz: Some("UTC".into()),
            },
            true,
        ),
    ]);
    Signature::new(
        components.iter().map(|c| (*c).to_owned()).collect(),
        schema,
        table_id,
    )
}

fn sig_req(world_id: &str, s: Signature) -> Request {
    Request::RegisterSignature {
        world_id: world_id.into(),
        signature: s,
    }
}

fn tick(world_id: &str, t: u64) -> Request {
    Request::AdvanceTick {
        world_id: world_id.into(),
        tick: t,
    }
}

#[track_caller]
fn reason<T: std::fmt::Debug>(r: Result<T, custos_core::world::WorldError>) -> &'static str {
    r.expect_err("expected a refusal").reason()
}

// ------------------------------------------------------------------ cases

/// A fresh catalog discovers nothing, lists no signature, opens nothing.
pub fn fresh_catalog_is_empty<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert!(c.discover_worlds().unwrap().is_empty());
    assert!(c.list_signatures().unwrap().is_empty());
    assert_eq!(reason(c.open_world_readonly("w-1")), "NotFound");
}

/// A registered world is discovered and opens read-only as registered.
pub fn registered_world_is_discovered_and_opens<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    assert_eq!(
        c.register(&r).unwrap(),
        Outcome::Registered { created: true }
    );
    assert_eq!(c.discover_worlds().unwrap(), vec![r.clone()]);
    let info = c.open_world_readonly("w-1").unwrap();
    assert_eq!(info.record, r);
    assert!(info.signatures.is_empty());
}

/// An identical re-registration is a no-op.
pub fn identical_reregistration_is_a_noop<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::Resumable);
    c.register(&r).unwrap();
    c.apply(&tick("w-1", 4)).unwrap();
    assert_eq!(
        c.register(&r).unwrap(),
        Outcome::Registered { created: false }
    );
    let stored = c.open_world_readonly("w-1").unwrap().record;
    assert_eq!(stored.tick_head, 4, "a repeat does not reset the tick head");
    assert_eq!(c.discover_worlds().unwrap().len(), 1);
}

/// Any differing immutable part — name, run, parent, writer mode — is
/// `CatalogConflict`, and nothing changes.
pub fn differing_identity_conflicts_without_mutation<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    c.register(&r).unwrap();
    let mut variants = Vec::new();
    let mut v = r.clone();
    v.identity.name = "other".into();
    variants.push(v);
    let mut v = r.clone();
    v.identity.run_id = None;
    variants.push(v);
    let mut v = r.clone();
    v.identity.parent_world_id = Some("parent-9".into());
    variants.push(v);
    let mut v = r.clone();
    v.writer_mode = WriterMode::Resumable;
    variants.push(v);
    let mut v = r.clone();
    v.writer_mode = WriterMode::Unknown("v9".into());
    variants.push(v);
    for v in variants {
        assert_eq!(reason(c.register(&v)), "CatalogConflict", "{v:?}");
    }
    assert_eq!(c.discover_worlds().unwrap(), vec![r]);
}

/// Retiring an absent world writes a destroyed tombstone for the supplied
/// identity.
pub fn retire_absent_writes_a_tombstone<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    assert_eq!(
        c.retire(&r).unwrap(),
        Outcome::Retired(Retirement::Tombstoned)
    );
    assert_eq!(c.discover_worlds().unwrap(), vec![r.destroyed()]);
}

/// Retiring the exact active row destroys it.
pub fn retire_exact_active_destroys<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    c.register(&r).unwrap();
    assert_eq!(
        c.retire(&r).unwrap(),
        Outcome::Retired(Retirement::Destroyed)
    );
    assert_eq!(
        c.open_world_readonly("w-1").unwrap().record.status,
        WorldStatus::Destroyed
    );
}

/// Retiring the exact destroyed row is an idempotent success.
pub fn retire_exact_destroyed_is_idempotent<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    c.retire(&r).unwrap();
    for _ in 0..2 {
        assert_eq!(
            c.retire(&r).unwrap(),
            Outcome::Retired(Retirement::AlreadyDestroyed)
        );
    }
    assert_eq!(c.discover_worlds().unwrap(), vec![r.destroyed()]);
}

/// Retiring with a different identity conflicts without mutation, whether
/// the row is active or destroyed.
pub fn retire_with_other_identity_conflicts_without_mutation<C: ControlCatalog, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    c.register(&r).unwrap();
    let mut other = r.clone();
    other.identity.name = "impostor".into();
    assert_eq!(reason(c.retire(&other)), "CatalogConflict");
    assert_eq!(c.discover_worlds().unwrap(), vec![r.clone()]);
    let mut mode = r.clone();
    mode.writer_mode = WriterMode::Resumable;
    assert_eq!(reason(c.retire(&mode)), "CatalogConflict");
    c.retire(&r).unwrap();
    assert_eq!(reason(c.retire(&other)), "CatalogConflict");
    assert_eq!(c.discover_worlds().unwrap(), vec![r.destroyed()]);
}

/// A destroyed world (retired or tombstoned) refuses a registration: a
/// delayed registration never resurrects it.
pub fn destroyed_refuses_registration<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let a = record("w-a", WriterMode::CleanupOnly);
    let b = record("w-b", WriterMode::CleanupOnly);
    c.retire(&a).unwrap(); // tombstone
    c.register(&b).unwrap();
    c.retire(&b).unwrap(); // retired
    for r in [&a, &b] {
        assert_eq!(reason(c.register(r)), "CatalogConflict");
        assert_eq!(
            c.open_world_readonly(&r.identity.world_id)
                .unwrap()
                .record
                .status,
            WorldStatus::Destroyed
        );
    }
}

/// Destroyed worlds stay discoverable; discovery is sorted by world id.
pub fn discovery_includes_destroyed_worlds_in_id_order<C: ControlCatalog, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    for id in ["w-c", "w-a", "w-b"] {
        c.register(&record(id, WriterMode::Resumable)).unwrap();
    }
    c.retire(&record("w-b", WriterMode::Resumable)).unwrap();
    let found = c.discover_worlds().unwrap();
    let ids: Vec<_> = found.iter().map(|r| r.identity.world_id.as_str()).collect();
    assert_eq!(ids, ["w-a", "w-b", "w-c"]);
    assert_eq!(found[1].status, WorldStatus::Destroyed);
}

/// Registrations carry status active, retirements status destroyed.
pub fn request_status_is_checked<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::CleanupOnly);
    assert_eq!(
        reason(c.apply(&Request::Register {
            record: r.destroyed()
        })),
        "Invalid"
    );
    assert_eq!(
        reason(c.apply(&Request::Retire { record: r.clone() })),
        "Invalid"
    );
    let mut empty = r;
    empty.identity.world_id = String::new();
    assert_eq!(reason(c.register(&empty)), "Invalid");
    assert!(c.discover_worlds().unwrap().is_empty());
}

/// The tick head advances monotonically; lower ticks change nothing.
pub fn tick_head_is_monotonic<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    assert_eq!(
        c.apply(&tick("w-1", 7)).unwrap(),
        Outcome::TickAdvanced { head: 7 }
    );
    assert_eq!(
        c.apply(&tick("w-1", 3)).unwrap(),
        Outcome::TickAdvanced { head: 7 }
    );
    assert_eq!(c.open_world_readonly("w-1").unwrap().record.tick_head, 7);
}

/// A tick on an unknown world is `NotFound`; on a destroyed one it is
/// refused and changes nothing.
pub fn tick_on_unknown_or_destroyed_is_refused<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert_eq!(reason(c.apply(&tick("w-1", 1))), "NotFound");
    let r = record("w-1", WriterMode::Resumable);
    c.register(&r).unwrap();
    c.retire(&r).unwrap();
    assert_eq!(reason(c.apply(&tick("w-1", 1))), "CatalogConflict");
    assert_eq!(c.open_world_readonly("w-1").unwrap().record.tick_head, 0);
}

/// Retirement keeps the higher of the stored and supplied tick heads.
pub fn retirement_keeps_the_tick_head<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let r = record("w-1", WriterMode::Resumable);
    c.register(&r).unwrap();
    c.apply(&tick("w-1", 9)).unwrap();
    c.retire(&r).unwrap();
    let stored = c.open_world_readonly("w-1").unwrap().record;
    assert_eq!(stored.tick_head, 9);
    assert_eq!(stored.status, WorldStatus::Destroyed);
}

/// Signatures round-trip (nested schema included), open with their world
/// and are listed storage-wide by `(world, table)`.
pub fn signatures_round_trip_and_list<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    c.register(&record("w-2", WriterMode::Resumable)).unwrap();
    let s1 = signature("t-b", &["Velocity", "Position"]);
    let s2 = signature("t-a", &["Score"]);
    let s3 = signature("t-c", &["Score"]);
    assert_eq!(
        c.apply(&sig_req("w-1", s1.clone())).unwrap(),
        Outcome::SignatureRegistered { created: true }
    );
    c.apply(&sig_req("w-1", s2.clone())).unwrap();
    c.apply(&sig_req("w-2", s3.clone())).unwrap();
    assert_eq!(
        c.open_world_readonly("w-1").unwrap().signatures,
        vec![s2.clone(), s1.clone()]
    );
    let listed: Vec<_> = c
        .list_signatures()
        .unwrap()
        .into_iter()
        .map(|r| (r.world_id, r.signature))
        .collect();
    assert_eq!(
        listed,
        vec![("w-1".into(), s2), ("w-1".into(), s1), ("w-2".into(), s3)]
    );
}

/// A world with several signatures whose table-id order differs from their
/// component order keeps every one exactly once as more are added.
pub fn many_signatures_per_world<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    let sa = signature("t-a", &["Zeta"]);
    let sb = signature("t-b", &["Alpha"]);
    let sc = signature("t-c", &["Mu"]);
    for s in [&sa, &sb, &sc] {
        assert_eq!(
            c.apply(&sig_req("w-1", s.clone())).unwrap(),
            Outcome::SignatureRegistered { created: true }
        );
    }
    // Re-registering each is a no-op.
    for s in [&sa, &sb, &sc] {
        assert_eq!(
            c.apply(&sig_req("w-1", s.clone())).unwrap(),
            Outcome::SignatureRegistered { created: false }
        );
    }
    assert_eq!(
        c.open_world_readonly("w-1").unwrap().signatures,
        vec![sa, sb, sc]
    );
}

/// A signature is immutable: an identical one is a no-op, a different
/// descriptor for the same table is `CatalogConflict`.
pub fn signatures_are_immutable<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    let s = signature("t-1", &["Score"]);
    c.apply(&sig_req("w-1", s.clone())).unwrap();
    assert_eq!(
        c.apply(&sig_req("w-1", s.clone())).unwrap(),
        Outcome::SignatureRegistered { created: false }
    );
    let other = signature("t-1", &["Score", "Bonus"]);
    assert_eq!(reason(c.apply(&sig_req("w-1", other))), "CatalogConflict");
    assert_eq!(c.open_world_readonly("w-1").unwrap().signatures, vec![s]);
}

/// A signature needs a recorded, active world and a true fingerprint.
pub fn signature_preconditions<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    let s = signature("t-1", &["Score"]);
    assert_eq!(reason(c.apply(&sig_req("w-1", s.clone()))), "NotFound");
    let r = record("w-1", WriterMode::Resumable);
    c.register(&r).unwrap();
    let mut forged = s.clone();
    forged.fingerprint = "0".repeat(64);
    assert_eq!(reason(c.apply(&sig_req("w-1", forged))), "Invalid");
    c.retire(&r).unwrap();
    assert_eq!(reason(c.apply(&sig_req("w-1", s))), "CatalogConflict");
    assert!(c.list_signatures().unwrap().is_empty());
}

/// Unknown writer modes are kept exactly as read; mutable resume fails
/// closed for them and for cleanup-only worlds, which stay discoverable.
pub fn writer_modes_round_trip_and_resume_fails_closed<C: ControlCatalog, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    let modes = [
        ("w-a", WriterMode::Resumable, true),
        ("w-b", WriterMode::CleanupOnly, false),
        ("w-c", WriterMode::Unknown("writer-v9".into()), false),
    ];
    for (id, mode, _) in &modes {
        c.register(&record(id, mode.clone())).unwrap();
    }
    for (id, mode, resumable) in modes {
        let stored = c.open_world_readonly(id).unwrap().record;
        assert_eq!(stored.writer_mode, mode);
        assert_eq!(check_mutable_resume(&stored).is_ok(), resumable, "{id}");
    }
    assert_eq!(c.discover_worlds().unwrap().len(), 3);
}

#[track_caller]
fn holder(name: &str) -> Holder {
    Holder::new(name).unwrap()
}

#[track_caller]
fn fence_of<C: ControlCatalog>(c: &C, world_id: &str) -> WorldFence {
    c.open_world_readonly(world_id).unwrap().fence
}

#[track_caller]
fn head_of<C: ControlCatalog>(c: &C, world_id: &str) -> u64 {
    c.open_world_readonly(world_id).unwrap().record.tick_head
}

/// A resume acquires an epoch strictly above every earlier one and stales
/// the previous writer; the fence (issued epoch, holder) is stored; a tick
/// commits only at the current epoch.
pub fn resume_acquires_strictly_higher_epochs<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    assert_eq!(fence_of(&c, "w-1"), WorldFence::default());
    let first = c
        .acquire_fence("w-1", &holder("writer-a"), FencePurpose::Resume)
        .unwrap();
    assert_eq!(first, (1, None));
    let second = c
        .acquire_fence("w-1", &holder("writer-b"), FencePurpose::Resume)
        .unwrap();
    assert_eq!(second, (2, Some(1)));
    assert_eq!(
        fence_of(&c, "w-1"),
        WorldFence {
            issued: 2,
            floor: 0,
            holder: Some(holder("writer-b")),
        }
    );
    assert_eq!(reason(c.commit_tick("w-1", 1, 3)), "StaleFence");
    assert_eq!(head_of(&c, "w-1"), 0);
    assert_eq!(c.commit_tick("w-1", 2, 3).unwrap(), 3);
    assert_eq!(head_of(&c, "w-1"), 3);
}

/// A resume of a cleanup-only, unknown-mode or destroyed world fails
/// closed and fences nothing; a migration fences the active cleanup-only
/// world but not a destroyed one; an unrecorded world is `NotFound`.
pub fn resume_of_a_non_resumable_world_fences_nothing<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-cleanup", WriterMode::CleanupOnly))
        .unwrap();
    c.register(&record("w-future", WriterMode::Unknown("writer-v9".into())))
        .unwrap();
    let gone = record("w-gone", WriterMode::Resumable);
    c.register(&gone).unwrap();
    c.retire(&gone).unwrap();
    for (id, why) in [
        ("w-cleanup", "ResumeRefused"),
        ("w-future", "ResumeRefused"),
        ("w-gone", "CatalogConflict"),
    ] {
        let r = c.acquire_fence(id, &holder("writer"), FencePurpose::Resume);
        assert_eq!(reason(r), why, "{id}");
        assert_eq!(fence_of(&c, id), WorldFence::default(), "{id} was fenced");
    }
    assert_eq!(
        c.acquire_fence("w-cleanup", &holder("migration"), FencePurpose::Migration)
            .unwrap(),
        (1, None)
    );
    let r = c.acquire_fence("w-gone", &holder("migration"), FencePurpose::Migration);
    assert_eq!(reason(r), "CatalogConflict");
    assert_eq!(fence_of(&c, "w-gone"), WorldFence::default());
    let r = c.acquire_fence("w-none", &holder("writer"), FencePurpose::Resume);
    assert_eq!(reason(r), "NotFound");
    assert!(c.open_world_readonly("w-none").is_err());
}

/// A writer staled by a later fence (a migration planning) cannot commit a
/// tick, nor move the head unfenced, nor commit at epoch 0: each is
/// `StaleFence` and changes neither the head nor the fence.
pub fn a_stale_writer_commits_nothing<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    let (writer, _) = c
        .acquire_fence("w-1", &holder("writer"), FencePurpose::Resume)
        .unwrap();
    assert_eq!(c.commit_tick("w-1", writer, 5).unwrap(), 5);
    let (migration, staled) = c
        .acquire_fence("w-1", &holder("migration"), FencePurpose::Migration)
        .unwrap();
    assert_eq!(staled, Some(writer));
    assert!(migration > writer);
    let fence = fence_of(&c, "w-1");
    assert_eq!(reason(c.commit_tick("w-1", writer, 6)), "StaleFence");
    assert_eq!(reason(c.apply(&tick("w-1", 7))), "StaleFence");
    assert_eq!(reason(c.commit_tick("w-1", 0, 8)), "StaleFence");
    assert_eq!(reason(c.commit_tick("w-1", migration + 1, 9)), "StaleFence");
    assert_eq!(head_of(&c, "w-1"), 5);
    assert_eq!(fence_of(&c, "w-1"), fence);
    // The current holder's tick commits; a lower tick leaves the head.
    assert_eq!(c.commit_tick("w-1", migration, 6).unwrap(), 6);
    assert_eq!(c.commit_tick("w-1", migration, 2).unwrap(), 6);
}

/// Fences are per world: each world's epochs start at 1, and one world's
/// epoch admits nothing on another.
pub fn fences_are_per_world<C: ControlCatalog, F: Fn() -> C>(factory: F) {
    let c = factory();
    for id in ["w-a", "w-b"] {
        c.register(&record(id, WriterMode::Resumable)).unwrap();
    }
    for _ in 0..3 {
        c.acquire_fence("w-a", &holder("writer"), FencePurpose::Resume)
            .unwrap();
    }
    assert_eq!(fence_of(&c, "w-b"), WorldFence::default());
    assert_eq!(reason(c.commit_tick("w-b", 3, 1)), "StaleFence");
    assert_eq!(
        c.acquire_fence("w-b", &holder("writer"), FencePurpose::Resume)
            .unwrap(),
        (1, None)
    );
    assert_eq!(reason(c.commit_tick("w-b", 3, 1)), "StaleFence");
    assert_eq!(c.commit_tick("w-a", 3, 1).unwrap(), 1);
    // An unfenced world still takes the unfenced advisory tick.
    c.register(&record("w-c", WriterMode::Resumable)).unwrap();
    c.apply(&tick("w-c", 4)).unwrap();
    assert_eq!(head_of(&c, "w-c"), 4);
}

/// Discovery is in byte order of the world id (not registration order, its
/// reverse, a collation or a numeric-aware order: [`crate::ORDER_PROBE`]).
pub fn discovery_is_in_byte_order_not_collation_or_registration<C: ControlCatalog, F: Fn() -> C>(
    factory: F,
) {
    let c = factory();
    for id in crate::ORDER_PROBE {
        c.register(&record(&format!("w{id}"), WriterMode::Resumable))
            .unwrap();
    }
    let ids: Vec<String> = c
        .discover_worlds()
        .unwrap()
        .into_iter()
        .map(|r| r.identity.world_id)
        .collect();
    let want: Vec<String> = crate::ORDER_PROBE_BYTES
        .iter()
        .map(|id| format!("w{id}"))
        .collect();
    assert_eq!(ids, want);
}

// ------------------------------------------------------------ reopen cases

/// Everything the port shows of the worlds the reopen cases write.
type Seen = (
    Vec<WorldRecord>,
    Vec<custos_core::world::SignatureRecord>,
    Vec<String>,
);

fn seen<C: ControlCatalog>(c: &C) -> Seen {
    let worlds = c.discover_worlds().unwrap();
    let infos = worlds
        .iter()
        .map(|w| format!("{:?}", c.open_world_readonly(&w.identity.world_id).unwrap()))
        .collect();
    (worlds, c.list_signatures().unwrap(), infos)
}

/// Acknowledged changes over every kind of row: worlds of each writer mode,
/// signatures, a fence acquired twice, committed ticks, a destroyed world
/// and a tombstone, and last of all one more tick (the write a store that
/// loses its tail would lose). Returns the last fence's epoch.
fn acknowledged_history<C: ControlCatalog>(c: &C) -> u64 {
    c.register(&record("w-1", WriterMode::Resumable)).unwrap();
    c.register(&record("w-2", WriterMode::CleanupOnly)).unwrap();
    c.apply(&sig_req("w-1", signature("t-1", &["pos"])))
        .unwrap();
    c.apply(&sig_req("w-1", signature("t-2", &["name", "tags"])))
        .unwrap();
    c.acquire_fence("w-1", &holder("writer-a"), FencePurpose::Resume)
        .unwrap();
    let (epoch, _) = c
        .acquire_fence("w-1", &holder("writer-b"), FencePurpose::Resume)
        .unwrap();
    c.commit_tick("w-1", epoch, 3).unwrap();
    c.retire(&record("w-2", WriterMode::CleanupOnly)).unwrap();
    c.retire(&record("w-3", WriterMode::CleanupOnly)).unwrap();
    c.commit_tick("w-1", epoch, 7).unwrap();
    epoch
}

/// Everything acknowledged survives a drop and a reopen, the last tick
/// included, and a fence acquired after the reopen is above every epoch
/// issued before it (the old writer stays stale).
pub fn acknowledged_changes_survive_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: ControlCatalog,
{
    let place = f();
    let (c, epoch, before) = crate::open_with_history(&place, acknowledged_history, seen);
    assert_eq!(head_of(&c, "w-1"), 7);
    drop(c);
    let c = place.open();
    assert_eq!(seen(&c), before, "the reopened catalog differs");
    let (next, staled) = c
        .acquire_fence("w-1", &holder("writer-c"), FencePurpose::Resume)
        .unwrap();
    assert!(next > epoch, "epoch {next} issued again after a reopen");
    assert_eq!(staled, Some(epoch));
    assert_eq!(reason(c.commit_tick("w-1", epoch, 8)), "StaleFence");
}

/// A refusal leaves the stored state unchanged across a reopen: a
/// conflicting registration, a stale writer's tick, a changed signature and a registration of a destroyed world change
/// nothing a later handle sees.
pub fn a_refusal_leaves_the_store_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: ControlCatalog,
{
    let place = f();
    let (c, epoch, before) = crate::open_with_history(&place, acknowledged_history, seen);
    let mut other = record("w-1", WriterMode::Resumable);
    other.identity.name = "another name".into();
    assert!(c.register(&other).is_err());
    assert!(c.commit_tick("w-1", epoch - 1, 9).is_err());
    assert!(c
        .apply(&sig_req("w-1", signature("t-1", &["name"])))
        .is_err());
    assert!(c.register(&record("w-2", WriterMode::CleanupOnly)).is_err());
    drop(c);
    let c = place.open();
    assert_eq!(seen(&c), before, "a refusal changed the stored state");
}

/// Every control-catalog case, by name, in suite order.
pub const CONTROL_CATALOG_CASES: &[&str] = &crate::__with_control_catalog_cases!(__emit_names!());

/// A control-catalog case runnable at run time, for a backend type `C`.
pub type ControlCatalogCase<C> = (&'static str, fn(&dyn Fn() -> C));

/// Every case as `(name, function)`, for runners that report per case
/// (run each under `std::panic::catch_unwind`).
pub fn control_catalog_cases<C: ControlCatalog>() -> Vec<ControlCatalogCase<C>> {
    crate::__with_control_catalog_cases!(__emit_table!(control, C))
}

/// Every reopen case, by name, in suite order.
pub const CONTROL_CATALOG_REOPEN_CASES: &[&str] =
    &crate::__with_control_catalog_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, function)`; each takes a factory of places.
pub fn control_catalog_reopen_cases<P: Place>() -> Vec<ControlCatalogCase<P>>
where
    P::Store: ControlCatalog,
{
    crate::__with_control_catalog_reopen_cases!(__emit_table!(control, P))
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every
/// control-catalog reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_control_catalog_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            acknowledged_changes_survive_a_reopen,
            a_refusal_leaves_the_store_unchanged_across_a_reopen,
        }
    };
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per control-catalog
/// conformance case, each calling the case with `$factory` (evaluated once
/// per test; every call must give a fresh, empty catalog), and one per
/// reopen case, each calling it with `$places` (`Fn() -> P`,
/// `P: `[`crate::Place`] opening a catalog: a fresh store per call, opened
/// again by every [`crate::Place::open`]).
#[macro_export]
macro_rules! control_catalog_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_control_catalog_cases,
            __with_control_catalog_reopen_cases,
            control,
            $name,
            $factory,
            $places
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_control_catalog_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            fresh_catalog_is_empty,
            registered_world_is_discovered_and_opens,
            identical_reregistration_is_a_noop,
            differing_identity_conflicts_without_mutation,
            retire_absent_writes_a_tombstone,
            retire_exact_active_destroys,
            retire_exact_destroyed_is_idempotent,
            retire_with_other_identity_conflicts_without_mutation,
            destroyed_refuses_registration,
            discovery_includes_destroyed_worlds_in_id_order,
            request_status_is_checked,
            tick_head_is_monotonic,
            tick_on_unknown_or_destroyed_is_refused,
            retirement_keeps_the_tick_head,
            signatures_round_trip_and_list,
            many_signatures_per_world,
            signatures_are_immutable,
            signature_preconditions,
            writer_modes_round_trip_and_resume_fails_closed,
            resume_acquires_strictly_higher_epochs,
            resume_of_a_non_resumable_world_fences_nothing,
            a_stale_writer_commits_nothing,
            fences_are_per_world,
            discovery_is_in_byte_order_not_collation_or_registration,
        }
    };
}
