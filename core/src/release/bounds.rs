//! The release catalog's bounds: independent, simultaneous limits (a byte
//! or directory budget can run out before the entry count) with their
//! defaults, the conservative index accounting, and the checks a
//! publication passes **before staging** — as pure functions over plain data
//! with typed refusals.
//!
//! The shell owns a [`CatalogUsage`] under its writer mutex (rebuilt at open,
//! never recomputed by a directory scan per publication), asks
//! [`admit_publication`] before it creates a staging directory, and stores the
//! returned usage once the rename has happened (a post-rename error keeps the
//! slot charged). Reads check a file's length with [`check_file_len`] before
//! allocating; pages are filled with [`PageFill`] (over [`page_admits`]).

use thiserror::Error;

/// One KiB.
pub const KIB: u64 = 1024;
/// One MiB.
pub const MIB: u64 = 1024 * KIB;

/// The fixed charge per release for its boxed summary, index nodes and
/// bookkeeping.
pub const PER_RELEASE_OVERHEAD: u64 = 8 * KIB;

/// The compact preparation stamp a release may carry: fixed-size fields
/// only. Its optional slot is
/// charged per release whether present or absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreparationFingerprint {
    /// The fingerprint digest.
    pub digest: [u8; 32],
    /// The bytes charged for the stamped metadata.
    pub charged_bytes: u64,
    /// The type depth the stamp requires.
    pub type_depth: u32,
}

/// `size_of::<Option<PreparationFingerprint>>()`, charged per release.
pub const PREPARATION_SLOT_BYTES: u64 =
    std::mem::size_of::<Option<PreparationFingerprint>>() as u64;

/// The per-repository epoch allocation charged once.
pub const EPOCH_ALLOCATION_BYTES: u64 = 64;

/// The number of verification counters a repository keeps: full fetches,
/// metadata fetches, component verifications, component bytes hashed and
/// metadata fingerprints.
pub const VERIFICATION_COUNTERS: u64 = 5;

/// The fixed allowance every repository charges, even when empty: the epoch
/// allocation and the five atomic 64-bit verification counters.
pub const REPOSITORY_FIXED_BYTES: u64 =
    EPOCH_ALLOCATION_BYTES + VERIFICATION_COUNTERS * std::mem::size_of::<u64>() as u64;

/// The maximum structural depth of a contract field type (the root counts 1).
pub const MAX_TYPE_DEPTH: u32 = 32;

/// The maximum number of type nodes across all contract parameters and
/// results of one artifact.
pub const MAX_TYPE_NODES: u64 = 16_384;

/// The catalog's configurable limits. All hold simultaneously.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Completed index entries.
    pub max_entries: u64,
    /// Conservatively accounted retained index bytes.
    pub max_index_bytes: u64,
    /// Rows per list page.
    pub max_page_rows: u64,
    /// Materialized descriptor bytes per list page.
    pub max_page_bytes: u64,
    /// Bytes of one compact descriptor.
    pub max_descriptor_bytes: u64,
    /// Bytes of persisted `metadata.json`.
    pub max_metadata_bytes: u64,
    /// Bytes of `component.wasm`.
    pub max_component_bytes: u64,
    /// Directories directly under `releases/`: completed, pending-adoption and
    /// retained incomplete ones alike.
    pub max_recovery_directories: u64,
}

impl Default for Bounds {
    /// The default limits.
    fn default() -> Self {
        Bounds {
            max_entries: 250_000,
            max_index_bytes: 64 * MIB,
            max_page_rows: 1_000,
            max_page_bytes: 4 * MIB,
            max_descriptor_bytes: 256 * KIB,
            max_metadata_bytes: 4 * MIB,
            max_component_bytes: 256 * MIB,
            max_recovery_directories: 1_000_000,
        }
    }
}

