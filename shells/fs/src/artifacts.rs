//! The filesystem Artifact object store: content objects beneath an owned
//! root, one regular file per SHA-256, implementing core's
//! [`ObjectStore`] port over the [`Fs`] trait.
//!
//! **Root.** [`ArtifactStore::open`] is [`DurableRoot::open`] with
//! [`LAYOUT`]: anchor, create a missing root, canonicalize, fsync leaf →
//! `/`, refuse a directory that is neither this kind's (the `INITIALIZED`
//! marker) nor empty, take the `fs2` lock (exclusive to write, shared to
//! read), initialize `.tmp/` and `sha256/`, clear `.tmp/` on a writing
//! open. The root's URI is `file://` + its canonical path
//! ([`ArtifactStore::root_uri`]); the store serves exactly the content
//! addresses beneath it ([`content_address`]), mapped to
//! `<root>/sha256/<2 hex>/<64 hex>`, and refuses every other URI
//! ([`ObjectError::NotServed`]).
//!
//! **Reads never write and never follow a symbolic link.** `probe` is
//! `lstat` on every component beneath the root (`sha256/`, the fan-out
//! directory, the object), so a symbolic link at the address *or on the way
//! to it* is [`Entry::Symlink`]. `read` probes first, refuses an object
//! longer than its limit by its length without reading it
//! ([`ObjectError::TooLong`]), and answers a stream ([`Fs::open_read`]);
//! the caller reads at most `limit + 1` bytes ([`measure`]), so a file that
//! grows past the limit is refused too. Between the `lstat` and the open
//! the entry is trusted not to change: the source is kept offline for the
//! whole migration and the destination is owned by this handle.
//!
//! **Publication** ([`ObjectStore::put_new`], under the writer mutex):
//! the fan-out directory is created if missing and its parent `sha256/`
//! fsynced (once per directory per handle, whether or not this handle
//! created it, so an earlier interrupted creation is made durable too);
//! the bytes are streamed into a fresh staged file in `.tmp/`
//! ([`DurableRoot::write_new_from`]) through core's [`Verifying`] reader
//! (so memory is one write buffer whatever the object's size), and the
//! staged file is fsynced only if they are the expected object — other
//! bytes are [`ObjectError::Mismatch`] and the staged file is removed; the
//! content address is checked to hold
//! nothing; the staged file is renamed there ([`DurableRoot::rename`],
//! which checks the lock first) and the fan-out directory fsynced. The
//! [`Fs`] trait has no rename-if-absent, so "never replace" rests on the
//! **single-writer assumption**: the exclusive root lock excludes other
//! processes and the writer mutex other threads of this one, so nothing can
//! appear at the address between the check and the rename. A staged file
//! is full and durable before it is renamed, so a content address never
//! holds a partial object; a failure leaves it holding nothing or the whole
//! object (a failed fsync poisons the handle: reopen). Debris in `.tmp/`
//! is removed at once where possible and by the next writing open.
//!
//! **Ingestion** ([`ArtifactStore::ingest`]) is for fixtures and users: it
//! hashes the bytes, publishes the object (or reuses an identical one) and
//! answers the new row. Relocation ([`custos_core::migration::artifacts::relocate`])
//! never calls it.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use custos_core::migration::artifacts::{
    addressed_digest, content_address, facts_of, measure, put_bytes, Entry, Measured, ObjectError,
    ObjectRead, ObjectStore, Occurrence, OccurrenceMeta, Verifying, CONTENT_DIR,
};
use custos_core::migration::{DataError, Digest, NormalizedUri, ObjectFacts};
use custos_core::root::{Access, Layout};
use thiserror::Error;

use crate::error::FsError;
use crate::fs::{Fs, Kind};
use crate::root::DurableRoot;

/// The staging directory directly under the root.
pub const STAGING_DIR: &str = ".tmp";

/// The Artifact store's root layout: its marker and state directories.
pub const LAYOUT: Layout = Layout {
    kind: "artifact store",
    marker: b"custos artifact store 1\n",
    dirs: &[STAGING_DIR, CONTENT_DIR],
    staging: Some(STAGING_DIR),
    files: &[],
    scratch: &[],
    signs: &[],
};

