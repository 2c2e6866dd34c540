//! The release repository on real files: publication order and
//! its refusals before staging, the two capacity scenarios, debris, the
//! pending gate, identical and conflicting republication, lifecycle,
//! recovery, page tokens, counters and length checks before allocation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::Class;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use custos_core::release::bounds::{Bound, BoundError, Bounds};
use custos_core::release::complete::{self, COMPLETE_FILE};
use custos_core::release::contract::{ComponentRejected, Contract, MagicOnly, ValType};
use custos_core::release::lifecycle::{Membership, OutcomeStatus, LIFECYCLE_HEAD};
use custos_core::release::page::PageError;
use custos_core::release::protocol::{Plan, ProtocolError, RecoveryError, Step};
use custos_core::release::Sha256;
use custos_core::root::MARKER_FILE;
use custos_fs::release::{
    ReleaseError, ReleaseRepository, COMPONENT_FILE, METADATA_FILE, RELEASES_DIR, STAGING_DIR,
};
use custos_fs::{Access, Fs, FsError, Op, RealFs, RecordingFs, ROOT_LOCKED};

mod support;
use support::{component, contract_of, param};

fn contract() -> Contract {
    contract_of(
        "api",
        vec![param(
            "x",
            ValType::Result {
                ok: Some(Box::new(ValType::U32)),
                err: Some(Box::new(ValType::String)),
            },
        )],
        vec![ValType::List(Box::new(ValType::U8))],
    )
}

fn manifest(name: &str, tenant: Option<&str>, service: Option<&str>, comp: &[u8]) -> Vec<u8> {
    let mut m = serde_json::json!({
        "name": name,
        "version": "1.0.0",
        "component_digest": Sha256::of(comp).to_string(),
        "exports": ["api"],
    });
    if let Some(t) = tenant {
        m["tenant"] = t.into();
    }
    if let Some(s) = service {
        m["service"] = s.into();
    }
    serde_json::to_vec(&m).unwrap()
}

type Repo<F = RealFs> = ReleaseRepository<F>;

fn open_with<F: Fs>(fs: F, dir: &Path, bounds: Bounds) -> Result<Repo<F>, ReleaseError> {
    ReleaseRepository::open(fs, dir, bounds, Arc::new(MagicOnly))
}

/// The catalog at `dir` on the real filesystem, default bounds, opened as
/// `access`.
fn open_as(access: Access, dir: &Path) -> Result<Repo, ReleaseError> {
    ReleaseRepository::open_as(access, RealFs, dir, Bounds::default(), Arc::new(MagicOnly))
}

fn open(dir: &Path, bounds: Bounds) -> Repo {
    open_with(RealFs, dir, bounds).unwrap()
}

fn publish<F: Fs>(repo: &Repo<F>, n: u32) -> Result<custos_fs::release::Published, ReleaseError> {
    let c = component(n);
    repo.publish(&manifest(&format!("r{n}"), None, None, &c), c, contract())
}

fn tenant_publish<F: Fs>(
    repo: &Repo<F>,
    n: u32,
    tenant: &str,
    service: Option<&str>,
) -> Result<custos_fs::release::Published, ReleaseError> {
    let c = component(n);
    repo.publish(
        &manifest(&format!("r{n}"), Some(tenant), service, &c),
        c,
        contract(),
    )
}

fn digest(n: u32) -> Sha256 {
    Sha256::of(&component(n))
}

fn release_dir(root: &Path, n: u32) -> PathBuf {
    root.join(RELEASES_DIR).join(digest(n).hex())
}

fn staged_anything(trace: &[custos_fs::Recorded], root: &Path) -> bool {
    let stage = root.join(STAGING_DIR);
    trace.iter().any(|r| match &r.op {
        Op::CreateDir(p) | Op::WriteNew(p, _) | Op::Rename(p, _) => p.starts_with(&stage),
        _ => false,
    })
}

fn mutations(trace: &[custos_fs::Recorded]) -> Vec<Op> {
    trace
        .iter()
        .map(|r| r.op.clone())
        .filter(|o| {
            matches!(
                o,
                Op::CreateDir(_)
                    | Op::WriteNew(..)
                    | Op::SyncFile(_)
                    | Op::SyncDir(_)
                    | Op::Rename(..)
                    | Op::RemoveDirAll(_)
            )
        })
        .collect()
}

fn bound_of(e: &ReleaseError) -> Option<Bound> {
    match e.root_cause() {
        ReleaseError::Bound(BoundError::ResourceExhausted { bound, .. }) => Some(*bound),
        _ => None,
    }
}

#[test]
fn publish_resolve_fetch_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    let p = publish(&repo, 1).unwrap();
    assert_eq!(p.digest, digest(1));
    assert_eq!(p.plan, Plan::New);
    assert!(p.outcome.is_some());
    let d = repo.resolve(None, "r1@1.0.0").unwrap();
    assert_eq!(d.component_digest, digest(1));
    let r = repo.fetch(&digest(1)).unwrap();
    assert_eq!(r.component, component(1));
    assert_eq!(r.contract, contract());
    let dir = release_dir(repo.root(), 1);
    for f in [
        METADATA_FILE,
        "manifest.json",
        COMPONENT_FILE,
        COMPLETE_FILE,
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let rec = complete::decode(&std::fs::read(dir.join(COMPLETE_FILE)).unwrap()).unwrap();
    assert_eq!(rec.component_digest, digest(1));
    let root = repo.root().to_path_buf();
    drop(repo);
    let again = open(&root, Bounds::default());
    assert_eq!(again.fetch(&digest(1)).unwrap(), r);
    assert_eq!(again.membership(&digest(1)), Some(Membership::Member));
    assert!(matches!(
        again.resolve(None, "r9@1.0.0"),
        Err(ReleaseError::NotFound(_))
    ));
}

/// Interface and function documentation is stored with the contract and
/// comes back byte-equal after a reopen; an inspector (which extracts types,
/// never documentation) binds the declared contract by its types alone.
#[test]
fn documented_contracts_round_trip_and_the_inspector_binds_types() {
    let documented = || {
        let mut c = contract();
        c.interfaces[0].docs = Some("An API.\n\u{1F600} any text at all".into());
        c.interfaces[0].functions[0].docs = Some(String::new());
        c
    };
    let tmp = tempfile::tempdir().unwrap();
    let extracts = |_: &[u8]| -> Result<Option<Contract>, _> { Ok(Some(contract())) };
    let repo =
        ReleaseRepository::open(RealFs, tmp.path(), Bounds::default(), Arc::new(extracts)).unwrap();
    let c = component(1);
    repo.publish(&manifest("r1", None, None, &c), c, documented())
        .unwrap();
    let mut other = documented();
    other.interfaces[0].functions[0].results.clear();
    let c = component(2);
    assert!(matches!(
        repo.publish(&manifest("r2", None, None, &c), c, other),
        Err(ReleaseError::ContractMismatch(_))
    ));
    assert_eq!(repo.fetch(&digest(1)).unwrap().contract, documented());
    drop(repo);
    let again = open(tmp.path(), Bounds::default());
    assert_eq!(again.fetch(&digest(1)).unwrap().contract, documented());
    assert!(again.fetch(&digest(2)).is_err());
}

