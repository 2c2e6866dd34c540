//! The local release repository: content-addressed releases
//! under `releases/<hex>/` in an exclusively owned root, published by the
//! protocol of `custos_core::release::protocol` and recovered at open.
//!
//! **Open** ([`ReleaseRepository::open`]): [`DurableRoot::open`] with
//! [`LAYOUT`] (anchor, create a nonexistent root, canonicalize, fsync leaf →
//! root, refuse a directory that is neither initialized — the
//! `INITIALIZED` marker — nor empty, lock `.catalog.lock`, initialize a
//! fresh root: `.tmp/`, `releases/`, `lifecycle/`, then the marker); for an
//! initialized root clear `.tmp/` (every stage there is abandoned crash
//! debris), load the lifecycle state, and recover every entry under
//! `releases/`: a digest-named directory is verified in full (each file's
//! length checked before it is read) and a missing or damaged COMPLETE
//! fails the open; a non-digest directory is invisible debris counted toward
//! `max_recovery_directories`; a verified directory the lifecycle state does
//! not name is an orphan (no membership, reserves its reference). An
//! initialized root whose `lifecycle/` is missing fails the open
//! (corruption: a deleted directory never brings revoked releases back).
//! Only an explicit upgrade ([`Access::Upgrade`]) of a catalog predating
//! the marker bootstraps missing lifecycle state once: every verified
//! completed directory becomes a member, the records are staged and renamed
//! into place as one directory, and then the marker is written. A reading
//! open ([`ReleaseRepository::open_read_only`]) verifies the same way and
//! writes nothing. Lifecycle state is one small record
//! per release (`lifecycle/<hex>`, its latest outcome), replaced atomically
//! (temp → fsync → rename → fsync `lifecycle/`), so a publication writes one
//! record whatever the catalog's size.
//!
//! **Publication** ([`ReleaseRepository::publish`]) walks the protocol's
//! steps ([`protocol::steps_of`]) under the writer mutex, each step one arm
//! of [`ReleaseRepository`]'s step executor; a failure past the rename keeps
//! the digest pending in the gate.
//!
//! **Reads** are served from the ordered in-memory index ([`shared`]):
//! [`ReleaseRepository::resolve`], [`ReleaseRepository::fetch`] (verified
//! from disk before returning), [`ReleaseRepository::get_catalog_entry`],
//! [`ReleaseRepository::list_catalog_entries`] (bounded pages, fixed-size
//! tokens), and [`ReleaseRepository::verification_snapshot`].

pub mod error;
pub mod shared;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use custos_core::release::bounds::{
    check_file_len, Bounds, Candidate, CatalogUsage, FileKind, PageFill,
};
use custos_core::release::complete::{self, CompleteRecord, StoredRelease, COMPLETE_FILE};
use custos_core::release::contract::{ComponentInspector, Contract};
use custos_core::release::lifecycle::{
    Head, HeadCheck, LifecycleDecision, LifecycleEffect, LifecycleOp, LifecycleState, Membership,
    Outcome, OutcomeStatus, LIFECYCLE_DIR, LIFECYCLE_HEAD, MAX_HEAD_BYTES, MAX_RECORD_BYTES,
};
use custos_core::release::manifest::Manifest;
use custos_core::release::metadata::{Descriptor, ReferenceKey, ReleaseMetadata};
use custos_core::release::page::{content_tag, Cursor, PageToken, Scope};
use custos_core::release::protocol::{
    self, classify_entry, recovered_membership, CompleteProbe, Plan, Probe, Recovered,
    RecoveredStanding, Step,
};
use custos_core::release::Sha256;

pub use error::ReleaseError;
pub use shared::Entry;
use shared::{Index, Refusal, Shared, Writer};

use custos_core::root::{Access, Layout, OpenPlan};

use crate::error::io_err;
use crate::fs::{Fs, Kind};
use crate::root::DurableRoot;

/// The release catalog's root layout: its marker and state directories.
pub const LAYOUT: Layout = Layout {
    kind: "release catalog",
    marker: b"custos release catalog 1\n",
    dirs: &[STAGING_DIR, RELEASES_DIR, LIFECYCLE_DIR],
    staging: Some(STAGING_DIR),
    files: &[],
    scratch: &[],
    signs: &[LIFECYCLE_HEAD],
};

/// The staging directory directly under the root.
pub const STAGING_DIR: &str = ".tmp";
/// The directory of completed releases directly under the root.
pub const RELEASES_DIR: &str = "releases";
/// The stored metadata file of a release.
pub const METADATA_FILE: &str = "metadata.json";
/// The stored canonical manifest of a release.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The stored component of a release.
pub const COMPONENT_FILE: &str = "component.wasm";

/// A fully verified release read from disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The compact descriptor.
    pub descriptor: Descriptor,
    /// The canonical manifest.
    pub manifest: Manifest,
    /// The contract metadata.
    pub contract: Contract,
    /// The component bytes.
    pub component: Vec<u8>,
}

/// A catalog row: the compact descriptor (manifest summary) and the
/// lifecycle membership. No component or contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The compact descriptor.
    pub descriptor: Descriptor,
    /// The lifecycle membership (historical metadata stays listed after
    /// revocation or retirement).
    pub membership: Membership,
}

/// One page of a scoped listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogPage {
    /// The rows, in ascending digest order.
    pub entries: Vec<CatalogEntry>,
    /// The token of the next page, when more rows remain.
    pub next_page_token: Option<String>,
}

/// How a listing continues: an instance-bound token or a durable cursor.
#[derive(Clone, Copy)]
enum Continue<'a> {
    Token(Option<&'a str>),
    Cursor(Option<&'a str>),
}

/// The trusted-local listing's scope. No tenant identifier is empty, so
/// this scope's tag is no tenant's.
const LOCAL: Scope<'static> = Scope {
    tenant: "",
    service: None,
};

/// What a publication did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The release digest.
    pub digest: Sha256,
    /// The protocol's plan: a new release, an identical no-op, or a
    /// reconciliation of an existing directory.
    pub plan: Plan,
    /// The lifecycle outcome committed (`None` for a no-op).
    pub outcome: Option<Outcome>,
}

