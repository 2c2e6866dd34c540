//! The concrete local ports of one migration endpoint, opened lazily so
//! that a refused preflight writes nothing anywhere.
//!
//! Each port reads through a read-only open of what exists and answers
//! "empty" for what does not (an in-memory stand-in with nothing in it),
//! and opens its writable form only on the first write: the control
//! catalog on the first administration or fence, the Iceberg catalog on
//! the first table copy, the Artifact root on the first object. A
//! preflight that refuses has therefore created no file, no directory and
//! no catalog at either endpoint. A remote endpoint opens nothing at all
//! (the machine refuses it as outside local v1).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use custos_core::control_memory::MemoryControlCatalog;
use custos_core::identity::StorageIdentity;
use custos_core::migration::artifacts::{
    Entry, MemoryObjectStore, ObjectError, ObjectRead, ObjectStore, Occurrence,
};
use custos_core::migration::control::{AdminEffect, AdminError, ControlAdmin, ControlSnapshot};
use custos_core::migration::departure::Departures;
use custos_core::migration::tables::{MemoryTableStore, TableError, TableStore};
use custos_core::migration::{
    CommitReply, Destination, Name, NormalizedUri, ObjectFacts, TableFacts, TablePlan,
};
use custos_core::root::RootRefusal;
use custos_core::world::{
    ControlCatalog, Outcome, Request, SignatureRecord, WorldError, WorldInfo, WorldRecord,
};
use custos_fs::artifacts::{ArtifactStore, ArtifactStoreError};
use custos_fs::{FsError, RealFs};
use custos_iceberg::store::iceberg_catalog_path;
use custos_iceberg::IcebergStore;
use custos_sqlite::control::SqliteControlCatalog;
use custos_sqlite::{OpenError, Refusal};

/// The control catalog and the administration, both.
pub trait Admin: ControlCatalog + ControlAdmin {}
impl<T: ControlCatalog + ControlAdmin> Admin for T {}

/// The control catalog of an endpoint (`None` path: remote, never opened).
pub struct Control {
    path: Option<PathBuf>,
    read: OnceLock<SqliteControlCatalog>,
    write: OnceLock<SqliteControlCatalog>,
    empty: MemoryControlCatalog,
    hot: OnceLock<(PathBuf, PathBuf)>,
}

fn world_fault(e: impl std::fmt::Display) -> WorldError {
    WorldError::BackendFault {
        reason: e.to_string(),
    }
}

fn admin_fault(e: impl std::fmt::Display) -> AdminError {
    AdminError::Backend {
        reason: e.to_string(),
    }
}

impl Control {
    /// The catalog at `path` (or none for a remote endpoint).
    pub fn new(path: Option<PathBuf>) -> Self {
        Control {
            path,
            read: OnceLock::new(),
            write: OnceLock::new(),
            empty: MemoryControlCatalog::default(),
            hot: OnceLock::new(),
        }
    }

    /// The catalog file and its hot rollback journal, when a read of this
    /// endpoint's catalog was refused because an interrupted writer left
    /// one (a read never rolls it back: `custos catalog recover` does).
    pub fn hot_journal(&self) -> Option<(&Path, &Path)> {
        self.hot.get().map(|(p, j)| (p.as_path(), j.as_path()))
    }

