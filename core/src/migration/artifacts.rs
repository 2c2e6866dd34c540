//! Artifact relocation without re-ingestion: the occurrence
//! row, the content-address layout, the object-store port, object hashing,
//! and [`relocate`].
//!
//! **The layout rule** ([`content_address`]). An object lives beneath an
//! Artifact root at exactly `<root>/sha256/<first 2 hex digits>/<64 hex
//! digits>` of its SHA-256; nothing else beneath a root is an object.
//! [`addressed_digest`] is the inverse (lexical, through
//! [`NormalizedUri::contains`]): the digest a URI is the content address of,
//! if any.
//!
//! **The port** ([`ObjectStore`]): `probe` (never following a symbolic
//! link), a bounded `read`, and `put_new`, which never overwrites. A shell
//! implements it (custos-fs's `ArtifactStore` over its `Fs` trait);
//! [`MemoryObjectStore`] is the memory implementation, and the conformance
//! suite (`custos_conformance::objects`) runs the same cases on both.
//!
//! **Hashing** ([`ObjectHasher`]): SHA-256 (`sha2`) and XXH3-64
//! (`twox-hash`, seed 0, the default secret) over the same bytes, in one
//! streaming pass of at most [`CHUNK`] bytes at a time; [`measure`] reads an
//! [`ObjectRead`] through it and stops at `limit + 1` bytes, so an object
//! longer than its row is refused without being read whole.
//!
//! **Relocation** ([`relocate`]) runs in three phases, and the first two
//! write nothing anywhere:
//!
//! 1. [`verify_source`] — the roots are disjoint and can hold content
//!    addresses; every row's `object_uri` is exactly its content address
//!    beneath the source root; every distinct object is probed (a regular
//!    file, never a symbolic link, directory or other entry) and read in
//!    full, streaming, and its SHA-256, XXH3-64 and size are compared with
//!    **every** row that references it;
//! 2. [`inspect_destination`] — each destination content address is probed
//!    read-only: absent (to copy), a regular file whose complete bytes
//!    verify (reused), anything else a refusal (conflicting bytes are never
//!    overwritten; a symbolic link, directory or other entry fails closed);
//! 3. the copy — each object still to copy is streamed again from the
//!    source into `put_new` once per distinct SHA-256, which stores it only
//!    if the streamed bytes verify against the rows (a [`Verifying`]
//!    reader), then read back from the destination and verified in full.
//!
//! So every refusal of phases 1 and 2 leaves the destination untouched,
//! and a source that changes between phase 1 and the copy stores nothing.
//! Memory is bounded independently of object size (a streaming store's
//! buffers and one [`CHUNK`]; a store that answers [`ObjectRead::Bytes`]
//! holds that object) plus the distinct-digest set and the rows
//! themselves. Relocation never mints an occurrence: the output rows
//! are the input rows with only `object_uri` replaced.

// A refusal names its object in full (artifact id, URI, digest, what was
// found): the public functions box it; the private steps pass it unboxed,
// once per relocation, off any hot path.
#![allow(
    clippy::result_large_err,
    reason = "private steps pass the full refusal once; the public API boxes it"
)]

mod memory;
#[cfg(test)]
mod tests;

pub use memory::{MemoryEntry, MemoryObjectStore};

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hasher as _;
use std::io::Read;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use twox_hash::XxHash3_64;

use super::{ArtifactPlan, DataError, Digest, Name, NormalizedUri, ObjectFacts, MAX_ITEMS};

/// The directory beneath an Artifact root that holds every object.
pub const CONTENT_DIR: &str = "sha256";

/// The largest piece of an object hashed or held at once while verifying.
pub const CHUNK: usize = 64 << 10;

/// One row of the `artifact_files` table: one visible occurrence of a
/// content object. Relocation changes only [`Occurrence::object_uri`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Occurrence {
    /// The Artifact's identity (joined by typed indexes and downstream
    /// `source_artifact_id` columns).
    pub artifact_id: Name,
    /// When the Artifact was ingested: **microseconds** since the Unix
    /// epoch, UTC, as the Iceberg `timestamp` column stores it. Copied,
    /// never interpreted.
    pub ingested_at: i64,
    /// Where the bytes came from at ingestion, uninterpreted (it may not
    /// even be a valid URI; it is never read).
    pub source_uri: String,
    /// The Artifact's logical path within its World.
    pub logical_path: String,
    /// The World the occurrence is attributed to.
    pub world: Name,
    /// The run it is attributed to, if any.
    pub run: Option<Name>,
    /// The tick it is attributed to, if any.
    pub tick: Option<u64>,
    /// SHA-256 of the object (its content address).
    #[serde(with = "crate::digest::bare")]
    pub sha256: Digest,
    /// XXH3-64 of the object.
    pub xxh3_64: u64,
    /// The object's size in bytes.
    pub size: u64,
    /// The media classification (`image/png`, …), uninterpreted.
    pub media_type: String,
    /// Where the object is: its content address beneath the Artifact root.
    pub object_uri: NormalizedUri,
}

/// Everything of an [`Occurrence`] that ingestion is told rather than
/// computes: the attribution and media classification.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccurrenceMeta {
    /// See [`Occurrence::artifact_id`].
    pub artifact_id: Name,
    /// See [`Occurrence::ingested_at`] (microseconds since the epoch).
    pub ingested_at: i64,
    /// See [`Occurrence::source_uri`].
    pub source_uri: String,
    /// See [`Occurrence::logical_path`].
    pub logical_path: String,
    /// See [`Occurrence::world`].
    pub world: Name,
    /// See [`Occurrence::run`].
    pub run: Option<Name>,
    /// See [`Occurrence::tick`].
    pub tick: Option<u64>,
    /// See [`Occurrence::media_type`].
    pub media_type: String,
}

