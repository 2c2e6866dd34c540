//! The in-memory side of the release repository: the writer mutex (gate,
//! usage, lifecycle state, orphans, the pending entry) and the ordered index
//! readers see. Its synchronization primitives are `loom`'s under
//! `cfg(loom)` and `std`'s otherwise, so `tests/loom.rs` explores every
//! interleaving of the same code the repository runs.
//!
//! Lock order: the writer mutex, then the index lock. Readers take only the
//! index lock (shared), so they never wait for a publication's I/O, and an
//! adoption inserts into every index map under one exclusive acquisition —
//! a reader sees a release in all of them or in none.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound as RangeBound;
use std::sync::Arc;

#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard, RwLock};

use custos_core::release::bounds::{
    admit_publication, BoundError, Bounds, Candidate, CatalogUsage,
};
use custos_core::release::lifecycle::{Head, LifecycleState, Membership};
use custos_core::release::metadata::{Descriptor, ReferenceKey};
use custos_core::release::protocol::{
    plan_publication, Existing, ExistingKind, Facts, Gate, Plan, ProtocolError,
};
use custos_core::release::Sha256;

/// One release as the index retains it: the compact descriptor, the digest
/// of its stored metadata (to recognise an identical republication without
/// reading it) and its lifecycle membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The compact descriptor.
    pub descriptor: Descriptor,
    /// SHA-256 of the stored `metadata.json`.
    pub metadata_digest: Sha256,
    /// The lifecycle membership.
    pub membership: Membership,
}

impl Entry {
    /// The release digest.
    pub fn digest(&self) -> Sha256 {
        self.descriptor.component_digest
    }

    /// Whether `descriptor` and `metadata_digest` are exactly this release's.
    pub fn same_content(&self, descriptor: &Descriptor, metadata_digest: &Sha256) -> bool {
        self.descriptor == *descriptor && self.metadata_digest == *metadata_digest
    }
}

/// The ordered in-memory index of adopted releases, with the visible
/// generation (moved by every adoption).
#[derive(Debug, Default)]
pub struct Index {
    generation: u64,
    by_digest: BTreeMap<Sha256, Arc<Entry>>,
    by_reference: BTreeMap<ReferenceKey, Sha256>,
    by_tenant: BTreeMap<String, BTreeSet<Sha256>>,
    by_service: BTreeMap<(String, String), BTreeSet<Sha256>>,
}

impl Index {
    /// The visible generation: the number of adoptions since open.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Adopted releases.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether nothing is adopted.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The adopted release with this digest.
    pub fn get(&self, digest: &Sha256) -> Option<&Arc<Entry>> {
        self.by_digest.get(digest)
    }

    /// The adopted release holding `reference` in `tenant`'s scope
    /// (`None`: the trusted-local releases). References are per tenant.
    pub fn by_reference(&self, tenant: Option<&str>, reference: &str) -> Option<&Arc<Entry>> {
        self.by_reference
            .get(&(tenant.map(str::to_owned), reference.to_owned()))
            .and_then(|d| self.by_digest.get(d))
    }

