//! Failpoints over every filesystem operation of the deployment
//! repository's sequences, with custos-fs's [`RecordingFs`]: the trace of a
//! successful run is recorded, then each operation `i` of it is failed on a
//! fresh copy.
//!
//! - **A mutation** (a conditional apply, and a delete): a failure up to
//!   and including the rename (the commit point) returns an error, leaves
//!   the installed generation as it was, and a reopen with [`RealFs`] shows
//!   the old state byte for byte — and the same mutation then succeeds with
//!   the reference receipt. A failure of the directory sync after the
//!   rename returns [`DeploymentRepoError::Uncertain`] carrying the exact
//!   receipt and detail, the new state is installed, the handle refuses
//!   further mutations (poisoned), and a reopen shows the new state.
//! - **The first open of a nonexistent nested path** `a/b/c`: every
//!   failure fails the open (a failed sync of the root or any ancestor with
//!   `catalog-path-durability-uncertain`), releases the lock, and a retry
//!   with [`RealFs`] opens an empty, marked catalog.
//!
//! Never a panic: every call runs under `catch_unwind`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::Class;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use custos_core::deployment::state::{Mutation, Receipt, Request, VersionedDeployment};
use custos_core::release::Sha256;
use custos_core::root::MARKER_FILE;
use custos_fs::deployment::{
    DeploymentRepoError, DeploymentRepository, CATALOG_FILE, PENDING_FILE,
};
use custos_fs::{
    Access, FsError, Op, RealFs, Recorded, RecordingFs, LOCK_FILE, PATH_DURABILITY_UNCERTAIN,
};

mod support;
use support::{acme_page, apply, component, names, releases, request, Source};

/// What a reader can see of a catalog: its generation and both records.
type State = (
    u64,
    Option<VersionedDeployment>,
    Option<VersionedDeployment>,
);

fn state<F: custos_fs::Fs>(repo: &DeploymentRepository<F>) -> State {
    (
        repo.generation().unwrap(),
        repo.get("acme", "blue").unwrap(),
        repo.get("acme", "green").unwrap(),
    )
}

fn reopen(root: &Path, source: &Source) -> DeploymentRepository<RealFs> {
    DeploymentRepository::open(RealFs, root, Arc::clone(source), Access::Write)
        .unwrap_or_else(|e| panic!("reopen {}: {e}", root.display()))
}

/// A fresh catalog at `dir` through a recording fs, holding `blue` (gen 1)
/// and `green` (gen 2).
fn fresh(
    dir: &Path,
    source: &Source,
    digests: [Sha256; 2],
) -> (RecordingFs, DeploymentRepository<RecordingFs>) {
    let fs = RecordingFs::new(RealFs);
    let repo =
        DeploymentRepository::open(fs.clone(), dir, Arc::clone(source), Access::Write).unwrap();
    repo.mutate(apply("blue", digests[0], 1, Some(0))).unwrap();
    repo.mutate(apply("green", digests[1], 2, Some(0))).unwrap();
    (fs, repo)
}

/// An operation's name and path (without the bytes written).
fn short(op: &Op) -> String {
    match op {
        Op::WriteNew(p, data) => format!("WriteNew({}, {} bytes)", p.display(), data.len()),
        other => format!("{other:?}"),
    }
}

fn same_op(a: &Op, b: &Op) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The reference run of `req`: its receipt, trace, the state it leaves and
/// the record's bytes after.
struct Reference {
    receipt: Receipt,
    trace: Vec<Recorded>,
    after: State,
    bytes: Vec<u8>,
    rename: usize,
    sync: usize,
}

