//! [`MemoryObjectStore`]: the object-store port over a map, the oracle the
//! object-store conformance suite runs beside real stores.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    addressed_digest, content_address, Entry, Measured, ObjectError, ObjectRead, ObjectStore,
    Verifying,
};
use crate::migration::{Digest, NormalizedUri, ObjectFacts};

/// What a [`MemoryObjectStore`] holds at one content address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemoryEntry {
    /// A regular object.
    Bytes(Vec<u8>),
    /// A symbolic link (never followed).
    Symlink,
    /// A directory.
    Directory,
}

/// An object store in memory serving the content addresses beneath one
/// root, with the port's full contract: reads never follow a symbolic
/// link, `read` refuses an object longer than its limit by its length,
/// `put_new` never overwrites and stores only bytes that verify.
#[derive(Debug)]
pub struct MemoryObjectStore {
    root: NormalizedUri,
    entries: Arc<Mutex<BTreeMap<Digest, MemoryEntry>>>,
}

impl MemoryObjectStore {
    /// An empty store beneath `root`.
    pub fn new(root: NormalizedUri) -> Self {
        MemoryObjectStore {
            root,
            entries: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// A second handle over this store's objects, as a restart would open
    /// the same root. Nothing in a memory store is durable: the "reopen"
    /// shares the first handle's map (what the conformance suite's reopen
    /// cases need of it).
    pub fn reopen(&self) -> Self {
        MemoryObjectStore {
            root: self.root.clone(),
            entries: Arc::clone(&self.entries),
        }
    }

    /// Everything it holds, keyed by the SHA-256 each content address
    /// names: a plain
    /// value (a model checker keeps it in its state and builds the store
    /// again with [`MemoryObjectStore::from_image`]).
    pub fn image(&self) -> Result<BTreeMap<Digest, MemoryEntry>, ObjectError> {
        Ok(self.lock()?.clone())
    }

    /// A store beneath `root` holding `entries` ([`MemoryObjectStore::image`]).
    pub fn from_image(root: NormalizedUri, entries: BTreeMap<Digest, MemoryEntry>) -> Self {
        MemoryObjectStore {
            root,
            entries: Arc::new(Mutex::new(entries)),
        }
    }

    /// The root it serves.
    pub fn root(&self) -> &NormalizedUri {
        &self.root
    }

    /// The content address of `sha256` beneath the root.
    pub fn address(&self, sha256: &Digest) -> Option<NormalizedUri> {
        content_address(&self.root, sha256).ok()
    }

    /// Places `entry` at `uri` directly (fixtures: a corrupt object, a
    /// symbolic link, a directory), whatever is there.
    pub fn plant(&self, uri: &NormalizedUri, entry: MemoryEntry) -> Result<(), ObjectError> {
        let d = addressed_digest(&self.root, uri).ok_or(ObjectError::NotServed)?;
        self.lock()?.insert(d, entry);
        Ok(())
    }

    fn lock(&self) -> Result<MutexGuard<'_, BTreeMap<Digest, MemoryEntry>>, ObjectError> {
        self.entries
            .lock()
            .map_err(|_| ObjectError::Io("memory object store mutex poisoned".into()))
    }

    fn digest(&self, uri: &NormalizedUri) -> Result<Digest, ObjectError> {
        addressed_digest(&self.root, uri).ok_or(ObjectError::NotServed)
    }
}

fn entry_of(e: Option<&MemoryEntry>) -> Entry {
    match e {
        None => Entry::Missing,
        Some(MemoryEntry::Bytes(b)) => Entry::RegularFile {
            len: u64::try_from(b.len()).unwrap_or(u64::MAX),
        },
        Some(MemoryEntry::Symlink) => Entry::Symlink,
        Some(MemoryEntry::Directory) => Entry::Directory,
    }
}

impl ObjectStore for MemoryObjectStore {
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError> {
        let d = self.digest(uri)?;
        Ok(entry_of(self.lock()?.get(&d)))
    }

    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError> {
        let d = self.digest(uri)?;
        match self.lock()?.get(&d) {
            Some(MemoryEntry::Bytes(b)) => {
                let len = u64::try_from(b.len()).unwrap_or(u64::MAX);
                if len > limit {
                    return Err(ObjectError::TooLong { len });
                }
                Ok(ObjectRead::Bytes(b.clone()))
            }
            None => Err(ObjectError::Missing),
            other => Err(ObjectError::NotRegularFile(entry_of(other))),
        }
    }

    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn Read,
        expect: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        let d = self.digest(uri)?;
        if let Some(e) = self.lock()?.get(&d) {
            return Err(ObjectError::Exists(entry_of(Some(e))));
        }
        let mut v = Verifying::new(bytes, expect.size);
        let mut staged = Vec::new();
        let read = v.read_to_end(&mut staged);
        if let Some(e) = v.source_failure() {
            return Err(ObjectError::Source(e.to_owned()));
        }
        read.map_err(|e| ObjectError::Io(e.to_string()))?;
        let measured = v.measured();
        if measured != Measured::Facts(*expect) {
            return Err(ObjectError::Mismatch(measured));
        }
        let mut entries = self.lock()?;
        if let Some(e) = entries.get(&d) {
            return Err(ObjectError::Exists(entry_of(Some(e))));
        }
        entries.insert(d, MemoryEntry::Bytes(staged));
        Ok(())
    }
}
