//! An owned, durable catalog root: the open sequence and the one module that
//! does all durable publication.
//!
//! **Open** ([`DurableRoot::open`]) follows [`custos_core::root`]'s rule of
//! which directory a catalog may adopt. Anchor a relative path against the
//! working directory once; a writing open creates a nonexistent root (a
//! reading one is refused); canonicalize; a writing open fsyncs every
//! directory from the root up to `/`, leaf first. Then the root is
//! classified from its listing and the decision taken **before** the lock,
//! because taking it creates `.catalog.lock`: a directory that is neither
//! initialized (no `INITIALIZED` marker) nor empty is refused
//! ([`FsError::Refused`]) and left byte-untouched. Only then the `fs2` lock
//! on `.catalog.lock` — exclusive to write, shared to read (a reader never
//! creates the file) — is taken, its identity checked against the path,
//! and a writing open decides again under the lock and acts: initialize a
//! fresh root (fsync the root, so the new lock file's entry is durable
//! before any scratch file can appear beside it; then state directories,
//! then the marker), or clear the staging directory of an initialized one. A failed ancestor sync is a retryable
//! [`FsError::Unavailable`] with [`PATH_DURABILITY_UNCERTAIN`] and nothing
//! is initialized or locked; a retry repeats the whole chain. A second live
//! opener gets [`FsError::Unavailable`] with [`ROOT_LOCKED`].
//!
//! **The lock file is checked, not trusted.** An operator who deletes
//! `.catalog.lock` under a live owner lets a later opener lock a new file
//! and believe itself alone. So the handle remembers the identity (device,
//! inode) of the file it locked and compares it with what the path names
//! after locking and before every commit point (every rename): a
//! difference is [`FsError::Unavailable`] with [`LOCK_REPLACED`], and
//! nothing is committed through that handle.
//!
//! **A read handle writes nothing**: every mutating primitive fails with
//! [`FsError::ReadOnly`].
//!
//! **Publication** ([`DurableRoot::publish_dir`]): write each file into a
//! private directory under the staging area → fsync each file → fsync the
//! staging directory → rename it to its destination → fsync the destination's
//! parent. Any fsync error poisons the handle.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use custos_core::root::LOCK_FILE;

use custos_core::root::{
    check_marker, check_state, classify, decide, decide_missing, Access, Layout, Listed, OpenPlan,
    RootRefusal, Seen, Standing, MARKER_FILE, MARKER_PENDING,
};

use crate::error::{
    io_err, FsError, LOCK_MISSING, LOCK_REPLACED, PATH_DURABILITY_UNCERTAIN, ROOT_LOCKED,
};
use crate::fs::{FileId, Fs, Kind, LockGuard, Meta};

/// The layouts of this crate's roots: a release catalog, a deployment
/// catalog, an Artifact store.
pub const LAYOUTS: [&Layout; 3] = [
    &crate::release::LAYOUT,
    &crate::deployment::LAYOUT,
    &crate::artifacts::LAYOUT,
];

/// An owned catalog root: its canonical absolute path and the lock
/// (exclusive for a writing open, shared for a reading one). A later change
/// of the process's working directory cannot redirect it.
pub struct DurableRoot<F: Fs> {
    fs: F,
    root: PathBuf,
    access: Access,
    lock_id: FileId,
    poisoned: AtomicBool,
    _lock: Box<dyn LockGuard>,
}

