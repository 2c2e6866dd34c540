//! The administrative control contract's conformance suite,
//! through [`ControlAdmin`] beside [`ControlCatalog`]: an exact export that
//! never includes migration administration, compare-and-swap storage of
//! the destination's reservation, staging invisible to discovery and
//! idempotent, activation that imports exact records and fence floors (never
//! a holder) only into an empty destination, and a completed receipt read
//! back byte-identical.
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies. A
//! case that needs a source and a destination calls the factory twice.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use custos_core::fence::{Holder, WorldFence};
use custos_core::migration::control::{AdminEffect, AdminError, ControlAdmin, ControlSnapshot};
use custos_core::migration::{
    import_floors, Destination, Name, Reservation, StagedControl, Status, TableState, WorldPlan,
};
use custos_core::world::{ControlCatalog, FencePurpose, WorldRecord, WriterMode};
use custos_testkit::simulate::{Driver, Fault, Fixture, Machine, Sim, SimOp};

use crate::control::{record, signature};
use crate::Place;

#[track_caller]
fn reason<T: std::fmt::Debug>(r: Result<T, AdminError>) -> &'static str {
    r.expect_err("expected a refusal").reason()
}

#[track_caller]
fn holder(name: &str) -> Holder {
    Holder::new(name).unwrap()
}

/// Fills a source catalog: an active resumable world fenced by a migration
/// (epoch 2 after a writer's 1) with two signatures and a tick head, an
/// active cleanup-only world, and a destroyed world.
#[track_caller]
pub fn populate<C: ControlCatalog>(c: &C) {
    c.register(&record("w-live", WriterMode::Resumable))
        .unwrap();
    c.acquire_fence("w-live", &holder("writer"), FencePurpose::Resume)
        .unwrap();
    c.commit_tick("w-live", 1, 12).unwrap();
    c.acquire_fence("w-live", &holder("migration"), FencePurpose::Migration)
        .unwrap();
    for (table, comps) in [("t-pos", &["Pos"][..]), ("t-vel", &["Pos", "Vel"][..])] {
        c.apply(&custos_core::world::Request::RegisterSignature {
            world_id: "w-live".into(),
            signature: signature(table, comps),
        })
        .unwrap();
    }
    c.register(&record("w-cleanup", WriterMode::CleanupOnly))
        .unwrap();
    let gone = record("w-gone", WriterMode::Resumable);
    c.register(&gone).unwrap();
    c.retire(&gone).unwrap();
}

/// A reservation of the shared fixture's plan rebound to `snapshot`: its
/// worlds (each at its exported epoch, resumable when it is), its digest,
/// and, when `staged`, the staged control the machine would record.
#[track_caller]
pub fn reservation_for(snapshot: &ControlSnapshot, status: Status, staged: bool) -> Destination {
    let fx = Fixture::new().unwrap();
    let mut plan = fx.plan(0, 1, 0);
    plan.control.snapshot_digest = snapshot.digest();
    plan.control.records = snapshot.records();
    plan.worlds = snapshot
        .worlds
        .iter()
        .map(|w| WorldPlan {
            world: Name::new(w.identity.world_id.as_str()).unwrap(),
            source_epoch: snapshot
                .fences
                .iter()
                .find(|f| f.world_id == w.identity.world_id)
                .map_or(0, |f| f.issued),
            manifest_writer_epochs: Vec::new(),
            resumable: w.writer_mode == WriterMode::Resumable,
        })
        .collect();
    let control = staged.then(|| StagedControl {
        snapshot_digest: snapshot.digest(),
        floors: import_floors(&plan),
    });
    Destination {
        reservation: Some(Reservation {
            plan_digest: plan.digest(),
            reserved_at: 1,
            status,
            objects: vec![true; plan.artifacts.objects.len()],
            tables: vec![TableState::Pending; plan.tables.len()],
            source_stability: None,
            control,
            cold: None,
            receipt: None,
            plan,
        }),
    }
}

/// The fixture migration driven to completion by the core machine: a
/// destination holding a sealed receipt.
#[track_caller]
pub fn completed() -> Destination {
    let fx = Fixture::new().unwrap();
    let mut sim = Sim::new(&fx);
    for _ in 0..64 {
        if !matches!(sim.drivers[0], Driver::Running(_)) {
            break;
        }
        sim.apply(&fx, &Machine::REAL, SimOp::Step(0, Fault::None));
    }
    assert!(
        sim.dest
            .reservation
            .as_ref()
            .is_some_and(|r| r.receipt.is_some()),
        "the fixture run did not complete"
    );
    sim.dest
}