/// The five verification counters, sampled independently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VerificationSnapshot {
    /// Full artifact fetches attempted.
    pub full_fetch_attempts: u64,
    /// Metadata fetches attempted (reading `metadata.json`).
    pub metadata_fetch_attempts: u64,
    /// Component verifications attempted (reading and hashing the component).
    pub component_verification_attempts: u64,
    /// Component bytes hashed from disk.
    pub component_bytes_hashed: u64,
    /// Metadata fingerprint checks attempted (COMPLETE against the stored
    /// metadata and manifest).
    pub metadata_fingerprint_attempts: u64,
}

#[derive(Debug, Default)]
struct Counters {
    full_fetch: AtomicU64,
    metadata_fetch: AtomicU64,
    component_verification: AtomicU64,
    component_bytes: AtomicU64,
    metadata_fingerprint: AtomicU64,
}

fn bump(c: &AtomicU64, by: u64) {
    // Saturating: fetch_update with a closure that always returns Some.
    let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_add(by))
    });
}

/// A fresh epoch for an open instance: distinct per open within a process
/// (a counter) and, with overwhelming likelihood, across processes (the
/// process id and the wall clock, hashed).
fn new_epoch() -> u64 {
    static OPENS: AtomicU64 = AtomicU64::new(0);
    let n = OPENS.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut seed = Vec::with_capacity(32);
    seed.extend_from_slice(&n.to_le_bytes());
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    seed.extend_from_slice(&nanos.to_le_bytes());
    let d = Sha256::of(&seed).0;
    let mut b = [0u8; 8];
    b.copy_from_slice(d.get(..8).unwrap_or(&[0; 8]));
    u64::from_le_bytes(b)
}

/// The validated inputs of one publication (step `Validate`).
struct Prepared {
    descriptor: Descriptor,
    metadata: Vec<u8>,
    manifest: Vec<u8>,
    record: CompleteRecord,
    candidate: Candidate,
}

/// The local release repository over an [`Fs`].
pub struct ReleaseRepository<F: Fs> {
    root: DurableRoot<F>,
    bounds: Bounds,
    inspector: Arc<dyn ComponentInspector>,
    shared: Shared,
    epoch: u64,
    plan: OpenPlan,
    counters: Counters,
    stage_seq: AtomicU64,
}

impl<F: Fs> std::fmt::Debug for ReleaseRepository<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseRepository")
            .field("root", &self.root.root())
            .field("bounds", &self.bounds)
            .field("epoch", &self.epoch)
            .finish()
    }
}

fn step_err(step: Step) -> impl FnOnce(ReleaseError) -> ReleaseError {
    move |e| ReleaseError::Step {
        step,
        source: Box::new(e),
    }
}

impl<F: Fs> ReleaseRepository<F> {
    /// Opens the repository at `path` for writing, owning it exclusively
    /// until dropped: a nonexistent or empty directory is initialized, an
    /// initialized one recovered; any other directory is refused untouched
    /// ([`crate::FsError::Refused`]). See the module documentation for the
    /// order; any refusal leaves committed files as they were.
    pub fn open(
        fs: F,
        path: &Path,
        bounds: Bounds,
        inspector: Arc<dyn ComponentInspector>,
    ) -> Result<Self, ReleaseError> {
        Self::open_as(Access::Write, fs, path, bounds, inspector)
    }

    /// Opens an initialized repository for reading only: it must exist and
    /// hold the marker; a shared lock excludes a live writer; nothing is
    /// created, cleaned, synced or bootstrapped, and every mutation fails
    /// with [`crate::FsError::ReadOnly`]. Recovery's verification runs in
    /// full, so a successful open is a full verification.
    pub fn open_read_only(
        fs: F,
        path: &Path,
        bounds: Bounds,
        inspector: Arc<dyn ComponentInspector>,
    ) -> Result<Self, ReleaseError> {
        Self::open_as(Access::Read, fs, path, bounds, inspector)
    }

    /// Opens the repository with the given [`Access`]. [`Access::Upgrade`]
    /// also adopts a catalog written before the durable mode marker
    /// existed (an unmarked root made only of this layout's names, its
    /// staging directory empty): every completed release is verified, a
    /// catalog without lifecycle state is bootstrapped once (every verified
    /// release a member), and only then is the marker written.
    pub fn open_as(
        access: Access,
        fs: F,
        path: &Path,
        bounds: Bounds,
        inspector: Arc<dyn ComponentInspector>,
    ) -> Result<Self, ReleaseError> {
        Self::open_observed(access, fs, path, bounds, inspector, &|_, _| {})
    }

    /// As [`ReleaseRepository::open_as`], telling `observe(done, total)`
    /// after each directory under `releases/` is recovered and verified
    /// (for a progress display over a large catalog; it cannot change
    /// what the open does).
    pub fn open_observed(
        access: Access,
        fs: F,
        path: &Path,
        bounds: Bounds,
        inspector: Arc<dyn ComponentInspector>,
        observe: &dyn Fn(u64, u64),
    ) -> Result<Self, ReleaseError> {
        let usage = CatalogUsage::empty(&bounds)?;
        let (root, plan) = DurableRoot::open(fs, path, &LAYOUT, access)?;
        if plan == OpenPlan::Upgrade {
            root.ensure_dir(RELEASES_DIR)?;
        }
        let mut repo = ReleaseRepository {
            root,
            bounds,
            inspector,
            shared: Shared::new(
                Writer::new(usage, LifecycleState::default()),
                Index::default(),
            ),
            epoch: new_epoch(),
            plan,
            counters: Counters::default(),
            stage_seq: AtomicU64::new(0),
        };
        let (writer, index) = repo.recover(usage, plan, observe)?;
        // A fresh root needs no head file (an absent head counts no
        // release); an upgraded one got its head in `recover`, before the
        // marker.
        if plan != OpenPlan::Open {
            repo.root.write_marker(&LAYOUT)?;
        }
        repo.shared = Shared::new(writer, index);
        Ok(repo)
    }

    fn fs(&self) -> &F {
        self.root.fs()
    }

    fn releases(&self) -> PathBuf {
        self.root.root().join(RELEASES_DIR)
    }

