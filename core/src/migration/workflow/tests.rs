use super::*;
use crate::control_memory::MemoryControlCatalog;
use crate::fence::Holder;
use crate::migration::artifacts::{
    facts_of, put_bytes, MemoryEntry, MemoryObjectStore, OccurrenceMeta,
};
use crate::migration::control::ControlAdmin;
use crate::migration::tables::{MemoryRows, MemoryTableStore};
use crate::migration::verify::{Discrepancy, ReceiptMismatch};
use crate::migration::{Digest, ObjectFound, Reservation, Resume, Status};
use crate::world::{
    ControlCatalog, Request as WorldRequest, Signature, WorldIdentity, WorldRecord,
};

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn uri(s: &str) -> NormalizedUri {
    NormalizedUri::parse(s).unwrap()
}

fn identity(path: &str) -> StorageIdentity {
    StorageIdentity::new(path, "app", "iceberg-sql").unwrap()
}

/// One identity's ports.
#[derive(Default)]
struct Side {
    control: MemoryControlCatalog,
    tables: MemoryTableStore,
    objects: Option<MemoryObjectStore>,
}

impl Side {
    fn new(root: &str) -> Self {
        Side {
            objects: Some(MemoryObjectStore::new(uri(root))),
            ..Side::default()
        }
    }
    fn objects(&self) -> &MemoryObjectStore {
        self.objects.as_ref().unwrap()
    }
    /// The destination's reservation, if any.
    fn reservation(&self) -> Option<Reservation> {
        self.control.load_destination().unwrap().reservation
    }
    /// Nothing reserved and no table written.
    fn assert_untouched(&self) {
        assert!(self.reservation().is_none());
        assert!(self.tables.namespace().unwrap().is_empty());
    }
}

/// An empty destination.
fn destination() -> Side {
    Side::new("file:///dst/artifacts")
}

/// A destination that already holds a World.
fn populated() -> Side {
    let dst = destination();
    let x = WorldRecord::active(WorldIdentity::new("w-x", "x"), WriterMode::Resumable);
    dst.control.register(&x).unwrap();
    dst
}

/// A source with two worlds (one resumable at tick 7 written by a writer,
/// one destroyed), an application table, an empty table, and artifact_files
/// over two objects (three occurrences).
fn source() -> Side {
    let s = Side::new("file:///src/artifacts");
    let live = WorldRecord::active(WorldIdentity::new("w-live", "live"), WriterMode::Resumable);
    s.control.register(&live).unwrap();
    let writer = Holder::new("writer").unwrap();
    let (epoch, _) = s
        .control
        .acquire_fence("w-live", &writer, FencePurpose::Resume)
        .unwrap();
    s.control.commit_tick("w-live", epoch, 7).unwrap();
    let schema = crate::schema::Schema::new(vec![crate::schema::Field::new(
        "x",
        crate::schema::LogicalType::Bool,
        true,
    )]);
    s.control
        .apply(&WorldRequest::RegisterSignature {
            world_id: "w-live".into(),
            signature: Signature::new(vec!["Pos".into()], schema, "t-pos"),
        })
        .unwrap();
    let gone = WorldRecord::active(WorldIdentity::new("w-gone", "gone"), WriterMode::Resumable);
    s.control.register(&gone).unwrap();
    s.control.retire(&gone).unwrap();
    s.tables
        .create(&n("events"), Digest::of(b"events"))
        .unwrap();
    let rows = (0..20).map(|i| format!("e{i}").into_bytes()).collect();
    s.tables
        .append(&n("events"), MemoryRows::Canonical(rows))
        .unwrap();
    s.tables.create(&n("empty"), Digest::of(b"empty")).unwrap();
    let mut occ = Vec::new();
    for (i, bytes) in [&b"frame one"[..], b"frame two", b"frame one"]
        .iter()
        .enumerate()
    {
        let facts = facts_of(bytes);
        let at = content_address(s.objects().root(), &facts.sha256).unwrap();
        if s.objects().probe(&at).unwrap() == crate::migration::artifacts::Entry::Missing {
            put_bytes(s.objects(), &at, bytes).unwrap();
        }
        let meta = OccurrenceMeta {
            artifact_id: n(&format!("a{i}")),
            ingested_at: 1_700_000_000_000_000 + i as i64,
            source_uri: format!("camera://{i}"),
            logical_path: format!("frames/{i}.raw"),
            world: n("w-live"),
            run: None,
            tick: Some(i as u64),
            media_type: "application/octet-stream".into(),
        };
        occ.push(Occurrence::new(meta, facts, at));
    }
    s.tables
        .create(&n(ARTIFACT_FILES), Digest::of(b"artifact_files"))
        .unwrap();
    s.tables
        .append(&n(ARTIFACT_FILES), MemoryRows::Occurrences(occ))
        .unwrap();
    s
}