/// Commits the [`completed`] administration into the empty `c`, asserts
/// its receipt is stored, and answers it.
#[track_caller]
pub fn commit_completed<C: ControlAdmin>(c: &C) -> Destination {
    let done = completed();
    c.commit_destination(&Destination::default(), &done, AdminEffect::None)
        .unwrap();
    assert!(c.stored_receipt().unwrap().is_some());
    done
}

/// Asserts that `c`, whose stored administration `done` was tampered with
/// (`what` says how), refuses it typed: loading it, reading its receipt
/// and committing over it each answer `StoredEvidenceInvalid`.
#[track_caller]
pub fn assert_evidence_refused<C: ControlAdmin>(c: &C, done: &Destination, what: &str) {
    let e = c.load_destination().unwrap_err();
    assert_eq!(e.reason(), "StoredEvidenceInvalid", "{what}: {e}");
    assert_eq!(
        c.stored_receipt().unwrap_err().reason(),
        "StoredEvidenceInvalid",
        "{what}"
    );
    let e = c
        .commit_destination(done, done, AdminEffect::None)
        .unwrap_err();
    assert_eq!(e.reason(), "StoredEvidenceInvalid", "{what}: {e}");
}

fn staged_floors(d: &Destination) -> Vec<custos_core::migration::WorldFloor> {
    d.reservation
        .as_ref()
        .and_then(|r| r.control.clone())
        .map(|c| c.floors)
        .unwrap_or_default()
}

/// A [`populate`]d source, its export, and a new destination (each store
/// from `factory`, the source first).
fn populated_export<C: ControlCatalog + ControlAdmin>(
    factory: impl Fn() -> C,
) -> (C, ControlSnapshot, C) {
    let source = factory();
    populate(&source);
    let s = source.export_snapshot().unwrap();
    (source, s, factory())
}

/// Reserves and stages `snapshot` at `c` through the port: the reserved
/// and the staged administration.
#[track_caller]
fn reserve_and_stage<C: ControlAdmin>(
    c: &C,
    snapshot: &ControlSnapshot,
) -> (Destination, Destination) {
    let reserved = reservation_for(snapshot, Status::Reserved, false);
    c.commit_destination(&Destination::default(), &reserved, AdminEffect::None)
        .unwrap();
    let staged = reservation_for(snapshot, Status::Reserved, true);
    let floors = staged_floors(&staged);
    c.commit_destination(
        &reserved,
        &staged,
        AdminEffect::Stage {
            snapshot,
            floors: &floors,
        },
    )
    .unwrap();
    (reserved, staged)
}

/// Reserves, stages and activates `snapshot` at `c` through the port.
#[track_caller]
fn stage_and_activate<C: ControlAdmin>(c: &C, snapshot: &ControlSnapshot) -> Destination {
    let (_, staged) = reserve_and_stage(c, snapshot);
    let active = reservation_for(snapshot, Status::Activated, true);
    c.commit_destination(&staged, &active, AdminEffect::Activate)
        .unwrap();
    active
}

// ------------------------------------------------------------------ cases

/// The export holds every record exactly — destroyed worlds, tick heads,
/// signatures, fence epochs — and no holder; a reservation and a staged
/// bundle stored beside it never appear in a later export.
pub fn export_is_exact_and_excludes_administration<
    C: ControlCatalog + ControlAdmin,
    F: Fn() -> C,
>(
    factory: F,
) {
    let c = factory();
    assert_eq!(c.export_snapshot().unwrap().records(), 0);
    populate(&c);
    let s = c.export_snapshot().unwrap();
    assert_eq!(s.worlds, c.discover_worlds().unwrap());
    assert_eq!(s.signatures, c.list_signatures().unwrap());
    assert_eq!(s.fences.len(), 1);
    assert_eq!(
        (s.fences[0].world_id.as_str(), s.fences[0].issued),
        ("w-live", 2)
    );
    assert!(!String::from_utf8(s.canonical())
        .unwrap()
        .contains("\"migration\""));
    assert_eq!(ControlSnapshot::decode(&s.canonical()).unwrap(), s);
    reserve_and_stage(&c, &s);
    assert_eq!(
        c.export_snapshot().unwrap(),
        s,
        "administration leaked into the export"
    );
    assert_eq!(c.export_snapshot().unwrap().digest(), s.digest());
}

