//! loom: every interleaving of the release repository's in-memory side —
//! the writer mutex (gate, usage, pending entry) and the index readers see —
//! driven through the same `custos_fs::release::shared` functions the
//! repository's `publish` calls (admit → on_renamed → adopt, with the
//! publication's I/O happening between them under the writer mutex).
//!
//! Run it (a separate target directory, so the `--cfg loom` build does not
//! evict the normal one):
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$HOME/.cache/custos-target-loom \
//!     cargo test -p custos-fs --release --test loom -- --nocapture
//! ```
//!
//! or `make loom`. Without `--cfg loom` this file compiles to nothing.

#![cfg(loom)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};

use custos_core::release::bounds::{Bound, BoundError, Bounds, Candidate, CatalogUsage};
use custos_core::release::lifecycle::{LifecycleState, Membership};
use custos_core::release::manifest::Manifest;
use custos_core::release::metadata::Descriptor;
use custos_core::release::protocol::{Plan, ProtocolError};
use custos_core::release::Sha256;
use custos_fs::release::shared::{Entry, Index, Refusal, Shared, Writer};
use loom::sync::Arc;
use loom::thread;

fn release(n: u8, service: Option<&str>) -> (Entry, Candidate) {
    let manifest = Manifest {
        name: format!("r{n}"),
        version: "1".into(),
        tenant: Some("acme".into()),
        service: service.map(str::to_owned),
        component_digest: Sha256([n; 32]),
        exports: vec![],
    };
    let descriptor = Descriptor::for_release(&manifest, 8);
    let candidate = Candidate {
        entry: descriptor.footprint(),
        metadata_bytes: 100,
        component_bytes: 8,
    };
    let entry = Entry {
        descriptor,
        metadata_digest: Sha256([n; 32]),
        membership: Membership::Member,
    };
    (entry, candidate)
}

fn shared(bounds: &Bounds) -> Arc<Shared> {
    let usage = CatalogUsage::empty(bounds).unwrap();
    Arc::new(Shared::new(
        Writer::new(usage, LifecycleState::default()),
        Index::default(),
    ))
}

/// The in-memory part of `ReleaseRepository::publish` for a new release:
/// admit under the writer mutex, (staging I/O), rename charges the slot and
/// marks it pending, (verify, sync, lifecycle I/O), adopt.
fn publish(shared: &Shared, bounds: &Bounds, entry: Entry, c: Candidate) -> Result<Plan, Refusal> {
    let mut w = shared.writer();
    let admitted = shared.admit(&w, bounds, &entry.descriptor, &entry.metadata_digest, &c)?;
    if admitted.plan == Plan::New {
        shared.on_renamed(&mut w, entry.clone(), admitted.usage);
        thread::yield_now();
    }
    shared.adopt(&mut w, entry);
    Ok(admitted.plan)
}

/// What any reader may observe at any moment: every map agrees, the
/// generation counts the adoptions, and a release found by digest is found
/// by its reference and in its tenant's (and service's) listing.
fn check_reader_view(ix: &Index) {
    assert!(ix.is_consistent(), "half-adopted release visible: {ix:?}");
    assert_eq!(ix.generation() as usize, ix.len());
    for e in ix.iter() {
        let d = e.digest();
        assert_eq!(
            ix.by_reference(e.descriptor.tenant.as_deref(), &e.descriptor.reference())
                .map(|x| x.digest()),
            Some(d)
        );
        assert!(ix.scope("acme", None, None).any(|x| x.digest() == d));
        if let Some(s) = &e.descriptor.service {
            assert!(ix.scope("acme", Some(s), None).any(|x| x.digest() == d));
        }
    }
}

static HALF_ADOPTED: AtomicUsize = AtomicUsize::new(0);
static LAST_SLOT: AtomicUsize = AtomicUsize::new(0);
static PENDING: AtomicUsize = AtomicUsize::new(0);

#[test]
fn readers_never_see_a_half_adopted_release() {
    HALF_ADOPTED.store(0, Ordering::SeqCst);
    loom::model(|| {
        HALF_ADOPTED.fetch_add(1, Ordering::SeqCst);
        let bounds = Bounds::default();
        let s = shared(&bounds);
        let publishers: Vec<_> = [(1u8, Some("api")), (2, None)]
            .into_iter()
            .map(|(n, svc)| {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let (e, c) = release(n, svc);
                    publish(&s, &bounds, e, c)
                })
            })
            .collect();
        s.read(check_reader_view);
        s.read(check_reader_view);
        for p in publishers {
            assert_eq!(p.join().unwrap(), Ok(Plan::New));
        }
        s.read(|ix| {
            check_reader_view(ix);
            assert_eq!(ix.len(), 2);
        });
        let w = s.writer();
        assert_eq!(w.usage.entries, 2);
        assert_eq!(w.gate.pending, None);
        assert!(w.pending.is_none());
    });
    println!(
        "readers_never_see_a_half_adopted_release: {} interleavings",
        HALF_ADOPTED.load(Ordering::SeqCst)
    );
}