/// What the root is, from a listing: the marker's presence alone decides
/// a marked root (nothing else is listed then); an unmarked one has each
/// entry's kind and, for directories, emptiness looked at. Reads only (no
/// lock is taken): a caller that must refuse a directory before opening
/// it asks [`custos_core::root::decide`] of this answer, so its refusal is
/// the one [`DurableRoot::open`] would make.
pub fn standing<F: Fs>(fs: &F, root: &Path, layout: &Layout) -> Result<Standing, FsError> {
    let names = fs.read_dir(root).map_err(io_err("read_dir", root))?;
    if names.iter().any(|n| n == MARKER_FILE) {
        return Ok(Standing::Marked);
    }
    let mut seen = Vec::with_capacity(names.len());
    for name in &names {
        let path = root.join(name);
        let Some(meta) = fs.metadata(&path).map_err(io_err("metadata", &path))? else {
            continue; // Vanished since the listing: not there.
        };
        let s = seen_of(meta, || {
            Ok(fs
                .read_dir(&path)
                .map_err(io_err("read_dir", &path))?
                .is_empty())
        })?;
        seen.push(s);
    }
    let listed: Vec<Listed<'_>> = names
        .iter()
        .zip(&seen)
        .map(|(name, &seen)| Listed { name, seen })
        .collect();
    Ok(classify(layout, &listed))
}

impl<F: Fs> std::fmt::Debug for DurableRoot<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableRoot")
            .field("root", &self.root)
            .field("poisoned", &self.poisoned.load(Ordering::SeqCst))
            .finish()
    }
}

/// Checks that `name` is one normal path component (no separators, no `..`).
pub fn plain_name(name: &str) -> Result<&Path, FsError> {
    let path = Path::new(name);
    let mut parts = path.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(_)), None) if !name.contains('/') => Ok(path),
        _ => Err(FsError::InvalidName(name.to_owned())),
    }
}

/// Whether an I/O error says the entry is not there.
/// Syncs `root` and every ancestor, so the path to the root is durable:
/// a failure is [`PATH_DURABILITY_UNCERTAIN`].
fn sync_ancestors<F: Fs>(fs: &F, root: &Path) -> Result<(), FsError> {
    for dir in root.ancestors() {
        fs.sync_dir(dir).map_err(|e| FsError::Unavailable {
            reason: PATH_DURABILITY_UNCERTAIN,
            path: dir.to_path_buf(),
            detail: e.to_string(),
        })?;
    }
    Ok(())
}

/// Takes the root's lock at `lock_path` without waiting: exclusive for a
/// writing `access`, shared otherwise; a held or missing lock is
/// [`FsError::Unavailable`].
fn take_lock<F: Fs>(
    fs: &F,
    lock_path: &Path,
    access: Access,
) -> Result<Box<dyn LockGuard>, FsError> {
    let lock = if access.writes() {
        fs.try_lock_exclusive(lock_path)
    } else {
        fs.try_lock_shared(lock_path)
    };
    match lock {
        Ok(Some(lock)) => Ok(lock),
        Ok(None) => Err(FsError::Unavailable {
            reason: ROOT_LOCKED,
            path: lock_path.to_path_buf(),
            detail: "another live process owns this catalog; stop it, or wait for it \
                     to finish"
                .into(),
        }),
        Err(e) if not_found(&e) && !access.writes() => Err(FsError::Unavailable {
            reason: LOCK_MISSING,
            path: lock_path.to_path_buf(),
            detail: "the lock file was deleted (a live owner may still hold it); \
                     once no process uses this catalog, a writing command recreates it"
                .into(),
        }),
        Err(e) => Err(io_err("lock", lock_path)(e)),
    }
}

fn not_found(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
}

fn seen_of(meta: Meta, empty: impl FnOnce() -> Result<bool, FsError>) -> Result<Seen, FsError> {
    Ok(match meta.kind {
        Kind::File => Seen::File { len: meta.len },
        Kind::Dir => Seen::Dir { empty: empty()? },
        Kind::Symlink | Kind::Other => Seen::Other,
    })
}