fn reference(
    base: &Path,
    label: &str,
    source: &Source,
    d: [Sha256; 2],
    req: &Request,
) -> Reference {
    let (fs, repo) = fresh(&base.join(format!("{label}-ref")), source, d);
    fs.clear_trace();
    let receipt = repo.mutate(req.clone()).unwrap();
    let trace = fs.trace();
    let rename = trace
        .iter()
        .position(|r| matches!(r.op, Op::Rename(..)))
        .unwrap();
    let sync = rename
        + trace[rename..]
            .iter()
            .position(|r| matches!(r.op, Op::SyncDir(..)))
            .unwrap();
    assert_eq!(
        sync,
        trace.len() - 1,
        "{label}: nothing after the root sync"
    );
    Reference {
        receipt,
        after: state(&repo),
        bytes: std::fs::read(repo.root().join(CATALOG_FILE)).unwrap(),
        trace,
        rename,
        sync,
    }
}

/// Fails each operation of `req`'s sequence in turn; returns the number
/// of failpoints checked.
fn fail_each_operation(label: &str, req: &Request) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let (source, d) = releases(tmp.path());
    let r = reference(tmp.path(), label, &source, d, req);
    for i in 0..r.trace.len() {
        let dir = tmp.path().join(format!("{label}-{i}"));
        let (fs, repo) = fresh(&dir, &source, d);
        let root = repo.root().to_path_buf();
        let before = state(&repo);
        let before_bytes = std::fs::read(root.join(CATALOG_FILE)).unwrap();
        fs.clear_trace();
        fs.fail_at(i);
        let result = catch_unwind(AssertUnwindSafe(|| repo.mutate(req.clone())))
            .unwrap_or_else(|_| panic!("{label}: failing op {i} panicked"));
        let trace = fs.trace();
        let what = format!("{label}: failing op {i} ({})", short(&r.trace[i].op));
        assert!(
            same_op(&trace[i].op, &r.trace[i].op) && !trace[i].ok,
            "{what}"
        );
        if i <= r.rename {
            let err = result.err().unwrap_or_else(|| panic!("{what}: succeeded"));
            assert!(
                !matches!(err, DeploymentRepoError::Uncertain(_)),
                "{what}: {err}"
            );
            assert_eq!(state(&repo), before, "{what}: installed anyway");
            drop(repo);
            let again = reopen(&root, &source);
            assert_eq!(state(&again), before, "{what}: after reopen");
            assert_eq!(
                std::fs::read(root.join(CATALOG_FILE)).unwrap(),
                before_bytes
            );
            assert!(!root.join(PENDING_FILE).exists(), "{what}: debris kept");
            // And the mutation goes through on the recovered catalog.
            assert_eq!(
                again.mutate(req.clone()).unwrap(),
                r.receipt,
                "{what}: retry"
            );
            assert_eq!(state(&again), r.after);
        } else {
            assert_eq!(i, r.sync, "{what}: an operation after the commit point");
            let Err(DeploymentRepoError::Uncertain(u)) = &result else {
                panic!("{what}: {result:?}");
            };
            assert_eq!(u.receipt, r.receipt, "{what}: the committed receipt");
            assert_eq!(u.detail(), r.receipt.mutation_detail());
            assert!(u.detail().is_some_and(|d| d.committed));
            assert!(matches!(u.source, FsError::SyncFailed { .. }), "{what}");
            let e = result.as_ref().unwrap_err();
            assert_eq!(e.reason(), "commit-durability-uncertain");
            assert_eq!(
                state(&repo),
                r.after,
                "{what}: the renamed state is installed"
            );
            let next = repo.mutate(apply("red", d[0], 1, None)).unwrap_err();
            assert!(
                matches!(next, DeploymentRepoError::Fs(FsError::Poisoned)),
                "{next}"
            );
            drop(repo);
            let again = reopen(&root, &source);
            assert_eq!(state(&again), r.after, "{what}: after reopen");
            assert_eq!(std::fs::read(root.join(CATALOG_FILE)).unwrap(), r.bytes);
        }
    }
    println!(
        "deployment failpoints, {label}: {} operations failed one at a time ({} before or at the \
         rename, 1 directory sync after it)",
        r.trace.len(),
        r.rename + 1
    );
    r.trace.len()
}