impl Occurrence {
    /// This occurrence at another content address: relocation changes
    /// `object_uri` and nothing else.
    pub fn relocated(&self, object_uri: NormalizedUri) -> Occurrence {
        Occurrence {
            object_uri,
            ..self.clone()
        }
    }

    /// Whether `self` is `source` with at most `object_uri` changed: the
    /// one check a table writer makes of relocated rows.
    pub fn is_relocation_of(&self, source: &Occurrence) -> bool {
        source.relocated(self.object_uri.clone()) == *self
    }

    /// The row of `meta` for an object with `facts` stored at `object_uri`.
    pub fn new(meta: OccurrenceMeta, facts: ObjectFacts, object_uri: NormalizedUri) -> Self {
        Occurrence {
            artifact_id: meta.artifact_id,
            ingested_at: meta.ingested_at,
            source_uri: meta.source_uri,
            logical_path: meta.logical_path,
            world: meta.world,
            run: meta.run,
            tick: meta.tick,
            sha256: facts.sha256,
            xxh3_64: facts.xxh3_64,
            size: facts.size,
            media_type: meta.media_type,
            object_uri,
        }
    }

    /// The object facts the row records.
    pub fn facts(&self) -> ObjectFacts {
        ObjectFacts {
            sha256: self.sha256,
            xxh3_64: self.xxh3_64,
            size: self.size,
        }
    }
}

/// The content address of `sha256` beneath `root`:
/// `<root>/sha256/<2 hex>/<64 hex>` (no doubled slash beneath a root of
/// path `/`). Fails only when the result would exceed
/// [`super::MAX_URI_LEN`]: such a root can hold no object.
pub fn content_address(root: &NormalizedUri, sha256: &Digest) -> Result<NormalizedUri, DataError> {
    let hex = sha256.hex();
    let fan = hex.get(..2).unwrap_or_default();
    let base = root.as_str().strip_suffix('/').unwrap_or(root.as_str());
    NormalizedUri::parse(&format!("{base}/{CONTENT_DIR}/{fan}/{hex}"))
}

/// The digest `uri` is exactly the content address of beneath `root`, if
/// any: `uri` lies (lexically, segment-wise) beneath `root` and equals
/// [`content_address`] of the digest its last segment names.
pub fn addressed_digest(root: &NormalizedUri, uri: &NormalizedUri) -> Option<Digest> {
    if !root.contains(uri) {
        return None;
    }
    let last = uri.path().rsplit('/').next()?;
    let digest = Digest::parse_hex(last)?;
    let expected = content_address(root, &digest).ok()?;
    (expected == *uri).then_some(digest)
}

/// Whether `uri` is exactly the content address of `sha256` beneath `root`.
pub fn is_content_address(root: &NormalizedUri, uri: &NormalizedUri, sha256: &Digest) -> bool {
    addressed_digest(root, uri) == Some(*sha256)
}

/// SHA-256, XXH3-64 and size of a byte stream, fed piece by piece.
#[derive(Clone)]
pub struct ObjectHasher {
    sha256: Sha256,
    xxh3: XxHash3_64,
    size: u64,
}

impl fmt::Debug for ObjectHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectHasher")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Default for ObjectHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectHasher {
    /// An empty hasher (XXH3-64 with seed 0 and the default secret).
    pub fn new() -> Self {
        ObjectHasher {
            sha256: Sha256::new(),
            xxh3: XxHash3_64::with_seed(0),
            size: 0,
        }
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.sha256.update(bytes);
        self.xxh3.write(bytes);
        let n = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        self.size = self.size.saturating_add(n);
    }

    /// Bytes fed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The facts of everything fed.
    pub fn finish(self) -> ObjectFacts {
        ObjectFacts {
            sha256: Digest(self.sha256.finalize().into()),
            xxh3_64: self.xxh3.finish(),
            size: self.size,
        }
    }
}

/// The facts of `bytes`.
pub fn facts_of(bytes: &[u8]) -> ObjectFacts {
    let mut h = ObjectHasher::new();
    for piece in bytes.chunks(CHUNK) {
        h.update(piece);
    }
    h.finish()
}

/// What a filesystem-like store finds at an address, never following a
/// symbolic link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Entry {
    /// Nothing.
    Missing,
    /// A regular file of `len` bytes.
    RegularFile {
        /// Its length.
        len: u64,
    },
    /// A symbolic link (at the address, or on the way to it).
    Symlink,
    /// A directory.
    Directory,
    /// Anything else: a socket, device, fifo — or a non-directory on the
    /// way to the address.
    Other,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Missing => f.write_str("nothing"),
            Entry::RegularFile { len } => write!(f, "a regular file of {len} bytes"),
            Entry::Symlink => f.write_str("a symbolic link"),
            Entry::Directory => f.write_str("a directory"),
            Entry::Other => f.write_str("a non-regular entry"),
        }
    }
}

/// The bytes of an object, as [`ObjectStore::read`] hands them over.
pub enum ObjectRead {
    /// The whole object (a store that holds objects in memory, bounded by
    /// the limit it was given).
    Bytes(Vec<u8>),
    /// A reader over the object; the caller reads at most `limit + 1`
    /// bytes from it.
    Stream(Box<dyn Read + Send>),
}

impl fmt::Debug for ObjectRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectRead::Bytes(b) => write!(f, "ObjectRead::Bytes({} bytes)", b.len()),
            ObjectRead::Stream(_) => f.write_str("ObjectRead::Stream(..)"),
        }
    }
}