/// The durable mode marker, not the presence of `lifecycle/`, says the
/// catalog is initialized: deleting `lifecycle/` fails every later open
/// (a revoked release never comes back as a member), and nothing is
/// re-created.
#[test]
fn a_deleted_lifecycle_directory_fails_the_open_and_revives_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    publish(&repo, 1).unwrap();
    publish(&repo, 2).unwrap();
    repo.revoke(&digest(1)).unwrap();
    let root = repo.root().to_path_buf();
    drop(repo);
    std::fs::remove_dir_all(root.join("lifecycle")).unwrap();
    let before = snapshot(&root);
    for read_only in [false, true] {
        let e = if read_only {
            ReleaseRepository::open_read_only(RealFs, &root, Bounds::default(), Arc::new(MagicOnly))
                .unwrap_err()
        } else {
            open_with(RealFs, &root, Bounds::default()).unwrap_err()
        };
        assert_eq!(e.class(), Class::CorruptArtifact, "{e}");
        assert!(e.to_string().contains("lifecycle/"), "{e}");
        assert_eq!(snapshot(&root), before, "a refused open changes nothing");
    }
}

/// A completed catalog predating the marker and lifecycle state is adopted
/// only by an explicit upgrade: a plain open refuses it untouched; the
/// upgrade verifies every release, bootstraps lifecycle state once (every
/// release a member, more than the in-memory outcome window, each with its
/// own record) and then writes the marker.
#[test]
fn only_an_upgrade_bootstraps_a_catalog_without_lifecycle_state() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    for n in 0..70 {
        publish(&repo, n).unwrap();
    }
    let root = repo.root().to_path_buf();
    drop(repo);
    // A catalog predating lifecycle state has neither lifecycle/, nor its
    // head, nor the marker.
    std::fs::remove_dir_all(root.join("lifecycle")).unwrap();
    std::fs::remove_file(root.join(LIFECYCLE_HEAD)).unwrap();
    std::fs::remove_file(root.join(MARKER_FILE)).unwrap();
    let before = snapshot(&root);
    let e = open_with(RealFs, &root, Bounds::default()).unwrap_err();
    assert_eq!(e.class(), Class::InvalidArgument, "{e}");
    assert!(e.to_string().contains("upgrade"), "{e}");
    assert_eq!(snapshot(&root), before);
    let repo = open_as(Access::Upgrade, &root).unwrap();
    assert_eq!(repo.len(), 70);
    assert!(repo.orphans().is_empty());
    assert_eq!(
        std::fs::read_dir(root.join("lifecycle")).unwrap().count(),
        70
    );
    assert!(root.join(MARKER_FILE).is_file());
    drop(repo);
    let repo = open(&root, Bounds::default());
    assert_eq!(repo.len(), 70);
    assert!((0..70).all(|n| repo.membership(&digest(n)) == Some(Membership::Member)));
}

/// A directory holding a user's files is never adopted, by a writing or a
/// reading open: the example of `releases/` beside a user's
/// `.tmp/cache/important.txt`, which an open used to delete.
#[test]
fn a_user_directory_is_refused_and_left_byte_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("releases")).unwrap();
    std::fs::create_dir_all(root.join(".tmp/cache")).unwrap();
    std::fs::write(root.join(".tmp/cache/important.txt"), b"keep me").unwrap();
    let before = snapshot(root);
    for access in [Access::Write, Access::Read, Access::Upgrade] {
        let e = open_as(access, root).unwrap_err();
        assert!(
            matches!(e, ReleaseError::Fs(custos_fs::FsError::Refused { .. })),
            "{access:?}: {e}"
        );
        assert_eq!(snapshot(root), before, "{access:?} changed the directory");
    }
}

/// Deleting `.catalog.lock` under a live owner: a second process locks a
/// new file and publishes; the first is refused at its next commit point,
/// so the two never both publish one reference, and the catalog still
/// opens afterwards.
#[test]
fn a_deleted_lock_file_never_lets_two_owners_publish_one_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open(tmp.path(), Bounds::default());
    let root = first.root().to_path_buf();
    std::fs::remove_file(root.join(custos_fs::LOCK_FILE)).unwrap();
    let second = open(&root, Bounds::default());
    publish(&second, 60).unwrap();
    let e = publish(&first, 60).unwrap_err();
    assert_eq!(e.class(), Class::Unavailable, "{e}");
    assert!(e.to_string().contains(custos_fs::LOCK_REPLACED), "{e}");
    drop((first, second));
    let again = open(&root, Bounds::default());
    assert_eq!(again.len(), 1);
    assert!(again.orphans().is_empty());
}

/// A write that fails after the lock file was deleted (another process's
/// open may have removed this one's stage) is reported as the lock's
/// replacement, not as a disk fault: the loser is told why.
#[test]
fn a_write_failing_under_a_replaced_lock_names_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let first = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    let root = first.root().to_path_buf();
    std::fs::remove_file(root.join(custos_fs::LOCK_FILE)).unwrap();
    let second = open(&root, Bounds::default());
    fs.clear_trace();
    // The stage's first file write fails, as it would once the other
    // owner's open removed the staging directory beneath it.
    fs.fail_at(1);
    let e = publish(&first, 61).unwrap_err();
    assert_eq!(e.class(), Class::Unavailable, "{e}");
    let text = e.to_string();
    assert!(text.contains(custos_fs::LOCK_REPLACED), "{text}");
    assert!(!text.contains("Internal"), "{text}");
    drop((first, second));
}

/// A reading open verifies in full and writes nothing: debris in `.tmp`
/// stays, no fsync, no created file; mutations are refused.
#[test]
fn a_reading_open_verifies_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    publish(&repo, 1).unwrap();
    let root = repo.root().to_path_buf();
    drop(repo);
    std::fs::create_dir(root.join(STAGING_DIR).join("abandoned")).unwrap();
    let before = snapshot(&root);
    let fs = RecordingFs::new(RealFs);
    let reader = ReleaseRepository::open_read_only(
        fs.clone(),
        &root,
        Bounds::default(),
        Arc::new(MagicOnly),
    )
    .unwrap();
    assert_eq!(reader.len(), 1);
    assert!(
        mutations(&fs.trace()).is_empty(),
        "{:?}",
        mutations(&fs.trace())
    );
    assert!(!fs
        .trace()
        .iter()
        .any(|r| matches!(r.op, Op::SyncDir(_) | Op::SyncFile(_))));
    let e = publish(&reader, 2).unwrap_err();
    assert_eq!(e.class(), Class::FailedPrecondition, "{e}");
    let e = reader.revoke(&digest(1)).unwrap_err();
    assert_eq!(e.class(), Class::FailedPrecondition, "{e}");
    drop(reader);
    assert_eq!(snapshot(&root), before);
}

