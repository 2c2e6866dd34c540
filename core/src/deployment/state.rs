//! Versioned desired state: generation preconditions, complete publication,
//! and managed operations.
//!
//! A [`Catalog`] is the whole desired state: its publication stamp
//! (`generation`), every deployment with the stamp of its last accepted
//! apply, and the bounded ring of managed-operation receipts. [`decide`] is
//! its one decision. A shell calls it twice with the same [`Request`]:
//! once outside its writer mutex, to learn the next desired state and
//! compile its routes, and once **under** the mutex against the live
//! catalog — that second call is the commit: it re-checks the managed
//! replay, the route generation the compilation started from
//! ([`DeploymentError::StaleRouteGeneration`]) and the caller's object
//! precondition ([`DeploymentError::GenerationConflict`]), and the receipt
//! it returns is the one the caller gets: never a read after the commit.
//!
//! Expected generations (`expected`):
//!
//! | expected | apply | delete |
//! | --- | --- | --- |
//! | `None` | unconditional upsert | delete; absent is `NotFound` |
//! | `Some(0)` | require absence, create | an existing object conflicts; absent is `NotFound` |
//! | `Some(g)` | require a live object at exactly `g` | require a live object at exactly `g` |

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::manifest::DeploymentManifest;
use super::DeploymentError;

/// The most deployments one catalog holds.
pub const MAX_DEPLOYMENTS: usize = 100_000;
/// Managed-operation receipts retained (oldest evicted first).
pub const RECEIPT_RING: usize = 256;

/// A deployment with its object version: the catalog stamp of its last
/// accepted apply.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VersionedDeployment {
    /// The normalized manifest.
    pub manifest: DeploymentManifest,
    /// Its object generation (positive; at most the catalog generation).
    pub generation: u64,
}

/// What a decision returns to its caller: exactly what it installed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Receipt {
    /// One or more deployments installed by an apply (a batch: one stamp
    /// for all, in id order).
    Applied {
        /// The installed records.
        deployments: Vec<VersionedDeployment>,
        /// The catalog generation that published them.
        catalog_generation: u64,
    },
    /// A deployment deleted.
    Deleted {
        /// The deleted record, with its old object version.
        deployment: Box<VersionedDeployment>,
        /// The catalog generation that published the deletion.
        catalog_generation: u64,
    },
    /// A snapshot-only publication.
    Published {
        /// The new catalog generation.
        catalog_generation: u64,
    },
    /// An empty batch: nothing published.
    Unchanged {
        /// The catalog generation, unchanged.
        catalog_generation: u64,
    },
}

impl Receipt {
    /// The catalog generation this receipt's decision produced.
    pub fn catalog_generation(&self) -> u64 {
        match self {
            Receipt::Applied {
                catalog_generation, ..
            }
            | Receipt::Deleted {
                catalog_generation, ..
            }
            | Receipt::Published { catalog_generation }
            | Receipt::Unchanged { catalog_generation } => *catalog_generation,
        }
    }

    /// The structured detail of a versioned mutation whose directory sync
    /// failed after the commit point (`commit-durability-uncertain`):
    /// captured from this exact decision, `committed` always true. `None`
    /// for a receipt that is not one deployment's apply or delete.
    pub fn mutation_detail(&self) -> Option<MutationDetail> {
        let (d, operation, catalog_generation) = match self {
            Receipt::Applied {
                deployments,
                catalog_generation,
            } if deployments.len() == 1 => (deployments.first()?, "apply", *catalog_generation),
            Receipt::Deleted {
                deployment,
                catalog_generation,
            } => (deployment.as_ref(), "delete", *catalog_generation),
            _ => return None,
        };
        Some(MutationDetail {
            deployment_id: d.manifest.id.clone(),
            object_generation: d.generation,
            catalog_generation,
            operation,
            committed: true,
        })
    }
}

/// The `deployment-mutation` detail of an uncertain-durability commit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct MutationDetail {
    /// The deployment.
    pub deployment_id: String,
    /// Its object generation (for a delete, the deleted record's old one).
    pub object_generation: u64,
    /// The catalog generation that published the mutation.
    pub catalog_generation: u64,
    /// `apply` or `delete`.
    pub operation: &'static str,
    /// Always true: the rename happened.
    pub committed: bool,
}

/// A change to the desired state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mutation {
    /// Apply (upsert) one deployment under an optional precondition.
    Apply {
        /// The manifest.
        manifest: Box<DeploymentManifest>,
        /// The expected object generation.
        expected: Option<u64>,
    },
    /// Apply several deployments atomically, unconditionally; one stamp.
    ApplyMany {
        /// The manifests (no id twice).
        manifests: Vec<DeploymentManifest>,
    },
    /// Delete one deployment under an optional precondition.
    Delete {
        /// The deployment id.
        id: String,
        /// The expected object generation.
        expected: Option<u64>,
    },
    /// Publish the current desired state again (a snapshot-only
    /// publication: the catalog generation advances, no object changes).
    PublishSnapshot,
}