/// Why an [`ArtifactStore`] could not be opened, or an ingestion failed.
#[derive(Debug, Error)]
pub enum ArtifactStoreError {
    /// The root could not be opened (see [`FsError`]).
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The canonical root path is not a normalized `file://` URI (it is not
    /// UTF-8, or has a character a normalized URI refuses).
    #[error("artifact-root-not-uri: {path}: {problem}")]
    RootNotUri {
        /// The canonical root.
        path: PathBuf,
        /// Why.
        problem: DataError,
    },
    /// The object could not be stored (or its address formed).
    #[error("artifact-ingest-failed: {uri}: {error}")]
    Object {
        /// The content address.
        uri: String,
        /// What the store said.
        error: ObjectError,
    },
    /// Different bytes already sit at the new object's content address;
    /// they are left as they are.
    #[error("artifact-destination-conflict: {uri} already holds other bytes ({found:?})")]
    Conflict {
        /// The content address.
        uri: NormalizedUri,
        /// What is there.
        found: Measured,
    },
}

impl ArtifactStoreError {
    /// The failure's [`Class`](custos_core::Class): what the caller does next
    /// (the filesystem's and the object's failures keep their own class).
    pub fn class(&self) -> custos_core::Class {
        use custos_core::Class;
        match self {
            ArtifactStoreError::Fs(e) => e.class(),
            ArtifactStoreError::RootNotUri { .. } => Class::InvalidArgument,
            ArtifactStoreError::Object { error, .. } => error.class(),
            ArtifactStoreError::Conflict { .. } => Class::AlreadyExists,
        }
    }
}

/// A content-addressed Artifact object store beneath an owned root.
pub struct ArtifactStore<F: Fs> {
    root: DurableRoot<F>,
    uri: NormalizedUri,
    writer: Mutex<BTreeSet<String>>,
    stage_seq: AtomicU64,
}

impl<F: Fs> std::fmt::Debug for ArtifactStore<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactStore")
            .field("root", &self.root)
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

impl<F: Fs> ArtifactStore<F> {
    /// Opens (creating and initializing if missing or empty) the store at
    /// `path` for writing; see the module documentation.
    pub fn open(fs: F, path: &Path) -> Result<Self, ArtifactStoreError> {
        Self::open_as(fs, path, Access::Write)
    }

    /// Opens an initialized store for reading only: a shared lock, nothing
    /// created, cleaned or synced; every `put_new` fails.
    pub fn open_read_only(fs: F, path: &Path) -> Result<Self, ArtifactStoreError> {
        Self::open_as(fs, path, Access::Read)
    }

    fn open_as(fs: F, path: &Path, access: Access) -> Result<Self, ArtifactStoreError> {
        let (root, _plan) = DurableRoot::open(fs, path, &LAYOUT, access)?;
        let not_uri = |problem| ArtifactStoreError::RootNotUri {
            path: root.root().to_path_buf(),
            problem,
        };
        let text = root.root().to_str().ok_or_else(|| {
            not_uri(DataError::InvalidUri(
                custos_core::migration::UriProblem::Shape,
            ))
        })?;
        let uri = NormalizedUri::parse(&format!("file://{text}")).map_err(not_uri)?;
        if uri.path() != text {
            return Err(not_uri(DataError::InvalidUri(
                custos_core::migration::UriProblem::NotNormalized,
            )));
        }
        // Every content address beneath the root must be a valid URI.
        content_address(&uri, &Digest::default()).map_err(not_uri)?;
        Ok(ArtifactStore {
            root,
            uri,
            writer: Mutex::new(BTreeSet::new()),
            stage_seq: AtomicU64::new(0),
        })
    }

    /// The root's URI: `file://` + its canonical path.
    pub fn root_uri(&self) -> &NormalizedUri {
        &self.uri
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        self.root.root()
    }

    /// Whether an fsync failed on this handle (reopen to recover).
    pub fn is_poisoned(&self) -> bool {
        self.root.is_poisoned()
    }

    /// The content address of `sha256` beneath this root.
    pub fn address(&self, sha256: &Digest) -> NormalizedUri {
        // The open checked that every address beneath the root is valid.
        content_address(&self.uri, sha256).unwrap_or_else(|_| self.uri.clone())
    }