/// Which bound refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bound {
    /// [`Bounds::max_entries`].
    Entries,
    /// [`Bounds::max_index_bytes`].
    IndexBytes,
    /// [`Bounds::max_page_rows`].
    PageRows,
    /// [`Bounds::max_page_bytes`].
    PageBytes,
    /// [`Bounds::max_descriptor_bytes`].
    DescriptorBytes,
    /// [`Bounds::max_metadata_bytes`].
    MetadataBytes,
    /// [`Bounds::max_component_bytes`].
    ComponentBytes,
    /// [`Bounds::max_recovery_directories`].
    RecoveryDirectories,
    /// [`MAX_TYPE_DEPTH`].
    TypeDepth,
    /// [`MAX_TYPE_NODES`].
    TypeNodes,
}

impl Bound {
    /// The bound's stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Bound::Entries => "max_entries",
            Bound::IndexBytes => "max_index_bytes",
            Bound::PageRows => "max_page_rows",
            Bound::PageBytes => "max_page_bytes",
            Bound::DescriptorBytes => "max_descriptor_bytes",
            Bound::MetadataBytes => "max_metadata_bytes",
            Bound::ComponentBytes => "max_component_bytes",
            Bound::RecoveryDirectories => "max_recovery_directories",
            Bound::TypeDepth => "max_type_depth",
            Bound::TypeNodes => "max_type_nodes",
        }
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal by a bound. Nothing was staged or written.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum BoundError {
    /// Admitting the request would exceed `bound`.
    #[error("ResourceExhausted: {bound} is {limit}; the request needs {requested}")]
    ResourceExhausted {
        /// The bound.
        bound: Bound,
        /// Its configured limit.
        limit: u64,
        /// What admitting the request would bring the total to (saturating).
        requested: u64,
    },
    /// A contract type is too deep or has too many nodes. A validation
    /// failure of the publication, reported with the bound it broke.
    #[error("InvalidContract: {bound} is {limit}; the contract needs {requested}")]
    ContractTooComplex {
        /// [`Bound::TypeDepth`] or [`Bound::TypeNodes`].
        bound: Bound,
        /// The limit.
        limit: u64,
        /// What the contract has.
        requested: u64,
    },
    /// The configured index byte budget cannot hold even the fixed
    /// repository allowance.
    #[error(
        "InvalidBounds: max_index_bytes {limit} is below the fixed repository allowance {fixed}"
    )]
    IndexBudgetBelowFixed {
        /// The configured budget.
        limit: u64,
        /// [`REPOSITORY_FIXED_BYTES`].
        fixed: u64,
    },
}

fn within(bound: Bound, limit: u64, requested: u64) -> Result<(), BoundError> {
    if requested > limit {
        Err(BoundError::ResourceExhausted {
            bound,
            limit,
            requested,
        })
    } else {
        Ok(())
    }
}

/// The accounted footprint of one release's index entry: the lengths the
/// shell measures on the compact descriptor and manifest summary it retains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EntryFootprint {
    /// Bytes of the compact descriptor and manifest-summary strings, vectors
    /// and sparse metadata maps (the materialized descriptor bytes).
    pub descriptor_bytes: u64,
    /// Bytes of the digest key.
    pub digest_key_bytes: u64,
    /// Bytes of the reference key.
    pub reference_key_bytes: u64,
    /// Bytes of the tenant key, when the release has a tenant.
    pub tenant_key_bytes: Option<u64>,
    /// Bytes of the service key, when the release has a service.
    pub service_key_bytes: Option<u64>,
}

/// The conservative index charge of one release: its descriptor bytes, each
/// index key charged separately (digest, reference, tenant and service — a
/// duplicate key in another index is charged again), the optional
/// preparation-stamp slot and [`PER_RELEASE_OVERHEAD`]. Saturating.
pub fn entry_charge(entry: &EntryFootprint) -> u64 {
    [
        PER_RELEASE_OVERHEAD,
        PREPARATION_SLOT_BYTES,
        entry.descriptor_bytes,
        entry.digest_key_bytes,
        entry.reference_key_bytes,
        entry.tenant_key_bytes.unwrap_or(0),
        entry.service_key_bytes.unwrap_or(0),
    ]
    .into_iter()
    .fold(0u64, u64::saturating_add)
}