/// Every directory and file under `dir` with its bytes: what
/// "byte-untouched" is checked against.
fn snapshot(dir: &Path) -> custos_fs::crash::Image {
    custos_fs::crash::image_of(dir).unwrap()
}

/// Initializes an empty catalog at `dir` (so a test can then plant debris).
fn initialize(dir: &Path) {
    drop(open(dir, Bounds::default()));
}

#[test]
fn a_second_live_opener_is_unavailable() {
    let tmp = tempfile::tempdir().unwrap();
    let _repo = open(tmp.path(), Bounds::default());
    let e = open_with(RealFs, tmp.path(), Bounds::default()).unwrap_err();
    assert_eq!(e.class(), Class::Unavailable);
    assert!(matches!(e, ReleaseError::Fs(ref f) if f.unavailable_reason() == Some(ROOT_LOCKED)));
}

#[test]
fn publication_writes_in_the_protocol_order() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    fs.clear_trace();
    publish(&repo, 1).unwrap();
    let ops = mutations(&fs.trace());
    let root = repo.root().to_path_buf();
    let releases = root.join(RELEASES_DIR);
    let Some(Op::CreateDir(stage)) = ops.first().cloned() else {
        panic!("{ops:?}")
    };
    assert!(stage.starts_with(root.join(STAGING_DIR)));
    let dest = releases.join(digest(1).hex());
    let mut want = vec![Op::CreateDir(stage.clone())];
    for name in [
        METADATA_FILE,
        "manifest.json",
        COMPONENT_FILE,
        COMPLETE_FILE,
    ] {
        let p = stage.join(name);
        let Some(Op::WriteNew(_, data)) = ops.get(want.len()).cloned() else {
            panic!("{ops:?}")
        };
        want.push(Op::WriteNew(p.clone(), data));
        want.push(Op::SyncFile(p));
    }
    want.push(Op::SyncDir(stage.clone()));
    want.push(Op::Rename(stage, dest));
    want.push(Op::SyncDir(releases));
    assert_eq!(ops.get(..want.len()), Some(&want[..]));
    // Then the release's lifecycle record: temp write, fsync, rename into
    // lifecycle/<hex> (the commit point), fsync lifecycle/.
    let rest = ops.get(want.len()..).unwrap();
    // Then the lifecycle head that counts it: temp write, fsync, rename
    // to LIFECYCLE, fsync the root.
    let lifecycle = root.join("lifecycle");
    assert!(
        matches!(rest, [Op::WriteNew(..), Op::SyncFile(_), Op::Rename(_, to), Op::SyncDir(r),
                        Op::WriteNew(..), Op::SyncFile(_), Op::Rename(_, head), Op::SyncDir(top)]
        if to == &lifecycle.join(digest(1).hex()) && r == &lifecycle
            && head == &root.join(LIFECYCLE_HEAD) && top == &root),
        "{rest:?}"
    );
}

/// Three index entries and two recovery directories admit only two
/// new releases into an empty root; the third is refused before staging;
/// both survive reopening with the same configuration.
#[test]
fn three_entries_two_recovery_directories_admit_two_releases() {
    let tmp = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        max_entries: 3,
        max_recovery_directories: 2,
        ..Bounds::default()
    };
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), bounds).unwrap();
    publish(&repo, 1).unwrap();
    publish(&repo, 2).unwrap();
    fs.clear_trace();
    let e = publish(&repo, 3).unwrap_err();
    assert_eq!(e.class(), Class::ResourceExhausted);
    assert_eq!(bound_of(&e), Some(Bound::RecoveryDirectories));
    assert!(!staged_anything(&fs.trace(), repo.root()));
    assert!(mutations(&fs.trace()).is_empty(), "{:?}", fs.trace());
    let root = repo.root().to_path_buf();
    drop(repo);
    let again = open(&root, bounds);
    for n in [1, 2] {
        assert_eq!(again.fetch(&digest(n)).unwrap().component, component(n));
    }
    assert_eq!(again.usage().recovery_directories, 2);
    assert_eq!(
        bound_of(&publish(&again, 3).unwrap_err()),
        Some(Bound::RecoveryDirectories)
    );
}

/// Both limits at two with one retained incomplete directory admit one new
/// release.
#[test]
fn both_limits_two_with_one_debris_directory_admit_one_release() {
    let tmp = tempfile::tempdir().unwrap();
    initialize(tmp.path());
    std::fs::create_dir_all(tmp.path().join(RELEASES_DIR).join("incomplete-stage")).unwrap();
    let bounds = Bounds {
        max_entries: 2,
        max_recovery_directories: 2,
        ..Bounds::default()
    };
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), bounds).unwrap();
    assert_eq!(repo.usage().recovery_directories, 1);
    assert_eq!(repo.usage().entries, 0, "debris is never an index entry");
    publish(&repo, 1).unwrap();
    fs.clear_trace();
    let e = publish(&repo, 2).unwrap_err();
    assert_eq!(bound_of(&e), Some(Bound::RecoveryDirectories));
    assert!(!staged_anything(&fs.trace(), repo.root()));
    // The identical republication reuses its directory at the limit.
    assert_eq!(publish(&repo, 1).unwrap().plan, Plan::Noop);
    let root = repo.root().to_path_buf();
    drop(repo);
    let again = open(&root, bounds);
    assert_eq!(again.fetch(&digest(1)).unwrap().component, component(1));
    assert!(again
        .list_catalog_entries("acme", None, None)
        .unwrap()
        .entries
        .is_empty());
    assert!(
        root.join(RELEASES_DIR).join("incomplete-stage").is_dir(),
        "debris is kept"
    );
}

#[test]
fn a_root_filled_with_debris_refuses_then_offline_cleanup_reclaims() {
    let tmp = tempfile::tempdir().unwrap();
    initialize(tmp.path());
    let releases = tmp.path().join(RELEASES_DIR);
    for i in 0..3 {
        std::fs::create_dir_all(releases.join(format!("junk-{i}"))).unwrap();
    }
    let bounds = Bounds {
        max_recovery_directories: 3,
        ..Bounds::default()
    };
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), bounds).unwrap();
    fs.clear_trace();
    assert_eq!(
        bound_of(&publish(&repo, 1).unwrap_err()),
        Some(Bound::RecoveryDirectories)
    );
    assert!(!staged_anything(&fs.trace(), repo.root()));
    drop(repo);
    // More debris than the bound: the open itself is refused.
    std::fs::create_dir_all(releases.join("junk-3")).unwrap();
    let e = open_with(RealFs, tmp.path(), bounds).unwrap_err();
    assert_eq!(bound_of(&e), Some(Bound::RecoveryDirectories));
    // Offline cleanup, then publication and reopen.
    for i in 0..4 {
        std::fs::remove_dir_all(releases.join(format!("junk-{i}"))).unwrap();
    }
    let repo = open(tmp.path(), bounds);
    publish(&repo, 1).unwrap();
    drop(repo);
    assert_eq!(
        open(tmp.path(), bounds)
            .fetch(&digest(1))
            .unwrap()
            .component,
        component(1)
    );
}