/// The digest of the source's `frame two`.
fn frame_two() -> Digest {
    facts_of(b"frame two").sha256
}

/// [`source`] with `frame two`'s bytes replaced by others of its length.
fn corrupt_source() -> Side {
    let src = source();
    let at = content_address(src.objects().root(), &frame_two()).unwrap();
    src.objects()
        .plant(&at, MemoryEntry::Bytes(b"frame TWO".to_vec()))
        .unwrap();
    src
}

/// The destination's cold verifier over its ports.
type Cold<'a> = PortsColdVerifier<'a, MemoryControlCatalog, MemoryTableStore, MemoryObjectStore>;

fn cold_of(d: &Side) -> Cold<'_> {
    PortsColdVerifier {
        control: &d.control,
        tables: &d.tables,
        objects: d.objects(),
        artifact_root: d.objects().root().clone(),
    }
}

fn endpoint<'a>(
    side: &'a Side,
    path: &str,
) -> Endpoint<'a, MemoryControlCatalog, MemoryTableStore, MemoryObjectStore> {
    Endpoint {
        identity: identity(path),
        audit: Some(identity(path)),
        control: &side.control,
        tables: &side.tables,
        objects: side.objects(),
        artifact_root: side.objects().root().clone(),
        locality: Locality::Local,
        activity_records: 0,
    }
}

fn clock() -> Millis {
    1_764_600_000_000
}

fn migration<'a>(
    src: &'a Side,
    dst: &'a Side,
    cold: &'a Cold<'a>,
) -> Migration<'a, MemoryControlCatalog, MemoryTableStore, MemoryObjectStore, Cold<'a>> {
    Migration {
        source: endpoint(src, "file:///src/warehouse"),
        destination: endpoint(dst, "file:///dst/warehouse"),
        migration_id: n("m1"),
        holder: Holder::new("migration").unwrap(),
        cold,
        version: n("custos-test"),
        clock: &clock,
        progress: &Quiet,
        second_copy: false,
    }
}