/// What the exclusive owner has admitted so far: the counts a publication is
/// checked against. Rebuilt at open, maintained under the writer mutex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CatalogUsage {
    /// Completed entries in the index (including pending adoption).
    pub entries: u64,
    /// Accounted index bytes, including [`REPOSITORY_FIXED_BYTES`].
    pub index_bytes: u64,
    /// Directories directly under `releases/`, of every kind.
    pub recovery_directories: u64,
}

impl CatalogUsage {
    /// An empty repository's usage: only the fixed allowance, which must fit.
    pub fn empty(bounds: &Bounds) -> Result<Self, BoundError> {
        if REPOSITORY_FIXED_BYTES > bounds.max_index_bytes {
            return Err(BoundError::IndexBudgetBelowFixed {
                limit: bounds.max_index_bytes,
                fixed: REPOSITORY_FIXED_BYTES,
            });
        }
        Ok(CatalogUsage {
            entries: 0,
            index_bytes: REPOSITORY_FIXED_BYTES,
            recovery_directories: 0,
        })
    }

    /// Charges a directory found at open under `releases/` that is not a
    /// completed release (retained incomplete debris): it counts toward the
    /// recovery-directory bound only, never the index quota.
    pub fn charge_debris(&self, bounds: &Bounds) -> Result<Self, BoundError> {
        let dirs = self.recovery_directories.saturating_add(1);
        within(
            Bound::RecoveryDirectories,
            bounds.max_recovery_directories,
            dirs,
        )?;
        Ok(CatalogUsage {
            recovery_directories: dirs,
            ..*self
        })
    }

    /// Charges a completed release found at open (recovery applies the same
    /// bounds as publication).
    pub fn charge_recovered(
        &self,
        bounds: &Bounds,
        entry: &EntryFootprint,
    ) -> Result<Self, BoundError> {
        charge(bounds, self, entry, true)
    }
}

/// A publication candidate, as validated before staging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// The index footprint it would add.
    pub entry: EntryFootprint,
    /// Bytes of the serialized `metadata.json`.
    pub metadata_bytes: u64,
    /// Bytes of the component.
    pub component_bytes: u64,
}

/// Whether a publication needs a new slot or reuses an existing directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// A new release: a new staging directory, a new index entry.
    New,
    /// An identical republication or an exact pending retry: its directory
    /// and entry already exist and are already charged, even at the limit.
    Existing,
}

fn charge(
    bounds: &Bounds,
    usage: &CatalogUsage,
    entry: &EntryFootprint,
    new_directory: bool,
) -> Result<CatalogUsage, BoundError> {
    within(
        Bound::DescriptorBytes,
        bounds.max_descriptor_bytes,
        entry.descriptor_bytes,
    )?;
    let entries = usage.entries.saturating_add(1);
    within(Bound::Entries, bounds.max_entries, entries)?;
    let index_bytes = usage.index_bytes.saturating_add(entry_charge(entry));
    within(Bound::IndexBytes, bounds.max_index_bytes, index_bytes)?;
    let recovery_directories = if new_directory {
        usage.recovery_directories.saturating_add(1)
    } else {
        usage.recovery_directories
    };
    within(
        Bound::RecoveryDirectories,
        bounds.max_recovery_directories,
        recovery_directories,
    )?;
    Ok(CatalogUsage {
        entries,
        index_bytes,
        recovery_directories,
    })
}