/// A managed operation's identity: replayed, not re-run, while its receipt
/// is retained.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Operation {
    /// The authenticated actor.
    pub actor: String,
    /// The caller's operation id.
    pub id: String,
    /// The catalog generation the caller observed when it formed the
    /// request (its expected combined state version).
    pub observed: u64,
}

/// One request to [`decide`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Request {
    /// The authenticated tenant scoping the request; `None` for the
    /// trusted-local compatibility operations.
    pub tenant: Option<String>,
    /// The change.
    pub mutation: Mutation,
    /// The catalog generation this request's compilation started from.
    pub compiled_at: u64,
    /// The managed operation, if any.
    pub operation: Option<Operation>,
}

/// A retained managed-operation receipt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Retained {
    /// The actor.
    pub actor: String,
    /// The operation id.
    pub id: String,
    /// The catalog generation the operation was formed against.
    pub observed: u64,
    /// The normalized request it ran (tenant and mutation).
    pub tenant: Option<String>,
    /// The mutation as normalized.
    pub mutation: Mutation,
    /// Its receipt.
    pub receipt: Receipt,
}

/// The bounded ring of managed-operation receipts, committed with the
/// catalog.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReceiptRing {
    /// Retained receipts, oldest first.
    pub entries: Vec<Retained>,
    /// The highest catalog generation of any evicted receipt (0 if none):
    /// an operation observed before it may have committed and been
    /// forgotten, so it is refused rather than run again.
    pub floor: u64,
}

/// The whole desired state.
///
/// Its serde form is a written form for inspection and tests: it
/// round-trips through JSON and through a self-describing binary format
/// (CBOR), and is stable as the manifests' canonical JSON form is. A
/// format that cannot skip a field (postcard, bincode) cannot carry it:
/// a manifest omits its absent fields, as its canonical JSON does. A
/// decoded value is not checked — [`Catalog::check`] and the stored
/// record's codec are.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Catalog {
    /// The catalog (route) generation: advanced once per publication.
    pub generation: u64,
    /// Deployments by id.
    pub objects: BTreeMap<String, VersionedDeployment>,
    /// Managed-operation receipts.
    pub receipts: ReceiptRing,
}

/// What [`decide`] returns.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The next catalog, or `None` when nothing is published (an empty
    /// batch, or a replayed operation).
    pub next: Option<Catalog>,
    /// The receipt of exactly that decision.
    pub receipt: Receipt,
    /// True when the receipt was replayed from the ring.
    pub replayed: bool,
}

impl Mutation {
    /// How a repository must open its root to carry this mutation out: an
    /// apply adds content, so it may create and initialize a root
    /// ([`Access::Write`](crate::root::Access::Write)); a delete or a
    /// snapshot-only publication adds nothing, so a missing or empty root
    /// is refused and nothing is created
    /// ([`Access::Modify`](crate::root::Access::Modify)).
    pub fn access(&self) -> crate::root::Access {
        match self {
            Mutation::Apply { .. } | Mutation::ApplyMany { .. } => crate::root::Access::Write,
            Mutation::Delete { .. } | Mutation::PublishSnapshot => crate::root::Access::Modify,
        }
    }
}

impl Decision {
    /// The ids of the deployments this decision applies (each must pass
    /// [`super::route::admit`] when the next generation is compiled:
    /// [`super::route::compile_admitting`]); empty for a deletion, a
    /// snapshot-only publication or a replay.
    pub fn applied(&self) -> std::collections::BTreeSet<String> {
        match (&self.next, &self.receipt) {
            (Some(_), Receipt::Applied { deployments, .. }) => {
                deployments.iter().map(|d| d.manifest.id.clone()).collect()
            }
            _ => std::collections::BTreeSet::new(),
        }
    }
}

impl Catalog {
    /// The deployment `id` as seen by `tenant` (`None`: unscoped).
    pub fn get(&self, tenant: Option<&str>, id: &str) -> Option<&VersionedDeployment> {
        self.objects
            .get(id)
            .filter(|d| tenant.is_none_or(|t| d.manifest.tenant == t))
    }