    /// Loads the lifecycle state from `lifecycle/<hex>` records: `None`
    /// when the root has no `lifecycle/` yet (never initialized).
    fn load_lifecycle(&self) -> Result<Option<LifecycleState>, ReleaseError> {
        let dir = self.root.root().join(LIFECYCLE_DIR);
        match self.fs().metadata(&dir).map_err(io_err("metadata", &dir))? {
            None => return Ok(None),
            Some(m) if m.kind != Kind::Dir => {
                return Err(corrupt(&dir, "lifecycle state is not a directory"))
            }
            Some(_) => {}
        }
        // A crash between a record's rename and the fsync of `lifecycle/`
        // leaves a rename that is visible but not yet durable. Make what
        // this open is about to act on durable first, so that a release it
        // serves (or a revocation it honours) cannot vanish at the next
        // power loss. A reading open writes nothing (it acknowledges
        // nothing either); the next writing open syncs.
        if self.root.access().writes() {
            self.root.sync_dir(&dir)?;
        }
        let names = self.fs().read_dir(&dir).map_err(io_err("read_dir", &dir))?;
        let mut records = Vec::with_capacity(names.len());
        for name in names {
            let path = dir.join(&name);
            let digest = Sha256::parse_hex(&name)
                .ok_or_else(|| corrupt(&path, "not a lifecycle record name"))?;
            let meta = self
                .fs()
                .metadata(&path)
                .map_err(io_err("metadata", &path))?
                .ok_or_else(|| corrupt(&path, "vanished"))?;
            if meta.kind != Kind::File {
                return Err(corrupt(&path, "lifecycle record is not a regular file"));
            }
            if meta.len > MAX_RECORD_BYTES {
                return Err(custos_core::release::lifecycle::LifecycleError::TooLarge {
                    len: meta.len,
                    limit: MAX_RECORD_BYTES,
                }
                .into());
            }
            let bytes = self
                .fs()
                .read_bounded(&path, MAX_RECORD_BYTES)
                .map_err(io_err("read", &path))?;
            let record = Outcome::decode(&bytes)?;
            if record.digest != digest {
                return Err(
                    custos_core::release::lifecycle::LifecycleError::Misplaced(digest).into(),
                );
            }
            records.push(record);
        }
        Ok(Some(LifecycleState::from_records(records)?))
    }

    /// The lifecycle head file, `None` when absent (read under its fixed
    /// bound, decoded totally).
    fn load_head(&self) -> Result<Option<Head>, ReleaseError> {
        let path = self.root.root().join(LIFECYCLE_HEAD);
        let Some(meta) = self
            .fs()
            .metadata(&path)
            .map_err(io_err("metadata", &path))?
        else {
            return Ok(None);
        };
        if meta.kind != Kind::File || meta.len > MAX_HEAD_BYTES {
            return Err(custos_core::release::lifecycle::LifecycleError::MalformedHead.into());
        }
        let bytes = self
            .fs()
            .read_bounded(&path, MAX_HEAD_BYTES)
            .map_err(io_err("read", &path))?;
        Ok(Some(Head::decode(&bytes)?))
    }

    /// Durably replaces the lifecycle head: temp under `.tmp` → fsync →
    /// rename to `LIFECYCLE` → fsync the root.
    fn write_head(&self, head: &Head) -> Result<(), ReleaseError> {
        let n = self.stage_seq.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .root
            .root()
            .join(STAGING_DIR)
            .join(format!("head-{:016x}-{n}", self.epoch));
        self.root.write_synced(&temp, &head.encode())?;
        self.root
            .rename(&temp, &self.root.root().join(LIFECYCLE_HEAD))?;
        self.root.sync_dir(self.root.root())?;
        Ok(())
    }

    /// Checks the records found against the head ([`Head::check`]) and
    /// answers the head they make: a lost record fails the open; the one
    /// record of a publication cut off before its head is accepted, and a
    /// writing open brings the head up to date. An absent head counts no
    /// release (a fresh catalog has none until its first publication), so
    /// in an initialized catalog with records its loss is detected like a
    /// record's — the error says to run the upgrade for a catalog written
    /// before the head existed, which adopts its records as found. An
    /// unmarked root being upgraded (whose head is written after
    /// `lifecycle/`, before the marker) may have records and no head: a
    /// writing open writes it.
    fn reconcile_head(
        &self,
        lifecycle: &LifecycleState,
        plan: OpenPlan,
    ) -> Result<(), ReleaseError> {
        let found: Vec<Sha256> = lifecycle.releases.keys().copied().collect();
        let have = Head::of(&found);
        let writes = self.root.access().writes();
        match self.load_head()? {
            Some(head) => match head.check(&found)? {
                HeadCheck::Current => {}
                HeadCheck::OneAhead(_) if writes => self.write_head(&have)?,
                HeadCheck::OneAhead(_) => {}
            },
            None if plan != OpenPlan::Open => {
                if writes && have != Head::default() {
                    self.write_head(&have)?;
                }
            }
            // A catalog written before the head existed: only an explicit
            // upgrade adopts its records as they are and writes the head.
            None if self.root.access() == Access::Upgrade => self.write_head(&have)?,
            None => match Head::default().check(&found)? {
                HeadCheck::Current => {}
                HeadCheck::OneAhead(_) if writes => self.write_head(&have)?,
                HeadCheck::OneAhead(_) => {}
            },
        }
        Ok(())
    }

    /// Durably replaces one release's lifecycle record: temp under `.tmp`
    /// → fsync → rename to `lifecycle/<hex>` → fsync `lifecycle/`. The
    /// rename is the commit point.
    fn write_record(&self, outcome: &Outcome) -> Result<(), ReleaseError> {
        let n = self.stage_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("lifecycle-{:016x}-{n}", self.epoch);
        self.root.replace_file(
            STAGING_DIR,
            &name,
            LIFECYCLE_DIR,
            &outcome.digest.hex(),
            &outcome.encode(),
        )?;
        Ok(())
    }

    /// Initializes lifecycle state once, atomically: every record is
    /// written into a staging directory, which is renamed to `lifecycle/`
    /// and the root fsynced.
    fn bootstrap_lifecycle(&self, records: &[Outcome]) -> Result<(), ReleaseError> {
        let stage = self
            .root
            .root()
            .join(STAGING_DIR)
            .join(format!("lifecycle-init-{:016x}", self.epoch));
        self.root.create_dir(&stage)?;
        for o in records {
            self.root
                .write_synced(&stage.join(o.digest.hex()), &o.encode())?;
        }
        self.root.sync_dir(&stage)?;
        self.root
            .rename(&stage, &self.root.root().join(LIFECYCLE_DIR))?;
        self.root.sync_dir(self.root.root())?;
        Ok(())
    }

