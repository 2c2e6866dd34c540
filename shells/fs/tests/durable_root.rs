//! The durable-directory primitives on real files under a temporary
//! directory, through the recording filesystem: the exact open sequence
//! (anchor, create, canonicalize, fsync leaf → root, lock), failure at each
//! ancestor and full replay on retry, exclusive ownership, and the exact
//! publication order with every single operation failed in turn.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::Class;
use std::io;
use std::path::{Path, PathBuf};

use custos_core::root::{MARKER_FILE, MARKER_PENDING};
use custos_fs::fs::LockGuard;
use custos_fs::{
    Access, DurableRoot, Fs, FsError, Op, OpenPlan, RealFs, RecordingFs, LOCK_FILE,
    PATH_DURABILITY_UNCERTAIN, ROOT_LOCKED,
};

mod support;
use support::LAYOUT;

fn open<F: Fs>(fs: F, path: &Path) -> Result<DurableRoot<F>, FsError> {
    DurableRoot::open(fs, path, &LAYOUT, Access::Write).map(|(root, _)| root)
}

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
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        RealFs.remove_file(p)
    }
    fn try_lock_shared(&self, p: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        RealFs.try_lock_shared(p)
    }
    fn file_id(&self, p: &Path) -> io::Result<Option<custos_fs::fs::FileId>> {
        RealFs.file_id(p)
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
    fn open_read(&self, p: &Path) -> io::Result<Box<dyn io::Read + Send>> {
        RealFs.open_read(p)
    }
    fn write_new_from(&self, p: &Path, src: &mut dyn io::Read) -> io::Result<u64> {
        RealFs.write_new_from(p, src)
    }
}

fn ops(fs: &RecordingFs<Cwd>) -> Vec<Op> {
    fs.trace().into_iter().map(|r| r.op).collect()
}

/// The open sequence up to the lock: anchor, look, create (when missing),
/// canonicalize, look, sync leaf → root, classify, lock.
fn expected_open(cwd: &Path, rel: &Path, canonical: &Path, created: bool) -> Vec<Op> {
    let anchored = cwd.join(rel);
    let mut want = vec![Op::CurrentDir, Op::Metadata(anchored.clone())];
    if created {
        want.push(Op::CreateDirAll(anchored.clone()));
    }
    want.push(Op::Canonicalize(anchored));
    want.push(Op::Metadata(canonical.into()));
    want.extend(canonical.ancestors().map(|d| Op::SyncDir(d.into())));
    want.push(Op::ReadDir(canonical.into()));
    want.push(Op::Lock(canonical.join(LOCK_FILE)));
    want
}

/// The ops after the lock of a fresh root's initialization end with the
/// marker: staged, synced, renamed (the commit point, after the lock's
/// identity is checked), then the root synced.
fn assert_initialized_last(ops: &[Op], canonical: &Path) {
    let pending = canonical.join(MARKER_PENDING);
    let want = [
        Op::WriteNew(pending.clone(), LAYOUT.marker.to_vec()),
        Op::SyncFile(pending.clone()),
        Op::FileId(canonical.join(LOCK_FILE)),
        Op::Rename(pending, canonical.join(MARKER_FILE)),
        Op::SyncDir(canonical.into()),
    ];
    assert_eq!(
        ops.get(ops.len().saturating_sub(want.len())..),
        Some(&want[..]),
        "{ops:#?}"
    );
}