#[test]
fn a_whole_identity_migrates_over_memory_ports_and_a_retry_returns_the_receipt() {
    let src = source();
    let dst = destination();
    let cold = cold_of(&dst);
    let m = migration(&src, &dst, &cold);
    let receipt = m.migrate(None).unwrap();
    assert_eq!(receipt.receipt.migration_id, n("m1"));
    assert_eq!(receipt.receipt.tables.len(), 3);
    assert!(matches!(
        receipt.receipt.cold_verification.resume,
        Resume::Resumed { .. }
    ));
    // The destination: worlds discoverable (destroyed one included),
    // objects relocated, artifact_files relocated, tables equal.
    let worlds = dst.control.discover_worlds().unwrap();
    assert_eq!(
        worlds,
        src.control
            .discover_worlds()
            .unwrap()
            .into_iter()
            .map(|mut w| {
                if w.identity.world_id == "w-live" {
                    w.tick_head = 8; // the cold verifier's later tick
                }
                w
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(
        dst.control.list_signatures().unwrap(),
        src.control.list_signatures().unwrap()
    );
    let fence = dst.control.open_world_readonly("w-live").unwrap().fence;
    // Source: writer 1, migration 2; imported floor 2; cold verifier 3.
    assert_eq!((fence.floor, fence.issued), (2, 3));
    let rows = dst
        .tables
        .occurrences(
            &n(ARTIFACT_FILES),
            dst.tables
                .inspect(&n(ARTIFACT_FILES))
                .unwrap()
                .unwrap()
                .snapshot,
        )
        .unwrap();
    assert!(rows
        .iter()
        .all(|o| dst.objects().root().contains(&o.object_uri)));
    assert_eq!(dst.tables.inspect(&n("events")).unwrap().unwrap().rows, 20);
    // The source's writer is stale there; its records are unchanged apart
    // from the fence.
    assert_eq!(
        src.control
            .commit_tick("w-live", 1, 9)
            .unwrap_err()
            .reason(),
        "StaleFence"
    );
    // A retry of the completed migration returns the exact stored receipt
    // and runs nothing (no further tick, no further epoch).
    let again = migration(&src, &dst, &cold).migrate(None).unwrap();
    assert_eq!(again.encode(), receipt.encode());
    assert_eq!(
        dst.control.stored_receipt().unwrap(),
        Some(receipt.encode())
    );
    assert_eq!(
        dst.control
            .open_world_readonly("w-live")
            .unwrap()
            .fence
            .issued,
        3
    );
    assert_eq!(dst.reservation().unwrap().status, Status::Completed);
}

/// A later verification reproduces cold evidence for the receipt's plan:
/// read-only it leaves the World's fence and tick as they are; resuming,
/// it takes a higher fence and commits the next tick; a receipt the
/// destination does not hold is refused, naming both receipts.
#[test]
fn a_later_verification_reads_only_unless_asked_to_resume() {
    let src = source();
    let dst = destination();
    let cold = cold_of(&dst);
    let receipt = migration(&src, &dst, &cold).migrate(None).unwrap();
    let before = dst.control.open_world_readonly("w-live").unwrap();
    let evidence = migration(&src, &dst, &cold)
        .verify(&receipt, VerifyMode::ReadOnly)
        .unwrap();
    assert_eq!(evidence.objects_verified, 2);
    assert_eq!(evidence.resume, Resume::NotExercised);
    assert_eq!(dst.control.open_world_readonly("w-live").unwrap(), before);
    // Resuming, it takes a higher fence and commits the next tick.
    let evidence = migration(&src, &dst, &cold)
        .verify(&receipt, VerifyMode::ResumeAndTick)
        .unwrap();
    assert_eq!(
        evidence.resume,
        Resume::Resumed {
            world: n("w-live"),
            epoch: before.fence.issued + 1,
            tick: before.record.tick_head + 1,
        }
    );
    // A receipt the destination does not hold is refused, even while it
    // holds a completed migration whose cold evidence passes.
    let mut other = receipt.receipt.clone();
    other.completed_at += 1;
    let other = StoredReceipt::seal(other);
    match migration(&src, &dst, &cold).verify(&other, VerifyMode::ReadOnly) {
        Err(WorkflowError::Refused(MigrationError::ReceiptMismatch(
            ReceiptMismatch::OtherReceipt { held, receipt: r },
        ))) => assert_eq!((held, r), (Some(receipt.digest), other.digest)),
        e => panic!("{e:?}"),
    }
}

/// A later verification names every table and object that differs from
/// the plan: the table with each evidence that differs, the object with
/// its address and what is there.
#[test]
fn a_verification_names_the_table_and_the_object_that_differ() {
    let src = source();
    let dst = destination();
    let cold = cold_of(&dst);
    let receipt = migration(&src, &dst, &cold).migrate(None).unwrap();
    let plan = dst.reservation().unwrap().plan;
    // One more row in `events`; one object's bytes replaced.
    let events = plan.tables.iter().find(|t| t.name == n("events")).unwrap();
    let extra = MemoryRows::Canonical(vec![b"tampered".to_vec()]);
    dst.tables.append(&n("events"), extra).unwrap();
    let object = plan.artifacts.objects[0];
    let at = content_address(dst.objects().root(), &object.sha256).unwrap();
    dst.objects()
        .plant(&at, MemoryEntry::Bytes(b"frame 1!!".to_vec()))
        .unwrap();
    let err = migration(&src, &dst, &cold)
        .verify(&receipt, VerifyMode::ReadOnly)
        .unwrap_err();
    let WorkflowError::Refused(MigrationError::ColdVerificationFailed(f)) = &err else {
        panic!("{err:?}")
    };
    let after = dst.tables.inspect(&n("events")).unwrap().unwrap();
    assert_eq!(
        f.discrepancies,
        vec![
            Discrepancy::TableRowCount {
                table: n("events"),
                expected: events.source.rows,
                found: after.rows,
            },
            Discrepancy::TableContentDigest {
                table: n("events"),
                expected: events.destination_content_digest,
                found: after.content_digest,
            },
            Discrepancy::Object {
                sha256: object.sha256,
                uri: at.clone(),
                expected: object,
                found: ObjectFound::Facts(facts_of(b"frame 1!!")),
            },
        ]
    );
    let text = err.to_string();
    assert!(text.contains("table events: row count"), "{text}");
    assert!(
        text.contains(&format!("object {} at {at}", object.sha256.hex())),
        "{text}"
    );
    assert_eq!(err.reason(), "cold-verification-failed");
}

#[test]
fn a_populated_destination_is_refused_before_anything_is_written() {
    let src = source();
    let dst = populated();
    let cold = cold_of(&dst);
    let e = migration(&src, &dst, &cold).migrate(None).unwrap_err();
    assert_eq!(e.reason(), "destination-not-empty", "{e}");
    dst.assert_untouched();
}

/// A corrupt indexed source object, or conflicting bytes at a destination
/// content address, refuse at preflight — typed, naming the object —
/// with nothing reserved and nothing written at the destination.
#[test]
fn preflight_refuses_corrupt_sources_and_conflicting_destinations_before_writing() {
    // A corrupt source object (same length, other bytes).
    let src = corrupt_source();
    let dst = destination();
    let cold = cold_of(&dst);
    let e = migration(&src, &dst, &cold).migrate(None).unwrap_err();
    // The machine decides (its report carries the count); the error also
    // names the object and the rule that refused it.
    assert_eq!(e.reason(), "artifact-unreadable", "{e}");
    assert!(e.to_string().contains("artifact-sha256-mismatch"), "{e}");
    assert!(
        e.to_string().contains("a1"),
        "the refusal names the artifact: {e}"
    );
    dst.assert_untouched();
    // Conflicting bytes already at the destination's content address.
    let src = source();
    let dst = destination();
    let there = content_address(dst.objects().root(), &frame_two()).unwrap();
    dst.objects()
        .plant(&there, MemoryEntry::Bytes(b"not frame two".to_vec()))
        .unwrap();
    let cold = cold_of(&dst);
    let e = migration(&src, &dst, &cold).migrate(None).unwrap_err();
    assert_eq!(e.reason(), "destination-not-empty", "{e}");
    assert!(
        e.to_string().contains("artifact-destination-conflict"),
        "{e}"
    );
    assert!(dst.reservation().is_none());
    assert_eq!(
        dst.objects().read(&there, 100).map(|r| match r {
            crate::migration::artifacts::ObjectRead::Bytes(b) => b,
            crate::migration::artifacts::ObjectRead::Stream(_) => Vec::new(),
        }),
        Ok(b"not frame two".to_vec()),
        "conflicting bytes were touched"
    );
}

/// The machine orders the refusals, not the driver: Activity at the
/// source refuses before a corrupt object is reported (the object's count
/// is in the report, the machine's order puts quiescence first).
#[test]
fn the_machine_orders_preflight_refusals_over_object_findings() {
    let src = corrupt_source();
    let dst = destination();
    let cold = cold_of(&dst);
    let mut m = migration(&src, &dst, &cold);
    m.source.activity_records = 1;
    let e = m.migrate(None).unwrap_err();
    assert_eq!(e.reason(), "activity-history-present", "{e}");
    // Nor is the refusal pinned on the object: it is about activity.
    assert!(
        matches!(
            e,
            WorkflowError::Refused(MigrationError::ActivityPresent { .. })
        ),
        "{e:?}"
    );
    let mut m = migration(&src, &dst, &cold);
    m.destination.identity = m.source.identity.clone();
    m.destination.audit = m.source.audit.clone();
    let e = m.migrate(None).unwrap_err();
    assert_eq!(e.reason(), "identical-storage-identity", "{e}");
    assert!(dst.reservation().is_none());
}

/// Planning runs preflight first: a refused preflight fences nothing at
/// the source.
#[test]
fn a_refused_plan_fences_nothing() {
    let src = source();
    let dst = populated();
    let cold = cold_of(&dst);
    let before = src.control.open_world_readonly("w-live").unwrap().fence;
    let e = migration(&src, &dst, &cold).plan().unwrap_err();
    assert_eq!(e.reason(), "destination-not-empty", "{e}");
    assert_eq!(
        src.control.open_world_readonly("w-live").unwrap().fence,
        before
    );
    // An admitted preflight answers the report; planning then fences.
    let dst = destination();
    let cold = cold_of(&dst);
    let m = migration(&src, &dst, &cold);
    assert_eq!(m.validate().unwrap().unreadable_objects, 0);
    let plan = m.plan().unwrap();
    assert_eq!(plan.worlds.len(), 1);
    assert!(
        src.control
            .open_world_readonly("w-live")
            .unwrap()
            .fence
            .issued
            > before.issued
    );
}

/// An identity without an `artifact_files` table has no Artifacts: it
/// migrates with an empty inventory.
#[test]
fn an_identity_without_artifact_files_migrates_with_no_artifacts() {
    let src = Side::new("file:///src/artifacts");
    src.tables
        .create(&n("events"), Digest::of(b"events"))
        .unwrap();
    src.tables
        .append(&n("events"), MemoryRows::Canonical(vec![b"e".to_vec()]))
        .unwrap();
    let dst = destination();
    let cold = cold_of(&dst);
    let receipt = migration(&src, &dst, &cold).migrate(None).unwrap();
    assert_eq!(receipt.receipt.tables.len(), 1);
    assert_eq!(receipt.receipt.artifacts.occurrences, 0);
    assert_eq!(
        receipt.receipt.cold_verification.resume,
        Resume::NotApplicable
    );
    assert_eq!(dst.tables.inspect(&n("events")).unwrap().unwrap().rows, 1);
}

/// Appends one occurrence of a new object to the source's artifact_files
/// the first time the run is about to freeze its plan (after preflight
/// verified the inventory it remembers).
struct GrowBeforePlan<'a>(&'a Side, std::sync::atomic::AtomicBool);

impl Progress for GrowBeforePlan<'_> {
    fn step(&self, next: &Next) {
        if !matches!(next, Next::Plan) || self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let s = self.0;
        let t = n(ARTIFACT_FILES);
        let bytes = b"frame three";
        let facts = facts_of(bytes);
        let at = content_address(s.objects().root(), &facts.sha256).unwrap();
        put_bytes(s.objects(), &at, bytes).unwrap();
        let meta = OccurrenceMeta {
            artifact_id: n("a3"),
            ingested_at: 1_700_000_000_000_100,
            source_uri: "camera://3".into(),
            logical_path: "frames/3.raw".into(),
            world: n("w-live"),
            run: None,
            tick: Some(3),
            media_type: "application/octet-stream".into(),
        };
        // An append adds rows to the table's current ones.
        let occ = vec![Occurrence::new(meta, facts, at)];
        s.tables.append(&t, MemoryRows::Occurrences(occ)).unwrap();
    }
}

#[test]
fn an_inventory_remembered_from_preflight_is_used_only_for_the_snapshot_it_checked() {
    let src = source();
    let dst = destination();
    let cold = cold_of(&dst);
    let grow = GrowBeforePlan(&src, std::sync::atomic::AtomicBool::new(false));
    let m = Migration {
        progress: &grow,
        second_copy: false,
        ..migration(&src, &dst, &cold)
    };
    let receipt = m.migrate(None).unwrap();
    assert!(grow.1.load(std::sync::atomic::Ordering::SeqCst));
    let plan = dst.reservation().unwrap().plan;
    // The plan is of the grown table: three distinct objects, four
    // occurrences, all at the destination.
    assert_eq!(plan.artifacts.objects.len(), 3);
    assert_eq!(plan.artifacts.occurrences, 4);
    let evidence = migration(&src, &dst, &cold)
        .verify(&receipt, VerifyMode::ResumeAndTick)
        .unwrap();
    assert_eq!(evidence.objects_verified, 3);
}

/// Asks the run to stop before step `at` (counted from 0), and counts the
/// steps it was asked about.
struct StopAt {
    at: usize,
    asked: std::cell::Cell<usize>,
}

impl StopAt {
    fn new(at: usize) -> Self {
        StopAt {
            at,
            asked: 0.into(),
        }
    }
}

impl Progress for StopAt {
    fn interrupted(&self) -> bool {
        let n = self.asked.get();
        self.asked.set(n + 1);
        n >= self.at
    }
}

/// A whole run, never stopped: its receipt and how many steps it took.
fn a_whole_run() -> (StoredReceipt, usize) {
    let (src, dst) = (source(), destination());
    let cold = cold_of(&dst);
    let all = StopAt::new(usize::MAX);
    let receipt = stopped_at(&src, &dst, &cold, &all).migrate(None).unwrap();
    (receipt, all.asked.get())
}

fn stopped_at<'a>(
    src: &'a Side,
    dst: &'a Side,
    cold: &'a Cold<'a>,
    stop: &'a StopAt,
) -> Migration<'a, MemoryControlCatalog, MemoryTableStore, MemoryObjectStore, Cold<'a>> {
    Migration {
        progress: stop,
        ..migration(src, dst, cold)
    }
}