    fn recover(
        &self,
        usage: CatalogUsage,
        plan: OpenPlan,
        observe: &dyn Fn(u64, u64),
    ) -> Result<(Writer, Index), ReleaseError> {
        let lifecycle = self.load_lifecycle()?;
        // Only an explicit upgrade of a catalog predating lifecycle state
        // bootstraps it; in a marked root missing state is corruption (the
        // root's open already refused it; this is the same rule, kept
        // where the records are read). A head without `lifecycle/` is a
        // catalog whose lifecycle state was lost: never bootstrapped again.
        let bootstrap = lifecycle.is_none();
        self.check_lifecycle_presence(lifecycle.as_ref(), plan)?;
        let mut lifecycle = lifecycle.unwrap_or_default();
        let dir = self.releases();
        let names = self.fs().read_dir(&dir).map_err(io_err("read_dir", &dir))?;
        let mut scan = RecoveryScan {
            usage,
            bootstrap,
            boot_records: Vec::new(),
            index: Index::default(),
            orphans: std::collections::BTreeMap::new(),
            references: std::collections::BTreeMap::new(),
        };
        let total = names.len() as u64;
        for (done, name) in (1..).zip(names) {
            self.recover_entry(&mut scan, &mut lifecycle, &dir, &name)?;
            observe(done, total);
        }
        let RecoveryScan {
            usage,
            boot_records,
            index,
            orphans,
            ..
        } = scan;
        if let Some(missing) = lifecycle.releases.keys().find(|d| index.get(d).is_none()) {
            return Err(corrupt(
                &dir,
                &format!("lifecycle state names {missing}, which has no completed directory"),
            ));
        }
        if bootstrap {
            self.bootstrap_lifecycle(&boot_records)?;
            self.write_head(&Head::of(lifecycle.releases.keys()))?;
        }
        let mut writer = Writer::new(usage, lifecycle);
        writer.orphans = orphans;
        Ok((writer, index))
    }

    /// Recovery's first phase: refuses a lost lifecycle state (its head
    /// remains, or the catalog is not being upgraded) and reconciles the
    /// head with the records found.
    fn check_lifecycle_presence(
        &self,
        lifecycle: Option<&LifecycleState>,
        plan: OpenPlan,
    ) -> Result<(), ReleaseError> {
        let bootstrap = lifecycle.is_none();
        if bootstrap
            && self
                .fs()
                .metadata(&self.root.root().join(LIFECYCLE_HEAD))
                .map_err(io_err("metadata", self.root.root()))?
                .is_some()
        {
            return Err(corrupt(
                &self.root.root().join(LIFECYCLE_DIR),
                "lifecycle state is missing but its head (LIFECYCLE) remains: the catalog had lifecycle state and lost it; restore lifecycle/ from a backup (it is never rebuilt from the release directories)",
            ));
        }
        if let Some(l) = lifecycle {
            self.reconcile_head(l, plan)?;
        }
        if bootstrap && plan != OpenPlan::Upgrade {
            return Err(corrupt(
                &self.root.root().join(LIFECYCLE_DIR),
                "the catalog is initialized but its lifecycle state is missing",
            ));
        }
        Ok(())
    }

    /// Recovers one entry of `releases/`: classifies it, charges debris,
    /// refuses corruption, and verifies and places a completed release.
    fn recover_entry(
        &self,
        scan: &mut RecoveryScan,
        lifecycle: &mut LifecycleState,
        dir: &Path,
        name: &str,
    ) -> Result<(), ReleaseError> {
        let path = dir.join(name);
        let is_dir = self
            .fs()
            .metadata(&path)
            .map_err(io_err("metadata", &path))?
            .is_some_and(|m| m.kind == Kind::Dir);
        let complete = if is_dir && Sha256::parse_hex(name).is_some() {
            self.probe_complete(&path)?
        } else {
            CompleteProbe::Missing
        };
        let probe = Probe {
            name,
            is_dir,
            complete,
        };
        match classify_entry(&probe) {
            Recovered::Debris => scan.usage = scan.usage.charge_debris(&self.bounds)?,
            Recovered::Corrupt(e) => return Err(e.into()),
            Recovered::Completed(digest, record) => {
                self.recover_completed(scan, lifecycle, &path, digest, record)?;
            }
        }
        Ok(())
    }

    /// Verifies a completed release directory in full, charges it, reserves
    /// its reference, and adopts it (or keeps it as an orphan) as lifecycle
    /// state says.
    fn recover_completed(
        &self,
        scan: &mut RecoveryScan,
        lifecycle: &mut LifecycleState,
        path: &Path,
        digest: Sha256,
        record: CompleteRecord,
    ) -> Result<(), ReleaseError> {
        let verified = self.verify_dir(&digest, Some(record), true)?;
        let descriptor = verified.descriptor;
        scan.usage = scan
            .usage
            .charge_recovered(&self.bounds, &descriptor.footprint())?;
        if let Some(other) = scan.references.insert(descriptor.reference_key(), digest) {
            return Err(corrupt(
                path,
                &format!(
                    "reference {} is held by both {other} and {digest}",
                    descriptor.reference()
                ),
            ));
        }
        if scan.bootstrap {
            scan.boot_records
                .push(lifecycle.apply(LifecycleOp::Publish, &digest)?);
        }
        let entry = |membership| Entry {
            descriptor: descriptor.clone(),
            metadata_digest: record.metadata_digest,
            membership,
        };
        match recovered_membership(lifecycle, &digest) {
            RecoveredStanding::Adopted(m) => scan.index.insert(entry(m)),
            RecoveredStanding::Orphan => {
                scan.orphans.insert(digest, entry(Membership::Member));
            }
        }
        Ok(())
    }

    /// Probes `dir/COMPLETE` without reading more than its fixed bound.
    fn probe_complete(&self, dir: &Path) -> Result<CompleteProbe, ReleaseError> {
        let path = dir.join(COMPLETE_FILE);
        let meta = self
            .fs()
            .metadata(&path)
            .map_err(io_err("metadata", &path))?;
        Ok(match meta {
            None => CompleteProbe::Missing,
            Some(m) if m.kind != Kind::File => CompleteProbe::NotRegular,
            Some(m) => match complete::check_complete_len(m.len) {
                Err(e) => CompleteProbe::Decoded(Err(e)),
                Ok(()) => {
                    let bytes = self
                        .fs()
                        .read_bounded(&path, complete::MAX_COMPLETE_BYTES)
                        .map_err(io_err("read", &path))?;
                    CompleteProbe::Decoded(complete::decode(&bytes))
                }
            },
        })
    }

