//! The local deployment repository: one node-owned directory
//! holding the deployment catalog record, publishing complete route
//! snapshots atomically over a release catalog.
//!
//! Files: `catalog.json` (the record, [`custos_core::deployment::record`]),
//! `INITIALIZED` (the durable mode marker), `.catalog.lock`; transiently
//! `.catalog.pending` and `.INITIALIZED.pending`. Deployment ids are data,
//! never paths.
//!
//! **Open** goes through [`DurableRoot::open`] with [`LAYOUT`] (anchor,
//! create nested, canonicalize, fsync leaf → root, lock; a directory that is
//! not this catalog is refused untouched). A fresh root gets the empty
//! record (pending → fsync → rename → fsync root), then the marker. An
//! initialized root (or one interrupted between its first record and its
//! marker) is read under a bound, its format and checksum verified, every
//! deployment validated, every referenced release fetched once through the
//! release source and the snapshot rebuilt and compared with the persisted
//! one — a valid checksum never bypasses that — before anything is served;
//! an interrupted initialization then gets its marker. Nothing is ever
//! reset: a missing or damaged record, a changed contract, a missing
//! release fail the open.
//!
//! **A mutation** decides with [`custos_core::deployment::state::decide`]
//! under the writer mutex, compiles the next snapshot, encodes the record
//! into one bounded buffer, writes and fsyncs `.catalog.pending`, renames it
//! over `catalog.json` (the commit point), fsyncs the root, and installs the
//! new generation. A failed directory sync after the rename installs the
//! renamed state and returns [`DeploymentRepoError::Uncertain`]
//! (`commit-durability-uncertain`) with the mutation's detail.
//!
//! **Readers** ([`DeploymentRepository::resolve`], `pin`, `get`, `page`)
//! read the installed generation only (one `try_read` of the pointer; no
//! filesystem access, no fetch). An apply replaces the pointer; it never
//! changes a generation a reader or a pin holds.

use custos_core::Class;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use custos_core::deployment::page::{self, Page, PageIndex, PageRequest, MAX_PAGE_BYTES};
use custos_core::deployment::record::{self, RecordError, MAX_STATE_BYTES};
use custos_core::deployment::route::{
    self, PinnedRoutes, ReleaseFacts, ReleaseSource, ResolvedRevision, Snapshot, Standing, Target,
};
use custos_core::deployment::state::{
    Catalog, MutationDetail, Receipt, Request, VersionedDeployment,
};
use custos_core::deployment::{DeploymentCatalog, DeploymentError, Refusal};
use custos_core::release::lifecycle::Membership;
use custos_core::release::Sha256;
use custos_core::root::{Access, Layout, OpenPlan};
use thiserror::Error;

use crate::error::FsError;
use crate::fs::Fs;
use crate::release::ReleaseRepository;
use crate::root::DurableRoot;

/// The record file.
pub const CATALOG_FILE: &str = "catalog.json";
/// The record being staged.
pub const PENDING_FILE: &str = ".catalog.pending";
/// The stable reason of a failed directory sync after the commit point.
pub const COMMIT_DURABILITY_UNCERTAIN: &str = "commit-durability-uncertain";
/// The stable reason of a reader that met a writer replacing the catalog.
pub const READER_CONTENDED: &str = "deployment-reader-contended";

/// The deployment catalog's root layout.
pub const LAYOUT: Layout = Layout {
    kind: "deployment catalog",
    marker: b"custos deployment catalog 1\n",
    dirs: &[],
    staging: None,
    files: &[CATALOG_FILE],
    scratch: &[PENDING_FILE],
    signs: &[],
};