/// The stored administration changes only from the state a decision was
/// made on: a commit from any other expected state is `AdminMoved` and
/// stores nothing.
pub fn commits_are_compare_and_swap<C: ControlAdmin, F: Fn() -> C>(factory: F) {
    let c = factory();
    assert_eq!(c.load_destination().unwrap(), Destination::default());
    let s = ControlSnapshot::from_slots(std::iter::empty());
    let reserved = reservation_for(&s, Status::Reserved, false);
    c.commit_destination(&Destination::default(), &reserved, AdminEffect::None)
        .unwrap();
    assert_eq!(c.load_destination().unwrap(), reserved);
    let other = reservation_for(&s, Status::Activated, false);
    let r = c.commit_destination(&Destination::default(), &other, AdminEffect::None);
    assert_eq!(reason(r), "AdminMoved");
    assert_eq!(c.load_destination().unwrap(), reserved);
    assert_eq!(c.stored_receipt().unwrap(), None);
}

/// The source's departure record (one live home per World): empty on a
/// fresh catalog, replaced only from the state a decision was made on (a
/// racing planner's commit is `AdminMoved` and stores nothing), read back
/// exactly, and never part of the control export.
pub fn departures_are_compare_and_swap_and_never_exported<
    C: ControlCatalog + ControlAdmin,
    F: Fn() -> C,
>(
    factory: F,
) {
    use custos_core::migration::departure::{self, Departures};
    let c = factory();
    populate(&c);
    let before = c.export_snapshot().unwrap();
    assert_eq!(c.load_departures().unwrap(), Departures::default());
    let fx = Fixture::new().unwrap();
    let empty = Departures::default();
    let first = departure::depart(&empty, &fx.migration, &fx.destination, false)
        .unwrap()
        .unwrap();
    let racer = departure::depart(&empty, &fx.other_migration, &fx.source, false)
        .unwrap()
        .unwrap();
    c.commit_departures(&empty, &first).unwrap();
    assert_eq!(c.load_departures().unwrap(), first);
    // The racer decided on the empty record: its commit must not land.
    let r = c.commit_departures(&empty, &racer);
    assert_eq!(
        r.as_ref().map_err(AdminError::reason).err(),
        Some("AdminMoved"),
        "{r:?}"
    );
    assert_eq!(c.load_departures().unwrap(), first, "a lost race stored");
    // Re-deciding on what is stored refuses the second home.
    assert!(departure::depart(&first, &fx.other_migration, &fx.source, false).is_err());
    let moved = departure::arrived(&first, &fx.migration, &fx.destination).unwrap();
    c.commit_departures(&first, &moved).unwrap();
    assert_eq!(c.load_departures().unwrap(), moved);
    assert_eq!(
        c.export_snapshot().unwrap(),
        before,
        "the departure record leaked into the export"
    );
}

/// Abandon before activation: the reservation is stored abandoned with
/// nothing staged (activation then finds no bundle), the abandoned id never
/// resumes, an activated reservation is never abandoned, and another
/// migration's reservation replaces the abandoned one — one reservation
/// stored, as before.
pub fn an_abandoned_reservation_stages_nothing_and_is_replaced<
    C: ControlCatalog + ControlAdmin,
    F: Fn() -> C,