    /// Reads a payload file: a regular file, its length checked against its
    /// bound before anything is allocated.
    fn read_payload(&self, path: &Path, kind: FileKind) -> Result<Vec<u8>, ReleaseError> {
        let meta = self
            .fs()
            .metadata(path)
            .map_err(io_err("metadata", path))?
            .ok_or_else(|| corrupt(path, "missing"))?;
        if meta.kind != Kind::File {
            return Err(corrupt(path, "not a regular file"));
        }
        check_file_len(&self.bounds, kind, meta.len)?;
        let limit = match kind {
            FileKind::Component => self.bounds.max_component_bytes,
            FileKind::Metadata | FileKind::Manifest => self.bounds.max_metadata_bytes,
        };
        self.fs().read_bounded(path, limit).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                // Grew past its bound while being read.
                corrupt(path, &e.to_string())
            } else {
                io_err("read", path)(e).into()
            }
        })
    }

    /// Verifies `releases/<hex>/` in full: COMPLETE (probed again unless
    /// given), metadata, manifest and component, each length-checked before
    /// reading, every digest and the descriptor's agreement with the
    /// manifest and the contract. Returns the release (with the component
    /// when `keep_component`).
    fn verify_dir(
        &self,
        digest: &Sha256,
        record: Option<CompleteRecord>,
        keep_component: bool,
    ) -> Result<Release, ReleaseError> {
        let dir = self.releases().join(digest.hex());
        let record = match record {
            Some(r) => r,
            None => match self.probe_complete(&dir)? {
                CompleteProbe::Decoded(Ok(r)) => r,
                CompleteProbe::Decoded(Err(e)) => return Err(ReleaseError::Complete(*digest, e)),
                CompleteProbe::Missing | CompleteProbe::NotRegular => {
                    return Err(corrupt(&dir, "completion record missing or not a file"))
                }
            },
        };
        bump(&self.counters.metadata_fetch, 1);
        let metadata_bytes = self.read_payload(&dir.join(METADATA_FILE), FileKind::Metadata)?;
        let meta = ReleaseMetadata::decode(&metadata_bytes, self.bounds.max_metadata_bytes)?;
        let manifest_bytes = self.read_payload(&dir.join(MANIFEST_FILE), FileKind::Manifest)?;
        let manifest = Manifest::decode_canonical(&manifest_bytes, self.bounds.max_metadata_bytes)?;
        bump(&self.counters.component_verification, 1);
        let component = self.read_payload(&dir.join(COMPONENT_FILE), FileKind::Component)?;
        bump(
            &self.counters.component_bytes,
            u64::try_from(component.len()).unwrap_or(u64::MAX),
        );
        bump(&self.counters.metadata_fingerprint, 1);
        let name = digest.hex();
        record
            .verify(&StoredRelease {
                directory_name: &name,
                descriptor_digest: meta.descriptor.component_digest,
                descriptor_size_bytes: meta.descriptor.component_size_bytes,
                component: &component,
                metadata: &metadata_bytes,
                manifest: &manifest_bytes,
            })
            .map_err(|e| ReleaseError::Complete(*digest, e))?;
        if Descriptor::for_release(&manifest, record.component_size_bytes) != meta.descriptor {
            return Err(corrupt(&dir, "descriptor disagrees with the manifest"));
        }
        if meta.contract.export_names() != manifest.exports {
            return Err(corrupt(&dir, "contract exports disagree with the manifest"));
        }
        Ok(Release {
            descriptor: meta.descriptor,
            manifest,
            contract: meta.contract,
            component: if keep_component {
                component
            } else {
                Vec::new()
            },
        })
    }

    /// Checks a publication's input alone — the manifest, the component's
    /// identity and size, the contract and its metadata bound — with no
    /// catalog and no I/O: what [`ReleaseRepository::publish`] refuses
    /// before it looks at the catalog. A caller about to create a catalog
    /// for a publication checks first, so that a refused one creates
    /// nothing.
    pub fn check_publication(
        bounds: &Bounds,
        inspector: &dyn ComponentInspector,
        manifest: &[u8],
        component: &[u8],
        contract: Contract,
    ) -> Result<(), ReleaseError> {
        prepare(bounds, inspector, manifest, component, contract).map(|_| ())
    }

    /// Step `Validate`: everything about the input, before the writer mutex
    /// and before any I/O.
    fn validate(
        &self,
        manifest: &[u8],
        component: &[u8],
        contract: Contract,
    ) -> Result<Prepared, ReleaseError> {
        prepare(
            &self.bounds,
            self.inspector.as_ref(),
            manifest,
            component,
            contract,
        )
    }
    /// Publishes a release: `manifest` (any JSON spelling; stored
    /// canonically), the component bytes (released before the stored copy
    /// is read back) and its contract metadata. Follows
    /// [`protocol::steps_of`] the plan exactly; see the module docs.
    pub fn publish(
        &self,
        manifest: &[u8],
        component: Vec<u8>,
        contract: Contract,
    ) -> Result<Published, ReleaseError> {
        self.root.check_live()?;
        let prepared = self.validate(manifest, &component, contract)?;
        let digest = prepared.record.component_digest;
        let mut w = self.shared.writer();
        let admitted = self
            .shared
            .admit(
                &w,
                &self.bounds,
                &prepared.descriptor,
                &prepared.record.metadata_digest,
                &prepared.candidate,
            )
            .map_err(|r| match r {
                Refusal::Protocol(p) => ReleaseError::Protocol(p),
                Refusal::Bound(b) => ReleaseError::Bound(b),
            })?;
        let entry = Entry {
            descriptor: prepared.descriptor.clone(),
            metadata_digest: prepared.record.metadata_digest,
            membership: Membership::Member,
        };
        let mut run = PublishRun {
            prepared: &prepared,
            digest,
            entry,
            usage: admitted.usage,
            component: Some(component),
            stage: PathBuf::new(),
            outcome: None,
        };
        for &step in protocol::steps_of(admitted.plan) {
            if let Err(e) = self.publish_step(&mut w, &mut run, step) {
                // A failure once the destination exists leaves the digest
                // pending: past the rename of a new release, or anywhere in
                // a reconciliation (its directory already exists). A no-op
                // changes nothing.
                if admitted.plan.failure_leaves_pending(step) {
                    w.gate.on_failure_after_rename(&digest);
                    if w.pending.is_none() {
                        w.pending = Some(run.entry.clone());
                    }
                }
                return Err(step_err(step)(e));
            }
        }
        Ok(Published {
            digest,
            plan: admitted.plan,
            outcome: run.outcome,
        })
    }

    /// Runs one step of a publication's plan under the writer mutex.
    fn publish_step(
        &self,
        w: &mut Writer,
        run: &mut PublishRun<'_>,
        step: Step,
    ) -> Result<(), ReleaseError> {
        let prepared = run.prepared;
        let digest = run.digest;
        match step {
            Step::Validate | Step::Admit => Ok(()),
            Step::CreateStage => {
                let n = self.stage_seq.fetch_add(1, Ordering::Relaxed);
                run.stage = self
                    .root
                    .root()
                    .join(STAGING_DIR)
                    .join(format!("{:016x}-{n}", self.epoch));
                self.root.create_dir(&run.stage).map_err(ReleaseError::from)
            }
            Step::WriteMetadata => self.write(&run.stage, METADATA_FILE, &prepared.metadata),
            Step::WriteManifest => self.write(&run.stage, MANIFEST_FILE, &prepared.manifest),
            Step::WriteComponent => {
                let r = self.write(
                    &run.stage,
                    COMPONENT_FILE,
                    run.component.as_deref().unwrap_or(&[]),
                );
                // The caller's buffer is released before the stored
                // component is read back.
                run.component = None;
                r
            }
            Step::WriteComplete => self.write(&run.stage, COMPLETE_FILE, &prepared.record.encode()),
            Step::SyncStage => self.root.sync_dir(&run.stage).map_err(ReleaseError::from),
            Step::Rename => {
                let dest = self.releases().join(digest.hex());
                let r = self
                    .root
                    .rename(&run.stage, &dest)
                    .map_err(ReleaseError::from);
                if r.is_ok() {
                    self.shared.on_renamed(w, run.entry.clone(), run.usage);
                }
                r
            }
            Step::Verify => {
                run.component = None;
                self.verify_dir(&digest, None, false).and_then(|r| {
                    if r.descriptor == prepared.descriptor {
                        Ok(())
                    } else {
                        Err(corrupt(&self.releases(), "stored descriptor differs"))
                    }
                })
            }
            Step::SyncReleases => self
                .root
                .sync_dir(&self.releases())
                .map_err(ReleaseError::from),
            Step::CommitLifecycle => self.commit_publish(w, &digest).map(|o| {
                run.outcome = Some(o);
            }),
            Step::Adopt => {
                let membership = w
                    .lifecycle
                    .membership(&digest)
                    .unwrap_or(Membership::Member);
                let adopted = Entry {
                    membership,
                    ..run.entry.clone()
                };
                self.shared.adopt(w, adopted);
                Ok(())
            }
        }
    }

    /// The publication's lifecycle commit: the `Publish` decision's
    /// changes, applied in core's order ([`Self::apply_lifecycle`]).
    fn commit_publish(&self, w: &mut Writer, digest: &Sha256) -> Result<Outcome, ReleaseError> {
        let d = w
            .lifecycle
            .decide_effects(LifecycleOp::Publish, digest, &w.head, !w.head_stale)?;
        self.apply_lifecycle(w, d)
    }

    /// Applies a lifecycle decision's changes in order, each durable
    /// before the next; the first failure ends them. A record that may or
    /// may not have been written reserves its seq and is
    /// [`ReleaseError::LifecycleUncertain`]; a head that could not be
    /// written stays pending ([`Writer::head_stale`]), and core writes it
    /// again before the next record.
    fn apply_lifecycle(
        &self,
        w: &mut Writer,
        d: LifecycleDecision,
    ) -> Result<Outcome, ReleaseError> {
        for effect in d.effects {
            match effect {
                LifecycleEffect::Head(head) => {
                    w.head = head;
                    w.head_stale = true;
                    self.write_head(&head)?;
                    w.head_stale = false;
                }
                LifecycleEffect::Record(o) => {
                    if let Err(e) = self.write_record(&o) {
                        w.lifecycle.reserve(&o);
                        return Err(ReleaseError::LifecycleUncertain {
                            seq: o.seq,
                            source: Box::new(e),
                        });
                    }
                    w.lifecycle.record(o);
                }
                LifecycleEffect::Retain(o) => w.lifecycle.record(o),
            }
        }
        Ok(d.outcome)
    }

    fn write(&self, stage: &Path, name: &str, data: &[u8]) -> Result<(), ReleaseError> {
        Ok(self.root.write_synced(&stage.join(name), data)?)
    }

    fn eligible(&self, entry: &Entry) -> Result<(), ReleaseError> {
        if entry.membership.is_eligible() {
            Ok(())
        } else {
            Err(ReleaseError::NotEligible {
                digest: entry.digest(),
                membership: entry.membership,
            })
        }
    }

    /// Resolves a reference (`name@version`) in `tenant`'s scope (`None`:
    /// the trusted-local releases) to an eligible release's descriptor,
    /// from the index (no I/O). References are per tenant: another
    /// tenant's release of the same reference is not found.
    pub fn resolve(
        &self,
        tenant: Option<&str>,
        reference: &str,
    ) -> Result<Descriptor, ReleaseError> {
        let entry = self
            .shared
            .read(|ix| ix.by_reference(tenant, reference).cloned())
            .ok_or_else(|| ReleaseError::NotFound(reference.to_owned()))?;
        self.eligible(&entry)?;
        Ok(entry.descriptor.clone())
    }

    /// Fetches an eligible release in full, verified from disk before it is
    /// returned.
    pub fn fetch(&self, digest: &Sha256) -> Result<Release, ReleaseError> {
        let entry = self
            .shared
            .read(|ix| ix.get(digest).cloned())
            .ok_or_else(|| ReleaseError::NotFound(digest.to_string()))?;
        self.eligible(&entry)?;
        bump(&self.counters.full_fetch, 1);
        let release = self.verify_dir(digest, None, true)?;
        if release.descriptor != entry.descriptor {
            return Err(corrupt(
                &self.releases().join(digest.hex()),
                "stored descriptor differs from the adopted one",
            ));
        }
        Ok(release)
    }

    /// The catalog row of `digest` whoever published it (historical
    /// metadata, whatever the membership): the operator's unscoped view,
    /// from the index (no I/O). Never a tenant's answer: a tenant reads
    /// [`ReleaseRepository::get_catalog_entry`].
    pub fn lookup(&self, digest: &Sha256) -> Option<CatalogEntry> {
        self.shared.read(|ix| {
            ix.get(digest).map(|e| CatalogEntry {
                descriptor: e.descriptor.clone(),
                membership: e.membership,
            })
        })
    }

    /// The catalog row of `digest` for `tenant` (historical metadata,
    /// whatever the membership). Another tenant's release, or a trusted
    /// local one with no tenant, is not found.
    pub fn get_catalog_entry(
        &self,
        tenant: &str,
        digest: &Sha256,
    ) -> Result<CatalogEntry, ReleaseError> {
        self.shared
            .read(|ix| {
                ix.get(digest)
                    .filter(|e| e.descriptor.tenant.as_deref() == Some(tenant))
                    .map(|e| CatalogEntry {
                        descriptor: e.descriptor.clone(),
                        membership: e.membership,
                    })
            })
            .ok_or_else(|| ReleaseError::NotFound(digest.to_string()))
    }

    /// One page of `tenant`'s releases (narrowed to `service` when given)
    /// in ascending digest order, bounded by rows and materialized
    /// descriptor bytes before anything is cloned. `page_token` continues a
    /// listing; it expires with a new visible publication or a reopen.
    pub fn list_catalog_entries(
        &self,
        tenant: &str,
        service: Option<&str>,
        page_token: Option<&str>,
    ) -> Result<CatalogPage, ReleaseError> {
        let scope = Scope { tenant, service };
        self.list_page(&scope, Continue::Token(page_token), |ix, after| {
            Box::new(ix.scope(tenant, service, after))
        })
    }

    /// As [`ReleaseRepository::list_catalog_entries`], continued by a
    /// durable [`Cursor`] (`c1-…`) instead of an instance-bound token: it
    /// survives a reopen (a command line opens the catalog on every page)
    /// and expires with any publication, revocation or retirement, so a
    /// listing never skips or repeats a row. `cursor` is the previous
    /// page's `next_page_token`.
    pub fn list_catalog_entries_by_cursor(
        &self,
        tenant: &str,
        service: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<CatalogPage, ReleaseError> {
        let scope = Scope { tenant, service };
        self.list_page(&scope, Continue::Cursor(cursor), |ix, after| {
            Box::new(ix.scope(tenant, service, after))
        })
    }

    /// One page of the trusted-local releases (published without a tenant,
    /// so outside every tenant-scoped listing), in ascending digest order,
    /// with the same bounds and tokens as
    /// [`ReleaseRepository::list_catalog_entries`]. For the node's
    /// operator, who owns the root; never a tenant's view.
    pub fn list_local_entries(
        &self,
        page_token: Option<&str>,
    ) -> Result<CatalogPage, ReleaseError> {
        self.list_page(&LOCAL, Continue::Token(page_token), |ix, after| {
            Box::new(ix.local(after))
        })
    }

    /// As [`ReleaseRepository::list_local_entries`], continued by a durable
    /// [`Cursor`] (see [`ReleaseRepository::list_catalog_entries_by_cursor`]).
    pub fn list_local_entries_by_cursor(
        &self,
        cursor: Option<&str>,
    ) -> Result<CatalogPage, ReleaseError> {
        self.list_page(&LOCAL, Continue::Cursor(cursor), |ix, after| {
            Box::new(ix.local(after))
        })
    }

    fn list_page(
        &self,
        scope: &Scope<'_>,
        from: Continue<'_>,
        rows: impl for<'i> Fn(
            &'i Index,
            Option<Sha256>,
        ) -> Box<dyn Iterator<Item = &'i Arc<Entry>> + 'i>,
    ) -> Result<CatalogPage, ReleaseError> {
        self.shared.read(|ix| {
            // The cursor's content tag is computed only for a cursor's
            // listing (a walk of the whole index).
            let content = match from {
                Continue::Cursor(_) => Some(content_tag(ix.iter().map(|e| {
                    (
                        &e.descriptor.component_digest,
                        &e.metadata_digest,
                        e.membership.as_str(),
                    )
                }))),
                Continue::Token(_) => None,
            };
            let after = match (from, content) {
                (Continue::Token(t), _) => t
                    .map(|t| PageToken::check(t, scope, self.epoch, ix.generation()))
                    .transpose()?,
                (Continue::Cursor(c), Some(tag)) => {
                    c.map(|c| Cursor::check(c, scope, tag)).transpose()?
                }
                (Continue::Cursor(_), None) => None,
            };
            let mut entries = Vec::new();
            let mut fill = PageFill::default();
            let mut more = false;
            for e in rows(ix, after) {
                if !fill.offer(&self.bounds, e.descriptor.materialized_bytes())? {
                    more = true;
                    break;
                }
                entries.push(CatalogEntry {
                    descriptor: e.descriptor.clone(),
                    membership: e.membership,
                });
            }
            let next_page_token = match entries.last() {
                Some(last) if more => {
                    let after = last.descriptor.component_digest;
                    Some(match content {
                        Some(content) => Cursor {
                            content,
                            scope: scope.tag(),
                            after,
                        }
                        .encode(),
                        None => PageToken::new(self.epoch, ix.generation(), scope, after).encode(),
                    })
                }
                _ => None,
            };
            Ok(CatalogPage {
                entries,
                next_page_token,
            })
        })
    }

    /// Revokes a release: durable in lifecycle state before the index
    /// changes; never undone by republication.
    pub fn revoke(&self, digest: &Sha256) -> Result<Outcome, ReleaseError> {
        self.change(LifecycleOp::Revoke, digest)
    }

    /// Retires a release (a revoked one stays revoked).
    pub fn retire(&self, digest: &Sha256) -> Result<Outcome, ReleaseError> {
        self.change(LifecycleOp::Retire, digest)
    }

    fn change(&self, op: LifecycleOp, digest: &Sha256) -> Result<Outcome, ReleaseError> {
        self.root.check_live()?;
        let mut w = self.shared.writer();
        if self.shared.read(|ix| ix.get(digest).is_none()) {
            return Err(ReleaseError::NotFound(digest.to_string()));
        }
        let d = w
            .lifecycle
            .decide_effects(op, digest, &w.head, !w.head_stale)?;
        let after = d.outcome.after;
        let changes = !d.effects.is_empty();
        let done = self.apply_lifecycle(&mut w, d);
        // Revocation and retirement only withdraw eligibility, so the
        // index takes the new membership even when the record's write is
        // uncertain: an uncertain write never leaves a release positively
        // eligible. Reopen reads the durable truth.
        if changes && matches!(done, Ok(_) | Err(ReleaseError::LifecycleUncertain { .. })) {
            self.shared.set_membership(digest, after);
        }
        done
    }

    /// The status of lifecycle operation `seq`: retained, or unknown.
    pub fn outcome(&self, seq: u64) -> OutcomeStatus {
        self.shared.writer().lifecycle.outcome(seq)
    }

    /// The lifecycle membership of `digest`, if it has a record: the
    /// committed view. After an uncertain revocation or retirement
    /// ([`ReleaseError::LifecycleUncertain`]) the index already withholds
    /// eligibility from resolve and fetch while this still answers the last
    /// committed membership; a reopen reads the durable truth.
    pub fn membership(&self, digest: &Sha256) -> Option<Membership> {
        self.shared.writer().lifecycle.membership(digest)
    }

    /// The five verification counters.
    pub fn verification_snapshot(&self) -> VerificationSnapshot {
        let c = &self.counters;
        VerificationSnapshot {
            full_fetch_attempts: c.full_fetch.load(Ordering::Relaxed),
            metadata_fetch_attempts: c.metadata_fetch.load(Ordering::Relaxed),
            component_verification_attempts: c.component_verification.load(Ordering::Relaxed),
            component_bytes_hashed: c.component_bytes.load(Ordering::Relaxed),
            metadata_fingerprint_attempts: c.metadata_fingerprint.load(Ordering::Relaxed),
        }
    }

    /// The canonical absolute root this handle owns.
    pub fn root(&self) -> &Path {
        self.root.root()
    }

    /// The configured bounds.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// What this open did with the root: opened an initialized catalog,
    /// initialized a fresh one, or upgraded an unmarked one.
    pub fn open_plan(&self) -> OpenPlan {
        self.plan
    }

    /// This open instance's epoch (page tokens are bound to it).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The visible generation (moved by every adoption).
    pub fn generation(&self) -> u64 {
        self.shared.read(|ix| ix.generation())
    }

    /// What the owner has admitted: entries, index bytes, directories.
    pub fn usage(&self) -> CatalogUsage {
        self.shared.writer().usage
    }

    /// The digest pending reconciliation, if a publication failed past its
    /// rename.
    pub fn pending(&self) -> Option<Sha256> {
        self.shared.writer().gate.pending
    }

    /// Digests of completed directories recovered without lifecycle
    /// membership (invisible; each reserves its reference).
    pub fn orphans(&self) -> Vec<Sha256> {
        self.shared.writer().orphans.keys().copied().collect()
    }

    /// The hidden completed release (recovered without lifecycle
    /// membership: an interrupted publication) that reserves `reference`
    /// in `tenant`'s scope, if any. It is not served, but no other digest
    /// may take its reference until its exact publication is retried.
    pub fn orphan_holding(&self, tenant: Option<&str>, reference: &str) -> Option<Sha256> {
        let key = (tenant.map(str::to_owned), reference.to_owned());
        self.shared
            .writer()
            .orphans
            .values()
            .find(|o| o.descriptor.reference_key() == key)
            .map(Entry::digest)
    }

    /// Adopted releases, in digest order.
    pub fn len(&self) -> usize {
        self.shared.read(Index::len)
    }

    /// Whether nothing is adopted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A publication's state across the steps of its plan.