/// Why a deployment repository operation failed.
#[derive(Debug, Error)]
pub enum DeploymentRepoError {
    /// A deployment rule refused the request; nothing changed.
    #[error(transparent)]
    Rule(#[from] DeploymentError),
    /// The filesystem failed, or the root is not this catalog; before the
    /// commit point, so nothing changed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The stored record is damaged, inconsistent or over its bound; the
    /// repository did not open and changed nothing.
    #[error("{source} ({path})")]
    Corrupt {
        /// The record.
        path: std::path::PathBuf,
        /// Why.
        source: RecordError,
    },
    /// The persisted snapshot differs from the one rebuilt from the desired
    /// state and the releases as they are now (a changed contract).
    #[error("CorruptArtifact: the persisted routes differ from the routes rebuilt from the releases ({detail})")]
    SnapshotMismatch {
        /// The first difference.
        detail: String,
    },
    /// Unavailable: the directory sync after the rename failed. The
    /// mutation **is** committed and installed; its durability is
    /// uncertain. Do not retry it blindly: read the object first.
    #[error("Unavailable: commit-durability-uncertain: {}; committed: {:?}", .0.source, .0.detail())]
    Uncertain(Box<UncertainCommit>),
    /// A reader met the writer replacing the catalog pointer: retry.
    #[error("Unavailable: {READER_CONTENDED}: a publication is being installed; retry")]
    Contended,
    /// An internal lock was poisoned by a panic.
    #[error("Internal: a deployment repository lock was poisoned")]
    Poisoned,
}

impl DeploymentRepoError {
    /// The error class.
    pub fn class(&self) -> Class {
        match self {
            DeploymentRepoError::Rule(e) => e.class(),
            DeploymentRepoError::Fs(e) => e.class(),
            DeploymentRepoError::Corrupt {
                source: RecordError::TooLarge { .. },
                ..
            } => Class::ResourceExhausted,
            DeploymentRepoError::Corrupt { .. } | DeploymentRepoError::SnapshotMismatch { .. } => {
                Class::CorruptArtifact
            }
            DeploymentRepoError::Uncertain(_) | DeploymentRepoError::Contended => {
                Class::Unavailable
            }
            DeploymentRepoError::Poisoned => Class::Internal,
        }
    }

    /// The stable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            DeploymentRepoError::Rule(e) => e.reason(),
            DeploymentRepoError::Fs(e) => e.unavailable_reason().unwrap_or(e.class().as_str()),
            DeploymentRepoError::Corrupt { .. } => "corrupt-deployment-catalog",
            DeploymentRepoError::SnapshotMismatch { .. } => "deployment-snapshot-mismatch",
            DeploymentRepoError::Uncertain(_) => COMMIT_DURABILITY_UNCERTAIN,
            DeploymentRepoError::Contended => READER_CONTENDED,
            DeploymentRepoError::Poisoned => "Internal",
        }
    }
}

/// What a commit whose directory sync failed after the rename did.
#[derive(Debug)]
pub struct UncertainCommit {
    /// The receipt of the committed decision.
    pub receipt: Receipt,
    /// The sync failure.
    pub source: FsError,
}

impl UncertainCommit {
    /// The mutation's structured `deployment-mutation` detail, from the
    /// committed decision's receipt (none for a batch or a snapshot-only
    /// publication).
    pub fn detail(&self) -> Option<MutationDetail> {
        self.receipt.mutation_detail()
    }
}

/// A release catalog as the compiler's release source: each release's
/// owner and lifecycle standing from the index, and an eligible release's
/// verified contract. Core decides what a deployment may use
/// ([`route::admit`]); a revoked or retired release contributes no
/// endpoints (it stays listed for management and never resolves).
pub struct ReleaseCatalog<G: Fs>(pub Arc<ReleaseRepository<G>>);

impl<G: Fs> ReleaseSource for ReleaseCatalog<G> {
    fn release(&self, release: &Sha256) -> Result<Option<ReleaseFacts>, String> {
        let Some(entry) = self.0.lookup(release) else {
            return Ok(None);
        };
        let standing = match entry.membership {
            Membership::Member => match self.0.fetch(release) {
                Ok(r) => Standing::Eligible(r.contract),
                Err(e) => Standing::Unreadable(e.to_string()),
            },
            Membership::Revoked => Standing::Revoked,
            Membership::Retired => Standing::Retired,
        };
        Ok(Some(ReleaseFacts {
            owner: entry.descriptor.tenant,
            standing,
        }))
    }
}

/// One installed generation: the desired state, its routes, its page
/// indexes.
#[derive(Debug)]
struct Installed {
    catalog: Catalog,
    routes: Arc<Snapshot>,
    index: PageIndex,
}

/// The deployment repository. Share it through an `Arc`; a second opener
/// of the same directory is refused.
pub struct DeploymentRepository<F: Fs> {
    root: DurableRoot<F>,
    source: Arc<dyn ReleaseSource + Send + Sync>,
    writer: Mutex<()>,
    current: RwLock<Arc<Installed>>,
    instance: u64,
    max_state_bytes: u64,
}

/// A per-open fingerprint for page tokens (tokens never outlive an open).
fn instance_fingerprint() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