>(
    factory: F,
) {
    let (_source, s, c) = populated_export(&factory);
    let (reserved, staged) = reserve_and_stage(&c, &s);
    let fx = Fixture::new().unwrap();
    let gone = custos_core::migration::abandon(&staged, &fx.migration)
        .unwrap()
        .unwrap();
    c.commit_destination(&staged, &gone, AdminEffect::None)
        .unwrap();
    assert_eq!(c.load_destination().unwrap(), gone);
    assert_eq!(
        custos_core::migration::abandon(&gone, &fx.migration),
        Ok(None)
    );
    // Nothing staged survives: resuming towards activation is refused.
    for back in [&reserved, &staged] {
        let r = c.commit_destination(&gone, back, AdminEffect::None);
        assert_eq!(reason(r), "Invalid", "an abandoned id resumed");
    }
    assert!(c.discover_worlds().unwrap().is_empty());
    // Another migration takes the destination in its place.
    let mut theirs = reservation_for(&s, Status::Reserved, false);
    if let Some(r) = theirs.reservation.as_mut() {
        r.plan.migration_id = fx.other_migration.clone();
        r.plan_digest = r.plan.digest();
    }
    c.commit_destination(&gone, &theirs, AdminEffect::None)
        .unwrap();
    assert_eq!(c.load_destination().unwrap(), theirs);
    let staged_theirs = {
        let mut d = theirs.clone();
        if let Some(r) = d.reservation.as_mut() {
            r.control = staged.reservation.as_ref().and_then(|o| o.control.clone());
        }
        d
    };
    let floors = staged_floors(&staged_theirs);
    c.commit_destination(
        &theirs,
        &staged_theirs,
        AdminEffect::Stage {
            snapshot: &s,
            floors: &floors,
        },
    )
    .unwrap();
    // An activated reservation is never abandoned (nor stored abandoned).
    let d = factory();
    let active = stage_and_activate(&d, &s);
    assert!(custos_core::migration::abandon(&active, &fx.migration).is_err());
    let mut forced = active.clone();
    if let Some(r) = forced.reservation.as_mut() {
        r.status = Status::Abandoned;
    }
    let r = d.commit_destination(&active, &forced, AdminEffect::None);
    assert_eq!(reason(r), "Invalid");
    assert_eq!(d.load_destination().unwrap(), active);
}

/// A staged bundle is invisible to discovery and to every read of the live
/// catalog; staging it again is a no-op; another bundle is
/// `StagingConflict` and changes nothing.
pub fn staging_is_invisible_idempotent_and_exclusive<
    C: ControlCatalog + ControlAdmin,
    F: Fn() -> C,
>(
    factory: F,
) {
    let (_source, s, c) = populated_export(&factory);
    let (_, staged) = reserve_and_stage(&c, &s);
    let floors = staged_floors(&staged);
    let stage = AdminEffect::Stage {
        snapshot: &s,
        floors: &floors,
    };
    assert!(
        c.discover_worlds().unwrap().is_empty(),
        "staged worlds are discoverable"
    );
    assert!(c.list_signatures().unwrap().is_empty());
    assert_eq!(
        c.open_world_readonly("w-live").unwrap_err().reason(),
        "NotFound"
    );
    c.commit_destination(&staged, &staged, stage).unwrap();
    // Another bundle for the same migration conflicts.
    let mut other = s.clone();
    other.worlds[0].tick_head += 1;
    let other_res = reservation_for(&other, Status::Reserved, true);
    let other_floors = staged_floors(&other_res);
    let r = c.commit_destination(
        &staged,
        &other_res,
        AdminEffect::Stage {
            snapshot: &other,
            floors: &other_floors,
        },
    );
    assert_eq!(reason(r), "StagingConflict");
    assert_eq!(c.load_destination().unwrap(), staged);
}

/// Activation imports the exact records (a destroyed world stays
/// destroyed, tick heads as they stood), the signatures, and a fence with
/// nothing issued, no holder and a floor at least the source's epoch; the
/// first resume acquires strictly above it; a cleanup-only world still
/// refuses to resume.
pub fn activation_imports_exact_records_and_floors<
    C: ControlCatalog + ControlAdmin,
    F: Fn() -> C,
>(
    factory: F,
) {
    let (source, s, c) = populated_export(&factory);
    let active = stage_and_activate(&c, &s);
    assert_eq!(c.load_destination().unwrap(), active);
    assert_eq!(
        c.discover_worlds().unwrap(),
        source.discover_worlds().unwrap()
    );
    assert_eq!(
        c.list_signatures().unwrap(),
        source.list_signatures().unwrap()
    );
    let gone: Vec<WorldRecord> = c
        .discover_worlds()
        .unwrap()
        .into_iter()
        .filter(|w| w.identity.world_id == "w-gone")
        .collect();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].status, custos_core::world::WorldStatus::Destroyed);
    let fence = c.open_world_readonly("w-live").unwrap().fence;
    assert_eq!(
        fence,
        WorldFence {
            issued: 0,
            floor: 2,
            holder: None
        },
        "the import must carry the floor and never the holder"
    );
    assert_eq!(
        c.open_world_readonly("w-live").unwrap().record.tick_head,
        12
    );
    // The source's writer and migration epochs are stale here.
    for stale in [1, 2] {
        assert_eq!(
            c.commit_tick("w-live", stale, 13).unwrap_err().reason(),
            "StaleFence"
        );
    }
    let (epoch, staled) = c
        .acquire_fence("w-live", &holder("cold-verifier"), FencePurpose::Resume)
        .unwrap();
    assert_eq!((epoch, staled), (3, None));
    assert_eq!(c.commit_tick("w-live", 3, 13).unwrap(), 13);
    let r = c.acquire_fence("w-cleanup", &holder("writer"), FencePurpose::Resume);
    assert_eq!(r.unwrap_err().reason(), "ResumeRefused");
    // A later export of the destination has the records and the floors.
    let again = c.export_snapshot().unwrap();
    assert_eq!(again.worlds.len(), s.worlds.len());
    assert_eq!(again.signatures, s.signatures);
}