/// Why an [`ObjectStore`] operation failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ObjectError {
    /// Nothing is at the address.
    #[error("nothing at the address")]
    Missing,
    /// The address holds something other than a regular file.
    #[error("the address holds {0}, not a regular file")]
    NotRegularFile(Entry),
    /// The object is longer than the read's limit; it was not read.
    #[error("the object is {len} bytes, over the read limit")]
    TooLong {
        /// Its length.
        len: u64,
    },
    /// `put_new` found something at the address; it was left as it was.
    #[error("the address already holds {0}")]
    Exists(Entry),
    /// `put_new` read bytes that are not the expected object (found: what
    /// they measured); nothing was stored.
    #[error("the bytes given are not the expected object (found {0:?})")]
    Mismatch(Measured),
    /// `put_new` could not read the bytes it was given (the source's I/O);
    /// nothing was stored.
    #[error("reading the object's bytes: {0}")]
    Source(String),
    /// The URI is not an address this store serves (outside its root, or
    /// not a content address).
    #[error("not an address this store serves")]
    NotServed,
    /// The store failed (I/O, a poisoned or read-only handle).
    #[error("{0}")]
    Io(String),
}

impl ObjectError {
    /// The failure's [`Class`](crate::Class): what the caller does next
    /// (an object whose bytes do not match its address is `CorruptArtifact`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            ObjectError::Missing => Class::NotFound,
            ObjectError::NotRegularFile(..) => Class::CorruptArtifact,
            ObjectError::TooLong { .. } => Class::ResourceExhausted,
            ObjectError::Exists(..) => Class::AlreadyExists,
            ObjectError::Mismatch(..) => Class::CorruptArtifact,
            ObjectError::Source(..) => Class::Internal,
            ObjectError::NotServed => Class::Unsupported,
            ObjectError::Io(..) => Class::Internal,
        }
    }
}

/// A content-object store: the port relocation works through. Object
/// safe; implementations are shared across threads.
pub trait ObjectStore: Send + Sync {
    /// What is at `uri`, not following a symbolic link (neither at the
    /// address nor on the way to it). Never writes.
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError>;

    /// The bytes of the regular file at `uri`. A symbolic link, directory
    /// or other entry is [`ObjectError::NotRegularFile`], never followed;
    /// an object known to be longer than `limit` is [`ObjectError::TooLong`]
    /// without being read; [`ObjectRead::Bytes`] holds at most `limit`
    /// bytes. Never writes.
    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError>;

    /// Durably stores the object `bytes` streams at `uri`, which must hold
    /// nothing: anything there is [`ObjectError::Exists`] and is left as it
    /// was. Stored only if the bytes are exactly `expect` (size, SHA-256,
    /// XXH3-64): read through a [`Verifying`] reader, which stops at
    /// `expect.size + 1` bytes; other bytes are [`ObjectError::Mismatch`], a
    /// failure to read them [`ObjectError::Source`], and either leaves
    /// `uri` holding nothing. Memory is bounded by the store's buffers, not
    /// by the object. After any error `uri` holds nothing or exactly the
    /// expected object — never a part, never other bytes.
    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError>;
}

/// [`ObjectStore::put_new`] of bytes in memory (fixtures, ingestion).
pub fn put_bytes(
    store: &dyn ObjectStore,
    uri: &NormalizedUri,
    bytes: &[u8],
) -> Result<(), ObjectError> {
    store.put_new(uri, &mut { bytes }, &facts_of(bytes))
}

/// A reader that passes an object's bytes through, hashing them on the
/// way, and ends after `limit + 1` bytes (so a longer object is known
/// longer without being read whole); a store's `put_new` writes what it
/// reads from one and stores it only if [`Verifying::measured`] is the
/// expected object. A failure of the inner reader is kept
/// ([`Verifying::source_failure`]) so that a store can tell it from its
/// own write failure.
pub struct Verifying<'a> {
    inner: &'a mut dyn Read,
    hasher: ObjectHasher,
    limit: u64,
    failed: Option<String>,
}

impl fmt::Debug for Verifying<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifying")
            .field("read", &self.hasher.size())
            .field("limit", &self.limit)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<'a> Verifying<'a> {
    /// Reads `inner`, expecting at most `limit` bytes.
    pub fn new(inner: &'a mut dyn Read, limit: u64) -> Self {
        Verifying {
            inner,
            hasher: ObjectHasher::new(),
            limit,
            failed: None,
        }
    }

    /// Why the inner reader failed, if it did.
    pub fn source_failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// What the bytes read so far measure: [`Measured::Longer`] past the
    /// limit.
    pub fn measured(self) -> Measured {
        if self.hasher.size() > self.limit {
            Measured::Longer
        } else {
            Measured::Facts(self.hasher.finish())
        }
    }
}

impl Read for Verifying<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self
            .limit
            .saturating_add(1)
            .saturating_sub(self.hasher.size());
        let max = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let Some(window) = buf.get_mut(..max) else {
            return Ok(0);
        };
        if window.is_empty() {
            return Ok(0);
        }
        let n = loop {
            match self.inner.read(window) {
                Ok(n) => break n.min(window.len()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let detail = e.to_string();
                    self.failed = Some(detail.clone());
                    return Err(std::io::Error::other(detail));
                }
            }
        };
        self.hasher.update(window.get(..n).unwrap_or_default());
        Ok(n)
    }
}

/// What reading an object through [`measure`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Measured {
    /// The whole object, at most the limit.
    Facts(ObjectFacts),
    /// More than the limit: refused after at most `limit + 1` bytes.
    Longer,
}

/// Hashes the object `read` streams, reading at most `limit + 1` bytes and
/// holding at most [`CHUNK`] of them at once (beyond what `read` holds).
pub fn measure(read: ObjectRead, limit: u64) -> std::io::Result<Measured> {
    match read {
        ObjectRead::Bytes(bytes) => {
            let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
            Ok(if len > limit {
                Measured::Longer
            } else {
                Measured::Facts(facts_of(&bytes))
            })
        }
        ObjectRead::Stream(reader) => {
            let mut reader = reader.take(limit.saturating_add(1));
            let mut h = ObjectHasher::new();
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                h.update(buf.get(..n).unwrap_or_default());
                if h.size() > limit {
                    return Ok(Measured::Longer);
                }
            }
            Ok(Measured::Facts(h.finish()))
        }
    }
}