#[test]
fn open_anchors_creates_syncs_leaf_to_root_then_locks() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().canonicalize().unwrap();
    let fs = RecordingFs::new(Cwd(cwd.clone()));
    let rel = Path::new("a/b/../b/c");
    let (root, plan) = DurableRoot::open(fs.clone(), rel, &LAYOUT, Access::Write).unwrap();
    assert_eq!(plan, OpenPlan::Initialize);
    let canonical = cwd.join("a/b/c");
    assert_eq!(root.root(), canonical);
    assert!(root.root().is_absolute());
    let want = expected_open(&cwd, rel, &canonical, true);
    assert_eq!(ops(&fs).get(..want.len()), Some(&want[..]));
    assert_initialized_last(&ops(&fs), &canonical);
    assert_eq!(
        std::fs::read(canonical.join(MARKER_FILE)).unwrap(),
        LAYOUT.marker
    );
    assert!(fs.trace().iter().all(|r| r.ok));
    // The root's first sync is the leaf, the last the filesystem root.
    let syncs: Vec<_> = want
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
        // current_dir, metadata, create_dir_all, canonicalize, metadata,
        // then the syncs.
        fs.fail_at(5 + i);
        let err = open(fs.clone(), Path::new("x/y")).unwrap_err();
        assert_eq!(
            err.unavailable_reason(),
            Some(PATH_DURABILITY_UNCERTAIN),
            "{err}"
        );
        let trace = fs.trace();
        assert_eq!(trace.len(), 6 + i, "the chain stops at the failed sync");
        assert!(!trace.last().unwrap().ok);
        assert!(
            !trace.iter().any(|r| matches!(r.op, Op::Lock(_))),
            "nothing is locked or initialized"
        );
        assert!(canonical.is_dir(), "created directories stay in place");
        assert!(!canonical.join(LOCK_FILE).exists());
        // The retry repeats the complete chain although the path exists now.
        fs.clear_trace();
        let root = open(fs.clone(), Path::new("x/y")).unwrap();
        assert_eq!(root.root(), canonical);
        let want = expected_open(&cwd, Path::new("x/y"), &canonical, false);
        assert_eq!(ops(&fs).get(..want.len()), Some(&want[..]));
        assert_initialized_last(&ops(&fs), &canonical);
    }
}

#[test]
fn a_second_opener_is_unavailable_until_the_first_drops() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open(RealFs, tmp.path()).unwrap();
    let err = open(RealFs, tmp.path()).unwrap_err();
    assert_eq!(err.unavailable_reason(), Some(ROOT_LOCKED), "{err}");
    drop(first);
    open(RealFs, tmp.path()).unwrap();
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
    let root = open(fs.clone(), tmp.path()).unwrap();
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
        Op::FileId(root.root().join(LOCK_FILE)),
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
    let steps = 9;
    for i in 0..steps {
        let tmp = tempfile::tempdir().unwrap();
        let fs = RecordingFs::new(RealFs);
        let root = open(fs.clone(), tmp.path()).unwrap();
        root.ensure_dir(".tmp").unwrap();
        root.ensure_dir("releases").unwrap();
        fs.clear_trace();
        fs.fail_at(i);
        let err = root
            .publish_dir(".tmp", "s", "releases", "d", &files())
            .unwrap_err();
        // The failed operation is the i-th; only the lock check a failed
        // write runs to explain itself (a read) may follow it.
        let failed = fs.trace()[i].op.clone();
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
        let after: Vec<Op> = fs.trace().into_iter().skip(i + 1).map(|r| r.op).collect();
        assert!(
            after.iter().all(|op| matches!(op, Op::FileId(_))),
            "nothing runs after the failure: {after:?}"
        );
    }
}

#[test]
fn names_must_be_plain() {
    let tmp = tempfile::tempdir().unwrap();
    let root = open(RealFs, tmp.path()).unwrap();
    for bad in ["", "..", "a/b", "/abs", "."] {
        assert!(matches!(root.ensure_dir(bad), Err(FsError::InvalidName(_))));
    }
}

/// Every directory and file under `dir` with its bytes: what
/// "byte-untouched" is checked against.
fn tree(dir: &Path) -> custos_fs::crash::Image {
    custos_fs::crash::image_of(dir).unwrap()
}

/// A name under a test root and its bytes (`None`: a directory).
type Planted = (&'static str, Option<&'static [u8]>);