    /// The stored-state invariants every load checks: each stamp positive
    /// and at most the catalog generation, keys equal to ids, manifests
    /// valid, receipts within the ring and the floor.
    pub fn check(&self) -> Result<(), &'static str> {
        for (id, d) in &self.objects {
            if *id != d.manifest.id {
                return Err("an object is filed under another id");
            }
            if d.generation == 0 || d.generation > self.generation {
                return Err("an object stamp is zero or above the catalog generation");
            }
            if d.manifest.clone().validate().as_ref() != Ok(&d.manifest) {
                return Err("an object's manifest is not valid and normalized");
            }
        }
        if self.objects.len() > MAX_DEPLOYMENTS {
            return Err("more deployments than the catalog holds");
        }
        if self.receipts.entries.len() > RECEIPT_RING || self.receipts.floor > self.generation {
            return Err("the receipt ring is over its bound");
        }
        if self
            .receipts
            .entries
            .iter()
            .any(|r| r.receipt.catalog_generation() > self.generation)
        {
            return Err("a receipt is newer than the catalog");
        }
        Ok(())
    }
}

/// Decides one request against `catalog`. Total and deterministic. Order:
/// exact managed replay, then the route generation, then the request's own
/// validation and precondition, then the next stamp.
pub fn decide(catalog: &Catalog, req: &Request) -> Result<Decision, DeploymentError> {
    decide_with_ring(catalog, req, RECEIPT_RING)
}

/// [`decide`] with a receipt ring of `capacity` entries (at least 1): the
/// repository uses [`RECEIPT_RING`]; the model uses a tiny ring so that
/// eviction is reachable.
pub fn decide_with_ring(
    catalog: &Catalog,
    req: &Request,
    capacity: usize,
) -> Result<Decision, DeploymentError> {
    if let Some(op) = &req.operation {
        if let Some(replay) = replay(catalog, req, op)? {
            return Ok(replay);
        }
    }
    if req.compiled_at != catalog.generation {
        return Err(DeploymentError::StaleRouteGeneration {
            compiled: req.compiled_at,
            live: catalog.generation,
        });
    }
    let tenant = req.tenant.as_deref();
    let decided = match &req.mutation {
        Mutation::Apply { manifest, expected } => apply(catalog, tenant, manifest, *expected)?,
        Mutation::ApplyMany { manifests } => apply_many(catalog, tenant, manifests)?,
        Mutation::Delete { id, expected } => delete(catalog, tenant, id, *expected)?,
        Mutation::PublishSnapshot => publish(catalog)?,
    };
    Ok(retain(decided, req, capacity.max(1)))
}

/// The exact replay of a retained operation, a refusal for a reused or
/// possibly forgotten one, or `None` to decide it afresh.
fn replay(
    catalog: &Catalog,
    req: &Request,
    op: &Operation,
) -> Result<Option<Decision>, DeploymentError> {
    let ring = &catalog.receipts;
    if let Some(r) = ring
        .entries
        .iter()
        .find(|r| r.actor == op.actor && r.id == op.id)
    {
        if r.observed != op.observed
            || r.tenant != req.tenant
            || r.mutation != normalized(&req.mutation)
        {
            return Err(DeploymentError::OperationConflict(op.id.clone()));
        }
        return Ok(Some(Decision {
            next: None,
            receipt: r.receipt.clone(),
            replayed: true,
        }));
    }
    if op.observed < ring.floor || op.observed > catalog.generation {
        return Err(DeploymentError::OperationExpired(op.id.clone()));
    }
    Ok(None)
}

/// The mutation with its manifests normalized (so a replay compares what
/// was installed, not the caller's spelling).
fn normalized(m: &Mutation) -> Mutation {
    match m {
        Mutation::Apply { manifest, expected } => Mutation::Apply {
            manifest: Box::new(
                manifest
                    .as_ref()
                    .clone()
                    .validate()
                    .unwrap_or_else(|_| manifest.as_ref().clone()),
            ),
            expected: *expected,
        },
        Mutation::ApplyMany { manifests } => Mutation::ApplyMany {
            manifests: manifests
                .iter()
                .map(|m| m.clone().validate().unwrap_or_else(|_| m.clone()))
                .collect(),
        },
        other => other.clone(),
    }
}

/// Records a managed operation's receipt in the next catalog's ring.
fn retain(mut decided: Decision, req: &Request, capacity: usize) -> Decision {
    let (Some(op), Some(next)) = (&req.operation, decided.next.as_mut()) else {
        return decided;
    };
    let ring = &mut next.receipts;
    ring.entries.push(Retained {
        actor: op.actor.clone(),
        id: op.id.clone(),
        observed: op.observed,
        tenant: req.tenant.clone(),
        mutation: normalized(&req.mutation),
        receipt: decided.receipt.clone(),
    });
    while ring.entries.len() > capacity {
        let evicted = ring.entries.remove(0);
        ring.floor = ring.floor.max(evicted.receipt.catalog_generation());
    }
    decided
}

fn next_generation(catalog: &Catalog) -> Result<u64, DeploymentError> {
    catalog
        .generation
        .checked_add(1)
        .ok_or(DeploymentError::GenerationExhausted)
}