/// The number of operations a publication of release `n` performs before
/// its lifecycle temp write (the first write under `.tmp` after the rename).
fn ops_before_lifecycle_write(fs: &RecordingFs, root: &Path) -> usize {
    let trace = fs.trace();
    let rename = trace
        .iter()
        .position(|r| matches!(&r.op, Op::Rename(_, to) if to.starts_with(root.join(RELEASES_DIR))))
        .unwrap();
    rename
        + trace[rename..]
            .iter()
            .position(
                |r| matches!(&r.op, Op::WriteNew(p, _) if p.starts_with(root.join(STAGING_DIR))),
            )
            .unwrap()
}

/// A recording catalog in `dir` whose next publication fails at the same
/// step (the lifecycle commit, past the rename) as release 1's: the
/// operation count of that one publication is learned first.
fn failing_at_lifecycle_commit(dir: &Path) -> (RecordingFs, Repo<RecordingFs>) {
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), dir, Bounds::default()).unwrap();
    fs.clear_trace();
    publish(&repo, 1).unwrap();
    let k = ops_before_lifecycle_write(&fs, repo.root());
    fs.clear_trace();
    fs.fail_at(k);
    (fs, repo)
}

#[test]
fn pending_gate_blocks_other_digests_until_the_exact_retry_reconciles() {
    let tmp = tempfile::tempdir().unwrap();
    let (fs, repo) = failing_at_lifecycle_commit(tmp.path());
    let e = publish(&repo, 2).unwrap_err();
    assert_eq!(e.step(), Some(Step::CommitLifecycle), "{e}");
    assert!(release_dir(repo.root(), 2).join(COMPLETE_FILE).is_file());
    assert_eq!(repo.pending(), Some(digest(2)));
    assert!(
        repo.resolve(None, "r2@1.0.0").is_err(),
        "pending stays hidden"
    );
    let gen = repo.generation();
    // Every other digest is Unavailable, before staging.
    fs.clear_trace();
    let e = publish(&repo, 3).unwrap_err();
    assert_eq!(e.class(), Class::Unavailable);
    assert!(matches!(
        e,
        ReleaseError::Protocol(ProtocolError::Unavailable { pending }) if pending == digest(2)
    ));
    assert!(!staged_anything(&fs.trace(), repo.root()));
    // Changed input under the pending digest is not an identical retry.
    let c2 = component(2);
    let digest_of_2 = digest(2);
    let changed = manifest("other-name", None, None, &c2);
    assert!(matches!(
        repo.publish(&changed, c2, contract()),
        Err(ReleaseError::Protocol(ProtocolError::DigestConflict { digest })) if digest == digest_of_2
    ));
    // The exact retry reconciles content and membership, without staging.
    fs.clear_trace();
    let p = publish(&repo, 2).unwrap();
    assert_eq!(p.plan, Plan::Reconcile);
    assert!(!fs.trace().iter().any(|r| matches!(r.op, Op::CreateDir(_))));
    assert_eq!(repo.pending(), None);
    assert_eq!(repo.membership(&digest(2)), Some(Membership::Member));
    assert_eq!(repo.generation(), gen + 1);
    assert_eq!(repo.fetch(&digest(2)).unwrap().component, component(2));
    // Others proceed.
    assert_eq!(publish(&repo, 3).unwrap().plan, Plan::New);
}

#[test]
fn a_pending_release_after_reopen_is_an_orphan_that_reserves_its_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let (_fs, repo) = failing_at_lifecycle_commit(tmp.path());
    assert!(publish(&repo, 2).is_err());
    let root = repo.root().to_path_buf();
    drop(repo);
    let repo = open(&root, Bounds::default());
    assert_eq!(repo.orphans(), vec![digest(2)]);
    assert_eq!(repo.pending(), None);
    assert!(matches!(
        repo.resolve(None, "r2@1.0.0"),
        Err(ReleaseError::NotFound(_))
    ));
    assert!(matches!(
        repo.fetch(&digest(2)),
        Err(ReleaseError::NotFound(_))
    ));
    assert_eq!(repo.membership(&digest(2)), None);
    assert_eq!(repo.usage().recovery_directories, 2);
    // Another digest under the orphan's reference is refused.
    let c = component(77);
    let e = repo
        .publish(&manifest("r2", None, None, &c), c, contract())
        .unwrap_err();
    assert!(matches!(
        e,
        ReleaseError::Protocol(ProtocolError::ReferenceConflict { owner }) if owner == digest(2)
    ));
    assert_eq!(e.class(), Class::AlreadyExists);
    // An explicit identical publication adopts it.
    assert_eq!(publish(&repo, 2).unwrap().plan, Plan::Reconcile);
    assert!(repo.orphans().is_empty());
    assert_eq!(
        repo.resolve(None, "r2@1.0.0").unwrap().component_digest,
        digest(2)
    );
}

#[test]
fn a_failure_before_the_rename_consumes_no_slot_and_leaves_the_gate_open() {
    let tmp = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        max_recovery_directories: 1,
        ..Bounds::default()
    };
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), bounds).unwrap();
    fs.clear_trace();
    // Operation 0 of a publication is the staging directory's creation; 1 is
    // the metadata write.
    fs.fail_at(1);
    let e = publish(&repo, 1).unwrap_err();
    assert_eq!(e.step(), Some(Step::WriteMetadata));
    assert_eq!(repo.pending(), None);
    assert_eq!(repo.usage().recovery_directories, 0);
    assert!(!release_dir(repo.root(), 1).exists());
    assert_eq!(publish(&repo, 2).unwrap().plan, Plan::New);
}

#[test]
fn identical_republication_is_a_verified_noop() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    publish(&repo, 1).unwrap();
    let gen = repo.generation();
    let before = repo.verification_snapshot();
    fs.clear_trace();
    let p = publish(&repo, 1).unwrap();
    assert_eq!(p.plan, Plan::Noop);
    assert_eq!(p.outcome, None);
    assert!(mutations(&fs.trace()).is_empty(), "{:?}", fs.trace());
    assert!(fs
        .trace()
        .iter()
        .any(|r| r.op == Op::Read(release_dir(repo.root(), 1).join(COMPONENT_FILE))));
    let after = repo.verification_snapshot();
    assert_eq!(
        after.component_verification_attempts,
        before.component_verification_attempts + 1
    );
    assert_eq!(repo.generation(), gen);
}

#[test]
fn different_content_under_a_digest_or_reference_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    publish(&repo, 1).unwrap();
    // Same component, different manifest (tenant): same digest, new content.
    let c = component(1);
    let e = repo
        .publish(&manifest("r1", Some("acme"), None, &c), c, contract())
        .unwrap_err();
    assert_eq!(
        e.root_cause().to_string(),
        ProtocolError::DigestConflict { digest: digest(1) }.to_string()
    );
    assert_eq!(e.class(), Class::AlreadyExists);
    // Another component under the same reference.
    let c = component(2);
    let e = repo
        .publish(&manifest("r1", None, None, &c), c, contract())
        .unwrap_err();
    assert!(matches!(
        e,
        ReleaseError::Protocol(ProtocolError::ReferenceConflict { owner }) if owner == digest(1)
    ));
    assert_eq!(repo.len(), 1);
}

