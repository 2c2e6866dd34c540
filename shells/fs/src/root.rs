//! An owned, durable catalog root: the open sequence and the one module that
//! does all durable publication.
//!
//! **Open** ([`DurableRoot::open`]): anchor a relative path against the working
//! directory once; create the nested directories; canonicalize; fsync every
//! directory from the root up to `/`, leaf first; only then take the `fs2`
//! exclusive lock on `.catalog.lock`. A failed ancestor sync is a retryable
//! [`FsError::Unavailable`] with [`PATH_DURABILITY_UNCERTAIN`] and nothing is
//! initialized or locked; a retry repeats the whole chain. A second live
//! opener gets [`FsError::Unavailable`] with [`ROOT_LOCKED`].
//!
//! **Publication** ([`DurableRoot::publish_dir`]): write each file into a
//! private directory under the staging area → fsync each file → fsync the
//! staging directory → rename it to its destination → fsync the destination's
//! parent. Any fsync error poisons the handle.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{io_err, FsError, PATH_DURABILITY_UNCERTAIN, ROOT_LOCKED};
use crate::fs::{Fs, LockGuard};

/// The lock file directly under the root.
pub const LOCK_FILE: &str = ".catalog.lock";

/// An owned catalog root: its canonical absolute path and the exclusive lock.
/// A later change of the process's working directory cannot redirect it.
pub struct DurableRoot<F: Fs> {
    fs: F,
    root: PathBuf,
    poisoned: AtomicBool,
    _lock: Box<dyn LockGuard>,
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

impl<F: Fs> DurableRoot<F> {
    /// Opens (creating if needed) and owns the root at `path`.
    pub fn open(fs: F, path: &Path) -> Result<Self, FsError> {
        let anchored = if path.is_absolute() {
            path.to_path_buf()
        } else {
            let cwd = fs
                .current_dir()
                .map_err(io_err("current_dir", PathBuf::new()))?;
            cwd.join(path)
        };
        fs.create_dir_all(&anchored)
            .map_err(io_err("create_dir_all", &anchored))?;
        let root = fs
            .canonicalize(&anchored)
            .map_err(io_err("canonicalize", &anchored))?;
        for dir in root.ancestors() {
            fs.sync_dir(dir).map_err(|e| FsError::Unavailable {
                reason: PATH_DURABILITY_UNCERTAIN,
                path: dir.to_path_buf(),
                detail: e.to_string(),
            })?;
        }
        let lock_path = root.join(LOCK_FILE);
        let lock = fs
            .try_lock_exclusive(&lock_path)
            .map_err(io_err("lock", &lock_path))?
            .ok_or_else(|| FsError::Unavailable {
                reason: ROOT_LOCKED,
                path: lock_path.clone(),
                detail: "another live repository owns this root".into(),
            })?;
        Ok(DurableRoot {
            fs,
            root,
            poisoned: AtomicBool::new(false),
            _lock: lock,
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

    fn live(&self) -> Result<(), FsError> {
        if self.is_poisoned() {
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
            FsError::SyncFailed {
                path: path.to_path_buf(),
                source,
            }
        })
    }

    /// Fails with [`FsError::Poisoned`] once an fsync has failed.
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
        self.fs.create_dir(path).map_err(io_err("create_dir", path))
    }

    /// Creates the file `path` (it must not exist), writes `data` and
    /// fsyncs it; an fsync failure poisons the handle.
    pub fn write_synced(&self, path: &Path, data: &[u8]) -> Result<(), FsError> {
        self.live()?;
        self.fs
            .write_new(path, data)
            .map_err(io_err("write", path))?;
        self.sync(path, false)
    }

    /// Renames `from` to `to` (same filesystem). Not durable until the
    /// destination's parent is fsynced.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<(), FsError> {
        self.live()?;
        self.fs.rename(from, to).map_err(io_err("rename", from))
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
        self.fs
            .rename(&stage, &dest)
            .map_err(io_err("rename", &stage))?;
        self.sync(&parent, true)?;
        Ok(dest)
    }
}