#[test]
fn every_failpoint_of_a_conditional_apply() {
    let d = [Sha256::of(&component(1)), Sha256::of(&component(2))];
    let n = fail_each_operation("apply", &apply("blue", d[1], 5, Some(1)));
    assert!(n >= 5, "only {n} operations");
}

#[test]
fn every_failpoint_of_a_delete() {
    let n = fail_each_operation(
        "delete",
        &request(Mutation::Delete {
            id: "green".into(),
            expected: Some(2),
        }),
    );
    assert!(n >= 5, "only {n} operations");
}

/// A retry with the real filesystem opens an empty, marked catalog.
fn retry_opens_empty_and_marked(path: &Path, source: &Source, what: &str) {
    let repo = DeploymentRepository::open(RealFs, path, Arc::clone(source), Access::Write)
        .unwrap_or_else(|e| panic!("{what}: retry: {e}"));
    assert_eq!(repo.generation().unwrap(), 0, "{what}");
    let page = repo.page(&acme_page(10)).unwrap();
    assert!(page.deployments.is_empty(), "{what}");
    assert_eq!(
        names(repo.root()),
        [LOCK_FILE, MARKER_FILE, CATALOG_FILE],
        "{what}"
    );
    drop(repo);
    // Marked: a reading open (which never initializes) accepts it.
    let read = DeploymentRepository::open(RealFs, path, Arc::clone(source), Access::Read)
        .unwrap_or_else(|e| panic!("{what}: read-only open: {e}"));
    assert_eq!(read.generation().unwrap(), 0);
}

#[test]
fn every_failpoint_of_a_first_open_of_a_nested_path() {
    let tmp = tempfile::tempdir().unwrap();
    let (source, _) = releases(tmp.path());
    let fs = RecordingFs::new(RealFs);
    let reference_path = tmp.path().join("ref/a/b/c");
    drop(
        DeploymentRepository::open(
            fs.clone(),
            &reference_path,
            Arc::clone(&source),
            Access::Write,
        )
        .unwrap(),
    );
    let trace = fs.trace();
    let lock = trace
        .iter()
        .position(|r| matches!(r.op, Op::Lock(..)))
        .unwrap();
    let ancestors: Vec<PathBuf> = trace[..lock]
        .iter()
        .filter_map(|r| match &r.op {
            Op::SyncDir(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    let canonical = std::fs::canonicalize(&reference_path).unwrap();
    assert_eq!(
        ancestors,
        canonical
            .ancestors()
            .map(Path::to_path_buf)
            .collect::<Vec<_>>()
    );
    let mut uncertain = 0;
    for i in 0..trace.len() {
        let path = tmp.path().join(format!("open-{i}/a/b/c"));
        let fs = RecordingFs::new(RealFs);
        fs.fail_at(i);
        let what = format!("open: failing op {i} ({})", short(&trace[i].op));
        let result = catch_unwind(AssertUnwindSafe(|| {
            DeploymentRepository::open(fs.clone(), &path, Arc::clone(&source), Access::Write)
        }))
        .unwrap_or_else(|_| panic!("{what}: panicked"));
        let got = fs.trace();
        assert!(same_op(&got[i].op, &trace[i].op) && !got[i].ok, "{what}");
        let err = result
            .err()
            .unwrap_or_else(|| panic!("{what}: opened anyway"));
        if i < lock && matches!(trace[i].op, Op::SyncDir(_)) {
            assert_eq!(err.reason(), PATH_DURABILITY_UNCERTAIN, "{what}: {err}");
            assert_eq!(err.class(), Class::Unavailable);
            uncertain += 1;
        }
        retry_opens_empty_and_marked(&path, &source, &what);
    }
    assert_eq!(uncertain, ancestors.len());
    println!(
        "deployment failpoints, first open of a/b/c: {} operations failed one at a time, {} of \
         them ancestor syncs ({}) refused as {PATH_DURABILITY_UNCERTAIN}; every retry opened an \
         empty marked catalog",
        trace.len(),
        uncertain,
        ancestors
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ← ")
    );
}