impl<F: Fs> DurableRoot<F> {
    /// Opens the root at `path` for `access`, following the rule of
    /// [`custos_core::root`]; returns the handle and the plan it carried
    /// out. See the module documentation for the order. A refused root
    /// ([`FsError::Refused`]) is left as it was: nothing is created,
    /// locked, cleaned or synced in it.
    ///
    /// - [`OpenPlan::Initialize`]: the state directories and then the
    ///   marker were written (the root is initialized and empty).
    /// - [`OpenPlan::Open`]: an initialized root; a writing open cleared
    ///   its staging directory.
    /// - [`OpenPlan::Upgrade`]: an unmarked root of this layout's names is
    ///   owned; the caller verifies it, bootstraps its state and calls
    ///   [`DurableRoot::write_marker`].
    pub fn open(
        fs: F,
        path: &Path,
        layout: &'static Layout,
        access: Access,
    ) -> Result<(Self, OpenPlan), FsError> {
        let anchored = if path.is_absolute() {
            path.to_path_buf()
        } else {
            let cwd = fs
                .current_dir()
                .map_err(io_err("current_dir", PathBuf::new()))?;
            cwd.join(path)
        };
        let refused = |path: &Path, refusal| FsError::Refused {
            path: path.to_path_buf(),
            refusal,
        };
        let existed = fs
            .metadata(&anchored)
            .map_err(io_err("metadata", &anchored))?
            .is_some();
        if !existed {
            decide_missing(layout, access).map_err(|r| refused(&anchored, r))?;
            fs.create_dir_all(&anchored)
                .map_err(io_err("create_dir_all", &anchored))?;
        }
        let root = fs
            .canonicalize(&anchored)
            .map_err(io_err("canonicalize", &anchored))?;
        let is_dir = fs
            .metadata(&root)
            .map_err(io_err("metadata", &root))?
            .is_some_and(|m| m.kind == Kind::Dir);
        if !is_dir {
            return Err(refused(
                &root,
                RootRefusal::NotADirectory { kind: layout.kind },
            ));
        }
        if access.writes() {
            sync_ancestors(&fs, &root)?;
        }
        // Decide before the lock: taking it creates the lock file, which a
        // refused directory must not get.
        let plan = decide(layout, &standing(&fs, &root, layout)?, access)
            .map_err(|r| refused(&root, r))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = take_lock(&fs, &lock_path, access)?;
        let lock_id = lock.file_id().map_err(io_err("fstat", &lock_path))?;
        let handle = DurableRoot {
            fs,
            root,
            access,
            lock_id,
            poisoned: AtomicBool::new(false),
            _lock: lock,
        };
        handle.check_lock()?;
        // Under the lock the decision is final: another process may have
        // initialized the root between the first look and the lock.
        let plan = if access.writes() {
            decide(layout, &standing(&handle.fs, &handle.root, layout)?, access)
                .map_err(|r| refused(&handle.root, r))?
        } else {
            plan
        };
        handle.carry_out(layout, plan)?;
        Ok((handle, plan))
    }

    /// Carries out the open's final `plan` under the lock: an open checks
    /// the marker (a writing one clears staging), an initialization writes
    /// the state directories and then the marker, an upgrade ensures only
    /// the staging directory.
    fn carry_out(&self, layout: &Layout, plan: OpenPlan) -> Result<(), FsError> {
        if self.access.writes() && plan != OpenPlan::Open {
            // An unmarked root is recognised as this layout's only with its
            // lock file beside a scratch file: the lock file's entry (just
            // created, perhaps) is made durable before anything is written,
            // or a crash could keep a scratch file without it and the next
            // open would refuse the root as foreign.
            self.sync(&self.root, true)?;
        }
        if self.access.writes() {
            self.remove_scratch(layout)?;
        }
        match plan {
            OpenPlan::Open => {
                self.check_marked(layout)?;
                if let (true, Some(staging)) = (self.access.writes(), layout.staging) {
                    self.reset_dir(staging)?;
                }
            }
            OpenPlan::Initialize => {
                for dir in layout.dirs {
                    self.ensure_dir(dir)?;
                }
                // A layout with state files has them written by its caller,
                // which then writes the marker.
                if layout.files.is_empty() {
                    self.write_marker(layout)?;
                }
            }
            OpenPlan::Upgrade => {
                if let Some(staging) = layout.staging {
                    self.ensure_dir(staging)?;
                }
            }
        }
        Ok(())
    }