    /// The file path of the content address `uri`, or `NotServed`.
    pub fn path_of(&self, uri: &NormalizedUri) -> Result<PathBuf, ObjectError> {
        let digest = addressed_digest(&self.uri, uri).ok_or(ObjectError::NotServed)?;
        let (dir, file) = self.parts(&digest);
        Ok(dir.join(file))
    }

    /// The fan-out directory and file name of `digest`.
    fn parts(&self, digest: &Digest) -> (PathBuf, String) {
        let hex = digest.hex();
        let fan = hex.get(..2).unwrap_or_default().to_string();
        (self.root.root().join(CONTENT_DIR).join(fan), hex)
    }

    fn writer(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn meta(&self, path: &Path) -> Result<Option<crate::fs::Meta>, ObjectError> {
        self.root
            .fs()
            .metadata(path)
            .map_err(|e| ObjectError::Io(format!("lstat {}: {e}", path.display())))
    }

    /// `lstat` of every component beneath the root on the way to `digest`'s
    /// file: the first that is missing or not a directory decides.
    fn probe_digest(&self, digest: &Digest) -> Result<Entry, ObjectError> {
        let (fan, file) = self.parts(digest);
        let content = self.root.root().join(CONTENT_DIR);
        for dir in [&content, &fan] {
            match self.meta(dir)? {
                None => return Ok(Entry::Missing),
                Some(m) if m.kind == Kind::Dir => {}
                Some(m) if m.kind == Kind::Symlink => return Ok(Entry::Symlink),
                Some(_) => return Ok(Entry::Other),
            }
        }
        Ok(match self.meta(&fan.join(file))? {
            None => Entry::Missing,
            Some(m) => match m.kind {
                Kind::File => Entry::RegularFile { len: m.len },
                Kind::Dir => Entry::Directory,
                Kind::Symlink => Entry::Symlink,
                Kind::Other => Entry::Other,
            },
        })
    }

    /// Makes the fan-out directory `fan` exist durably for this handle:
    /// created if missing, and its parent fsynced once per handle.
    fn ensure_fan(&self, synced: &mut BTreeSet<String>, fan: &Path) -> Result<(), ObjectError> {
        let name = fan.display().to_string();
        if synced.contains(&name) {
            return Ok(());
        }
        match self.meta(fan)? {
            None => self.root.create_dir(fan).map_err(fs_err)?,
            Some(m) if m.kind == Kind::Dir => {}
            Some(m) if m.kind == Kind::Symlink => return Err(ObjectError::Exists(Entry::Symlink)),
            Some(_) => return Err(ObjectError::Exists(Entry::Other)),
        }
        self.root
            .sync_dir(&self.root.root().join(CONTENT_DIR))
            .map_err(fs_err)?;
        synced.insert(name);
        Ok(())
    }

    /// The staged file's path: unique within this handle (and `.tmp/` is
    /// cleared by every writing open).
    fn stage_path(&self, digest: &Digest) -> PathBuf {
        let n = self.stage_seq.fetch_add(1, Ordering::SeqCst);
        self.root
            .root()
            .join(STAGING_DIR)
            .join(format!("{}.{n}", digest.hex()))
    }

    /// Best effort: a staged file that will not be renamed is removed now
    /// (otherwise by the next writing open).
    fn discard(&self, stage: &Path) {
        let _ = self.root.fs().remove_file(stage);
    }

    /// Hashes `bytes`, stores them at their content address (an identical
    /// object already there is reused; different bytes are
    /// [`ArtifactStoreError::Conflict`] and left alone) and answers the new
    /// `artifact_files` row. For fixtures and users: relocation never
    /// ingests.
    pub fn ingest(
        &self,
        bytes: &[u8],
        meta: OccurrenceMeta,
    ) -> Result<Occurrence, ArtifactStoreError> {
        let facts = facts_of(bytes);
        let uri = self.address(&facts.sha256);
        let failed = |error| ArtifactStoreError::Object {
            uri: uri.to_string(),
            error,
        };
        match put_bytes(self, &uri, bytes) {
            Ok(()) => {}
            Err(ObjectError::Exists(Entry::RegularFile { .. })) => {
                self.check_existing(&uri, facts).map_err(|e| match e {
                    Ok(found) => ArtifactStoreError::Conflict {
                        uri: uri.clone(),
                        found,
                    },
                    Err(error) => failed(error),
                })?;
            }
            Err(error) => return Err(failed(error)),
        }
        Ok(Occurrence::new(meta, facts, uri))
    }

    /// `Ok` when the object at `uri` verifies as `facts`; `Err(Ok(found))`
    /// when it holds other bytes; `Err(Err(_))` when it cannot be read.
    fn check_existing(
        &self,
        uri: &NormalizedUri,
        facts: ObjectFacts,
    ) -> Result<(), Result<Measured, ObjectError>> {
        let read = match self.read(uri, facts.size) {
            Ok(r) => r,
            Err(ObjectError::TooLong { .. }) => return Err(Ok(Measured::Longer)),
            Err(e) => return Err(Err(e)),
        };
        match measure(read, facts.size) {
            Ok(Measured::Facts(f)) if f == facts => Ok(()),
            Ok(found) => Err(Ok(found)),
            Err(e) => Err(Err(ObjectError::Io(e.to_string()))),
        }
    }
}

impl<F: Fs> ArtifactStore<F> {
    /// Streams `bytes` into the new file `stage` through a [`Verifying`]
    /// reader, then fsyncs it only if they are the expected object.
    fn stage(
        &self,
        stage: &Path,
        bytes: &mut dyn Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        let mut v = Verifying::new(bytes, expect.size);
        let wrote = self.root.write_new_from(stage, &mut v);
        if let Some(e) = v.source_failure() {
            return Err(ObjectError::Source(e.to_string()));
        }
        wrote.map_err(fs_err)?;
        match v.measured() {
            Measured::Facts(f) if f == *expect => self.root.sync_file(stage).map_err(fs_err),
            found => Err(ObjectError::Mismatch(found)),
        }
    }
}

fn fs_err(e: FsError) -> ObjectError {
    ObjectError::Io(e.to_string())
}

impl<F: Fs> ObjectStore for ArtifactStore<F> {
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError> {
        let digest = addressed_digest(&self.uri, uri).ok_or(ObjectError::NotServed)?;
        self.probe_digest(&digest)
    }

    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError> {
        let path = self.path_of(uri)?;
        match self.probe(uri)? {
            Entry::RegularFile { len } if len > limit => return Err(ObjectError::TooLong { len }),
            Entry::RegularFile { .. } => {}
            Entry::Missing => return Err(ObjectError::Missing),
            other => return Err(ObjectError::NotRegularFile(other)),
        }
        match self.root.fs().open_read(&path) {
            Ok(reader) => Ok(ObjectRead::Stream(reader)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ObjectError::Missing),
            Err(e) => Err(ObjectError::Io(format!("read {}: {e}", path.display()))),
        }
    }

    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        let digest = addressed_digest(&self.uri, uri).ok_or(ObjectError::NotServed)?;
        let mut synced = self.writer();
        self.root.check_live().map_err(fs_err)?;
        let (fan, file) = self.parts(&digest);
        let dest = fan.join(file);
        match self.probe_digest(&digest)? {
            Entry::Missing => {}
            found => return Err(ObjectError::Exists(found)),
        }
        self.ensure_fan(&mut synced, &fan)?;
        let stage = self.stage_path(&digest);
        if let Err(e) = self.stage(&stage, bytes, expect) {
            self.discard(&stage);
            return Err(e);
        }
        // Single writer: nothing appears at `dest` between this check and
        // the rename (see the module documentation).
        match self.probe_digest(&digest) {
            Ok(Entry::Missing) => {}
            Ok(found) => {
                self.discard(&stage);
                return Err(ObjectError::Exists(found));
            }
            Err(e) => {
                self.discard(&stage);
                return Err(e);
            }
        }
        if let Err(e) = self.root.rename(&stage, &dest) {
            self.discard(&stage);
            return Err(fs_err(e));
        }
        self.root.sync_dir(&fan).map_err(fs_err)
    }
}
