//! The [`Fs`] trait: every filesystem operation the durable primitives use,
//! with the real implementation ([`RealFs`]) and a recording one
//! ([`RecordingFs`]) that logs every operation and can fail any single one.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fs2::FileExt;

/// A held lock on a file; released when dropped (or by the OS when the
/// process exits or crashes).
pub trait LockGuard: Send + Sync + std::fmt::Debug {
    /// The identity of the file the lock is held on (its open descriptor's
    /// device and inode), to compare with what the lock's path names now.
    fn file_id(&self) -> io::Result<FileId>;
}

/// A file's identity: device and inode. Two paths name the same file
/// exactly when their identities are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// The device.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// What kind of filesystem object a path names (not following a final
/// symbolic link).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// Anything else (a socket, a device, a fifo).
    Other,
}

/// The kind and length of a path, as `lstat` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Meta {
    /// The kind.
    pub kind: Kind,
    /// The length in bytes.
    pub len: u64,
}

impl Meta {
    fn of(m: &std::fs::Metadata) -> Self {
        let t = m.file_type();
        let kind = if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        Meta { kind, len: m.len() }
    }
}

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
    /// Removes one regular file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Takes the exclusive lock on `path` (created if missing) without
    /// waiting: `Ok(None)` when another holder has it.
    fn try_lock_exclusive(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
    /// Takes a shared lock on the existing file `path` (opened read-only;
    /// never created: `NotFound` when missing) without waiting: `Ok(None)`
    /// when an exclusive holder has it.
    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
    /// The identity of the file at `path`, not following a final symbolic
    /// link; `Ok(None)` when nothing is there.
    fn file_id(&self, path: &Path) -> io::Result<Option<FileId>>;
    /// The kind and length of `path`, not following a final symbolic link;
    /// `Ok(None)` when nothing is there.
    fn metadata(&self, path: &Path) -> io::Result<Option<Meta>>;
    /// The names directly under the directory `path`, sorted.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Reads the file at `path`, refusing (`InvalidData`) a file longer
    /// than `limit` bytes: the length is checked before allocating, and a
    /// file that grows past `limit` while being read is refused too.
    fn read_bounded(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>>;
    /// Opens the file at `path` for reading, as a stream (the caller bounds
    /// how much it reads).
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + Send>>;
    /// Creates a new file (it must not exist) and writes everything `src`
    /// yields, a buffer at a time; answers the bytes written. Memory is the
    /// buffer, whatever the length (a recording instrument may keep more).
    fn write_new_from(&self, path: &Path, src: &mut dyn io::Read) -> io::Result<u64>;
}

/// The write buffer of [`RealFs::write_new_from`].
const COPY_BUFFER: usize = 256 << 10;

/// The real filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

#[derive(Debug)]
struct FileLock(File);

impl LockGuard for FileLock {
    fn file_id(&self) -> io::Result<FileId> {
        Ok(FileId::of(&self.0.metadata()?))
    }
}

fn lock_result(file: File, taken: io::Result<()>) -> io::Result<Option<Box<dyn LockGuard>>> {
    match taken {
        Ok(()) => Ok(Some(Box::new(FileLock(file)))),
        Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

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
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + Send>> {
        Ok(Box::new(File::open(path)?))
    }
    fn write_new_from(&self, path: &Path, src: &mut dyn io::Read) -> io::Result<u64> {
        let f = OpenOptions::new().write(true).create_new(true).open(path)?;
        let mut w = io::BufWriter::with_capacity(COPY_BUFFER, f);
        let n = io::copy(src, &mut w)?;
        w.flush()?;
        Ok(n)
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
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn try_lock_exclusive(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let taken = FileExt::try_lock_exclusive(&file);
        lock_result(file, taken)
    }
    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = OpenOptions::new().read(true).open(path)?;
        let taken = FileExt::try_lock_shared(&file);
        lock_result(file, taken)
    }
    fn file_id(&self, path: &Path) -> io::Result<Option<FileId>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(FileId::of(&m))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn metadata(&self, path: &Path) -> io::Result<Option<Meta>> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(Meta::of(&m))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let name = entry?.file_name();
            names.push(name.into_string().map_err(|n| {
                io::Error::new(io::ErrorKind::InvalidData, format!("non-UTF-8 name {n:?}"))
            })?);
        }
        names.sort();
        Ok(names)
    }
    fn read_bounded(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let file = OpenOptions::new().read(true).open(path)?;
        let len = file.metadata()?.len();
        if len > limit {
            return Err(too_long(len, limit));
        }
        let cap = usize::try_from(len).map_err(|_| too_long(len, limit))?;
        let mut buf = Vec::with_capacity(cap);
        file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
        let read = u64::try_from(buf.len()).unwrap_or(u64::MAX);
        if read > limit {
            return Err(too_long(read, limit));
        }
        Ok(buf)
    }
}

/// The error of a file longer than its read bound.
fn too_long(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("file is {len} bytes, over the {limit}-byte read bound"),
    )
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
    /// [`Fs::remove_file`].
    RemoveFile(PathBuf),
    /// [`Fs::try_lock_exclusive`].
    Lock(PathBuf),
    /// [`Fs::try_lock_shared`].
    LockShared(PathBuf),
    /// [`Fs::file_id`].
    FileId(PathBuf),
    /// [`Fs::metadata`].
    Metadata(PathBuf),
    /// [`Fs::read_dir`].
    ReadDir(PathBuf),
    /// [`Fs::read_bounded`] or [`Fs::open_read`].
    Read(PathBuf),
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
    fail_kind: Option<io::ErrorKind>,
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
        log.fail_kind = None;
    }

    /// Like [`RecordingFs::fail_at`], with an error of `kind` (say
    /// `StorageFull`, a full disk) instead of a generic one.
    pub fn fail_at_with(&self, n: usize, kind: io::ErrorKind) {
        let mut log = self.log();
        log.fail_at = Some(log.trace.len() + n);
        log.fail_kind = Some(kind);
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
            (log.fail_at == Some(log.trace.len())).then_some(log.fail_kind)
        };
        let result = if let Some(kind) = inject {
            Err(match kind {
                Some(kind) => io::Error::new(kind, INJECTED),
                None => io::Error::other(INJECTED),
            })
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
    /// Recorded as the [`Op::WriteNew`] of everything `src` yields (the
    /// recorder keeps the bytes to replay crash states; read first, so a
    /// failing `src` records nothing).
    fn write_new_from(&self, path: &Path, src: &mut dyn io::Read) -> io::Result<u64> {
        let mut data = Vec::new();
        src.read_to_end(&mut data)?;
        let n = data.len() as u64;
        self.write_new(path, &data).map(|()| n)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn io::Read + Send>> {
        self.run(Op::Read(path.into()), |fs| fs.open_read(path))
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
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.run(Op::RemoveFile(path.into()), |fs| fs.remove_file(path))
    }
    fn try_lock_exclusive(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.run(Op::Lock(path.into()), |fs| fs.try_lock_exclusive(path))
    }
    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.run(Op::LockShared(path.into()), |fs| fs.try_lock_shared(path))
    }
    fn file_id(&self, path: &Path) -> io::Result<Option<FileId>> {
        self.run(Op::FileId(path.into()), |fs| fs.file_id(path))
    }
    fn metadata(&self, path: &Path) -> io::Result<Option<Meta>> {
        self.run(Op::Metadata(path.into()), |fs| fs.metadata(path))
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.run(Op::ReadDir(path.into()), |fs| fs.read_dir(path))
    }
    fn read_bounded(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        self.run(Op::Read(path.into()), |fs| fs.read_bounded(path, limit))
    }
}