#[test]
fn an_interrupted_run_stops_at_a_step_boundary_and_a_retry_resumes_it() {
    // How many steps a whole run takes.
    let (receipt, steps) = a_whole_run();
    assert!(steps >= 12, "{steps} steps");
    for at in 0..steps {
        let (src, dst) = (source(), destination());
        let cold = cold_of(&dst);
        let stop = StopAt::new(at);
        let e = stopped_at(&src, &dst, &cold, &stop)
            .migrate(None)
            .unwrap_err();
        assert_eq!(e.reason(), "interrupted", "{at}: {e}");
        assert!(
            e.to_string().contains("every earlier step is stored"),
            "{e}"
        );
        // Asked once, before the step it did not take.
        assert_eq!(stop.asked.get(), at + 1);
        let done = migration(&src, &dst, &cold).migrate(None).unwrap();
        assert_eq!(done.receipt.tables, receipt.receipt.tables, "{at}");
    }
}

#[test]
fn a_migration_abandoned_before_activation_frees_its_source_and_destination() {
    use super::abandon::abandon;
    let (_, steps) = a_whole_run();
    let (mut abandoned, mut refused) = (0, 0);
    for at in 0..steps {
        let (src, dst) = (source(), destination());
        let cold = cold_of(&dst);
        let stop = StopAt::new(at);
        stopped_at(&src, &dst, &cold, &stop)
            .migrate(None)
            .unwrap_err();
        let status = dst.reservation().map(|r| r.status);
        let source_admin = |_: &StorageIdentity| -> Res<Option<Box<dyn ControlAdmin + '_>>> {
            Ok(Some(Box::new(&src.control)))
        };
        let got = abandon(&dst.control, &dst.tables, source_admin, &n("m1"));
        match status {
            None => {
                assert_eq!(got.unwrap_err().reason(), "nothing-to-abandon", "{at}");
                continue;
            }
            Some(Status::Activated | Status::Completed) => {
                assert_eq!(
                    got.unwrap_err().reason(),
                    "abandon-after-activation",
                    "{at}"
                );
                // Nothing was undone: the destination is a live home.
                assert!(!dst.control.discover_worlds().unwrap().is_empty());
                refused += 1;
                continue;
            }
            Some(_) => {}
        }
        let done = got.unwrap();
        abandoned += 1;
        assert!(!done.already && done.source_marked, "{at}: {done:?}");
        assert!(dst.tables.namespace().unwrap().is_empty(), "{at}");
        assert!(dst.control.discover_worlds().unwrap().is_empty());
        // Again: a retry finds it abandoned and does the rest again.
        let again = abandon(&dst.control, &dst.tables, source_admin, &n("m1")).unwrap();
        assert!(again.already && again.source_marked && again.tables_removed.is_empty());
        // The abandoned id never resumes.
        let cold = cold_of(&dst);
        assert_eq!(
            migration(&src, &dst, &cold)
                .migrate(None)
                .unwrap_err()
                .reason(),
            "migration-abandoned"
        );
        // The source is free again and the destination is empty: another
        // migration goes through with no acknowledgement of a second copy.
        let other = Migration {
            migration_id: n("m2"),
            ..migration(&src, &dst, &cold)
        };
        let r = other.migrate(None).unwrap();
        assert_eq!(r.receipt.migration_id, n("m2"));
    }
    assert!(abandoned >= 6, "{abandoned} states abandoned");
    assert!(refused >= 2, "{refused} activated states refused");
}