/// Reads the whole object `read` yields into memory, at most `limit`
/// bytes: `None` when it is longer (after reading at most `limit + 1`).
pub fn read_bounded(read: ObjectRead, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    match read {
        ObjectRead::Bytes(bytes) => {
            let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
            Ok((len <= limit).then_some(bytes))
        }
        ObjectRead::Stream(reader) => {
            let mut out = Vec::new();
            reader.take(limit.saturating_add(1)).read_to_end(&mut out)?;
            let len = u64::try_from(out.len()).unwrap_or(u64::MAX);
            Ok((len <= limit).then_some(out))
        }
    }
}

/// Which endpoint an object was refused at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The source Artifact root.
    Source,
    /// The destination Artifact root.
    Destination,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Source => "source",
            Side::Destination => "destination",
        })
    }
}

/// What was found in place of the expected object, for a destination
/// refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Found {
    /// An object with these facts.
    Facts(ObjectFacts),
    /// An object longer than expected (not read whole).
    Longer,
    /// No regular file: this entry.
    Entry(Entry),
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Facts(o) => write!(
                f,
                "an object of {} bytes, sha256 {}, xxh3-64 {:016x}",
                o.size,
                o.sha256.hex(),
                o.xxh3_64
            ),
            Found::Longer => f.write_str("an object longer than expected"),
            Found::Entry(e) => write!(f, "{e}"),
        }
    }
}

fn size_text(found: &Option<u64>) -> String {
    match found {
        Some(n) => format!("{n} bytes"),
        None => "more bytes (refused without reading it whole)".into(),
    }
}

/// Why relocation refused (boxed by the public functions: it names the
/// object in full). Every variant names the object (the first
/// occurrence's `artifact_id` and the URI and digest concerned) and the
/// rule; [`RelocationError::reason`] is the stable kebab-case reason.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RelocationError {
    /// The source and destination Artifact roots are not disjoint.
    #[error("artifact-roots-overlap: source root {source_root} and destination root {destination_root} must be disjoint")]
    RootsOverlap {
        /// The source root.
        source_root: NormalizedUri,
        /// The destination root.
        destination_root: NormalizedUri,
    },
    /// A root too long to hold any content address.
    #[error(
        "artifact-root-invalid: the {side} root {root} cannot hold a content address: {problem}"
    )]
    RootInvalid {
        /// Which root.
        side: Side,
        /// The root.
        root: NormalizedUri,
        /// Why.
        problem: DataError,
    },
    /// More distinct objects than one plan may list ([`MAX_ITEMS`]).
    #[error("artifact-too-many-objects: more than {max} distinct objects", max = MAX_ITEMS)]
    TooManyObjects,
    /// A row's `object_uri` outside the source root.
    #[error("artifact-uri-outside-root: artifact {artifact_id}: {uri} is not beneath the source root {root}")]
    UriOutsideRoot {
        /// The row.
        artifact_id: Name,
        /// Its `object_uri`.
        uri: NormalizedUri,
        /// The source root.
        root: NormalizedUri,
    },
    /// A row's `object_uri` beneath the source root but not exactly the
    /// content address of its SHA-256.
    #[error("artifact-uri-not-content-address: artifact {artifact_id}: {uri} is not the content address {expected} of its sha256")]
    NotContentAddress {
        /// The row.
        artifact_id: Name,
        /// Its `object_uri`.
        uri: NormalizedUri,
        /// The content address of its SHA-256.
        expected: NormalizedUri,
    },
    /// No object at a source content address.
    #[error("artifact-object-missing: artifact {artifact_id}: no object at {uri} (sha256 {sha256_hex}) at the {side}", sha256_hex = .sha256.hex())]
    ObjectMissing {
        /// Where.
        side: Side,
        /// The first row referencing the object.
        artifact_id: Name,
        /// The content address.
        uri: NormalizedUri,
        /// The object's digest.
        sha256: Digest,
    },
    /// A symbolic link, directory or other entry at a content address.
    #[error("artifact-object-not-regular-file: artifact {artifact_id}: {uri} (sha256 {sha256_hex}) at the {side} is {found}; content objects must be regular files", sha256_hex = .sha256.hex())]
    NotRegularFile {
        /// Where.
        side: Side,
        /// The first row referencing the object.
        artifact_id: Name,
        /// The content address.
        uri: NormalizedUri,
        /// The object's digest.
        sha256: Digest,
        /// What is there.
        found: Entry,
    },
    /// The object's size differs from a row's.
    #[error("artifact-size-mismatch: artifact {artifact_id}: {uri} (sha256 {sha256_hex}) has {}, the row says {expected}", size_text(found), sha256_hex = .sha256.hex())]
    SizeMismatch {
        /// The row.
        artifact_id: Name,
        /// The content address.
        uri: NormalizedUri,
        /// The object's digest.
        sha256: Digest,
        /// The row's size.
        expected: u64,
        /// The object's size; `None` when it is longer than the row's and
        /// was refused at `expected + 1` bytes, never read whole.
        found: Option<u64>,
    },
    /// The object's SHA-256 differs from a row's.
    #[error("artifact-sha256-mismatch: artifact {artifact_id}: {uri} hashes to sha256 {found_hex}, the row says {expected_hex}", expected_hex = .expected.hex(), found_hex = .found.hex())]
    Sha256Mismatch {
        /// The row.
        artifact_id: Name,
        /// The content address.
        uri: NormalizedUri,
        /// The row's SHA-256.
        expected: Digest,
        /// The bytes' SHA-256.
        found: Digest,
    },
    /// The object's XXH3-64 differs from a row's.
    #[error("artifact-xxh3-mismatch: artifact {artifact_id}: {uri} (sha256 {sha256_hex}) hashes to xxh3-64 {found:016x}, the row says {expected:016x}", sha256_hex = .sha256.hex())]
    Xxh3Mismatch {
        /// The row.
        artifact_id: Name,
        /// The content address.
        uri: NormalizedUri,
        /// The object's digest.
        sha256: Digest,
        /// The row's XXH3-64.
        expected: u64,
        /// The bytes' XXH3-64.
        found: u64,
    },
    /// Bytes that do not verify already at a destination content address:
    /// never overwritten.
    #[error("artifact-destination-conflict: artifact {artifact_id}: the destination {uri} (sha256 {sha256_hex}) already holds {found}; it is not overwritten", sha256_hex = .sha256.hex())]
    DestinationConflict {
        /// The first row referencing the object.
        artifact_id: Name,
        /// The destination content address.
        uri: NormalizedUri,
        /// The object's digest.
        sha256: Digest,
        /// What is there.
        found: Found,
    },
    /// The copied object does not read back as the verified one.
    #[error("artifact-readback-mismatch: artifact {artifact_id}: the destination {uri} (sha256 {sha256_hex}) reads back as {found}", sha256_hex = .sha256.hex())]
    ReadbackMismatch {
        /// The first row referencing the object.
        artifact_id: Name,
        /// The destination content address.
        uri: NormalizedUri,
        /// The object's digest.
        sha256: Digest,
        /// What was read back.
        found: Found,
    },
    /// The store failed or does not serve the address.
    #[error("artifact-io: artifact {artifact_id}: {uri} at the {side}: {detail}")]
    Io {
        /// Where.
        side: Side,
        /// The first row referencing the object.
        artifact_id: Name,
        /// The address.
        uri: NormalizedUri,
        /// What the store said.
        detail: String,
    },
}