    /// The catalog to read: the writable one once open, else a read-only
    /// open of an existing file, else the empty stand-in.
    fn reader(&self) -> Result<&dyn Admin, String> {
        if let Some(w) = self.write.get() {
            return Ok(w);
        }
        let Some(path) = self.path.as_deref().filter(|p| p.exists()) else {
            return Ok(&self.empty);
        };
        if self.read.get().is_none() {
            match SqliteControlCatalog::open_read_only(path) {
                Ok(c) => {
                    let _ = self.read.set(c);
                }
                // A creation interrupted before its first commit (a kill
                // while the catalog was being made) holds nothing: read as
                // no catalog; the writable open initializes it.
                Err(OpenError::NotReadable {
                    rule: Refusal::ZeroLength | Refusal::Empty,
                    ..
                }) => return Ok(&self.empty),
                Err(OpenError::RecoveryNeeded { path, journal }) => {
                    let e = OpenError::RecoveryNeeded {
                        path: path.clone(),
                        journal: journal.clone(),
                    };
                    let _ = self.hot.set((path, journal));
                    return Err(e.to_string());
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        match self.read.get() {
            Some(c) => Ok(c),
            None => Err("the control catalog could not be opened".into()),
        }
    }

    /// The writable catalog, created on first use.
    fn writer(&self) -> Result<&dyn Admin, String> {
        if self.write.get().is_none() {
            let path = self
                .path
                .as_deref()
                .ok_or("a remote control catalog is not written")?;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            let c = SqliteControlCatalog::open(path).map_err(|e| e.to_string())?;
            let _ = self.write.set(c);
        }
        match self.write.get() {
            Some(c) => Ok(c),
            None => Err("the control catalog could not be opened".into()),
        }
    }
}

impl ControlCatalog for Control {
    fn apply(&self, req: &Request) -> Result<Outcome, WorldError> {
        self.writer().map_err(world_fault)?.apply(req)
    }
    fn discover_worlds(&self) -> Result<Vec<WorldRecord>, WorldError> {
        self.reader().map_err(world_fault)?.discover_worlds()
    }
    fn open_world_readonly(&self, world_id: &str) -> Result<WorldInfo, WorldError> {
        self.reader()
            .map_err(world_fault)?
            .open_world_readonly(world_id)
    }
    fn list_signatures(&self) -> Result<Vec<SignatureRecord>, WorldError> {
        self.reader().map_err(world_fault)?.list_signatures()
    }
}

impl ControlAdmin for Control {
    fn export_snapshot(&self) -> Result<ControlSnapshot, AdminError> {
        self.reader().map_err(admin_fault)?.export_snapshot()
    }
    fn load_destination(&self) -> Result<Destination, AdminError> {
        self.reader().map_err(admin_fault)?.load_destination()
    }
    fn commit_destination(
        &self,
        expected: &Destination,
        next: &Destination,
        effect: AdminEffect<'_>,
    ) -> Result<(), AdminError> {
        self.writer()
            .map_err(admin_fault)?
            .commit_destination(expected, next, effect)
    }
    fn stored_receipt(&self) -> Result<Option<Vec<u8>>, AdminError> {
        self.reader().map_err(admin_fault)?.stored_receipt()
    }
    fn load_departures(&self) -> Result<Departures, AdminError> {
        self.reader().map_err(admin_fault)?.load_departures()
    }
    fn commit_departures(
        &self,
        expected: &Departures,
        next: &Departures,
    ) -> Result<(), AdminError> {
        self.writer()
            .map_err(admin_fault)?
            .commit_departures(expected, next)
    }
}

/// The Iceberg tables of an endpoint (`None`: remote, never opened).
pub struct Tables {
    id: Option<StorageIdentity>,
    recover: bool,
    read: OnceLock<IcebergStore>,
    write: OnceLock<IcebergStore>,
    empty: MemoryTableStore,
}

fn table_fault(e: impl std::fmt::Display) -> TableError {
    TableError::Backend {
        reason: e.to_string(),
    }
}

impl Tables {
    /// The tables of `id` (or none for a remote endpoint).
    pub fn new(id: Option<StorageIdentity>) -> Self {
        Tables {
            id,
            recover: false,
            read: OnceLock::new(),
            write: OnceLock::new(),
            empty: MemoryTableStore::default(),
        }
    }

    /// A destination's tables: a catalog left with a hot rollback journal
    /// (a run killed inside an Iceberg commit) is opened writable, so that
    /// SQLite rolls the interrupted commit back — a read-only connection
    /// cannot (`SQLITE_READONLY_ROLLBACK`). The rollback restores the last
    /// committed state; nothing committed is changed. So is a catalog whose
    /// read-only open fails (a kill between the file's creation and the
    /// catalog's own tables; found by `make torture`).
    pub fn recovering(mut self) -> Self {
        self.recover = true;
        self
    }

    /// The Iceberg store to read: the writable one once open, else a
    /// read-only open of an existing catalog, else `None` (no tables).
    fn store(&self) -> Result<Option<&IcebergStore>, TableError> {
        if let Some(w) = self.write.get() {
            return Ok(Some(w));
        }
        let Some(id) = &self.id else { return Ok(None) };
        let path = iceberg_catalog_path(id).map_err(table_fault)?;
        if !path.is_file() {
            return Ok(None);
        }
        let mut journal = path.clone().into_os_string();
        journal.push("-journal");
        let hot = std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0);
        if self.recover && hot {
            return self.writer().map(Some);
        }
        if self.read.get().is_none() {
            match IcebergStore::open_readonly(id) {
                Ok(s) => {
                    let _ = self.read.set(s);
                }
                // A destination catalog a killed run created but did not
                // finish setting up (the file is there, the catalog's own
                // tables are not: a read-only connection cannot create
                // them, "attempt to write a readonly database"). Opening
                // it for writing finishes the set-up, which changes no
                // table of the migration's.
                Err(_) if self.recover => return self.writer().map(Some),
                Err(e) => return Err(table_fault(e)),
            }
        }
        Ok(self.read.get())
    }

    fn reader(&self) -> Result<&dyn TableStore, TableError> {
        Ok(match self.store()? {
            Some(s) => s,
            None => &self.empty,
        })
    }

    fn writer(&self) -> Result<&IcebergStore, TableError> {
        if self.write.get().is_none() {
            let id = self
                .id
                .as_ref()
                .ok_or_else(|| table_fault("a remote catalog is not written"))?;
            let s = IcebergStore::open_writable(id).map_err(table_fault)?;
            let _ = self.write.set(s);
        }
        self.write
            .get()
            .ok_or_else(|| table_fault("the Iceberg catalog could not be opened"))
    }
}

impl custos_core::migration::workflow::abandon::Discard for Tables {
    /// Removes a table a migration copied; a destination without an
    /// Iceberg catalog has none (and none is created to say so).
    fn discard(&self, table: &Name) -> Result<bool, TableError> {
        let Some(id) = &self.id else {
            return Ok(false);
        };
        if !iceberg_catalog_path(id).map_err(table_fault)?.is_file() {
            return Ok(false);
        }
        self.writer()?
            .discard_table(table.as_str())
            .map_err(table_fault)
    }
}

impl TableStore for Tables {
    fn namespace(&self) -> Result<Vec<(Name, TableFacts)>, TableError> {
        self.reader()?.namespace()
    }
    fn evidence_at(&self, table: &Name, snapshot: u64) -> Result<TableFacts, TableError> {
        self.reader()?.evidence_at(table, snapshot)
    }
    fn inspect(&self, table: &Name) -> Result<Option<TableFacts>, TableError> {
        self.reader()?.inspect(table)
    }
    fn occurrences(&self, table: &Name, snapshot: u64) -> Result<Vec<Occurrence>, TableError> {
        self.reader()?.occurrences(table, snapshot)
    }
    fn relocated_digest(
        &self,
        table: &Name,
        snapshot: u64,
        relocated: &[Occurrence],
    ) -> Result<custos_core::migration::Digest, TableError> {
        self.reader()?.relocated_digest(table, snapshot, relocated)
    }
    fn copy_from(
        &self,
        source: &Self,
        plan: &TablePlan,
        relocated: Option<&[Occurrence]>,
    ) -> Result<CommitReply, TableError> {
        let from = source.store()?.ok_or_else(|| TableError::NotFound {
            table: plan.name.to_string(),
            detail: "the source has no Iceberg catalog".into(),
        })?;
        self.writer()?.copy_from(from, plan, relocated)
    }
}

/// The open Artifact store of an endpoint, if any.
enum Handle {
    Closed,
    Read(ArtifactStore<RealFs>),
    Write(ArtifactStore<RealFs>),
}

/// The Artifact root of an endpoint. One handle at a time: the root's
/// lock is shared to read and exclusive to write, and two opens from one
/// process would exclude each other, so a writing open closes the reading
/// one first.
pub struct Objects {
    root: PathBuf,
    uri: NormalizedUri,
    local: bool,
    handle: Mutex<Handle>,
    empty: MemoryObjectStore,
}

fn object_fault(e: impl std::fmt::Display) -> ObjectError {
    ObjectError::Io(e.to_string())
}

impl Objects {
    /// The root directory `root` (absolute), served as `file://` + its
    /// path; `local: false` opens nothing.
    pub fn new(root: PathBuf, local: bool) -> Result<Self, String> {
        let text = root
            .to_str()
            .ok_or_else(|| format!("{}: not UTF-8", root.display()))?;
        // An existing root is served at its canonical path, as the store does.
        let canonical = std::fs::canonicalize(&root).ok();
        let text = canonical
            .as_deref()
            .and_then(Path::to_str)
            .unwrap_or(text)
            .to_owned();
        let uri = NormalizedUri::parse(&format!("file://{text}"))
            .map_err(|e| format!("artifact root {text}: {e}"))?;
        Ok(Objects {
            root: PathBuf::from(text),
            empty: MemoryObjectStore::new(uri.clone()),
            uri,
            local,
            handle: Mutex::new(Handle::Closed),
        })
    }

    /// The root's URI.
    pub fn uri(&self) -> &NormalizedUri {
        &self.uri
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Closes the open handle (and its lock), so that another process —
    /// the cold verifier — may open the root.
    pub fn release(&self) {
        if let Ok(mut h) = self.handle.lock() {
            *h = Handle::Closed;
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Handle>, ObjectError> {
        self.handle
            .lock()
            .map_err(|_| object_fault("the artifact handle lock is poisoned"))
    }

    /// Runs `f` on the store to read: the open one, else a read-only open
    /// of an existing root, else the empty stand-in — also for a root a
    /// writer has not finished initializing (a run killed while it created
    /// the root leaves one: it holds no object, and the next put completes
    /// its initialization).
    fn with<R>(&self, f: impl FnOnce(&dyn ObjectStore) -> R) -> Result<R, ObjectError> {
        let mut h = self.lock()?;
        if matches!(*h, Handle::Closed) {
            if !self.local || !self.root.exists() {
                return Ok(f(&self.empty));
            }
            match ArtifactStore::open_read_only(RealFs, &self.root) {
                Ok(store) => *h = Handle::Read(store),
                Err(ArtifactStoreError::Fs(FsError::Refused {
                    refusal: RootRefusal::NotInitialized { .. },
                    ..
                })) => return Ok(f(&self.empty)),
                Err(e) => return Err(object_fault(e)),
            }
        }
        match &*h {
            Handle::Read(s) | Handle::Write(s) => Ok(f(s)),
            Handle::Closed => Ok(f(&self.empty)),
        }
    }
}

impl ObjectStore for Objects {
    fn probe(&self, uri: &NormalizedUri) -> Result<Entry, ObjectError> {
        self.with(|s| s.probe(uri))?
    }
    fn read(&self, uri: &NormalizedUri, limit: u64) -> Result<ObjectRead, ObjectError> {
        self.with(|s| s.read(uri, limit))?
    }
    fn put_new(
        &self,
        uri: &NormalizedUri,
        bytes: &mut dyn std::io::Read,
        facts: &ObjectFacts,
    ) -> Result<(), ObjectError> {
        if !self.local {
            return Err(object_fault("a remote Artifact root is not written"));
        }
        let mut h = self.lock()?;
        if !matches!(*h, Handle::Write(_)) {
            *h = Handle::Closed; // a reading open would exclude the writer
            *h = Handle::Write(ArtifactStore::open(RealFs, &self.root).map_err(object_fault)?);
        }
        match &*h {
            Handle::Write(s) => s.put_new(uri, bytes, facts),
            _ => Err(object_fault("the Artifact root could not be opened")),
        }
    }
}