    /// The releases of `tenant` (and `service`, when given) after `after`,
    /// in ascending digest order. Never scans another tenant.
    pub fn scope(
        &self,
        tenant: &str,
        service: Option<&str>,
        after: Option<Sha256>,
    ) -> impl Iterator<Item = &Arc<Entry>> + '_ {
        let set = match service {
            Some(s) => self.by_service.get(&(tenant.to_owned(), s.to_owned())),
            None => self.by_tenant.get(tenant),
        };
        let lower = after.map_or(RangeBound::Unbounded, RangeBound::Excluded);
        set.into_iter()
            .flat_map(move |s| s.range((lower, RangeBound::Unbounded)))
            .filter_map(|d| self.by_digest.get(d))
    }

    /// The trusted-local releases (no tenant) after `after`, in digest
    /// order. Not indexed by scope: an operator's listing walks the digest
    /// map, skipping tenant-scoped releases.
    pub fn local(&self, after: Option<Sha256>) -> impl Iterator<Item = &Arc<Entry>> + '_ {
        let lower = after.map_or(RangeBound::Unbounded, RangeBound::Excluded);
        self.by_digest
            .range((lower, RangeBound::Unbounded))
            .map(|(_, e)| e)
            .filter(|e| e.descriptor.tenant.is_none())
    }

    /// Every adopted release in digest order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Entry>> + '_ {
        self.by_digest.values()
    }

    /// Whether every map agrees with the digest map (no half-adopted
    /// release): each release is under its reference and its scopes, and
    /// nothing else is.
    pub fn is_consistent(&self) -> bool {
        let scoped: usize = self.by_tenant.values().map(BTreeSet::len).sum();
        let serviced: usize = self.by_service.values().map(BTreeSet::len).sum();
        let tenants = self
            .by_digest
            .values()
            .filter(|e| e.descriptor.tenant.is_some())
            .count();
        let services = self
            .by_digest
            .values()
            .filter(|e| e.descriptor.tenant.is_some() && e.descriptor.service.is_some())
            .count();
        self.by_reference.len() == self.by_digest.len()
            && scoped == tenants
            && serviced == services
            && self.by_digest.iter().all(|(d, e)| {
                let desc = &e.descriptor;
                self.by_reference.get(&desc.reference_key()) == Some(d)
                    && desc.tenant.as_ref().is_none_or(|t| {
                        self.by_tenant.get(t).is_some_and(|s| s.contains(d))
                            && desc.service.as_ref().is_none_or(|s| {
                                self.by_service
                                    .get(&(t.clone(), s.clone()))
                                    .is_some_and(|set| set.contains(d))
                            })
                    })
            })
    }

    pub(crate) fn insert(&mut self, entry: Entry) {
        let d = entry.digest();
        let desc = &entry.descriptor;
        self.by_reference.insert(desc.reference_key(), d);
        if let Some(t) = &desc.tenant {
            self.by_tenant.entry(t.clone()).or_default().insert(d);
            if let Some(s) = &desc.service {
                self.by_service
                    .entry((t.clone(), s.clone()))
                    .or_default()
                    .insert(d);
            }
        }
        self.by_digest.insert(d, Arc::new(entry));
    }
}

/// What the writer mutex guards.
#[derive(Debug)]
pub struct Writer {
    /// The pending gate.
    pub gate: Gate,
    /// What the owner has admitted (entries, index bytes, directories).
    pub usage: CatalogUsage,
    /// The authoritative lifecycle state, as last made durable.
    pub lifecycle: LifecycleState,
    /// Completed directories with no lifecycle record: invisible, reserving
    /// their references.
    pub orphans: BTreeMap<Sha256, Entry>,
    /// The renamed, not yet adopted release (the gate's pending digest).
    pub pending: Option<Entry>,
    /// The lifecycle head of the records in [`Writer::lifecycle`].
    pub head: Head,
    /// The head file on disk may lag [`Writer::head`] (its last write
    /// failed): it is written again before any new record.
    pub head_stale: bool,
}

impl Writer {
    /// A writer with an open gate; its head is that of `lifecycle`'s
    /// records.
    pub fn new(usage: CatalogUsage, lifecycle: LifecycleState) -> Self {
        Writer {
            gate: Gate::new(),
            usage,
            head: Head::of(lifecycle.releases.keys()),
            lifecycle,
            orphans: BTreeMap::new(),
            pending: None,
            head_stale: false,
        }
    }
}

/// Why the writer refused a publication before staging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The protocol refused (pending gate, conflicts).
    Protocol(ProtocolError),
    /// A bound refused.
    Bound(BoundError),
}

/// An admitted publication: its plan and the usage to store once its
/// directory exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The plan.
    pub plan: Plan,
    /// The usage after the publication.
    pub usage: CatalogUsage,
}

/// The writer mutex and the index, shared by the repository's handles.
#[derive(Debug)]
pub struct Shared {
    writer: Mutex<Writer>,
    index: RwLock<Index>,
}