impl<F: Fs> DeploymentRepository<F> {
    /// Opens (and, for a writing access on a new directory, initializes) the
    /// repository at `path` over `source`.
    pub fn open(
        fs: F,
        path: &Path,
        source: Arc<dyn ReleaseSource + Send + Sync>,
        access: Access,
    ) -> Result<Self, DeploymentRepoError> {
        let (root, plan) = DurableRoot::open(fs, path, &LAYOUT, access)?;
        let repo = DeploymentRepository {
            root,
            source,
            writer: Mutex::new(()),
            current: RwLock::new(Arc::new(Installed {
                catalog: Catalog::default(),
                routes: Arc::new(Snapshot::empty(0)),
                index: PageIndex::build(&Catalog::default()),
            })),
            instance: instance_fingerprint(),
            max_state_bytes: MAX_STATE_BYTES,
        };
        match plan {
            OpenPlan::Initialize => {
                let empty = Catalog::default();
                let bytes = record::encode(&empty, &Snapshot::empty(0), repo.max_state_bytes)
                    .map_err(|source| repo.corrupt(source))?;
                repo.write_record(&bytes).map_err(DeploymentRepoError::Fs)?;
                repo.root.write_marker(&LAYOUT)?;
            }
            OpenPlan::Open | OpenPlan::Upgrade => {
                let installed = repo.load()?;
                repo.install(installed)?;
                if plan == OpenPlan::Upgrade {
                    repo.root.write_marker(&LAYOUT)?;
                }
            }
        }
        Ok(repo)
    }

    fn corrupt(&self, source: RecordError) -> DeploymentRepoError {
        DeploymentRepoError::Corrupt {
            path: self.root.root().join(CATALOG_FILE),
            source,
        }
    }