crate::reasons! {
    /// The stable kebab-case reason of the refusal.
    RelocationError {
        RootsOverlap => "artifact-roots-overlap",
        RootInvalid => "artifact-root-invalid",
        TooManyObjects => "artifact-too-many-objects",
        UriOutsideRoot => "artifact-uri-outside-root",
        NotContentAddress => "artifact-uri-not-content-address",
        ObjectMissing => "artifact-object-missing",
        NotRegularFile => "artifact-object-not-regular-file",
        SizeMismatch => "artifact-size-mismatch",
        Sha256Mismatch => "artifact-sha256-mismatch",
        Xxh3Mismatch => "artifact-xxh3-mismatch",
        DestinationConflict => "artifact-destination-conflict",
        ReadbackMismatch => "artifact-readback-mismatch",
        Io => "artifact-io",
    }
}

impl RelocationError {
    /// The refusal's [`Class`](crate::Class): an I/O failure is
    /// `Internal`; roots that overlap or cannot be used and a count over
    /// the bound refuse the request (`FailedPrecondition`); every other
    /// refusal is an object that does not verify (`CorruptArtifact`).
    pub fn class(&self) -> crate::Class {
        use crate::Class;
        match self {
            RelocationError::Io { .. } => Class::Internal,
            RelocationError::RootsOverlap { .. }
            | RelocationError::RootInvalid { .. }
            | RelocationError::TooManyObjects => Class::FailedPrecondition,
            _ => Class::CorruptArtifact,
        }
    }
}

/// One distinct object of a verified inventory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InventoryObject {
    /// Its verified facts.
    pub facts: ObjectFacts,
    /// The first row (in input order) referencing it, named in refusals.
    pub artifact_id: Name,
}

/// The source inventory [`verify_source`] verified: every distinct object,
/// sorted by SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SourceInventory {
    /// The occurrences verified.
    pub occurrences: u64,
    /// Every distinct object, sorted by SHA-256.
    pub objects: Vec<InventoryObject>,
}

impl SourceInventory {
    /// The plan's Artifact inventory.
    pub fn artifact_plan(&self) -> ArtifactPlan {
        ArtifactPlan {
            occurrences: self.occurrences,
            objects: self.objects.iter().map(|o| o.facts).collect(),
        }
    }
}

/// What [`inspect_destination`] found for one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disposition {
    /// Nothing at the destination content address: to copy.
    Copy,
    /// A regular file whose complete bytes verify: reused as it is.
    Reuse,
}

/// The result of [`relocate`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Relocation {
    /// The input rows, in input order, each with only `object_uri`
    /// replaced by its destination content address.
    pub occurrences: Vec<Occurrence>,
    /// Every distinct object, sorted by SHA-256 (an
    /// [`ArtifactPlan::objects`]).
    pub objects: Vec<ObjectFacts>,
    /// Objects written to the destination (once per distinct SHA-256).
    pub copied: u64,
    /// Objects already at the destination whose bytes verified.
    pub reused: u64,
    /// Bytes read back from the destination and verified.
    pub verified_bytes: u64,
}

impl Relocation {
    /// The Artifact inventory of the relocated rows.
    pub fn artifact_plan(&self) -> ArtifactPlan {
        ArtifactPlan {
            occurrences: u64::try_from(self.occurrences.len()).unwrap_or(u64::MAX),
            objects: self.objects.clone(),
        }
    }
}

/// Refuses non-disjoint roots and roots that cannot hold a content address.
fn check_roots(source: &NormalizedUri, destination: &NormalizedUri) -> Result<(), RelocationError> {
    if !source.disjoint(destination) {
        return Err(RelocationError::RootsOverlap {
            source_root: source.clone(),
            destination_root: destination.clone(),
        });
    }
    for (side, root) in [(Side::Source, source), (Side::Destination, destination)] {
        // Every address beneath a root has the same length.
        content_address(root, &Digest::default()).map_err(|problem| {
            RelocationError::RootInvalid {
                side,
                root: root.clone(),
                problem,
            }
        })?;
    }
    Ok(())
}