/// References are per tenant, the content digest global: two tenants each
/// publish `calc@1.0.0`; a held reference is refused naming only the
/// caller's own release; resolving a reference never crosses tenants; and
/// a tenant re-publishing another's exact bytes learns only that those
/// bytes exist, never who holds them or under what name.
#[test]
fn references_are_per_tenant_and_refusals_name_no_other_tenant() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    let publish_as = |tenant: Option<&str>, n: u32| {
        let c = component(n);
        repo.publish(&manifest("calc", tenant, None, &c), c, contract())
    };
    let acme = publish_as(Some("acme"), 1).unwrap().digest;
    let other = publish_as(Some("other"), 2).unwrap().digest;
    let local = publish_as(None, 3).unwrap().digest;
    assert_eq!(
        repo.resolve(Some("acme"), "calc@1.0.0")
            .unwrap()
            .component_digest,
        acme
    );
    assert_eq!(
        repo.resolve(Some("other"), "calc@1.0.0")
            .unwrap()
            .component_digest,
        other
    );
    assert_eq!(
        repo.resolve(None, "calc@1.0.0").unwrap().component_digest,
        local
    );
    assert_eq!(
        repo.resolve(Some("nobody"), "calc@1.0.0")
            .unwrap_err()
            .class(),
        Class::NotFound
    );
    // A second calc@1.0.0 of tenant other: refused, naming other's own.
    let e = publish_as(Some("other"), 4).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(&other.to_string()), "{text}");
    for foreign in [acme, local] {
        assert!(!text.contains(&foreign.to_string()), "{text}");
        assert!(!text.contains(&foreign.hex()), "{text}");
    }
    // acme's exact bytes under tenant other's name: the digest is global.
    let c = component(1);
    let e = repo
        .publish(&manifest("mine", Some("other"), None, &c), c, contract())
        .unwrap_err();
    let text = e.to_string();
    assert_eq!(e.class(), Class::AlreadyExists);
    assert!(!text.contains("acme") && !text.contains("calc"), "{text}");
    // Scoped reads: another tenant's release is absent.
    assert_eq!(
        repo.get_catalog_entry("other", &acme).unwrap_err().class(),
        Class::NotFound
    );
    assert_eq!(repo.len(), 3);
}

#[test]
fn invalid_inputs_are_refused_before_staging() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let bounds = Bounds {
        max_component_bytes: 64,
        ..Bounds::default()
    };
    let repo = open_with(fs.clone(), tmp.path(), bounds).unwrap();
    fs.clear_trace();
    let c = component(1);
    // Digest mismatch.
    let e = repo
        .publish(
            &manifest("r1", None, None, &component(2)),
            c.clone(),
            contract(),
        )
        .unwrap_err();
    assert!(matches!(e, ReleaseError::DigestMismatch { .. }));
    // Exports disagree with the contract.
    let e = repo
        .publish(
            &manifest("r1", None, None, &c),
            c.clone(),
            Contract::default(),
        )
        .unwrap_err();
    assert!(matches!(e, ReleaseError::ContractMismatch(_)));
    // Not a component.
    let bad = b"ELF....".to_vec();
    let e = repo
        .publish(&manifest("r1", None, None, &bad), bad, contract())
        .unwrap_err();
    assert!(matches!(
        e,
        ReleaseError::Component(ComponentRejected { .. })
    ));
    // Too large.
    let big = [b"\0asm".to_vec(), vec![0; 100]].concat();
    let e = repo
        .publish(&manifest("r1", None, None, &big), big, contract())
        .unwrap_err();
    assert_eq!(bound_of(&e), Some(Bound::ComponentBytes));
    // A contract too deep.
    let mut ty = ValType::U8;
    for _ in 0..40 {
        ty = ValType::Option(Box::new(ty));
    }
    let mut deep = contract();
    deep.interfaces[0].functions[0].results = vec![ty];
    let e = repo
        .publish(&manifest("r1", None, None, &c), c.clone(), deep)
        .unwrap_err();
    assert!(matches!(
        e,
        ReleaseError::Bound(BoundError::ContractTooComplex {
            bound: Bound::TypeDepth,
            ..
        })
    ));
    // An inspector that extracts another contract.
    drop(repo);
    let other = |_: &[u8]| Ok(Some(Contract::default()));
    let repo = ReleaseRepository::open(fs.clone(), tmp.path(), bounds, Arc::new(other)).unwrap();
    fs.clear_trace();
    let e = repo
        .publish(&manifest("r1", None, None, &c), c, contract())
        .unwrap_err();
    assert!(matches!(e, ReleaseError::ContractMismatch(_)));
    assert!(mutations(&fs.trace()).is_empty());
    assert!(repo.is_empty());
}

#[test]
fn revocation_and_retirement_survive_republication_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    tenant_publish(&repo, 1, "acme", None).unwrap();
    tenant_publish(&repo, 2, "acme", None).unwrap();
    let o = repo.revoke(&digest(1)).unwrap();
    assert_eq!(o.after, Membership::Revoked);
    repo.retire(&digest(2)).unwrap();
    assert!(matches!(repo.outcome(o.seq), OutcomeStatus::Retained(x) if x == o));
    let p = tenant_publish(&repo, 1, "acme", None).unwrap();
    assert_eq!(p.plan, Plan::Noop);
    assert_eq!(repo.membership(&digest(1)), Some(Membership::Revoked));
    let e = repo.resolve(Some("acme"), "r1@1.0.0").unwrap_err();
    assert_eq!(e.class(), Class::FailedPrecondition);
    assert!(matches!(
        repo.fetch(&digest(2)),
        Err(ReleaseError::NotEligible {
            membership: Membership::Retired,
            ..
        })
    ));
    // Historical metadata stays readable.
    assert_eq!(
        repo.get_catalog_entry("acme", &digest(1))
            .unwrap()
            .membership,
        Membership::Revoked
    );
    let root = repo.root().to_path_buf();
    drop(repo);
    let repo = open(&root, Bounds::default());
    assert_eq!(repo.membership(&digest(1)), Some(Membership::Revoked));
    assert_eq!(repo.membership(&digest(2)), Some(Membership::Retired));
    assert_eq!(
        repo.resolve(Some("acme"), "r1@1.0.0").unwrap_err().class(),
        Class::FailedPrecondition
    );
    assert!(matches!(
        repo.revoke(&digest(9)),
        Err(ReleaseError::NotFound(_))
    ));
}