#[test]
fn two_publishers_racing_for_the_last_slot_never_both_succeed() {
    LAST_SLOT.store(0, Ordering::SeqCst);
    loom::model(|| {
        LAST_SLOT.fetch_add(1, Ordering::SeqCst);
        let bounds = Bounds {
            max_recovery_directories: 1,
            ..Bounds::default()
        };
        let s = shared(&bounds);
        let racers: Vec<_> = [1u8, 2]
            .into_iter()
            .map(|n| {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let (e, c) = release(n, None);
                    publish(&s, &bounds, e, c)
                })
            })
            .collect();
        s.read(check_reader_view);
        let results: Vec<_> = racers.into_iter().map(|h| h.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "both publishers took the last slot: {results:?}");
        assert!(results.iter().any(|r| matches!(
            r,
            Err(Refusal::Bound(BoundError::ResourceExhausted {
                bound: Bound::RecoveryDirectories,
                ..
            }))
        )));
        s.read(|ix| assert_eq!(ix.len(), 1));
        assert_eq!(s.writer().usage.recovery_directories, 1);
    });
    println!(
        "two_publishers_racing_for_the_last_slot_never_both_succeed: {} interleavings",
        LAST_SLOT.load(Ordering::SeqCst)
    );
}

#[test]
fn a_pending_release_blocks_racers_and_stays_hidden() {
    PENDING.store(0, Ordering::SeqCst);
    loom::model(|| {
        PENDING.fetch_add(1, Ordering::SeqCst);
        let bounds = Bounds::default();
        let s = shared(&bounds);
        // Publisher 1 renames, then fails past the rename (no adoption).
        let failing = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let (e, c) = release(1, None);
                let mut w = s.writer();
                let admitted = s
                    .admit(&w, &bounds, &e.descriptor, &e.metadata_digest, &c)
                    .unwrap();
                let d = e.digest();
                s.on_renamed(&mut w, e, admitted.usage);
                w.gate.on_failure_after_rename(&d);
            })
        };
        let racer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let (e, c) = release(2, None);
                publish(&s, &bounds, e, c)
            })
        };
        s.read(|ix| {
            check_reader_view(ix);
            assert!(ix.get(&Sha256([1; 32])).is_none(), "pending is visible");
        });
        failing.join().unwrap();
        let raced = racer.join().unwrap();
        // The racer either finished before the rename, or was refused.
        match raced {
            Ok(Plan::New) => {}
            Err(Refusal::Protocol(ProtocolError::Unavailable { pending })) => {
                assert_eq!(pending, Sha256([1; 32]))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.writer().gate.pending, Some(Sha256([1; 32])));
        // The exact retry reconciles; then others proceed.
        let (e, c) = release(1, None);
        assert_eq!(publish(&s, &bounds, e, c), Ok(Plan::Reconcile));
        let (e, c) = release(3, None);
        assert_eq!(publish(&s, &bounds, e, c), Ok(Plan::New));
        s.read(check_reader_view);
    });
    println!(
        "a_pending_release_blocks_racers_and_stays_hidden: {} interleavings",
        PENDING.load(Ordering::SeqCst)
    );
}

/// The check has teeth: a publisher that admits under one acquisition of
/// the writer mutex and charges the slot under another (the mutex not held
/// across the publication) lets both racers take the last slot, and loom
/// finds that interleaving.
#[test]
#[should_panic(expected = "both publishers took the last slot")]
fn negative_control_admission_outside_the_writer_mutex_is_caught() {
    fn broken(s: &Shared, bounds: &Bounds, e: Entry, c: Candidate) -> Result<Plan, Refusal> {
        let admitted = {
            let w = s.writer();
            s.admit(&w, bounds, &e.descriptor, &e.metadata_digest, &c)?
        };
        let mut w = s.writer();
        s.on_renamed(&mut w, e.clone(), admitted.usage);
        s.adopt(&mut w, e);
        Ok(admitted.plan)
    }
    loom::model(|| {
        let bounds = Bounds {
            max_recovery_directories: 1,
            ..Bounds::default()
        };
        let s = shared(&bounds);
        let racers: Vec<_> = [1u8, 2]
            .into_iter()
            .map(|n| {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let (e, c) = release(n, None);
                    broken(&s, &bounds, e, c)
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|h| h.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "both publishers took the last slot: {results:?}");
    });
}