/// A directory that is neither initialized nor empty is refused by every
/// kind of open before anything is created in it: no lock file, no state
/// directory, and the user's files where they were.
#[test]
fn a_foreign_directory_is_refused_and_left_byte_untouched() {
    let cases: [&[Planted]; 4] = [
        // The user's cache beside a directory that happens to be called releases/.
        &[
            ("releases", None),
            (".tmp", None),
            (".tmp/cache", None),
            (".tmp/cache/important.txt", Some(b"keep me")),
        ],
        &[("notes.txt", Some(b"mine"))],
        &[("releases", Some(b"a file, not a directory"))],
        &[(".catalog.lock", Some(b"not empty"))],
    ];
    for case in cases {
        let tmp = tempfile::tempdir().unwrap();
        for (name, body) in case {
            let p = tmp.path().join(name);
            match body {
                Some(b) => std::fs::write(&p, b).unwrap(),
                None => std::fs::create_dir_all(&p).unwrap(),
            }
        }
        let before = tree(tmp.path());
        for access in [Access::Write, Access::Read] {
            let err = DurableRoot::open(RealFs, tmp.path(), &LAYOUT, access).unwrap_err();
            assert!(
                matches!(err, FsError::Refused { .. }),
                "{case:?} {access:?}: {err}"
            );
            assert_eq!(
                tree(tmp.path()),
                before,
                "{case:?} {access:?} changed the directory"
            );
        }
    }
}

#[test]
fn a_root_that_is_a_file_is_refused_with_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("root");
    std::fs::write(&file, b"x").unwrap();
    for access in [Access::Write, Access::Read] {
        let err = DurableRoot::open(RealFs, &file, &LAYOUT, access).unwrap_err();
        assert_eq!(err.class(), Class::InvalidArgument, "{err}");
        assert!(err.to_string().contains("not a directory"), "{err}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// A reading open never creates: not a missing root, not a lock file, not
/// the layout of an empty directory.
#[test]
fn a_reading_open_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = DurableRoot::open(RealFs, &missing, &LAYOUT, Access::Read).unwrap_err();
    assert_eq!(err.class(), Class::NotFound, "{err}");
    assert!(!missing.exists());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = DurableRoot::open(RealFs, &empty, &LAYOUT, Access::Read).unwrap_err();
    assert_eq!(err.class(), Class::NotFound, "{err}");
    assert_eq!(tree(&empty).len(), 1, "only the directory itself");
    // An initialized root opens for reading; the handle refuses mutation,
    // and a reader and a writer exclude each other.
    drop(open(RealFs, &empty).unwrap());
    let before = tree(&empty);
    let (reader, plan) = DurableRoot::open(RealFs, &empty, &LAYOUT, Access::Read).unwrap();
    assert_eq!(plan, OpenPlan::Open);
    assert!(matches!(
        reader.ensure_dir("releases"),
        Err(FsError::ReadOnly)
    ));
    assert!(matches!(reader.check_live(), Err(FsError::ReadOnly)));
    let second = DurableRoot::open(RealFs, &empty, &LAYOUT, Access::Read);
    assert!(second.is_ok(), "readers share the lock");
    let err = open(RealFs, &empty).unwrap_err();
    assert_eq!(err.unavailable_reason(), Some(ROOT_LOCKED), "{err}");
    drop((reader, second));
    assert_eq!(tree(&empty), before);
}

/// What an interrupted initialization leaves (the lock, empty state
/// directories, a partial marker staging file) is still a fresh root: the
/// next writing open completes it.
#[test]
fn an_interrupted_initialization_is_completed() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(LOCK_FILE), b"").unwrap();
    std::fs::create_dir(tmp.path().join(".tmp")).unwrap();
    std::fs::write(tmp.path().join(MARKER_PENDING), b"custos").unwrap();
    let (_root, plan) = DurableRoot::open(RealFs, tmp.path(), &LAYOUT, Access::Write).unwrap();
    assert_eq!(plan, OpenPlan::Initialize);
    assert_eq!(
        std::fs::read(tmp.path().join(MARKER_FILE)).unwrap(),
        LAYOUT.marker
    );
    assert!(!tmp.path().join(MARKER_PENDING).exists());
    assert!(tmp.path().join("releases").is_dir());
}