/// The lexical pass: every row's `object_uri` is exactly its content
/// address beneath `root`. Answers, per distinct digest, the index of its
/// first row.
fn check_addresses(
    occurrences: &[Occurrence],
    root: &NormalizedUri,
) -> Result<BTreeMap<Digest, usize>, RelocationError> {
    let mut first = BTreeMap::new();
    for (i, o) in occurrences.iter().enumerate() {
        if !root.contains(&o.object_uri) {
            return Err(RelocationError::UriOutsideRoot {
                artifact_id: o.artifact_id.clone(),
                uri: o.object_uri.clone(),
                root: root.clone(),
            });
        }
        if !is_content_address(root, &o.object_uri, &o.sha256) {
            let expected = content_address(root, &o.sha256).map_err(|problem| {
                RelocationError::RootInvalid {
                    side: Side::Source,
                    root: root.clone(),
                    problem,
                }
            })?;
            return Err(RelocationError::NotContentAddress {
                artifact_id: o.artifact_id.clone(),
                uri: o.object_uri.clone(),
                expected,
            });
        }
        first.entry(o.sha256).or_insert(i);
        if first.len() > MAX_ITEMS {
            return Err(RelocationError::TooManyObjects);
        }
    }
    Ok(first)
}

/// What one row (or the first row of an object) expects: named in every
/// refusal.
struct Expect<'a> {
    artifact_id: &'a Name,
    uri: &'a NormalizedUri,
    facts: ObjectFacts,
}

impl Occurrence {
    fn expect(&self) -> Expect<'_> {
        Expect {
            artifact_id: &self.artifact_id,
            uri: &self.object_uri,
            facts: self.facts(),
        }
    }
}

impl Expect<'_> {
    fn io(&self, side: Side, detail: impl fmt::Display) -> RelocationError {
        RelocationError::Io {
            side,
            artifact_id: self.artifact_id.clone(),
            uri: self.uri.clone(),
            detail: detail.to_string(),
        }
    }

    fn size_mismatch(&self, found: Option<u64>) -> RelocationError {
        RelocationError::SizeMismatch {
            artifact_id: self.artifact_id.clone(),
            uri: self.uri.clone(),
            sha256: self.facts.sha256,
            expected: self.facts.size,
            found,
        }
    }

    /// Maps a source store's refusal to the relocation rule it breaks.
    fn source_refusal(&self, e: ObjectError) -> RelocationError {
        match e {
            ObjectError::Missing => RelocationError::ObjectMissing {
                side: Side::Source,
                artifact_id: self.artifact_id.clone(),
                uri: self.uri.clone(),
                sha256: self.facts.sha256,
            },
            ObjectError::NotRegularFile(found) | ObjectError::Exists(found) => {
                RelocationError::NotRegularFile {
                    side: Side::Source,
                    artifact_id: self.artifact_id.clone(),
                    uri: self.uri.clone(),
                    sha256: self.facts.sha256,
                    found,
                }
            }
            ObjectError::TooLong { len } => self.size_mismatch(Some(len)),
            other => self.io(Side::Source, other),
        }
    }

    /// Compares the measured object with the expectation: size, then
    /// SHA-256, then XXH3-64.
    fn check(&self, measured: Measured) -> Result<(), RelocationError> {
        let found = match measured {
            Measured::Longer => return Err(self.size_mismatch(None)),
            Measured::Facts(f) => f,
        };
        if found.size != self.facts.size {
            return Err(self.size_mismatch(Some(found.size)));
        }
        if found.sha256 != self.facts.sha256 {
            return Err(RelocationError::Sha256Mismatch {
                artifact_id: self.artifact_id.clone(),
                uri: self.uri.clone(),
                expected: self.facts.sha256,
                found: found.sha256,
            });
        }
        if found.xxh3_64 != self.facts.xxh3_64 {
            return Err(RelocationError::Xxh3Mismatch {
                artifact_id: self.artifact_id.clone(),
                uri: self.uri.clone(),
                sha256: self.facts.sha256,
                expected: self.facts.xxh3_64,
                found: found.xxh3_64,
            });
        }
        Ok(())
    }
}

/// Measures the source object `e` names: a regular file (probed first, so
/// a longer one is refused by its length), read in full, streaming, at most
/// `size + 1` bytes.
fn measure_source(source: &dyn ObjectStore, e: &Expect<'_>) -> Result<Measured, RelocationError> {
    match source.probe(e.uri).map_err(|x| e.source_refusal(x))? {
        Entry::RegularFile { len } if len > e.facts.size => {
            return Err(e.size_mismatch(Some(len)));
        }
        Entry::RegularFile { .. } => {}
        Entry::Missing => return Err(e.source_refusal(ObjectError::Missing)),
        found => return Err(e.source_refusal(ObjectError::NotRegularFile(found))),
    }
    let read = source
        .read(e.uri, e.facts.size)
        .map_err(|x| e.source_refusal(x))?;
    measure(read, e.facts.size).map_err(|x| e.io(Side::Source, x))
}

/// Phase 1, writing nothing: checks the roots, every row's address, and
/// every distinct source object read in full against **every** row that
/// references it. The first refusal found is returned; input order decides
/// among rows, SHA-256 order among objects.
pub fn verify_source(
    occurrences: &[Occurrence],
    source: &dyn ObjectStore,
    source_root: &NormalizedUri,
    destination_root: &NormalizedUri,
) -> Result<SourceInventory, Box<RelocationError>> {
    verify_source_inner(occurrences, source, source_root, destination_root).map_err(Box::new)
}