/// Activation into a destination with live control records is
/// `DestinationPopulated` and changes neither the live catalog nor the
/// stored administration; activation with nothing staged is `NotStaged`.
pub fn activation_refuses_a_populated_destination<
    C: ControlCatalog + ControlAdmin,
    F: Fn() -> C,
>(
    factory: F,
) {
    let (_source, s, c) = populated_export(&factory);
    let reserved = reservation_for(&s, Status::Reserved, false);
    c.commit_destination(&Destination::default(), &reserved, AdminEffect::None)
        .unwrap();
    let active = reservation_for(&s, Status::Activated, true);
    let r = c.commit_destination(&reserved, &active, AdminEffect::Activate);
    assert_eq!(reason(r), "NotStaged");
    let staged = reservation_for(&s, Status::Reserved, true);
    let floors = staged_floors(&staged);
    let stage = AdminEffect::Stage {
        snapshot: &s,
        floors: &floors,
    };
    c.commit_destination(&reserved, &staged, stage).unwrap();
    c.register(&record("w-intruder", WriterMode::Resumable))
        .unwrap();
    let before = c.discover_worlds().unwrap();
    let r = c.commit_destination(&staged, &active, AdminEffect::Activate);
    assert_eq!(reason(r), "DestinationPopulated");
    assert_eq!(c.discover_worlds().unwrap(), before);
    assert_eq!(c.load_destination().unwrap(), staged);
}

/// Completion stores the sealed receipt with the reservation: it is read
/// back byte-identical (the canonical encoding) on every later load, and a
/// commit from the pre-completion state is `AdminMoved`.
pub fn a_completed_receipt_reads_back_byte_identical<C: ControlAdmin, F: Fn() -> C>(factory: F) {
    let c = factory();
    let done = completed();
    let stored = done
        .reservation
        .as_ref()
        .and_then(|r| r.receipt.clone())
        .unwrap();
    c.commit_destination(&Destination::default(), &done, AdminEffect::None)
        .unwrap();
    let bytes = c.stored_receipt().unwrap().expect("a stored receipt");
    assert_eq!(bytes, stored.encode());
    assert_eq!(c.stored_receipt().unwrap(), Some(bytes));
    assert_eq!(c.load_destination().unwrap(), done);
    let r = c.commit_destination(&Destination::default(), &done, AdminEffect::None);
    assert_eq!(reason(r), "AdminMoved");
}

// ------------------------------------------------------------ reopen cases

/// Everything the administrative port shows.
fn administration<C: ControlCatalog + ControlAdmin>(c: &C) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        c.load_destination().unwrap(),
        c.stored_receipt().unwrap(),
        c.load_departures().unwrap(),
        c.export_snapshot().unwrap(),
        c.discover_worlds().unwrap()
    )
}

/// A staged reservation and a source's departure record (the one live home
/// of its Worlds) at one catalog, a completed receipt at another.
fn administered<C: ControlCatalog + ControlAdmin>(
    c: &C,
) -> custos_core::migration::departure::Departures {
    use custos_core::migration::departure::{self, Departures};
    populate(c);
    let s = c.export_snapshot().unwrap();
    reserve_and_stage(c, &s);
    let fx = Fixture::new().unwrap();
    let first = departure::depart(
        &Departures::default(),
        &fx.migration,
        &fx.destination,
        false,
    )
    .unwrap()
    .unwrap();
    c.commit_departures(&Departures::default(), &first).unwrap();
    first
}

