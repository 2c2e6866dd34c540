//! The durable-directory primitives on real files under a temporary
//! directory, through the recording filesystem: the exact open sequence
//! (anchor, create, canonicalize, fsync leaf → root, lock), failure at each
//! ancestor and full replay on retry, exclusive ownership, and the exact
//! publication order with every single operation failed in turn.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io;
use std::path::{Path, PathBuf};

use custos_fs::fs::LockGuard;
use custos_fs::{
    DurableRoot, Fs, FsError, Op, RealFs, RecordingFs, LOCK_FILE, PATH_DURABILITY_UNCERTAIN,
    ROOT_LOCKED,
};

/// The real filesystem with a fixed working directory, so relative roots are
/// tested without changing the test process's own.
#[derive(Clone)]
struct Cwd(PathBuf);

impl Fs for Cwd {
    fn current_dir(&self) -> io::Result<PathBuf> {
        Ok(self.0.clone())
    }
    fn create_dir_all(&self, p: &Path) -> io::Result<()> {
        RealFs.create_dir_all(p)
    }
    fn create_dir(&self, p: &Path) -> io::Result<()> {
        RealFs.create_dir(p)
    }
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        RealFs.canonicalize(p)
    }
    fn write_new(&self, p: &Path, d: &[u8]) -> io::Result<()> {
        RealFs.write_new(p, d)
    }
    fn sync_file(&self, p: &Path) -> io::Result<()> {
        RealFs.sync_file(p)
    }
    fn sync_dir(&self, p: &Path) -> io::Result<()> {
        RealFs.sync_dir(p)
    }
    fn rename(&self, f: &Path, t: &Path) -> io::Result<()> {
        RealFs.rename(f, t)
    }
    fn remove_dir_all(&self, p: &Path) -> io::Result<()> {
        RealFs.remove_dir_all(p)
    }
    fn try_lock_exclusive(&self, p: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        RealFs.try_lock_exclusive(p)
    }
    fn metadata(&self, p: &Path) -> io::Result<Option<custos_fs::fs::Meta>> {
        RealFs.metadata(p)
    }
    fn read_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        RealFs.read_dir(p)
    }
    fn read_bounded(&self, p: &Path, limit: u64) -> io::Result<Vec<u8>> {
        RealFs.read_bounded(p, limit)
    }
}

fn ops(fs: &RecordingFs<Cwd>) -> Vec<Op> {
    fs.trace().into_iter().map(|r| r.op).collect()
}

fn expected_open(cwd: &Path, rel: &Path, canonical: &Path) -> Vec<Op> {
    let anchored = cwd.join(rel);
    let mut want = vec![
        Op::CurrentDir,
        Op::CreateDirAll(anchored.clone()),
        Op::Canonicalize(anchored),
    ];
    want.extend(canonical.ancestors().map(|d| Op::SyncDir(d.into())));
    want.push(Op::Lock(canonical.join(LOCK_FILE)));
    want
}