fn verify_source_inner(
    occurrences: &[Occurrence],
    source: &dyn ObjectStore,
    source_root: &NormalizedUri,
    destination_root: &NormalizedUri,
) -> Result<SourceInventory, RelocationError> {
    check_roots(source_root, destination_root)?;
    let first = check_addresses(occurrences, source_root)?;
    let mut measured = BTreeMap::new();
    for (digest, &i) in &first {
        let Some(row) = occurrences.get(i) else {
            continue;
        };
        let m = measure_source(source, &row.expect())?;
        row.expect().check(m)?;
        measured.insert(*digest, m);
    }
    for row in occurrences {
        if let Some(m) = measured.get(&row.sha256) {
            row.expect().check(*m)?;
        }
    }
    Ok(inventory_of(&first, occurrences))
}

/// The inventory of `occurrences`: each distinct object with the facts
/// and `artifact_id` of its first row (`first`: digest → row index).
fn inventory_of(first: &BTreeMap<Digest, usize>, occurrences: &[Occurrence]) -> SourceInventory {
    let objects = first
        .iter()
        .filter_map(|(_, &i)| occurrences.get(i))
        .map(|row| InventoryObject {
            facts: row.facts(),
            artifact_id: row.artifact_id.clone(),
        })
        .collect();
    SourceInventory {
        occurrences: u64::try_from(occurrences.len()).unwrap_or(u64::MAX),
        objects,
    }
}

/// The inventory the rows declare, reading no object: the roots and every
/// row's address checked as [`verify_source`] does, every row of one
/// SHA-256 agreeing with the first on its facts. For a recheck of rows
/// whose objects were verified and copied already (a changed row changes
/// the inventory's digest; an object's bytes are not re-read).
pub fn declared_inventory(
    occurrences: &[Occurrence],
    source_root: &NormalizedUri,
    destination_root: &NormalizedUri,
) -> Result<SourceInventory, Box<RelocationError>> {
    declared_inner(occurrences, source_root, destination_root).map_err(Box::new)
}

fn declared_inner(
    occurrences: &[Occurrence],
    source_root: &NormalizedUri,
    destination_root: &NormalizedUri,
) -> Result<SourceInventory, RelocationError> {
    check_roots(source_root, destination_root)?;
    let first = check_addresses(occurrences, source_root)?;
    for row in occurrences {
        if let Some(f) = first.get(&row.sha256).and_then(|&i| occurrences.get(i)) {
            row.expect().check(Measured::Facts(f.facts()))?;
        }
    }
    Ok(inventory_of(&first, occurrences))
}

/// Classifies the destination content address `uri` of `object`, writing
/// nothing: absent ([`Disposition::Copy`]), a regular file whose complete
/// bytes verify ([`Disposition::Reuse`]), or a refusal.
fn inspect_one(
    destination: &dyn ObjectStore,
    uri: &NormalizedUri,
    object: &InventoryObject,
) -> Result<Disposition, RelocationError> {
    let facts = object.facts;
    let io = |e: ObjectError| RelocationError::Io {
        side: Side::Destination,
        artifact_id: object.artifact_id.clone(),
        uri: uri.clone(),
        detail: e.to_string(),
    };
    let not_regular = |found| RelocationError::NotRegularFile {
        side: Side::Destination,
        artifact_id: object.artifact_id.clone(),
        uri: uri.clone(),
        sha256: facts.sha256,
        found,
    };
    let conflict = |found| RelocationError::DestinationConflict {
        artifact_id: object.artifact_id.clone(),
        uri: uri.clone(),
        sha256: facts.sha256,
        found,
    };
    match destination.probe(uri).map_err(io)? {
        Entry::Missing => return Ok(Disposition::Copy),
        Entry::RegularFile { len } if len > facts.size => return Err(conflict(Found::Longer)),
        Entry::RegularFile { .. } => {}
        found => return Err(not_regular(found)),
    }
    let read = match destination.read(uri, facts.size) {
        Ok(r) => r,
        Err(ObjectError::TooLong { .. }) => return Err(conflict(Found::Longer)),
        Err(ObjectError::NotRegularFile(found)) => return Err(not_regular(found)),
        Err(e) => return Err(io(e)),
    };
    match measure(read, facts.size).map_err(|e| io(ObjectError::Io(e.to_string())))? {
        Measured::Facts(f) if f == facts => Ok(Disposition::Reuse),
        Measured::Facts(f) => Err(conflict(Found::Facts(f))),
        Measured::Longer => Err(conflict(Found::Longer)),
    }
}

/// Phase 2, writing nothing: what each destination content address holds,
/// per object of `inventory` in order.
pub fn inspect_destination(
    inventory: &SourceInventory,
    destination: &dyn ObjectStore,
    destination_root: &NormalizedUri,
) -> Result<Vec<Disposition>, Box<RelocationError>> {
    inspect_destination_inner(inventory, destination, destination_root).map_err(Box::new)
}

fn inspect_destination_inner(
    inventory: &SourceInventory,
    destination: &dyn ObjectStore,
    destination_root: &NormalizedUri,
) -> Result<Vec<Disposition>, RelocationError> {
    inventory
        .objects
        .iter()
        .map(|object| {
            let uri = destination_address(destination_root, object)?;
            inspect_one(destination, &uri, object)
        })
        .collect()
}

fn destination_address(
    root: &NormalizedUri,
    object: &InventoryObject,
) -> Result<NormalizedUri, RelocationError> {
    content_address(root, &object.facts.sha256).map_err(|problem| RelocationError::RootInvalid {
        side: Side::Destination,
        root: root.clone(),
        problem,
    })
}