/// The check a publication passes before anything is staged: payload sizes,
/// the descriptor bound, the entry count, the accounted index bytes and the
/// recovery-directory capacity, all simultaneously. Returns the usage to
/// store once the release's directory exists (an [`Placement::Existing`]
/// placement returns `usage` unchanged).
pub fn admit_publication(
    bounds: &Bounds,
    usage: &CatalogUsage,
    candidate: &Candidate,
    placement: Placement,
) -> Result<CatalogUsage, BoundError> {
    within(
        Bound::ComponentBytes,
        bounds.max_component_bytes,
        candidate.component_bytes,
    )?;
    within(
        Bound::MetadataBytes,
        bounds.max_metadata_bytes,
        candidate.metadata_bytes,
    )?;
    match placement {
        Placement::Existing => {
            within(
                Bound::DescriptorBytes,
                bounds.max_descriptor_bytes,
                candidate.entry.descriptor_bytes,
            )?;
            Ok(*usage)
        }
        Placement::New => charge(bounds, usage, &candidate.entry, true),
    }
}

/// The kind of a persisted file whose length is checked before allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `metadata.json`.
    Metadata,
    /// `manifest.json` (bounded by the metadata limit).
    Manifest,
    /// `component.wasm`.
    Component,
}

/// Checks a persisted file's length before a reader allocates for it.
/// (COMPLETE has its own fixed bound: `complete::check_complete_len`.)
pub fn check_file_len(bounds: &Bounds, kind: FileKind, len: u64) -> Result<(), BoundError> {
    match kind {
        FileKind::Metadata | FileKind::Manifest => {
            within(Bound::MetadataBytes, bounds.max_metadata_bytes, len)
        }
        FileKind::Component => within(Bound::ComponentBytes, bounds.max_component_bytes, len),
    }
}

/// Checks a contract's type structure before recursive conversion: depth
/// (root = 1) at most [`MAX_TYPE_DEPTH`], nodes at most [`MAX_TYPE_NODES`].
pub fn check_contract_shape(depth: u32, nodes: u64) -> Result<(), BoundError> {
    if depth > MAX_TYPE_DEPTH {
        return Err(BoundError::ContractTooComplex {
            bound: Bound::TypeDepth,
            limit: u64::from(MAX_TYPE_DEPTH),
            requested: u64::from(depth),
        });
    }
    if nodes > MAX_TYPE_NODES {
        return Err(BoundError::ContractTooComplex {
            bound: Bound::TypeNodes,
            limit: MAX_TYPE_NODES,
            requested: nodes,
        });
    }
    Ok(())
}

/// Whether one more row of `descriptor_bytes` fits a page that already holds
/// `rows` rows and `bytes` materialized descriptor bytes. The first row of a
/// page always fits if it alone is within the byte bound.
pub fn page_admits(bounds: &Bounds, rows: u64, bytes: u64, descriptor_bytes: u64) -> bool {
    rows < bounds.max_page_rows && bytes.saturating_add(descriptor_bytes) <= bounds.max_page_bytes
}

/// The running size of one list page, filled row by row before anything
/// is cloned: the whole paging rule in one place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageFill {
    /// Rows taken.
    pub rows: u64,
    /// Materialized descriptor bytes taken.
    pub bytes: u64,
}