#[test]
fn an_uncertain_revocation_withdraws_eligibility_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    publish(&repo, 1).unwrap();
    fs.clear_trace();
    fs.fail_at(0); // the lifecycle temp write
    let e = repo.revoke(&digest(1)).unwrap_err();
    // The uncertain operation names its reserved seq, which answers
    // unknown and is never handed out again.
    let seq = e
        .uncertain_seq()
        .expect("an uncertain lifecycle write names its seq");
    assert_eq!(
        repo.outcome(seq),
        custos_core::release::lifecycle::OutcomeStatus::Unknown
    );
    assert!(matches!(
        repo.resolve(None, "r1@1.0.0"),
        Err(ReleaseError::NotEligible {
            membership: Membership::Revoked,
            ..
        })
    ));
    fs.clear_failpoint();
    let next = repo.retire(&digest(1)).unwrap();
    assert_eq!(next.seq, seq + 1, "the uncertain seq was reused");
    assert!(matches!(
        repo.outcome(next.seq),
        custos_core::release::lifecycle::OutcomeStatus::Retained(_)
    ));
    // The durable state never said revoked; the later retirement did land:
    // a reopen finds it retired.
    let root = repo.root().to_path_buf();
    drop(repo);
    let repo = open(&root, Bounds::default());
    assert_eq!(repo.membership(&digest(1)), Some(Membership::Retired));
}

#[test]
fn recovery_fails_on_a_digest_directory_without_a_valid_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    publish(&repo, 1).unwrap();
    let root = repo.root().to_path_buf();
    drop(repo);
    let complete = release_dir(&root, 1).join(COMPLETE_FILE);
    let saved = std::fs::read(&complete).unwrap();
    std::fs::remove_file(&complete).unwrap();
    let e = open_with(RealFs, &root, Bounds::default()).unwrap_err();
    assert!(
        matches!(e, ReleaseError::Recovery(RecoveryError::MissingComplete(d)) if d == digest(1))
    );
    assert_eq!(e.class(), Class::CorruptArtifact);
    // The legacy marker has its own message; files are preserved.
    std::fs::write(&complete, b"complete\n").unwrap();
    let e = open_with(RealFs, &root, Bounds::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("legacy catalog completion marker is unsupported"),
        "{e}"
    );
    assert_eq!(std::fs::read(&complete).unwrap(), b"complete\n");
    // A changed component byte fails verification.
    std::fs::write(&complete, &saved).unwrap();
    let comp = release_dir(&root, 1).join(COMPONENT_FILE);
    let mut bytes = std::fs::read(&comp).unwrap();
    bytes[9] ^= 1;
    std::fs::write(&comp, &bytes).unwrap();
    let e = open_with(RealFs, &root, Bounds::default()).unwrap_err();
    assert_eq!(e.class(), Class::CorruptArtifact, "{e}");
    bytes[9] ^= 1;
    std::fs::write(&comp, &bytes).unwrap();
    assert_eq!(open(&root, Bounds::default()).len(), 1);
}

#[test]
fn open_clears_abandoned_stages_after_taking_ownership() {
    let tmp = tempfile::tempdir().unwrap();
    initialize(tmp.path());
    let stage = tmp.path().join(STAGING_DIR).join("abandoned");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::write(stage.join(COMPLETE_FILE), b"x").unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    assert!(!stage.exists());
    let trace: Vec<Op> = fs.trace().into_iter().map(|r| r.op).collect();
    let lock = trace.iter().position(|o| matches!(o, Op::Lock(_))).unwrap();
    let clear = trace
        .iter()
        .position(|o| matches!(o, Op::RemoveDirAll(_)))
        .unwrap();
    assert!(lock < clear, "cleanup only after the lock is held");
    assert!(repo.is_empty());
}

#[test]
fn oversized_files_are_refused_before_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    publish(&repo, 1).unwrap();
    let root = repo.root().to_path_buf();
    drop(repo);
    let fs = RecordingFs::new(RealFs);
    let small = Bounds {
        max_component_bytes: 8,
        ..Bounds::default()
    };
    let e = open_with(fs.clone(), &root, small).unwrap_err();
    assert_eq!(bound_of(&e), Some(Bound::ComponentBytes), "{e}");
    assert_eq!(e.class(), Class::ResourceExhausted);
    let comp = release_dir(&root, 1).join(COMPONENT_FILE);
    assert!(
        !fs.trace().iter().any(|r| r.op == Op::Read(comp.clone())),
        "read before the length check"
    );
    let tiny_meta = Bounds {
        max_metadata_bytes: 16,
        ..Bounds::default()
    };
    let e = open_with(RealFs, &root, tiny_meta).unwrap_err();
    assert_eq!(bound_of(&e), Some(Bound::MetadataBytes), "{e}");
    // An oversized COMPLETE is corruption under its fixed bound.
    std::fs::write(release_dir(&root, 1).join(COMPLETE_FILE), vec![b' '; 2048]).unwrap();
    let e = open_with(RealFs, &root, Bounds::default()).unwrap_err();
    assert!(matches!(
        e,
        ReleaseError::Recovery(RecoveryError::BadComplete(
            _,
            complete::CompleteError::TooLarge { .. }
        ))
    ));
}

#[test]
fn pages_are_ordered_bounded_and_their_tokens_expire() {
    let tmp = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        max_page_rows: 2,
        ..Bounds::default()
    };
    let repo = open(tmp.path(), bounds);
    for n in 1..=3 {
        tenant_publish(&repo, n, "acme", Some("api")).unwrap();
    }
    tenant_publish(&repo, 4, "acme", None).unwrap();
    tenant_publish(&repo, 5, "beta", None).unwrap();
    publish(&repo, 6).unwrap(); // trusted local: in no tenant's listing
    let mut all = Vec::new();
    let mut token = None;
    loop {
        let page = repo
            .list_catalog_entries("acme", None, token.as_deref())
            .unwrap();
        assert!(page.entries.len() <= 2);
        all.extend(page.entries.iter().map(|e| e.descriptor.component_digest));
        match page.next_page_token {
            Some(t) => {
                assert_eq!(t.len(), custos_core::release::page::TOKEN_LEN);
                token = Some(t);
            }
            None => break,
        }
    }
    let mut want: Vec<Sha256> = (1..=4).map(digest).collect();
    want.sort();
    assert_eq!(all, want, "every acme row once, in digest order");
    let svc = repo
        .list_catalog_entries("acme", Some("api"), None)
        .unwrap();
    assert_eq!(svc.entries.len(), 2);
    assert!(svc
        .entries
        .iter()
        .all(|e| e.descriptor.service.as_deref() == Some("api")));
    assert!(matches!(
        repo.get_catalog_entry("beta", &digest(1)),
        Err(ReleaseError::NotFound(_))
    ));
    assert!(matches!(
        repo.get_catalog_entry("acme", &digest(6)),
        Err(ReleaseError::NotFound(_))
    ));

    let t = repo
        .list_catalog_entries("acme", None, None)
        .unwrap()
        .next_page_token
        .unwrap();
    // Bound to the tenant and the service.
    assert!(matches!(
        repo.list_catalog_entries("beta", None, Some(&t)),
        Err(ReleaseError::Page(PageError::InvalidToken))
    ));
    assert!(matches!(
        repo.list_catalog_entries("acme", Some("api"), Some(&t)),
        Err(ReleaseError::Page(PageError::InvalidToken))
    ));
    assert!(matches!(
        repo.list_catalog_entries("acme", None, Some("not-a-token")),
        Err(ReleaseError::Page(PageError::InvalidToken))
    ));
    // An identical retry does not expire it; a new visible publication does.
    tenant_publish(&repo, 1, "acme", Some("api")).unwrap();
    assert!(repo.list_catalog_entries("acme", None, Some(&t)).is_ok());
    tenant_publish(&repo, 7, "zeta", None).unwrap();
    let e = repo
        .list_catalog_entries("acme", None, Some(&t))
        .unwrap_err();
    assert!(matches!(e, ReleaseError::Page(PageError::Expired)));
    assert_eq!(e.class(), Class::StateConflict);
    // A reopen expires tokens too.
    let t = repo
        .list_catalog_entries("acme", None, None)
        .unwrap()
        .next_page_token
        .unwrap();
    let root = repo.root().to_path_buf();
    drop(repo);
    let repo = open(&root, bounds);
    assert!(matches!(
        repo.list_catalog_entries("acme", None, Some(&t)),
        Err(ReleaseError::Page(PageError::Expired))
    ));
    // A byte bound smaller than one row refuses rather than loop.
    drop(repo);
    let tight = Bounds {
        max_page_bytes: 8,
        ..Bounds::default()
    };
    let repo = open(&root, tight);
    assert_eq!(
        bound_of(&repo.list_catalog_entries("acme", None, None).unwrap_err()),
        Some(Bound::PageBytes)
    );
}

