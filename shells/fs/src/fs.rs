//! The [`Fs`] trait: every filesystem operation the durable primitives use,
//! with the real implementation ([`RealFs`]) and a recording one
//! ([`RecordingFs`]) that logs every operation and can fail any single one.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fs2::FileExt;

/// A held exclusive lock on a file; released when dropped (or by the OS when
/// the process exits or crashes).
pub trait LockGuard: Send + Sync + std::fmt::Debug {}

/// The filesystem operations of the durable primitives. Paths are absolute
/// except for [`Fs::current_dir`]'s input side (there is none).
pub trait Fs: Send + Sync {
    /// The process's working directory (read once, to anchor a relative root).
    fn current_dir(&self) -> io::Result<PathBuf>;
    /// Creates `path` and every missing parent.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates one directory; its parent must exist.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Resolves `path` to its canonical absolute form.
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
    /// Creates a new file (it must not exist) and writes all of `data`.
    fn write_new(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// fsyncs a file's data and metadata.
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// fsyncs a directory (its entries).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to` (same filesystem).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a directory and everything under it.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Takes the exclusive lock on `path` (created if missing) without
    /// waiting: `Ok(None)` when another holder has it.
    fn try_lock_exclusive(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
}

/// The real filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

#[derive(Debug)]
struct FileLock(File);

impl LockGuard for FileLock {}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock too; unlocking first is
        // only prompt. A failure here leaves the close to release it.
        let _ = FileExt::unlock(&self.0);
    }
}

impl Fs for RealFs {
    fn current_dir(&self) -> io::Result<PathBuf> {
        std::env::current_dir()
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }
    fn write_new(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
        f.write_all(data)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        OpenOptions::new().write(true).open(path)?.sync_all()
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }
    fn try_lock_exclusive(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(()) => Ok(Some(Box::new(FileLock(file)))),
            Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One recorded filesystem operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// [`Fs::current_dir`].
    CurrentDir,
    /// [`Fs::create_dir_all`].
    CreateDirAll(PathBuf),
    /// [`Fs::create_dir`].
    CreateDir(PathBuf),
    /// [`Fs::canonicalize`].
    Canonicalize(PathBuf),
    /// [`Fs::write_new`], with the bytes written.
    WriteNew(PathBuf, Vec<u8>),
    /// [`Fs::sync_file`].
    SyncFile(PathBuf),
    /// [`Fs::sync_dir`].
    SyncDir(PathBuf),
    /// [`Fs::rename`].
    Rename(PathBuf, PathBuf),
    /// [`Fs::remove_dir_all`].
    RemoveDirAll(PathBuf),
    /// [`Fs::try_lock_exclusive`].
    Lock(PathBuf),
}

/// One entry of a trace: the operation and whether it succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The operation.
    pub op: Op,
    /// `true` when it returned `Ok` (an injected failure is `false` and was
    /// not performed).
    pub ok: bool,
}

#[derive(Debug, Default)]
struct Log {
    trace: Vec<Recorded>,
    fail_at: Option<usize>,
}

/// A filesystem that performs every operation on an inner [`Fs`] and logs
/// it. A failpoint ([`RecordingFs::fail_at`]) makes exactly one operation —
/// the n-th from now, counting from 0 — return an injected error without
/// being performed. Clones share one log.
#[derive(Clone, Debug)]
pub struct RecordingFs<F: Fs = RealFs> {
    inner: F,
    log: Arc<Mutex<Log>>,
}

/// The message of an injected failure.
pub const INJECTED: &str = "injected failure";

impl<F: Fs> RecordingFs<F> {
    /// Records operations performed on `inner`.
    pub fn new(inner: F) -> Self {
        RecordingFs {
            inner,
            log: Arc::new(Mutex::new(Log::default())),
        }
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails the operation `n` operations from now (0 = the next one), once.
    pub fn fail_at(&self, n: usize) {
        let mut log = self.log();
        log.fail_at = Some(log.trace.len() + n);
    }

    /// Clears any pending failpoint.
    pub fn clear_failpoint(&self) {
        self.log().fail_at = None;
    }

    /// A copy of the trace so far.
    pub fn trace(&self) -> Vec<Recorded> {
        self.log().trace.clone()
    }

    /// Forgets the trace (failpoints are kept relative to the new start).
    pub fn clear_trace(&self) {
        let mut log = self.log();
        let len = log.trace.len();
        log.fail_at = log.fail_at.and_then(|f| f.checked_sub(len));
        log.trace.clear();
    }

    fn run<T>(&self, op: Op, f: impl FnOnce(&F) -> io::Result<T>) -> io::Result<T> {
        let inject = {
            let log = self.log();
            log.fail_at == Some(log.trace.len())
        };
        let result = if inject {
            Err(io::Error::other(INJECTED))
        } else {
            f(&self.inner)
        };
        self.log().trace.push(Recorded {
            op,
            ok: result.is_ok(),
        });
        result
    }
}

impl<F: Fs> Fs for RecordingFs<F> {
    fn current_dir(&self) -> io::Result<PathBuf> {
        self.run(Op::CurrentDir, |fs| fs.current_dir())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.run(Op::CreateDirAll(path.into()), |fs| fs.create_dir_all(path))
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.run(Op::CreateDir(path.into()), |fs| fs.create_dir(path))
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.run(Op::Canonicalize(path.into()), |fs| fs.canonicalize(path))
    }
    fn write_new(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.run(Op::WriteNew(path.into(), data.to_vec()), |fs| {
            fs.write_new(path, data)
        })
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.run(Op::SyncFile(path.into()), |fs| fs.sync_file(path))
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.run(Op::SyncDir(path.into()), |fs| fs.sync_dir(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.run(Op::Rename(from.into(), to.into()), |fs| fs.rename(from, to))
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.run(Op::RemoveDirAll(path.into()), |fs| fs.remove_dir_all(path))
    }
    fn try_lock_exclusive(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.run(Op::Lock(path.into()), |fs| fs.try_lock_exclusive(path))
    }
}