impl PageFill {
    /// Offers the next row of `descriptor_bytes`: `Ok(true)` it fits and is
    /// counted; `Ok(false)` the page is full (this row starts the next
    /// page); an error when it is the page's first row and too large alone
    /// — no page could ever hold it, so the listing cannot progress and is
    /// refused rather than answered empty with a token that repeats.
    pub fn offer(&mut self, bounds: &Bounds, descriptor_bytes: u64) -> Result<bool, BoundError> {
        if page_admits(bounds, self.rows, self.bytes, descriptor_bytes) {
            self.rows += 1;
            self.bytes = self.bytes.saturating_add(descriptor_bytes);
            return Ok(true);
        }
        if self.rows == 0 {
            return Err(BoundError::ResourceExhausted {
                bound: Bound::PageBytes,
                limit: bounds.max_page_bytes,
                requested: descriptor_bytes,
            });
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> EntryFootprint {
        EntryFootprint {
            descriptor_bytes: 600,
            digest_key_bytes: 71,
            reference_key_bytes: 20,
            tenant_key_bytes: Some(8),
            service_key_bytes: Some(8),
        }
    }

    fn candidate() -> Candidate {
        Candidate {
            entry: entry(),
            metadata_bytes: 900,
            component_bytes: 4096,
        }
    }

    fn publish_until_refused(bounds: &Bounds, mut usage: CatalogUsage) -> (u64, BoundError) {
        let mut published = 0;
        loop {
            match admit_publication(bounds, &usage, &candidate(), Placement::New) {
                Ok(next) => {
                    usage = next;
                    published += 1;
                }
                Err(e) => return (published, e),
            }
        }
    }

    #[test]
    fn defaults_are_the_specs() {
        let b = Bounds::default();
        assert_eq!(b.max_entries, 250_000);
        assert_eq!(b.max_index_bytes, 64 * 1024 * 1024);
        assert_eq!(b.max_page_rows, 1_000);
        assert_eq!(b.max_page_bytes, 4 * 1024 * 1024);
        assert_eq!(b.max_descriptor_bytes, 256 * 1024);
        assert_eq!(b.max_metadata_bytes, 4 * 1024 * 1024);
        assert_eq!(b.max_component_bytes, 256 * 1024 * 1024);
        assert_eq!(b.max_recovery_directories, 1_000_000);
    }

    /// Three index entries and two recovery directories is valid, but
    /// only two new releases fit into an empty root.
    #[test]
    fn three_entries_two_recovery_directories_admit_two() {
        let bounds = Bounds {
            max_entries: 3,
            max_recovery_directories: 2,
            ..Bounds::default()
        };
        let empty = CatalogUsage::empty(&bounds).unwrap();
        let (n, e) = publish_until_refused(&bounds, empty);
        assert_eq!(n, 2);
        assert_eq!(
            e,
            BoundError::ResourceExhausted {
                bound: Bound::RecoveryDirectories,
                limit: 2,
                requested: 3
            }
        );
    }

    /// Both limits two and one retained incomplete directory: one new
    /// release fits.
    #[test]
    fn both_two_with_one_debris_directory_admit_one() {
        let bounds = Bounds {
            max_entries: 2,
            max_recovery_directories: 2,
            ..Bounds::default()
        };
        let usage = CatalogUsage::empty(&bounds)
            .unwrap()
            .charge_debris(&bounds)
            .unwrap();
        assert_eq!(usage.entries, 0, "debris never counts as an index entry");
        let (n, e) = publish_until_refused(&bounds, usage);
        assert_eq!(n, 1);
        assert!(matches!(
            e,
            BoundError::ResourceExhausted {
                bound: Bound::RecoveryDirectories,
                ..
            }
        ));
    }

    #[test]
    fn existing_placement_reuses_its_slot_at_the_limit() {
        let bounds = Bounds {
            max_entries: 1,
            max_recovery_directories: 1,
            ..Bounds::default()
        };
        let full = admit_publication(
            &bounds,
            &CatalogUsage::empty(&bounds).unwrap(),
            &candidate(),
            Placement::New,
        )
        .unwrap();
        assert_eq!(
            admit_publication(&bounds, &full, &candidate(), Placement::Existing),
            Ok(full)
        );
        assert!(admit_publication(&bounds, &full, &candidate(), Placement::New).is_err());
    }

    #[test]
    fn default_index_bytes_exhaust_before_entries() {
        let bounds = Bounds::default();
        let per = entry_charge(&entry());
        assert!(per > PER_RELEASE_OVERHEAD + entry().descriptor_bytes);
        let by_bytes = (bounds.max_index_bytes - REPOSITORY_FIXED_BYTES) / per;
        assert!(by_bytes < bounds.max_entries, "{by_bytes}");
        let mut usage = CatalogUsage::empty(&bounds).unwrap();
        usage.entries = by_bytes;
        usage.index_bytes = REPOSITORY_FIXED_BYTES + by_bytes * per;
        assert!(matches!(
            admit_publication(&bounds, &usage, &candidate(), Placement::New),
            Err(BoundError::ResourceExhausted {
                bound: Bound::IndexBytes,
                ..
            })
        ));
    }

    #[test]
    fn each_key_and_the_fixed_allowance_are_charged() {
        let bare = EntryFootprint::default();
        assert_eq!(
            entry_charge(&bare),
            PER_RELEASE_OVERHEAD + PREPARATION_SLOT_BYTES
        );
        assert_eq!(
            entry_charge(&entry()),
            entry_charge(&bare) + 600 + 71 + 20 + 8 + 8
        );
        assert_eq!(REPOSITORY_FIXED_BYTES, 64 + 40);
        let tiny = Bounds {
            max_index_bytes: REPOSITORY_FIXED_BYTES - 1,
            ..Bounds::default()
        };
        assert!(CatalogUsage::empty(&tiny).is_err());
    }

    #[test]
    fn payload_descriptor_and_contract_bounds_refuse() {
        let bounds = Bounds::default();
        let empty = CatalogUsage::empty(&bounds).unwrap();
        let mut c = candidate();
        c.component_bytes = bounds.max_component_bytes + 1;
        assert!(matches!(
            admit_publication(&bounds, &empty, &c, Placement::New),
            Err(BoundError::ResourceExhausted {
                bound: Bound::ComponentBytes,
                ..
            })
        ));
        let mut c = candidate();
        c.metadata_bytes = bounds.max_metadata_bytes + 1;
        assert!(matches!(
            admit_publication(&bounds, &empty, &c, Placement::Existing),
            Err(BoundError::ResourceExhausted {
                bound: Bound::MetadataBytes,
                ..
            })
        ));
        let mut c = candidate();
        c.entry.descriptor_bytes = bounds.max_descriptor_bytes + 1;
        assert!(matches!(
            admit_publication(&bounds, &empty, &c, Placement::New),
            Err(BoundError::ResourceExhausted {
                bound: Bound::DescriptorBytes,
                ..
            })
        ));
        assert!(check_file_len(&bounds, FileKind::Component, bounds.max_component_bytes).is_ok());
        assert!(check_file_len(&bounds, FileKind::Metadata, u64::MAX).is_err());
        assert!(check_contract_shape(32, 16_384).is_ok());
        assert!(check_contract_shape(33, 1).is_err());
        assert!(check_contract_shape(1, 16_385).is_err());
    }

    #[test]
    fn pages_bound_rows_and_bytes() {
        let bounds = Bounds {
            max_page_rows: 2,
            max_page_bytes: 100,
            ..Bounds::default()
        };
        assert!(page_admits(&bounds, 0, 0, 100));
        assert!(!page_admits(&bounds, 0, 0, 101));
        assert!(page_admits(&bounds, 1, 50, 50));
        assert!(!page_admits(&bounds, 1, 60, 50));
        assert!(!page_admits(&bounds, 2, 0, 1));
    }

    #[test]
    fn a_page_fills_until_full_and_refuses_a_first_row_too_large_alone() {
        let bounds = Bounds {
            max_page_rows: 2,
            max_page_bytes: 100,
            ..Bounds::default()
        };
        let mut page = PageFill::default();
        assert_eq!(page.offer(&bounds, 60), Ok(true));
        assert_eq!(page.offer(&bounds, 50), Ok(false), "bytes full");
        assert_eq!(page.offer(&bounds, 40), Ok(true));
        assert_eq!(page.offer(&bounds, 1), Ok(false), "rows full");
        assert_eq!(
            page,
            PageFill {
                rows: 2,
                bytes: 100
            }
        );
        assert!(matches!(
            PageFill::default().offer(&bounds, 101),
            Err(BoundError::ResourceExhausted {
                bound: Bound::PageBytes,
                requested: 101,
                ..
            })
        ));
    }
}