#[test]
fn open_anchors_creates_syncs_leaf_to_root_then_locks() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().canonicalize().unwrap();
    let fs = RecordingFs::new(Cwd(cwd.clone()));
    let rel = Path::new("a/b/../b/c");
    let root = DurableRoot::open(fs.clone(), rel).unwrap();
    let canonical = cwd.join("a/b/c");
    assert_eq!(root.root(), canonical);
    assert!(root.root().is_absolute());
    assert_eq!(ops(&fs), expected_open(&cwd, rel, &canonical));
    assert!(fs.trace().iter().all(|r| r.ok));
    // The root's first sync is the leaf, the last the filesystem root.
    let syncs: Vec<_> = ops(&fs)
        .into_iter()
        .filter_map(|o| match o {
            Op::SyncDir(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(syncs.first(), Some(&canonical));
    assert_eq!(syncs.last().map(PathBuf::as_path), Some(Path::new("/")));
}

#[test]
fn a_failed_ancestor_sync_is_unavailable_and_a_retry_replays_the_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().canonicalize().unwrap();
    let canonical = cwd.join("x/y");
    let ancestors = canonical.ancestors().count();
    for i in 0..ancestors {
        let _ = std::fs::remove_dir_all(cwd.join("x"));
        let fs = RecordingFs::new(Cwd(cwd.clone()));
        // current_dir, create_dir_all, canonicalize, then the syncs.
        fs.fail_at(3 + i);
        let err = DurableRoot::open(fs.clone(), Path::new("x/y")).unwrap_err();
        assert_eq!(
            err.unavailable_reason(),
            Some(PATH_DURABILITY_UNCERTAIN),
            "{err}"
        );
        let trace = fs.trace();
        assert_eq!(trace.len(), 4 + i, "the chain stops at the failed sync");
        assert!(!trace.last().unwrap().ok);
        assert!(
            !trace.iter().any(|r| matches!(r.op, Op::Lock(_))),
            "nothing is locked or initialized"
        );
        assert!(canonical.is_dir(), "created directories stay in place");
        assert!(!canonical.join(LOCK_FILE).exists());
        // The retry repeats the complete chain although the path exists now.
        fs.clear_trace();
        let root = DurableRoot::open(fs.clone(), Path::new("x/y")).unwrap();
        assert_eq!(root.root(), canonical);
        assert_eq!(ops(&fs), expected_open(&cwd, Path::new("x/y"), &canonical));
    }
}

#[test]
fn a_second_opener_is_unavailable_until_the_first_drops() {
    let tmp = tempfile::tempdir().unwrap();
    let first = DurableRoot::open(RealFs, tmp.path()).unwrap();
    let err = DurableRoot::open(RealFs, tmp.path()).unwrap_err();
    assert_eq!(err.unavailable_reason(), Some(ROOT_LOCKED), "{err}");
    drop(first);
    DurableRoot::open(RealFs, tmp.path()).unwrap();
}

fn files() -> Vec<(&'static str, &'static [u8])> {
    vec![
        ("component.wasm", b"\0asm".as_slice()),
        ("COMPLETE", b"{}".as_slice()),
    ]
}

#[test]
fn publication_runs_in_the_durable_order() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RecordingFs::new(RealFs);
    let root = DurableRoot::open(fs.clone(), tmp.path()).unwrap();
    let stage_dir = root.ensure_dir(".tmp").unwrap();
    let releases = root.ensure_dir("releases").unwrap();
    fs.clear_trace();
    let dest = root
        .publish_dir(".tmp", "s1", "releases", "d1", &files())
        .unwrap();
    let stage = stage_dir.join("s1");
    let want = vec![
        Op::CreateDir(stage.clone()),
        Op::WriteNew(stage.join("component.wasm"), b"\0asm".to_vec()),
        Op::SyncFile(stage.join("component.wasm")),
        Op::WriteNew(stage.join("COMPLETE"), b"{}".to_vec()),
        Op::SyncFile(stage.join("COMPLETE")),
        Op::SyncDir(stage.clone()),
        Op::Rename(stage, dest.clone()),
        Op::SyncDir(releases.clone()),
    ];
    assert_eq!(
        fs.trace().into_iter().map(|r| r.op).collect::<Vec<_>>(),
        want
    );
    assert_eq!(dest, releases.join("d1"));
    assert_eq!(std::fs::read(dest.join("COMPLETE")).unwrap(), b"{}");
}

#[test]
fn every_single_publication_failure_is_reported_and_fsync_failures_poison() {
    let steps = 8;
    for i in 0..steps {
        let tmp = tempfile::tempdir().unwrap();
        let fs = RecordingFs::new(RealFs);
        let root = DurableRoot::open(fs.clone(), tmp.path()).unwrap();
        root.ensure_dir(".tmp").unwrap();
        root.ensure_dir("releases").unwrap();
        fs.clear_trace();
        fs.fail_at(i);
        let err = root
            .publish_dir(".tmp", "s", "releases", "d", &files())
            .unwrap_err();
        let failed = fs.trace().last().unwrap().op.clone();
        let is_sync = matches!(failed, Op::SyncFile(_) | Op::SyncDir(_));
        assert_eq!(root.is_poisoned(), is_sync, "step {i}: {failed:?}");
        if is_sync {
            assert!(matches!(err, FsError::SyncFailed { .. }), "{err}");
            let again = root
                .publish_dir(".tmp", "s2", "releases", "d2", &files())
                .unwrap_err();
            assert!(matches!(again, FsError::Poisoned));
        } else {
            assert!(matches!(err, FsError::Io { .. }), "{err}");
        }
        assert_eq!(fs.trace().len(), i + 1, "nothing runs after the failure");
    }
}

#[test]
fn names_must_be_plain() {
    let tmp = tempfile::tempdir().unwrap();
    let root = DurableRoot::open(RealFs, tmp.path()).unwrap();
    for bad in ["", "..", "a/b", "/abs", "."] {
        assert!(matches!(root.ensure_dir(bad), Err(FsError::InvalidName(_))));
    }
}