    /// Reads, verifies and rebuilds the stored generation.
    fn load(&self) -> Result<Installed, DeploymentRepoError> {
        let path = self.root.root().join(CATALOG_FILE);
        let bytes = match self.root.fs().read_bounded(&path, self.max_state_bytes) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(self.corrupt(RecordError::TooLarge {
                    limit: self.max_state_bytes,
                }))
            }
            Err(source) => {
                return Err(FsError::Io {
                    op: "read",
                    path,
                    source,
                }
                .into())
            }
        };
        let decoded = record::decode(&bytes, self.max_state_bytes).map_err(|e| self.corrupt(e))?;
        let routes = route::compile(&decoded.catalog, self.source.as_ref())?;
        record::check_rebuilt(&record::stored_records(&routes), &decoded.snapshot)
            .map_err(|detail| DeploymentRepoError::SnapshotMismatch { detail })?;
        let index = PageIndex::build(&decoded.catalog);
        Ok(Installed {
            catalog: decoded.catalog,
            routes: Arc::new(routes),
            index,
        })
    }

    fn install(&self, installed: Installed) -> Result<(), DeploymentRepoError> {
        let new = Arc::new(installed);
        let old = {
            let mut slot = self
                .current
                .write()
                .map_err(|_| DeploymentRepoError::Poisoned)?;
            std::mem::replace(&mut *slot, new)
        };
        // The retired generation is dropped here, outside the lock (or by
        // the last reader or pin that still holds it).
        drop(old);
        Ok(())
    }

    /// Writes `.catalog.pending`, fsyncs it, renames it over `catalog.json`.
    /// Returns after the rename; the caller syncs the root.
    fn stage_and_rename(&self, bytes: &[u8]) -> Result<(), FsError> {
        let root = self.root.root();
        let pending = root.join(PENDING_FILE);
        if self
            .root
            .fs()
            .metadata(&pending)
            .map_err(|source| FsError::Io {
                op: "metadata",
                path: pending.clone(),
                source,
            })?
            .is_some()
        {
            self.root
                .fs()
                .remove_file(&pending)
                .map_err(|source| FsError::Io {
                    op: "remove_file",
                    path: pending.clone(),
                    source,
                })?;
        }
        self.root.write_synced(&pending, bytes)?;
        self.root.rename(&pending, &root.join(CATALOG_FILE))
    }

    fn write_record(&self, bytes: &[u8]) -> Result<(), FsError> {
        self.stage_and_rename(bytes)?;
        self.root.sync_dir(self.root.root())
    }

    fn live(&self) -> Result<Arc<Installed>, DeploymentRepoError> {
        Ok(Arc::clone(
            &*self
                .current
                .read()
                .map_err(|_| DeploymentRepoError::Poisoned)?,
        ))
    }

    /// Decides `req` (its `compiled_at` is set to the live generation) and
    /// publishes the result; returns the decision's own receipt.
    pub fn mutate(&self, mut req: Request) -> Result<Receipt, DeploymentRepoError> {
        self.root.check_live()?;
        let _writer = self
            .writer
            .lock()
            .map_err(|_| DeploymentRepoError::Poisoned)?;
        let live = self.live()?;
        let decided = route::decide_live(&live.catalog, &mut req, self.source.as_ref())?;
        let Some((next, routes)) = decided.next else {
            return Ok(decided.receipt);
        };
        let bytes = record::encode(&next, &routes, self.max_state_bytes).map_err(|e| match e {
            RecordError::TooLarge { limit } => {
                DeploymentRepoError::Rule(DeploymentError::CompileLimit {
                    what: "serialized state bytes",
                    limit,
                })
            }
            other => self.corrupt(other),
        })?;
        // Commit under the mutex: the live generation is still the one
        // decided against (the mutex is held), so the decision stands.
        self.stage_and_rename(&bytes)?;
        let synced = self.root.sync_dir(self.root.root());
        let index = PageIndex::build(&next);
        self.install(Installed {
            catalog: next,
            routes: Arc::new(routes),
            index,
        })?;
        match synced {
            Ok(()) => Ok(decided.receipt),
            Err(source) => Err(DeploymentRepoError::Uncertain(Box::new(UncertainCommit {
                receipt: decided.receipt,
                source,
            }))),
        }
    }

    /// Resolves `target` against the installed generation: one `try_read`
    /// (contention is [`DeploymentRepoError::Contended`]), no I/O.
    pub fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentRepoError> {
        let routes = match self.current.try_read() {
            Ok(g) => Arc::clone(&g.routes),
            Err(std::sync::TryLockError::WouldBlock) => return Err(DeploymentRepoError::Contended),
            Err(std::sync::TryLockError::Poisoned(_)) => return Err(DeploymentRepoError::Poisoned),
        };
        Ok(routes.resolve(target, routing_key)?)
    }

    /// Pins the installed generation for several lookups.
    pub fn pin(&self) -> Result<PinnedRoutes, DeploymentRepoError> {
        let live = self.live()?;
        Ok(PinnedRoutes::pin(&live.routes))
    }

    /// The deployment `id` in `tenant`'s scope.
    pub fn get(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<VersionedDeployment>, DeploymentRepoError> {
        Ok(self.live()?.catalog.get(Some(tenant), id).cloned())
    }

    /// One page of `req.tenant`'s deployments.
    pub fn page(&self, req: &PageRequest) -> Result<Page, DeploymentRepoError> {
        let live = self.live()?;
        Ok(page::page(
            &live.catalog,
            &live.index,
            req,
            self.instance,
            MAX_PAGE_BYTES,
        )?)
    }

    /// One page of `req.tenant`'s deployments continued by a durable
    /// cursor ([`page::page_by_cursor`]) instead of a token bound to this
    /// open: for a caller that reopens the catalog for every page (the
    /// command line). The cursor expires with any publication, as a token
    /// does.
    pub fn page_by_cursor(&self, req: &PageRequest) -> Result<Page, DeploymentRepoError> {
        let live = self.live()?;
        Ok(page::page_by_cursor(
            &live.catalog,
            &live.index,
            req,
            MAX_PAGE_BYTES,
        )?)
    }

    /// The installed catalog generation.
    pub fn generation(&self) -> Result<u64, DeploymentRepoError> {
        Ok(self.live()?.catalog.generation)
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        self.root.root()
    }
}

/// The core port, by the repository's own operations (above): what the
/// conformance suite and generic callers use.
impl<F: Fs> DeploymentCatalog for DeploymentRepository<F> {
    type Error = DeploymentRepoError;

    fn mutate(&self, req: Request) -> Result<Receipt, DeploymentRepoError> {
        DeploymentRepository::mutate(self, req)
    }
    fn get(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<VersionedDeployment>, DeploymentRepoError> {
        DeploymentRepository::get(self, tenant, id)
    }
    fn page(&self, req: &PageRequest) -> Result<Page, DeploymentRepoError> {
        DeploymentRepository::page(self, req)
    }
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentRepoError> {
        DeploymentRepository::resolve(self, target, routing_key)
    }
    fn pin(&self) -> Result<PinnedRoutes, DeploymentRepoError> {
        DeploymentRepository::pin(self)
    }
    fn generation(&self) -> Result<u64, DeploymentRepoError> {
        DeploymentRepository::generation(self)
    }
}

impl Refusal for DeploymentRepoError {
    fn refusal(&self) -> Option<&DeploymentError> {
        match self {
            DeploymentRepoError::Rule(e) => Some(e),
            _ => None,
        }
    }
}