    /// Removes the layout's scratch files (abandoned pending records) and
    /// makes the removal durable. Under the exclusive lock only.
    fn remove_scratch(&self, layout: &Layout) -> Result<(), FsError> {
        let mut removed = false;
        for name in layout.scratch {
            let path = self.root.join(plain_name(name)?);
            if self
                .fs
                .metadata(&path)
                .map_err(io_err("metadata", &path))?
                .is_some()
            {
                self.fs
                    .remove_file(&path)
                    .map_err(io_err("remove_file", &path))?;
                removed = true;
            }
        }
        if removed {
            self.sync(&self.root, true)?;
        }
        Ok(())
    }

    /// Checks the marker's bytes and that every state directory is there.
    fn check_marked(&self, layout: &Layout) -> Result<(), FsError> {
        let path = self.root.join(MARKER_FILE);
        let refused = |refusal| FsError::Refused {
            path: self.root.clone(),
            refusal,
        };
        let meta = self.fs.metadata(&path).map_err(io_err("metadata", &path))?;
        let seen = match meta {
            Some(m) => seen_of(m, || Ok(false))?,
            None => Seen::Other,
        };
        // Every layout this crate knows, so that another kind's root named
        // here is told apart from corruption.
        let others: Vec<&Layout> = LAYOUTS
            .into_iter()
            .filter(|o| o.marker != layout.marker)
            .collect();
        let bytes = if matches!(seen, Seen::File { .. }) {
            let longest = others
                .iter()
                .map(|o| o.marker.len())
                .fold(layout.marker.len(), usize::max);
            let limit = u64::try_from(longest).unwrap_or(u64::MAX);
            match self.fs.read_bounded(&path, limit) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(refused(RootRefusal::BadMarker {
                        kind: layout.kind,
                        marker: MARKER_FILE,
                        why: "longer than any marker".into(),
                    }))
                }
                Err(e) => return Err(io_err("read", &path)(e)),
            }
        } else {
            Vec::new()
        };
        check_marker(layout, &others, seen, &bytes).map_err(refused)?;
        let mut found = Vec::new();
        for dir in layout.dirs.iter().chain(layout.files) {
            let p = self.root.join(dir);
            let m = self.fs.metadata(&p).map_err(io_err("metadata", &p))?;
            found.push((
                *dir,
                m.map(|m| match m.kind {
                    Kind::Dir => Seen::Dir { empty: false },
                    Kind::File => Seen::File { len: m.len },
                    _ => Seen::Other,
                }),
            ));
        }
        check_state(layout, |d| {
            found.iter().find(|(n, _)| *n == d).and_then(|(_, s)| *s)
        })
        .map_err(refused)
    }

    /// Writes the durable mode marker: `.INITIALIZED.pending` (any stale
    /// one removed first) → fsync → rename to `INITIALIZED` → fsync the
    /// root. Call only once the layout's state is whole and durable.
    pub fn write_marker(&self, layout: &Layout) -> Result<(), FsError> {
        self.live()?;
        let pending = self.root.join(MARKER_PENDING);
        let stale = self
            .fs
            .metadata(&pending)
            .map_err(io_err("metadata", &pending))?;
        if stale.is_some() {
            // The rule admitted it: a regular file no longer than a marker,
            // left by an interrupted initialization.
            self.fs
                .remove_file(&pending)
                .map_err(io_err("remove_file", &pending))?;
        }
        self.sync(&self.root, true)?;
        self.write_synced(&pending, layout.marker)?;
        self.rename(&pending, &self.root.join(MARKER_FILE))?;
        self.sync(&self.root, true)
    }

    /// Fails with [`FsError::Unavailable`] ([`LOCK_REPLACED`]) when the
    /// lock file's path no longer names the file this handle locked (it was
    /// deleted, or replaced): a process opening after that would lock
    /// another file and think itself the only owner. Runs after the lock is
    /// taken and before every commit point (each rename).
    pub fn check_lock(&self) -> Result<(), FsError> {
        let path = self.root.join(LOCK_FILE);
        let now = self.fs.file_id(&path).map_err(io_err("lstat", &path))?;
        if now == Some(self.lock_id) {
            return Ok(());
        }
        Err(FsError::Unavailable {
            reason: LOCK_REPLACED,
            path,
            detail: String::from(match now {
                None => "the lock file this process holds was deleted",
                Some(_) => "the lock file was replaced by another file",
            }) + "; another process may own the catalog now, so this one stops before \
                 committing anything: stop every process using the catalog, then reopen",
        })
    }

    /// The canonical absolute root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The filesystem the handle works through.
    pub fn fs(&self) -> &F {
        &self.fs
    }

    /// Whether an fsync has failed on this handle.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// The access this handle was opened with.
    pub fn access(&self) -> Access {
        self.access
    }

    fn live(&self) -> Result<(), FsError> {
        if !self.access.writes() {
            Err(FsError::ReadOnly)
        } else if self.is_poisoned() {
            Err(FsError::Poisoned)
        } else {
            Ok(())
        }
    }

    fn sync(&self, path: &Path, dir: bool) -> Result<(), FsError> {
        let result = if dir {
            self.fs.sync_dir(path)
        } else {
            self.fs.sync_file(path)
        };
        result.map_err(|source| {
            self.poisoned.store(true, Ordering::SeqCst);
            self.explain(FsError::SyncFailed {
                path: path.to_path_buf(),
                source,
            })
        })
    }

    /// A failed write explained: when the lock file this handle holds was
    /// deleted or replaced, another process may own the root now and its
    /// open may have removed what this one was writing (its staging
    /// directory), so the failure is that — [`LOCK_REPLACED`], naming the
    /// operation that failed — not a disk fault to retry.
    fn explain(&self, e: FsError) -> FsError {
        if !matches!(e, FsError::Io { .. } | FsError::SyncFailed { .. }) {
            return e;
        }
        match self.check_lock() {
            Err(FsError::Unavailable {
                reason,
                path,
                detail,
            }) => FsError::Unavailable {
                reason,
                path,
                detail: format!("{detail} (what failed then: {e})"),
            },
            _ => e,
        }
    }

    /// Fails with [`FsError::Poisoned`] once an fsync has failed, and with
    /// [`FsError::ReadOnly`] on a handle opened for reading.
    pub fn check_live(&self) -> Result<(), FsError> {
        self.live()
    }

    /// fsyncs the directory `path`; a failure poisons the handle.
    pub fn sync_dir(&self, path: &Path) -> Result<(), FsError> {
        self.live()?;
        self.sync(path, true)
    }

    /// Creates the directory `path` (its parent must exist). Not durable
    /// until its parent is fsynced.
    pub fn create_dir(&self, path: &Path) -> Result<(), FsError> {
        self.live()?;
        self.fs
            .create_dir(path)
            .map_err(|e| self.explain(io_err("create_dir", path)(e)))
    }

    /// Creates the file `path` (it must not exist), writes `data` and
    /// fsyncs it; an fsync failure poisons the handle.
    pub fn write_synced(&self, path: &Path, data: &[u8]) -> Result<(), FsError> {
        self.live()?;
        self.fs
            .write_new(path, data)
            .map_err(|e| self.explain(io_err("write", path)(e)))?;
        self.sync(path, false)
    }

    /// Creates the file `path` (it must not exist) and writes everything
    /// `src` yields, streaming; not fsynced (see [`DurableRoot::sync_file`])
    /// so that a caller can check what it wrote first.
    pub fn write_new_from(&self, path: &Path, src: &mut dyn std::io::Read) -> Result<u64, FsError> {
        self.live()?;
        self.fs
            .write_new_from(path, src)
            .map_err(|e| self.explain(io_err("write", path)(e)))
    }

    /// fsyncs the file `path`; a failure poisons the handle.
    pub fn sync_file(&self, path: &Path) -> Result<(), FsError> {
        self.live()?;
        self.sync(path, false)
    }

    /// Renames `from` to `to` (same filesystem): a commit point, so the
    /// lock is checked first ([`DurableRoot::check_lock`]). Not durable
    /// until the destination's parent is fsynced.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<(), FsError> {
        self.live()?;
        self.check_lock()?;
        self.fs
            .rename(from, to)
            .map_err(|e| self.explain(io_err("rename", from)(e)))
    }

    /// Durably replaces the file `dest_dir/name` (`dest_dir` directly under
    /// the root) with `data`: write `stage_dir/stage_name` → fsync it →
    /// rename over the destination → fsync `dest_dir`. Readers see the old
    /// or the new file, never a mix.
    pub fn replace_file(
        &self,
        stage_dir: &str,
        stage_name: &str,
        dest_dir: &str,
        name: &str,
        data: &[u8],
    ) -> Result<(), FsError> {
        self.live()?;
        let temp = self
            .root
            .join(plain_name(stage_dir)?)
            .join(plain_name(stage_name)?);
        let parent = self.root.join(plain_name(dest_dir)?);
        let dest = parent.join(plain_name(name)?);
        self.write_synced(&temp, data)?;
        self.rename(&temp, &dest)?;
        self.sync(&parent, true)
    }

    /// Removes the directory `name` directly under the root with everything
    /// in it (if present), recreates it empty and makes that durable.
    pub fn reset_dir(&self, name: &str) -> Result<PathBuf, FsError> {
        self.live()?;
        let dir = self.root.join(plain_name(name)?);
        match self.fs.remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove_dir_all", &dir)(e)),
        }
        self.ensure_dir(name)
    }

    /// Ensures the directory `name` directly under the root exists durably
    /// (created, then the root fsynced). Returns its path.
    pub fn ensure_dir(&self, name: &str) -> Result<PathBuf, FsError> {
        self.live()?;
        let dir = self.root.join(plain_name(name)?);
        match self.fs.create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create_dir", &dir)(e)),
        }
        self.sync(&dir, true)?;
        self.sync(&self.root, true)?;
        Ok(dir)
    }

    /// Durably publishes a directory of `files` at `dest_dir/dest_name`
    /// (both under the root): creates `stage_dir/stage_name`, writes and
    /// fsyncs each file in order, fsyncs the staging directory, renames it to
    /// the destination and fsyncs the destination's parent. `stage_dir` and
    /// `dest_dir` are names directly under the root, on the same filesystem.
    /// The destination is durable once this returns `Ok`; after an error it
    /// may or may not exist.
    pub fn publish_dir(
        &self,
        stage_dir: &str,
        stage_name: &str,
        dest_dir: &str,
        dest_name: &str,
        files: &[(&str, &[u8])],
    ) -> Result<PathBuf, FsError> {
        self.live()?;
        let stage_parent = self.root.join(plain_name(stage_dir)?);
        let stage = stage_parent.join(plain_name(stage_name)?);
        let parent = self.root.join(plain_name(dest_dir)?);
        let dest = parent.join(plain_name(dest_name)?);
        self.fs
            .create_dir(&stage)
            .map_err(io_err("create_dir", &stage))?;
        for (name, data) in files {
            let path = stage.join(plain_name(name)?);
            self.fs
                .write_new(&path, data)
                .map_err(io_err("write", &path))?;
            self.sync(&path, false)?;
        }
        self.sync(&stage, true)?;
        self.rename(&stage, &dest)?;
        self.sync(&parent, true)?;
        Ok(dest)
    }
}