struct PublishRun<'a> {
    /// The validated input.
    prepared: &'a Prepared,
    /// The component's digest (the release directory's name).
    digest: Sha256,
    /// The index entry the release becomes.
    entry: Entry,
    /// The usage after the publication.
    usage: CatalogUsage,
    /// The caller's component, until it is written.
    component: Option<Vec<u8>>,
    /// The staging directory, once created.
    stage: PathBuf,
    /// The lifecycle commit's outcome, once committed.
    outcome: Option<Outcome>,
}

/// The state recovery accumulates while it scans `releases/`.
struct RecoveryScan {
    /// The catalog's usage, charged entry by entry.
    usage: CatalogUsage,
    /// Whether lifecycle state is being bootstrapped (an upgrade).
    bootstrap: bool,
    /// The bootstrap's records, one per completed release.
    boot_records: Vec<Outcome>,
    /// The adopted releases.
    index: Index,
    /// Completed releases lifecycle state does not name.
    orphans: std::collections::BTreeMap<Sha256, Entry>,
    /// Which release holds each reference.
    references: std::collections::BTreeMap<ReferenceKey, Sha256>,
}

fn corrupt(path: &Path, detail: &str) -> ReleaseError {
    ReleaseError::Corrupt {
        path: path.to_path_buf(),
        detail: detail.to_owned(),
    }
}

