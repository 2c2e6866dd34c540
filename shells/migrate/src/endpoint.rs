//! One local endpoint of a migration, composed: its storage identity, its
//! locality, and its lazily opened ports
//! ([`crate::ports`]); the destination directory's listing for core's
//! destination rule ([`destination_listing`]); and a migration's own values
//! ([`Job`]). Nothing here opens or creates anything: a refused preflight
//! leaves both endpoints as they were.

use std::path::{Path, PathBuf};

use custos_core::fence::Holder;
use custos_core::identity::{self, StorageIdentity};
use custos_core::migration::workflow::{ColdVerifier, Endpoint, Migration, Progress};
use custos_core::migration::{DestinationListing, Locality, Name};
use custos_core::Class;

use crate::ports::{Control, Objects, Tables};

/// Why an endpoint could not be composed. The uri is never echoed (it may
/// carry a credential).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    /// The identity's uri, namespace, backend or Artifact root is invalid.
    #[error("{side}: {detail}")]
    Invalid {
        /// Which endpoint (`--source`, `--dest`).
        side: String,
        /// What is wrong.
        detail: String,
    },
    /// A remote identity: this version migrates local identities only.
    #[error("endpoint-outside-local-v1: {side} is not a local storage identity; this version migrates local identities only [endpoint-outside-local-v1]")]
    Remote {
        /// Which endpoint.
        side: String,
    },
}

impl ComposeError {
    /// The class: an invalid argument, or a refusal (unsupported).
    pub fn class(&self) -> Class {
        match self {
            ComposeError::Invalid { .. } => Class::InvalidArgument,
            ComposeError::Remote { .. } => Class::Unsupported,
        }
    }
}

/// One endpoint, composed.
pub struct LocalEndpoint {
    /// The store's identity: it names the catalog files and host locks,
    /// and it is the endpoint plans and receipts bind.
    pub id: StorageIdentity,
    /// Local or remote.
    pub locality: Locality,
    /// Its control catalog.
    pub control: Control,
    /// Its tables.
    pub tables: Tables,
    /// Its Artifact objects.
    pub objects: Objects,
}

impl LocalEndpoint {
    /// Composes the endpoint of `uri` (an absolute path or a URI) in
    /// `namespace` over `backend`, its Artifact root `artifacts` (absolute)
    /// or, for a local identity, the namespace's `.custos-artifacts`.
    /// `side` names the endpoint in errors. Nothing is opened.
    pub fn compose(
        uri: &str,
        namespace: &str,
        backend: &str,
        artifacts: Option<&Path>,
        side: &str,
    ) -> Result<LocalEndpoint, ComposeError> {
        let bad = |e: &dyn std::fmt::Display| ComposeError::Invalid {
            side: side.to_owned(),
            detail: e.to_string(),
        };
        let id = StorageIdentity::new(uri, namespace, backend).map_err(|e| bad(&e))?;
        let local = id.is_local();
        let root = match artifacts {
            Some(p) => p.to_path_buf(),
            None if local => Path::new(id.location())
                .join(id.namespace())
                .join(".custos-artifacts"),
            // A remote identity has no local Artifact root to derive: it is
            // refused here as preflight would refuse it, before anything is
            // opened.
            None => {
                return Err(ComposeError::Remote {
                    side: side.to_owned(),
                })
            }
        };
        let objects = Objects::new(root, local).map_err(|e| bad(&e))?;
        let control =
            Control::new(local.then(|| PathBuf::from(identity::catalog_location(&id, ""))));
        let tables = Tables::new(local.then(|| id.clone()));
        Ok(LocalEndpoint {
            locality: if local {
                Locality::Local
            } else {
                Locality::Remote
            },
            id,
            control,
            tables,
            objects,
        })
    }

    /// This endpoint as a run's destination (its tables recover a commit a
    /// killed run left behind; a destination composed for reading does
    /// not).
    #[must_use]
    pub fn into_destination(mut self) -> LocalEndpoint {
        self.tables = self.tables.recovering();
        self
    }

    /// The Activity records of the endpoint (0 for a remote one: the
    /// machine refuses it before it matters).
    pub fn activity(&self) -> Result<u64, custos_sqlite::ledger::ActivityError> {
        if self.locality != Locality::Local {
            return Ok(0);
        }
        custos_sqlite::ledger::activity_records(&self.id)
    }

    /// The workflow's view of this endpoint, with its Activity count.
    pub fn endpoint(&self, activity_records: u64) -> Endpoint<'_, Control, Tables, Objects> {
        Endpoint {
            identity: self.id.clone(),
            audit: Some(self.id.clone()),
            control: &self.control,
            tables: &self.tables,
            objects: &self.objects,
            artifact_root: self.objects.uri().clone(),
            locality: self.locality,
            activity_records,
        }
    }
}