#[test]
fn cursors_survive_a_reopen_and_expire_with_any_change() {
    let tmp = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        max_page_rows: 2,
        ..Bounds::default()
    };
    let repo = open(tmp.path(), bounds);
    for n in 1..=5 {
        tenant_publish(&repo, n, "acme", None).unwrap();
    }
    let t = repo
        .list_catalog_entries("acme", None, None)
        .unwrap()
        .next_page_token
        .unwrap();
    // A token dies with the open instance; a durable cursor names the
    // content instead, so it continues after a reopen.
    let cursor = repo
        .list_catalog_entries_by_cursor("acme", None, None)
        .unwrap()
        .next_page_token
        .unwrap();
    let token_second = repo
        .list_catalog_entries("acme", None, Some(&t))
        .unwrap()
        .entries;
    let root = repo.root().to_path_buf();
    drop(repo);
    let repo = open(&root, bounds);
    let cursor_second = repo
        .list_catalog_entries_by_cursor("acme", None, Some(&cursor))
        .unwrap()
        .entries;
    assert_eq!(cursor_second.len(), 2);
    assert_eq!(
        cursor_second, token_second,
        "the same next page after a reopen"
    );
    // A cursor is not a token.
    assert!(matches!(
        repo.list_catalog_entries("acme", None, Some(&cursor)),
        Err(ReleaseError::Page(PageError::InvalidToken))
    ));
    // Any publication, even another tenant's, expires the cursor.
    tenant_publish(&repo, 9, "zeta", None).unwrap();
    let e = repo
        .list_catalog_entries_by_cursor("acme", None, Some(&cursor))
        .unwrap_err();
    assert_eq!(e.class(), Class::StateConflict);
}

#[test]
fn verification_counters_count_disk_reads_only() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = open(tmp.path(), Bounds::default());
    let zero = repo.verification_snapshot();
    assert_eq!(zero, Default::default());
    publish(&repo, 1).unwrap();
    let after_publish = repo.verification_snapshot();
    // Publication verifies the stored entry (one component read-back).
    assert_eq!(after_publish.component_verification_attempts, 1);
    assert_eq!(after_publish.full_fetch_attempts, 0);
    repo.resolve(None, "r1@1.0.0").unwrap();
    repo.list_catalog_entries("acme", None, None).unwrap();
    assert_eq!(
        repo.verification_snapshot(),
        after_publish,
        "warm lookups read nothing"
    );
    repo.fetch(&digest(1)).unwrap();
    let s = repo.verification_snapshot();
    assert_eq!(s.full_fetch_attempts, 1);
    assert_eq!(
        s.metadata_fetch_attempts,
        after_publish.metadata_fetch_attempts + 1
    );
    assert_eq!(
        s.metadata_fingerprint_attempts,
        after_publish.metadata_fingerprint_attempts + 1
    );
    assert_eq!(
        s.component_bytes_hashed,
        after_publish.component_bytes_hashed + component(1).len() as u64
    );
    // Recovery verifies too, on the new instance's own counters.
    let root = repo.root().to_path_buf();
    drop(repo);
    let again = open(&root, Bounds::default());
    assert_eq!(
        again
            .verification_snapshot()
            .component_verification_attempts,
        1
    );
}

#[test]
fn concurrent_publishers_never_both_take_the_last_slot() {
    let tmp = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        max_recovery_directories: 1,
        ..Bounds::default()
    };
    let repo = Arc::new(open(tmp.path(), bounds));
    let handles: Vec<_> = (1..=4)
        .map(|n| {
            let r = Arc::clone(&repo);
            std::thread::spawn(move || publish(&r, n))
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| bound_of(e) == Some(Bound::RecoveryDirectories)));
    assert_eq!(repo.len(), 1);
    assert_eq!(repo.usage().recovery_directories, 1);
}

#[test]
fn an_fsync_failure_poisons_the_handle() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    fs.clear_trace();
    // 0 creates the stage, 1 writes metadata.json, 2 fsyncs it.
    fs.fail_at(2);
    let e = publish(&repo, 1).unwrap_err();
    assert!(
        matches!(e.root_cause(), ReleaseError::Fs(FsError::SyncFailed { .. })),
        "{e}"
    );
    let failed = fs.trace().into_iter().find(|r| !r.ok).unwrap();
    assert!(matches!(failed.op, Op::SyncFile(_)));
    assert!(matches!(
        publish(&repo, 2).unwrap_err().root_cause(),
        ReleaseError::Fs(FsError::Poisoned)
    ));
}

/// Open makes `lifecycle/` durable before acting on any record in it: a
/// record whose rename survived a crash in the page cache (but not yet
/// through the directory fsync) must not be served and then lost.
#[test]
fn open_syncs_lifecycle_state_before_reading_it() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let repo = open(tmp.path(), Bounds::default());
        publish(&repo, 1).unwrap();
    }
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    assert_eq!(repo.len(), 1);
    let lifecycle = repo.root().join("lifecycle");
    let trace = fs.trace();
    let synced = trace
        .iter()
        .position(|r| r.ok && r.op == Op::SyncDir(lifecycle.clone()))
        .expect("open fsyncs lifecycle/");
    let first_record_read = trace
        .iter()
        .position(|r| matches!(&r.op, Op::Read(p) if p.starts_with(&lifecycle)))
        .expect("open reads the lifecycle records");
    assert!(
        synced < first_record_read,
        "lifecycle/ fsynced at op {synced}, first record read at op {first_record_read}"
    );
}