/// Copies one object: streams the source bytes into `put_new`, which
/// stores them only if they verify (an identical object that appeared
/// meanwhile is reused, different bytes are a conflict), reads them back
/// and verifies them in full. Answers whether it wrote.
fn copy_one(
    object: &InventoryObject,
    source: &dyn ObjectStore,
    source_root: &NormalizedUri,
    destination: &dyn ObjectStore,
    uri: &NormalizedUri,
) -> Result<bool, RelocationError> {
    let source_uri = content_address(source_root, &object.facts.sha256).map_err(|problem| {
        RelocationError::RootInvalid {
            side: Side::Source,
            root: source_root.clone(),
            problem,
        }
    })?;
    let from = Expect {
        artifact_id: &object.artifact_id,
        uri: &source_uri,
        facts: object.facts,
    };
    let read = source
        .read(&source_uri, object.facts.size)
        .map_err(|x| from.source_refusal(x))?;
    let mut bytes: Box<dyn Read + Send> = match read {
        ObjectRead::Bytes(b) => Box::new(std::io::Cursor::new(b)),
        ObjectRead::Stream(r) => r,
    };
    let to = Expect { uri, ..from };
    let wrote = match destination.put_new(uri, &mut bytes, &object.facts) {
        Ok(()) => true,
        // The source no longer reads as its rows: nothing was stored.
        Err(ObjectError::Mismatch(found)) => {
            from.check(found)?;
            return Err(to.io(Side::Destination, "put_new refused bytes that verify"));
        }
        Err(ObjectError::Source(x)) => return Err(from.io(Side::Source, x)),
        Err(ObjectError::Exists(_)) => match inspect_one(destination, uri, object)? {
            Disposition::Reuse => false,
            Disposition::Copy => {
                return Err(to.io(
                    Side::Destination,
                    "the object vanished after put_new found it",
                ))
            }
        },
        Err(x) => return Err(to.io(Side::Destination, x)),
    };
    drop(bytes);
    readback(destination, uri, object)?;
    Ok(wrote)
}

/// Reads the destination object back and verifies it in full.
fn readback(
    destination: &dyn ObjectStore,
    uri: &NormalizedUri,
    object: &InventoryObject,
) -> Result<(), RelocationError> {
    let facts = object.facts;
    let mismatch = |found| RelocationError::ReadbackMismatch {
        artifact_id: object.artifact_id.clone(),
        uri: uri.clone(),
        sha256: facts.sha256,
        found,
    };
    let read = match destination.read(uri, facts.size) {
        Ok(r) => r,
        Err(ObjectError::Missing) => return Err(mismatch(Found::Entry(Entry::Missing))),
        Err(ObjectError::NotRegularFile(e)) => return Err(mismatch(Found::Entry(e))),
        Err(ObjectError::TooLong { .. }) => return Err(mismatch(Found::Longer)),
        Err(e) => {
            return Err(RelocationError::Io {
                side: Side::Destination,
                artifact_id: object.artifact_id.clone(),
                uri: uri.clone(),
                detail: e.to_string(),
            })
        }
    };
    let measured = measure(read, facts.size).map_err(|e| RelocationError::Io {
        side: Side::Destination,
        artifact_id: object.artifact_id.clone(),
        uri: uri.clone(),
        detail: e.to_string(),
    })?;
    match measured {
        Measured::Facts(f) if f == facts => Ok(()),
        Measured::Facts(f) => Err(mismatch(Found::Facts(f))),
        Measured::Longer => Err(mismatch(Found::Longer)),
    }
}

/// Relocates the objects `occurrences` reference from `source` (beneath
/// `source_root`) to `destination` (beneath `destination_root`): each
/// distinct SHA-256 copied once and verified in full; see the module
/// documentation for the three phases. Never
/// ingests: the answer's rows are `occurrences` with only `object_uri`
/// changed. A refusal of [`verify_source`] or [`inspect_destination`]
/// leaves the destination untouched; a failure while copying leaves every
/// destination content address holding nothing or a complete verified
/// object (the [`ObjectStore::put_new`] contract), so a retry converges.
pub fn relocate(
    occurrences: &[Occurrence],
    source: &dyn ObjectStore,
    source_root: &NormalizedUri,
    destination: &dyn ObjectStore,
    destination_root: &NormalizedUri,
) -> Result<Relocation, Box<RelocationError>> {
    relocate_inner(
        occurrences,
        source,
        source_root,
        destination,
        destination_root,
    )
    .map_err(Box::new)
}

fn relocate_inner(
    occurrences: &[Occurrence],
    source: &dyn ObjectStore,
    source_root: &NormalizedUri,
    destination: &dyn ObjectStore,
    destination_root: &NormalizedUri,
) -> Result<Relocation, RelocationError> {
    let inventory = verify_source_inner(occurrences, source, source_root, destination_root)?;
    let plan = inspect_destination_inner(&inventory, destination, destination_root)?;
    let (mut copied, mut reused, mut verified_bytes) = (0u64, 0u64, 0u64);
    for (object, disposition) in inventory.objects.iter().zip(&plan) {
        let uri = destination_address(destination_root, object)?;
        let wrote = match disposition {
            Disposition::Reuse => false,
            Disposition::Copy => copy_one(object, source, source_root, destination, &uri)?,
        };
        if wrote {
            copied += 1;
        } else {
            reused += 1;
        }
        verified_bytes = verified_bytes.saturating_add(object.facts.size);
    }
    let mut rows = Vec::with_capacity(occurrences.len());
    for o in occurrences {
        let object_uri = content_address(destination_root, &o.sha256).map_err(|problem| {
            RelocationError::RootInvalid {
                side: Side::Destination,
                root: destination_root.clone(),
                problem,
            }
        })?;
        rows.push(o.relocated(object_uri));
    }
    Ok(Relocation {
        occurrences: rows,
        objects: inventory.objects.iter().map(|o| o.facts).collect(),
        copied,
        reused,
        verified_bytes,
    })
}