/// Everything administered survives a drop and a reopen: a staged
/// reservation (still invisible to discovery), the departure record, the
/// export, and a completed receipt byte-identical; the reopened catalog
/// goes on deciding from what it stored.
pub fn administration_survives_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: ControlCatalog + ControlAdmin,
{
    let place = f();
    let (c, departed, before) = crate::open_with_history(&place, administered, administration);
    drop(c);
    let c = place.open();
    assert_eq!(
        administration(&c),
        before,
        "the reopened administration differs"
    );
    let r = c.commit_departures(
        &custos_core::migration::departure::Departures::default(),
        &departed,
    );
    assert_eq!(
        reason(r),
        "AdminMoved",
        "the departure record was forgotten"
    );

    let place = f();
    let c = place.open();
    let done = completed();
    c.commit_destination(&Destination::default(), &done, AdminEffect::None)
        .unwrap();
    let bytes = c.stored_receipt().unwrap();
    assert!(bytes.is_some());
    drop(c);
    let c = place.open();
    assert_eq!(c.stored_receipt().unwrap(), bytes, "the receipt changed");
    assert_eq!(c.load_destination().unwrap(), done);
}

/// A refused commit leaves the administration unchanged across a reopen: a
/// reservation from a stale expected state and a racing departure store
/// nothing a later handle sees.
pub fn a_refused_commit_leaves_administration_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: ControlCatalog + ControlAdmin,
{
    use custos_core::migration::departure::{self, Departures};
    let place = f();
    let (c, _, before) = crate::open_with_history(&place, administered, administration);
    let s = c.export_snapshot().unwrap();
    let other = reservation_for(&s, Status::Activated, false);
    let r = c.commit_destination(&Destination::default(), &other, AdminEffect::None);
    assert_eq!(reason(r), "AdminMoved");
    let fx = Fixture::new().unwrap();
    let racer = departure::depart(
        &Departures::default(),
        &fx.other_migration,
        &fx.source,
        false,
    )
    .unwrap()
    .unwrap();
    let r = c.commit_departures(&Departures::default(), &racer);
    assert_eq!(reason(r), "AdminMoved");
    drop(c);
    let c = place.open();
    assert_eq!(
        administration(&c),
        before,
        "a refusal changed the stored state"
    );
}

/// Every administrative case, by name, in suite order.
pub const CONTROL_ADMIN_CASES: &[&str] = &crate::__with_control_admin_cases!(__emit_names!());

/// An administrative case runnable at run time, for a backend type `C`.
pub type ControlAdminCase<C> = (&'static str, fn(&dyn Fn() -> C));

/// Every case as `(name, function)`, for runners that report per case
/// (run each under `std::panic::catch_unwind`).
pub fn control_admin_cases<C: ControlCatalog + ControlAdmin>() -> Vec<ControlAdminCase<C>> {
    crate::__with_control_admin_cases!(__emit_table!(control_admin, C))
}

/// Every reopen case, by name, in suite order.
pub const CONTROL_ADMIN_REOPEN_CASES: &[&str] =
    &crate::__with_control_admin_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, case)`; each takes a factory of places.
pub fn control_admin_reopen_cases<P: Place>() -> Vec<ControlAdminCase<P>>
where
    P::Store: ControlCatalog + ControlAdmin,
{
    crate::__with_control_admin_reopen_cases!(__emit_table!(control_admin, P))
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per administrative
/// case, each calling the case with `$factory` (every call a fresh, empty
/// catalog implementing both `ControlCatalog` and `ControlAdmin`), and one
/// per reopen case, each calling it with `$places` (`Fn() -> P`,
/// `P: `[`crate::Place`] opening such a catalog: a fresh store per call,
/// reopened by each `open`).
#[macro_export]
macro_rules! control_admin_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_control_admin_cases,
            __with_control_admin_reopen_cases,
            control_admin,
            $name,
            $factory,
            $places
        );
    };
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every
/// administrative reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_control_admin_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            administration_survives_a_reopen,
            a_refused_commit_leaves_administration_unchanged_across_a_reopen,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_control_admin_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            export_is_exact_and_excludes_administration,
            commits_are_compare_and_swap,
            departures_are_compare_and_swap_and_never_exported,
            an_abandoned_reservation_stages_nothing_and_is_replaced,
            staging_is_invisible_idempotent_and_exclusive,
            activation_imports_exact_records_and_floors,
            activation_refuses_a_populated_destination,
            a_completed_receipt_reads_back_byte_identical,
        }
    };
}