/// A failed fsync of `releases/` after the rename: the publication fails as
/// retryable `Unavailable` (the handle is poisoned), a reopen recovers the
/// directory as an orphan, and the exact retry reconciles it into a member.
#[test]
fn a_failed_parent_fsync_is_unavailable_and_the_exact_retry_reconciles_after_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    let releases = repo.root().join(RELEASES_DIR);
    // Where the releases/ fsync falls in a first publication's trace
    // (learned from a publication into another fresh root).
    fs.clear_trace();
    publish(&repo, 9).unwrap();
    let n = fs
        .trace()
        .iter()
        .position(|r| r.op == Op::SyncDir(releases.clone()))
        .expect("publication fsyncs releases/");
    drop(repo);
    let tmp = tempfile::tempdir().unwrap();
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    let releases = repo.root().join(RELEASES_DIR);
    fs.clear_trace();
    fs.fail_at(n);
    let e = publish(&repo, 1).unwrap_err();
    let failed = fs.trace().into_iter().find(|r| !r.ok).unwrap();
    assert_eq!(failed.op, Op::SyncDir(releases), "{e}");
    assert_eq!(e.class(), Class::Unavailable, "{e}");
    assert_eq!(publish(&repo, 2).unwrap_err().class(), Class::Unavailable);
    fs.clear_failpoint();
    drop(repo);
    let repo = open(tmp.path(), Bounds::default());
    assert_eq!(repo.orphans(), vec![digest(1)]);
    publish(&repo, 1).unwrap();
    assert!(repo.orphans().is_empty());
    assert_eq!(repo.fetch(&digest(1)).unwrap().component, component(1));
    publish(&repo, 2).unwrap();
}

/// A full disk is a limit the operator can act on, not an internal error:
/// class `ResourceExhausted`, nothing half-visible, and the same
/// publication succeeds once there is room.
#[test]
fn a_full_disk_is_resource_exhausted_and_the_retry_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    fs.clear_trace();
    // The stage's directory, then its first file: the write fails.
    fs.fail_at_with(1, std::io::ErrorKind::StorageFull);
    let e = publish(&repo, 1).unwrap_err();
    assert_eq!(e.class(), Class::ResourceExhausted, "{e}");
    assert!(repo.resolve(None, "r1@1.0.0").is_err());
    publish(&repo, 1).unwrap();
    assert!(repo.resolve(None, "r1@1.0.0").is_ok());
}

/// The trusted-local listing pages with the same bounds and tokens as a
/// tenant's, and shows no tenant's release.
#[test]
fn trusted_local_releases_are_listed_in_bounded_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let bounds = Bounds {
        max_page_rows: 2,
        ..Bounds::default()
    };
    let repo = open(tmp.path(), bounds);
    for n in 0..5 {
        let c = component(100 + n);
        let m = manifest(&format!("local{n}"), None, None, &c);
        repo.publish(&m, c, contract()).unwrap();
    }
    tenant_publish(&repo, 1, "acme", None).unwrap();
    let (mut seen, mut token, mut pages) = (Vec::new(), None, 0);
    loop {
        let page = repo.list_local_entries(token.as_deref()).unwrap();
        assert!(page.entries.len() <= 2);
        pages += 1;
        seen.extend(page.entries.into_iter().map(|e| e.descriptor.reference()));
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    seen.sort();
    assert_eq!(
        seen,
        (0..5)
            .map(|n| format!("local{n}@1.0.0"))
            .collect::<Vec<_>>()
    );
    // A tenant's token is no trusted-local token.
    let tenant_page = repo.list_catalog_entries("acme", None, None).unwrap();
    assert_eq!(tenant_page.entries.len(), 1);
    assert!(matches!(
        repo.list_local_entries(Some("00")),
        Err(ReleaseError::Page(PageError::InvalidToken))
    ));
}

/// A lost lifecycle record never revives a revoked release: deleting the
/// single record of a revoked release fails every open (reading or
/// writing) as corruption, so nothing can republish it; deleting its head
/// instead is detected the same way (until an explicit upgrade adopts the
/// intact records); deleting `lifecycle/` and the marker leaves the head
/// behind, and the upgrade refuses to bootstrap.
#[test]
fn a_lost_lifecycle_record_is_corruption_and_revives_nothing() {
    for lose in ["record", "head", "lifecycle and marker"] {
        let tmp = tempfile::tempdir().unwrap();
        let repo = open(tmp.path(), Bounds::default());
        tenant_publish(&repo, 1, "acme", None).unwrap();
        tenant_publish(&repo, 2, "acme", None).unwrap();
        repo.revoke(&digest(1)).unwrap();
        let root = repo.root().to_path_buf();
        drop(repo);
        match lose {
            "record" => std::fs::remove_file(root.join("lifecycle").join(digest(1).hex())).unwrap(),
            "head" => std::fs::remove_file(root.join(LIFECYCLE_HEAD)).unwrap(),
            _ => {
                std::fs::remove_dir_all(root.join("lifecycle")).unwrap();
                std::fs::remove_file(root.join(MARKER_FILE)).unwrap();
            }
        }
        let before = snapshot(&root);
        // A lost head alone loses no record: an explicit upgrade adopts the
        // records as found (the path of a catalog written before the head
        // existed), and the revoked release stays revoked.
        let accesses: &[Access] = if lose == "head" {
            &[Access::Read, Access::Write]
        } else {
            &[Access::Read, Access::Write, Access::Upgrade]
        };
        for &access in accesses {
            let e = open_as(access, &root)
                .err()
                .unwrap_or_else(|| panic!("{lose}: {access:?} opened a catalog that lost state"));
            // An unmarked root is no catalog to a reading open at all.
            let want = if access == Access::Read && lose != "record" && lose != "head" {
                Class::NotFound
            } else {
                Class::CorruptArtifact
            };
            assert_eq!(e.class(), want, "{lose}: {access:?}: {e}");
            assert_eq!(
                snapshot(&root),
                before,
                "{lose}: {access:?} changed the catalog"
            );
        }
        if lose == "head" {
            let up = open_as(Access::Upgrade, &root).unwrap();
            assert_eq!(up.membership(&digest(1)), Some(Membership::Revoked));
            drop(up);
            assert!(root.join(LIFECYCLE_HEAD).is_file());
            open(&root, Bounds::default());
        }
    }
}

/// Revoking or retiring a release that already is so reports unchanged and
/// writes nothing.
#[test]
fn an_unchanged_revocation_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let repo = open_with(fs.clone(), tmp.path(), Bounds::default()).unwrap();
    publish(&repo, 1).unwrap();
    repo.revoke(&digest(1)).unwrap();
    fs.clear_trace();
    for again in [
        repo.revoke(&digest(1)).unwrap(),
        repo.retire(&digest(1)).unwrap(),
    ] {
        assert_eq!(
            again.kind,
            custos_core::release::lifecycle::OutcomeKind::Unchanged
        );
        assert_eq!(again.after, Membership::Revoked);
    }
    assert!(mutations(&fs.trace()).is_empty(), "{:?}", fs.trace());
}