/// Scope rules for one manifest: the caller's tenant, and an existing id
/// keeps its tenant, namespace and service.
fn check_scope(
    catalog: &Catalog,
    tenant: Option<&str>,
    m: &DeploymentManifest,
) -> Result<(), DeploymentError> {
    let foreign = |tenant: &str| DeploymentError::TenantMismatch {
        id: m.id.clone(),
        tenant: tenant.to_owned(),
    };
    if let Some(t) = tenant {
        if m.tenant != t {
            return Err(foreign(t));
        }
    }
    if let Some(old) = catalog.objects.get(&m.id) {
        let o = &old.manifest;
        if o.tenant != m.tenant {
            return Err(foreign(&m.tenant));
        }
        let field = if o.namespace != m.namespace {
            "namespace"
        } else if o.service != m.service {
            "service"
        } else {
            return Ok(());
        };
        return Err(DeploymentError::ScopeChange {
            id: m.id.clone(),
            field,
        });
    }
    Ok(())
}

fn check_expected(
    id: &str,
    live: Option<&VersionedDeployment>,
    expected: Option<u64>,
) -> Result<(), DeploymentError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let live = live.map(|d| d.generation);
    if live.unwrap_or(0) == expected {
        return Ok(());
    }
    Err(DeploymentError::GenerationConflict {
        id: id.to_owned(),
        expected,
        live,
    })
}

fn apply(
    catalog: &Catalog,
    tenant: Option<&str>,
    manifest: &DeploymentManifest,
    expected: Option<u64>,
) -> Result<Decision, DeploymentError> {
    let manifest = manifest.clone().validate()?;
    check_scope(catalog, tenant, &manifest)?;
    check_expected(&manifest.id, catalog.objects.get(&manifest.id), expected)?;
    install(catalog, vec![manifest])
}

fn apply_many(
    catalog: &Catalog,
    tenant: Option<&str>,
    manifests: &[DeploymentManifest],
) -> Result<Decision, DeploymentError> {
    let mut seen = BTreeSet::new();
    let mut valid = Vec::with_capacity(manifests.len().min(MAX_DEPLOYMENTS));
    for m in manifests {
        let m = m.clone().validate()?;
        if !seen.insert(m.id.clone()) {
            return Err(DeploymentError::DuplicateId(m.id));
        }
        check_scope(catalog, tenant, &m)?;
        valid.push(m);
    }
    if valid.is_empty() {
        return Ok(Decision {
            next: None,
            receipt: Receipt::Unchanged {
                catalog_generation: catalog.generation,
            },
            replayed: false,
        });
    }
    install(catalog, valid)
}

/// Installs `manifests` (valid, distinct ids) under one new stamp.
fn install(
    catalog: &Catalog,
    manifests: Vec<DeploymentManifest>,
) -> Result<Decision, DeploymentError> {
    let stamp = next_generation(catalog)?;
    let mut next = catalog.clone();
    next.generation = stamp;
    let mut installed = Vec::with_capacity(manifests.len());
    for manifest in manifests {
        let record = VersionedDeployment {
            manifest,
            generation: stamp,
        };
        next.objects
            .insert(record.manifest.id.clone(), record.clone());
        installed.push(record);
    }
    if next.objects.len() > MAX_DEPLOYMENTS {
        return Err(DeploymentError::TooManyDeployments(MAX_DEPLOYMENTS));
    }
    installed.sort_by(|a, b| a.manifest.id.cmp(&b.manifest.id));
    Ok(Decision {
        next: Some(next),
        receipt: Receipt::Applied {
            deployments: installed,
            catalog_generation: stamp,
        },
        replayed: false,
    })
}

fn delete(
    catalog: &Catalog,
    tenant: Option<&str>,
    id: &str,
    expected: Option<u64>,
) -> Result<Decision, DeploymentError> {
    let live = catalog
        .get(tenant, id)
        .ok_or_else(|| DeploymentError::NotFound(id.to_owned()))?;
    check_expected(id, Some(live), expected)?;
    let stamp = next_generation(catalog)?;
    let mut next = catalog.clone();
    next.generation = stamp;
    let deployment = next
        .objects
        .remove(id)
        .ok_or_else(|| DeploymentError::NotFound(id.to_owned()))?;
    Ok(Decision {
        next: Some(next),
        receipt: Receipt::Deleted {
            deployment: Box::new(deployment),
            catalog_generation: stamp,
        },
        replayed: false,
    })
}

fn publish(catalog: &Catalog) -> Result<Decision, DeploymentError> {
    let stamp = next_generation(catalog)?;
    let mut next = catalog.clone();
    next.generation = stamp;
    Ok(Decision {
        next: Some(next),
        receipt: Receipt::Published {
            catalog_generation: stamp,
        },
        replayed: false,
    })
}