/// The listing of a local destination directory that core's destination
/// rule ([`custos_core::migration::check_destination_listing`]) judges:
/// which top-level names are this storage identity's own (the Iceberg
/// catalog file and its SQLite siblings, the namespace directory), whether
/// a catalog exists, whether the namespace directory holds only the
/// Artifact root, and whether a writing open would refuse the Artifact
/// root (core's root rule, so a root whose initialization a killed run cut
/// off is adopted). `None` for a remote endpoint. Reads only.
pub fn destination_listing(d: &LocalEndpoint) -> Option<DestinationListing> {
    if d.locality != Locality::Local {
        return None;
    }
    let root = Path::new(d.id.location());
    let own = |name: &str| {
        name == d.id.namespace()
            || name
                .strip_prefix(custos_iceberg::store::ICEBERG_CATALOG_FILE)
                .is_some_and(|rest| ["", "-journal", "-wal", "-shm"].contains(&rest))
    };
    let top = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let mine = own(&name);
                    (name, mine)
                })
                .collect()
        })
        .unwrap_or_default();
    let ns = root.join(d.id.namespace());
    let catalogs = root
        .join(custos_iceberg::store::ICEBERG_CATALOG_FILE)
        .exists()
        || Path::new(&identity::catalog_location(&d.id, "")).exists();
    let artifacts_name = d.objects.root().file_name().map(ToOwned::to_owned);
    let namespace_only_artifacts = std::fs::read_dir(&ns).is_ok_and(|entries| {
        entries
            .flatten()
            .all(|e| Some(e.file_name()) == artifacts_name && e.path().parent() == Some(&ns))
    });
    Some(DestinationListing {
        root: root.display().to_string(),
        top,
        namespace: ns.exists().then(|| ns.display().to_string()),
        catalogs,
        namespace_only_artifacts,
        artifacts_refused: artifacts_refused(d.objects.root()),
    })
}

/// Whether a writing open would refuse the Artifact root at `artifacts`
/// (its path and why), by core's root rule.
fn artifacts_refused(artifacts: &Path) -> Option<(String, String)> {
    if !artifacts.is_dir() {
        return None;
    }
    let layout = &custos_fs::artifacts::LAYOUT;
    match custos_fs::root::standing(&custos_fs::RealFs, artifacts, layout) {
        Err(e) => Some((artifacts.display().to_string(), e.to_string())),
        Ok(standing) => {
            custos_core::root::decide(layout, &standing, custos_core::root::Access::Write)
                .err()
                .map(|why| (artifacts.display().to_string(), why.to_string()))
        }
    }
}

/// Both endpoints of a migration and its own values.
pub struct Job {
    /// The source.
    pub source: LocalEndpoint,
    /// The destination (composed with [`LocalEndpoint::into_destination`]).
    pub destination: LocalEndpoint,
    /// The migration's id.
    pub migration_id: Name,
    /// The source fence's holder: `custos-migrate-<id>`.
    pub holder: Holder,
    /// The version written into receipts.
    pub version: Name,
    /// Whether the source is kept as a second copy.
    pub second_copy: bool,
}

/// Why a migration id cannot name a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Not a name.
    #[error("--migration-id {id:?}: {detail}")]
    Id {
        /// The id given.
        id: String,
        /// What is wrong.
        detail: String,
    },
    /// A name, but its fence holder (`custos-migrate-<id>`) is not a
    /// holder (too long, say).
    #[error("--migration-id {id}: {detail}")]
    Holder {
        /// The id given.
        id: String,
        /// What is wrong.
        detail: String,
    },
}

/// The migration's id and its source fence holder (`custos-migrate-<id>`)
/// for `migration_id`; checked before anything else of a job, so a bad id
/// is the answer whatever else is wrong.
pub fn job_id(migration_id: &str) -> Result<(Name, Holder), JobError> {
    let id = Name::new(migration_id).map_err(|e| JobError::Id {
        id: migration_id.to_owned(),
        detail: e.to_string(),
    })?;
    let holder = Holder::new(format!("custos-migrate-{id}")).map_err(|e| JobError::Holder {
        id: migration_id.to_owned(),
        detail: e.to_string(),
    })?;
    Ok((id, holder))
}

impl Job {
    /// The job of `migration_id` between `source` and `destination`,
    /// writing `version` into its receipts.
    pub fn new(
        source: LocalEndpoint,
        destination: LocalEndpoint,
        migration_id: &str,
        version: Name,
        second_copy: bool,
    ) -> Result<Job, JobError> {
        let (migration_id, holder) = job_id(migration_id)?;
        Ok(Job {
            source,
            destination: destination.into_destination(),
            migration_id,
            holder,
            version,
            second_copy,
        })
    }

    /// The workflow over this job: `cold` verifies, `clock` is the wall
    /// clock, `progress` hears each step; the Activity counts are the
    /// endpoints' own ([`LocalEndpoint::activity`]).
    pub fn migration<'a, V: ColdVerifier>(
        &'a self,
        activity: (u64, u64),
        cold: &'a V,
        clock: &'a dyn Fn() -> custos_core::Millis,
        progress: &'a dyn Progress,
    ) -> Migration<'a, Control, Tables, Objects, V> {
        Migration {
            source: self.source.endpoint(activity.0),
            destination: self.destination.endpoint(activity.1),
            migration_id: self.migration_id.clone(),
            holder: self.holder.clone(),
            cold,
            version: self.version.clone(),
            clock,
            progress,
            second_copy: self.second_copy,
        }
    }
}