/// The checks of [`ReleaseRepository::check_publication`], answering what
/// a publication writes.
fn prepare(
    bounds: &Bounds,
    inspector: &dyn ComponentInspector,
    manifest: &[u8],
    component: &[u8],
    contract: Contract,
) -> Result<Prepared, ReleaseError> {
    let manifest = Manifest::parse(manifest, bounds.max_metadata_bytes)?;
    let size = u64::try_from(component.len()).unwrap_or(u64::MAX);
    check_file_len(bounds, FileKind::Component, size)?;
    let actual = Sha256::of(component);
    if manifest.component_digest != actual {
        return Err(ReleaseError::DigestMismatch {
            declared: manifest.component_digest,
            actual,
        });
    }
    contract.shape().check()?;
    if let Some(extracted) = inspector.inspect(component)? {
        if !extracted.same_types(&contract) {
            return Err(ReleaseError::ContractMismatch(
                "the declared contract is not the component's",
            ));
        }
    }
    if contract.export_names() != manifest.exports {
        return Err(ReleaseError::ContractMismatch(
            "the contract's exports are not the manifest's declared exports",
        ));
    }
    let descriptor = Descriptor::for_release(&manifest, size);
    let metadata = ReleaseMetadata {
        descriptor: descriptor.clone(),
        contract,
    }
    .encode_checked(bounds.max_metadata_bytes)?;
    let manifest = manifest.canonical();
    let record = CompleteRecord::for_release(component, &metadata, &manifest);
    let candidate = Candidate {
        entry: descriptor.footprint(),
        metadata_bytes: u64::try_from(metadata.len()).unwrap_or(u64::MAX),
        component_bytes: size,
    };
    Ok(Prepared {
        descriptor,
        metadata,
        manifest,
        record,
        candidate,
    })
}