/// Counts what a run reports, per table index.
#[derive(Default)]
struct Counting {
    copy_steps: std::sync::Mutex<std::collections::BTreeMap<usize, u32>>,
    tables: std::sync::Mutex<std::collections::BTreeMap<usize, u32>>,
}

impl Progress for Counting {
    fn step(&self, next: &Next) {
        if let Next::CopyTable { index } = next {
            *self.copy_steps.lock().unwrap().entry(*index).or_default() += 1;
        }
    }
    fn table(&self, index: usize, _rows: u64) {
        *self.tables.lock().unwrap().entry(index).or_default() += 1;
    }
}

#[test]
fn each_table_is_reported_once_even_after_a_lost_commit_reply() {
    let src = source();
    let dst = destination();
    // The first commit lands and its reply is lost: the table is
    // inspected at a second copy step, found matching, and reported then.
    dst.tables.lose_next_reply();
    let cold = cold_of(&dst);
    let counting = Counting::default();
    let m = Migration {
        progress: &counting,
        ..migration(&src, &dst, &cold)
    };
    let receipt = m.migrate(None).unwrap();
    let tables = receipt.receipt.tables.len();
    let reported = counting.tables.lock().unwrap().clone();
    assert_eq!(reported.len(), tables, "{reported:?}");
    assert!(reported.values().all(|n| *n == 1), "{reported:?}");
    // Only the table in doubt was stepped twice (its copy, its inspection).
    let steps = counting.copy_steps.lock().unwrap().clone();
    assert_eq!(steps.values().filter(|n| **n == 2).count(), 1, "{steps:?}");
    assert_eq!(steps.values().filter(|n| **n == 1).count(), tables - 1);
}