/// The marker, not the directories, says the root is initialized: a
/// marked root missing a state directory, or with a marker that is no
/// kind's, fails every open as corrupt and is not re-created; one with
/// another kind's marker is that kind's root, refused as invalid input.
#[test]
fn a_marked_root_missing_its_state_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open(RealFs, tmp.path()).unwrap());
    std::fs::remove_dir(tmp.path().join("releases")).unwrap();
    for access in [Access::Write, Access::Read] {
        let err = DurableRoot::open(RealFs, tmp.path(), &LAYOUT, access).unwrap_err();
        assert_eq!(err.class(), Class::CorruptArtifact, "{err}");
        assert!(
            err.to_string().contains("its releases/ is missing"),
            "{err}"
        );
    }
    assert!(
        !tmp.path().join("releases").exists(),
        "lost state is not re-created"
    );
    std::fs::create_dir(tmp.path().join("releases")).unwrap();
    std::fs::write(
        tmp.path().join(MARKER_FILE),
        b"custos deployment catalog 1\n",
    )
    .unwrap();
    // Another kind's marker: that kind's root named here, refused as
    // invalid input naming the kind, not as damage.
    let err = open(RealFs, tmp.path()).unwrap_err();
    assert_eq!(err.class(), Class::InvalidArgument, "{err}");
    assert!(
        err.to_string()
            .contains("this directory is a deployment catalog, not a test catalog"),
        "{err}"
    );
    // A marker that is no kind's is damage.
    std::fs::write(
        tmp.path().join(MARKER_FILE),
        b"custos dep1oyment catalog 1\n",
    )
    .unwrap();
    let err = open(RealFs, tmp.path()).unwrap_err();
    assert_eq!(err.class(), Class::CorruptArtifact, "{err}");
    // The staging directory is scratch: a writing open re-creates it.
    std::fs::write(tmp.path().join(MARKER_FILE), LAYOUT.marker).unwrap();
    std::fs::remove_dir(tmp.path().join(".tmp")).unwrap();
    drop(open(RealFs, tmp.path()).unwrap());
    assert!(tmp.path().join(".tmp").is_dir());
}

/// Deleting `.catalog.lock` under a live owner lets a later opener lock a
/// new file. The first owner notices at its next commit point and commits
/// nothing; the same holds for a lock file replaced by another file.
#[test]
fn a_deleted_or_replaced_lock_file_stops_the_first_owner_before_it_commits() {
    for replace in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let first = open(RealFs, tmp.path()).unwrap();
        let lock = tmp.path().join(LOCK_FILE);
        std::fs::remove_file(&lock).unwrap();
        if replace {
            std::fs::write(&lock, b"").unwrap();
        }
        let err = first
            .publish_dir(".tmp", "s", "releases", "d", &files())
            .unwrap_err();
        assert_eq!(
            err.unavailable_reason(),
            Some(custos_fs::LOCK_REPLACED),
            "{err}"
        );
        assert!(!tmp.path().join("releases/d").exists(), "nothing committed");
        assert!(first.check_lock().is_err());
        // A second opener now gets the lock (on the new file): the two
        // are not both able to commit.
        let second = open(RealFs, tmp.path()).unwrap();
        second
            .publish_dir(".tmp", "s2", "releases", "d2", &files())
            .unwrap();
        assert!(first
            .publish_dir(".tmp", "s3", "releases", "d3", &files())
            .is_err());
    }
}

/// A reading open needs the lock file to share; it never creates one.
#[test]
fn a_reading_open_without_a_lock_file_is_unavailable() {
    let tmp = tempfile::tempdir().unwrap();
    drop(open(RealFs, tmp.path()).unwrap());
    std::fs::remove_file(tmp.path().join(LOCK_FILE)).unwrap();
    let err = DurableRoot::open(RealFs, tmp.path(), &LAYOUT, Access::Read).unwrap_err();
    assert_eq!(
        err.unavailable_reason(),
        Some(custos_fs::LOCK_MISSING),
        "{err}"
    );
    assert!(!tmp.path().join(LOCK_FILE).exists());
    drop(open(RealFs, tmp.path()).unwrap());
    assert!(DurableRoot::open(RealFs, tmp.path(), &LAYOUT, Access::Read).is_ok());
}