impl Shared {
    /// Shared state over a recovered writer state and index.
    pub fn new(writer: Writer, index: Index) -> Self {
        Shared {
            writer: Mutex::new(writer),
            index: RwLock::new(index),
        }
    }

    /// Takes the writer mutex (held across a publication's whole I/O). A
    /// panic in an earlier holder does not wedge the catalog: the state it
    /// guards changes only by whole assignments.
    pub fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the index under the shared lock.
    pub fn read<T>(&self, f: impl FnOnce(&Index) -> T) -> T {
        let guard = self.index.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
    }

    /// The protocol facts of a publication of `descriptor` with metadata
    /// digest `metadata_digest`, from the writer state and the index.
    pub fn facts(&self, w: &Writer, descriptor: &Descriptor, metadata_digest: &Sha256) -> Facts {
        let digest = descriptor.component_digest;
        let reference = descriptor.reference_key();
        let (indexed, ref_owner) = self.read(|ix| {
            (
                ix.get(&digest)
                    .map(|e| e.same_content(descriptor, metadata_digest)),
                ix.by_reference(reference.0.as_deref(), &reference.1)
                    .map(|e| e.digest()),
            )
        });
        let existing = if let Some(identical) = indexed {
            Some(Existing {
                kind: ExistingKind::Adopted,
                identical,
            })
        } else if let Some(p) = w.pending.as_ref().filter(|p| p.digest() == digest) {
            Some(Existing {
                kind: ExistingKind::Pending,
                identical: p.same_content(descriptor, metadata_digest),
            })
        } else {
            w.orphans.get(&digest).map(|o| Existing {
                kind: ExistingKind::Orphan,
                identical: o.same_content(descriptor, metadata_digest),
            })
        };
        let holds = |e: &Entry| e.descriptor.reference_key() == reference;
        let reference_owner = ref_owner
            .or_else(|| w.pending.as_ref().filter(|p| holds(p)).map(Entry::digest))
            .or_else(|| w.orphans.values().find(|o| holds(o)).map(Entry::digest));
        Facts {
            digest,
            existing,
            reference_owner,
        }
    }

    /// Step `Admit`: plans the publication and checks every bound, under
    /// the writer mutex, before anything is staged.
    pub fn admit(
        &self,
        w: &Writer,
        bounds: &Bounds,
        descriptor: &Descriptor,
        metadata_digest: &Sha256,
        candidate: &Candidate,
    ) -> Result<Admitted, Refusal> {
        let facts = self.facts(w, descriptor, metadata_digest);
        let plan = plan_publication(&w.gate, &facts).map_err(Refusal::Protocol)?;
        let usage = admit_publication(bounds, &w.usage, candidate, plan.placement())
            .map_err(Refusal::Bound)?;
        Ok(Admitted { plan, usage })
    }

    /// After a successful rename: the slot is charged, the digest pending.
    pub fn on_renamed(&self, w: &mut Writer, entry: Entry, usage: CatalogUsage) {
        w.gate.on_renamed(&entry.digest());
        w.usage = usage;
        w.pending = Some(entry);
    }

    /// Step `Adopt`: inserts `entry` into every index map under one
    /// exclusive acquisition, moves the visible generation, and opens the
    /// gate if `entry` was pending. An orphan with the digest is adopted.
    pub fn adopt(&self, w: &mut Writer, entry: Entry) {
        let digest = entry.digest();
        {
            let mut ix = self.index.write().unwrap_or_else(|p| p.into_inner());
            ix.insert(entry);
            ix.generation = ix.generation.saturating_add(1);
        }
        w.orphans.remove(&digest);
        if w.pending.as_ref().is_some_and(|p| p.digest() == digest) {
            w.pending = None;
        }
        w.gate.on_reconciled(&digest);
    }

    /// Sets an adopted release's membership (revocation, retirement). Does
    /// not move the visible generation: the listing is unchanged.
    pub fn set_membership(&self, digest: &Sha256, membership: Membership) {
        let mut ix = self.index.write().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = ix.by_digest.get_mut(digest) {
            let mut updated = Entry::clone(e);
            updated.membership = membership;
            *e = Arc::new(updated);
        }
    }
}