#[test]
fn a_tables_metadata_arrives_and_is_bound_in_the_receipt() {
    use crate::migration::metadata::{PartitionField, TableMetadata};
    let src = source();
    let meta = TableMetadata::new(
        vec![PartitionField {
            source: "day".into(),
            transform: "identity".into(),
            name: "day".into(),
        }],
        Vec::new(),
        [("owner".to_string(), "ops".to_string())],
    );
    src.tables
        .create_with(&n("partitioned"), Digest::of(b"partitioned"), &meta)
        .unwrap();
    src.tables
        .append(
            &n("partitioned"),
            MemoryRows::Canonical(vec![b"p".to_vec()]),
        )
        .unwrap();
    let dst = destination();
    let cold = cold_of(&dst);
    let receipt = migration(&src, &dst, &cold).migrate(None).unwrap();
    let line = receipt
        .receipt
        .tables
        .iter()
        .find(|t| t.name == n("partitioned"))
        .unwrap();
    assert_eq!(line.metadata_fingerprint, meta.fingerprint());
    let at_dst = dst.tables.inspect(&n("partitioned")).unwrap().unwrap();
    assert_eq!(at_dst.metadata_fingerprint, meta.fingerprint());
    // Every other table's line carries its own (default) metadata.
    let plain = TableMetadata::default().fingerprint();
    assert!(receipt
        .receipt
        .tables
        .iter()
        .filter(|t| t.name != n("partitioned"))
        .all(|t| t.metadata_fingerprint == plain));
}

#[test]
fn a_run_another_host_carried_past_activation_resumes_without_touching_the_source() {
    let src = source();
    let dst = destination();
    let cold = cold_of(&dst);
    let m = migration(&src, &dst, &cold);
    // Host A starts and validates; host B then runs the whole migration.
    let mut a = m.start(None).unwrap();
    assert_eq!(m.advance(&mut a).unwrap(), None);
    let receipt = m.migrate(None).unwrap();
    let before = (
        src.control.image().unwrap(),
        src.tables.image().unwrap(),
        src.objects().image().unwrap(),
    );
    // Host A's next steps start from what the destination holds now: the
    // completed migration's receipt, with no source step on the way.
    let mut answered = None;
    for _ in 0..32 {
        if let Some(r) = m.advance(&mut a).unwrap() {
            answered = Some(r);
            break;
        }
    }
    assert_eq!(answered, Some(receipt));
    let after = (
        src.control.image().unwrap(),
        src.tables.image().unwrap(),
        src.objects().image().unwrap(),
    );
    assert_eq!(after, before, "host A changed the source after activation");
}
