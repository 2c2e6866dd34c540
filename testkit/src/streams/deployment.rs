//! The deployment-catalog stream checker ([`custos_core::deployment::state::decide`],
//! [`custos_core::deployment::route::compile`], [`custos_core::deployment::page::page`]
//! and [`DeploymentManifest::decode`]), shared by the fuzz target
//! (`fuzz/fuzz_targets/deployment.rs`), the property tests
//! (`core/tests/deployment_props.rs`) and the corpus replay
//! (`core/tests/deployment_corpus.rs`).
//!
//! A stream of small operations picks its manifests from a fixed universe
//! (five ids, one of them reserved and one malformed; two tenants; two
//! services; an optional namespace; six releases, among them one with
//! another schema for the same contract, one unreadable and one exporting
//! a function twice; valid and invalid weights) and becomes real
//! [`Request`]s: scoped and unscoped, with every kind of expected
//! generation, stale or current compilation generations, and managed
//! operations of two actors. After every step the checker checks rules
//! stated independently of how `decide` works:
//!
//! - the next catalog passes [`Catalog::check`];
//! - the catalog generation grows by exactly one on a published decision
//!   and not otherwise;
//! - a receipt equals what the next catalog holds, objects outside it are
//!   untouched, and a replay returns the receipt the operation first got;
//! - object stamps only grow and never pass the catalog generation;
//! - a published decision honoured the caller's precondition, compiled
//!   generation and tenant scope;
//! - a managed operation commits at most once (an old create never runs
//!   again after a later delete);
//! - compiling the next catalog succeeds or refuses with a typed error,
//!   fetching each release at most once; a named route selects only its
//!   deployment and a default route only a deployment of its scope;
//! - each tenant's pages list its ids in ascending order, and a token of
//!   an older generation is expired;
//! - [`DeploymentManifest::decode`] of arbitrary bytes never panics, and
//!   anything it accepts re-decodes from its canonical bytes to the same
//!   manifest.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::{violation, Violation};
use custos_core::deployment::manifest::{
    Availability, DeploymentManifest, Placement, ResourceBudgets,
};
use custos_core::deployment::page::{self, PageIndex, PageRequest, MAX_PAGE_BYTES};
use custos_core::deployment::route::{self, ReleaseFacts, Standing, Target};
use custos_core::deployment::state::{
    decide, Catalog, Decision, Mutation, Operation, Receipt, Request,
};
use custos_core::deployment::DeploymentError;
use custos_core::release::contract::{Contract, Function, Interface, Param, ValType};
use custos_core::release::Sha256;

/// The decision function of the desired state, as the checker takes it (a
/// mutant can be passed to show the checker catches it).
pub type DeploymentDecide = fn(&Catalog, &Request) -> Result<Decision, DeploymentError>;

/// A manifest picked from the checker's universe: each field an index
/// taken modulo its universe's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Pick {
    /// Index into [`IDS`].
    pub id: u8,
    /// Index into [`TENANTS`].
    pub tenant: u8,
    /// Odd: the namespace `prod`; even: none.
    pub namespace: u8,
    /// Index into [`SERVICES`].
    pub service: u8,
    /// Index of the release (0..6).
    pub release: u8,
    /// Index into [`WEIGHTS`].
    pub weight: u8,
    /// Bits 0 and 1: which of two grants; bit 2: listed in reverse order.
    pub grants: u8,
}

/// One step of a deployment-catalog stream.
///
/// `scope` chooses the caller's tenant (0: unscoped, 1: `acme`, 2: `beta`,
/// modulo 3); `stale` compiles at another generation than the live one;
/// `managed` below 128 is no managed operation, otherwise one of four
/// operation ids of one of two actors, observing the live generation or
/// generation 0. `expected` chooses the precondition modulo 4: none,
/// `Some(0)`, the live stamp (1 when absent), the live stamp plus one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum DeploymentOp {
    /// Apply one manifest.
    Apply {
        /// The manifest.
        pick: Pick,
        /// The precondition selector.
        expected: u8,
        /// The caller's tenant selector.
        scope: u8,
        /// Compile at a stale generation.
        stale: bool,
        /// The managed-operation selector.
        managed: u8,
    },
    /// Apply a batch: `pick`, then for each set bit `i` of `mask` (bits
    /// 0..4) `pick` with id `i` (bit 4: `pick` itself twice).
    ApplyMany {
        /// The first manifest; the others vary its id.
        pick: Pick,
        /// Which further ids are in the batch; 0 with `empty`: none.
        mask: u8,
        /// Send an empty batch.
        empty: bool,
        /// The caller's tenant selector.
        scope: u8,
        /// Compile at a stale generation.
        stale: bool,
        /// The managed-operation selector.
        managed: u8,
    },
    /// Delete one id.
    Delete {
        /// Index into [`IDS`].
        id: u8,
        /// The precondition selector.
        expected: u8,
        /// The caller's tenant selector.
        scope: u8,
        /// Compile at a stale generation.
        stale: bool,
        /// The managed-operation selector.
        managed: u8,
    },
    /// A snapshot-only publication.
    Publish {
        /// Compile at a stale generation.
        stale: bool,
        /// The managed-operation selector.
        managed: u8,
    },
    /// The stored catalog is reopened `distance % 4` publications short of
    /// exhaustion (as if many publications had happened meanwhile).
    Jump {
        /// How far below `u64::MAX`.
        distance: u8,
    },
    /// Decode the picked manifest's JSON with one byte overwritten.
    Decode {
        /// The manifest.
        pick: Pick,
        /// Where (modulo the document's length).
        at: u16,
        /// The byte written there.
        byte: u8,
    },
}

/// The deployment ids: `default` is reserved, `-bad` is not an identifier.
pub const IDS: [&str; 6] = ["blue", "green", "red", "white", "default", "-bad"];
/// The tenants.
pub const TENANTS: [&str; 2] = ["acme", "beta"];
/// The services.
pub const SERVICES: [&str; 2] = ["api", "web"];
/// The route weights, two of them invalid.
pub const WEIGHTS: [u32; 7] = [1, 2, 3, 10_000, 0, 10_001, 5_000];
const GRANTS: [&str; 2] = ["kv:read", "kv:write"];
const ACTORS: [&str; 2] = ["alice", "bob"];
const RELEASES: u8 = 6;

/// The digest of release `i` of the universe.
pub fn release(i: u8) -> Sha256 {
    Sha256::of(&[b'r', i % RELEASES])
}

fn function(name: &str, ty: ValType) -> Function {
    Function {
        docs: None,
        name: name.to_owned(),
        params: vec![Param {
            name: "key".to_owned(),
            ty,
        }],
        results: vec![ValType::U64],
    }
}

fn kv(get: ValType, put: &str) -> Contract {
    Contract {
        interfaces: vec![Interface {
            docs: None,
            name: "kv".to_owned(),
            functions: vec![function("get", get), function(put, ValType::String)],
        }],
    }
}

/// The universe's release catalog: 0 and 1 export `kv` {get, put} alike,
/// 2 exports `kv` with another schema for `get`, 3 exports `blob` {read},
/// 4 cannot be read, 5 exports `kv` with `get` twice.
pub fn contract_of(i: u8) -> Result<Contract, String> {
    match i % RELEASES {
        0 | 1 => Ok(kv(ValType::String, "put")),
        2 => Ok(kv(ValType::U32, "put")),
        3 => Ok(Contract {
            interfaces: vec![Interface {
                docs: None,
                name: "blob".to_owned(),
                functions: vec![function("read", ValType::String)],
            }],
        }),
        4 => Err("release 4 is unreadable".to_owned()),
        _ => Ok(kv(ValType::String, "get")),
    }
}

/// The tenant that published release `i`: even releases are `acme`'s, odd
/// ones `beta`'s, so either tenant's deployments meet releases of both.
pub fn owner_of(i: u8) -> &'static str {
    TENANTS[usize::from(i % RELEASES) % TENANTS.len()]
}

/// What the universe's release catalog reports of release `i`: its owner
/// ([`owner_of`]) and its contract ([`contract_of`]); an unreadable
/// release is reported as such.
pub fn facts_of(i: u8) -> Result<ReleaseFacts, String> {
    let standing = match contract_of(i) {
        Ok(c) => Standing::Eligible(c),
        Err(e) => Standing::Unreadable(e),
    };
    Ok(ReleaseFacts {
        owner: Some(owner_of(i).to_owned()),
        standing,
    })
}

/// The manifest a pick stands for (not necessarily valid).
pub fn manifest(p: &Pick) -> DeploymentManifest {
    let mut grants: Vec<String> = GRANTS
        .iter()
        .enumerate()
        .filter(|(i, _)| p.grants & (1 << i) != 0)
        .map(|(_, g)| (*g).to_owned())
        .collect();
    if p.grants & 4 != 0 {
        grants.reverse();
    }
    DeploymentManifest {
        id: IDS[usize::from(p.id) % IDS.len()].to_owned(),
        tenant: TENANTS[usize::from(p.tenant) % TENANTS.len()].to_owned(),
        namespace: (p.namespace % 2 == 1).then(|| "prod".to_owned()),
        service: SERVICES[usize::from(p.service) % SERVICES.len()].to_owned(),
        release: release(p.release),
        route_weight: WEIGHTS[usize::from(p.weight) % WEIGHTS.len()],
        grants,
        budgets: ResourceBudgets::default(),
        placement: Placement::default(),
        availability: Availability::default(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

fn scope(s: u8) -> Option<String> {
    match s % 3 {
        0 => None,
        i => Some(TENANTS[usize::from(i - 1)].to_owned()),
    }
}

fn expected(e: u8, live: Option<u64>) -> Option<u64> {
    match e % 4 {
        0 => None,
        1 => Some(0),
        2 => Some(live.unwrap_or(1)),
        _ => Some(live.unwrap_or(0).saturating_add(1)),
    }
}

fn operation(managed: u8, catalog: &Catalog) -> Option<Operation> {
    (managed >= 128).then(|| Operation {
        actor: ACTORS[usize::from((managed >> 2) & 1)].to_owned(),
        id: format!("op-{}", managed & 3),
        observed: if managed & 8 != 0 {
            0
        } else {
            catalog.generation
        },
    })
}

fn compiled_at(stale: bool, catalog: &Catalog) -> u64 {
    match (stale, catalog.generation) {
        (false, g) => g,
        (true, 0) => 1,
        (true, g) => g - 1,
    }
}

fn batch(pick: &Pick, mask: u8, empty: bool) -> Vec<DeploymentManifest> {
    if empty && mask & 0x0f == 0 {
        return Vec::new();
    }
    let first = manifest(pick);
    let mut out = vec![first.clone()];
    for i in 0..4u8 {
        if mask & (1 << i) != 0 && usize::from(i) != usize::from(pick.id) % IDS.len() {
            out.push(manifest(&Pick { id: i, ..*pick }));
        }
    }
    if mask & 0x10 != 0 {
        out.push(first);
    }
    out
}

/// The request an operation stands for against `catalog`; `None` for the
/// operations that are not requests ([`DeploymentOp::Jump`],
/// [`DeploymentOp::Decode`]).
pub fn request(op: &DeploymentOp, catalog: &Catalog) -> Option<Request> {
    let (tenant, mutation, stale, managed) = match *op {
        DeploymentOp::Apply {
            pick,
            expected: e,
            scope: s,
            stale,
            managed,
        } => {
            let m = manifest(&pick);
            let live = catalog.objects.get(&m.id).map(|d| d.generation);
            let mutation = Mutation::Apply {
                manifest: Box::new(m),
                expected: expected(e, live),
            };
            (scope(s), mutation, stale, managed)
        }
        DeploymentOp::ApplyMany {
            pick,
            mask,
            empty,
            scope: s,
            stale,
            managed,
        } => {
            let manifests = batch(&pick, mask, empty);
            (scope(s), Mutation::ApplyMany { manifests }, stale, managed)
        }
        DeploymentOp::Delete {
            id,
            expected: e,
            scope: s,
            stale,
            managed,
        } => {
            let id = IDS[usize::from(id) % IDS.len()].to_owned();
            let live = catalog.objects.get(&id).map(|d| d.generation);
            let expected = expected(e, live);
            (scope(s), Mutation::Delete { id, expected }, stale, managed)
        }
        DeploymentOp::Publish { stale, managed } => {
            (None, Mutation::PublishSnapshot, stale, managed)
        }
        DeploymentOp::Jump { .. } | DeploymentOp::Decode { .. } => return None,
    };
    Some(Request {
        tenant,
        mutation,
        compiled_at: compiled_at(stale, catalog),
        operation: operation(managed, catalog),
    })
}

/// What the checker remembers across steps.
#[derive(Default)]
struct Memory {
    /// The receipt each managed operation last committed with, by (actor,
    /// id): what a replay returns.
    receipts: BTreeMap<(String, String), Receipt>,
    /// Every managed operation committed, by (actor, id, observed
    /// generation): none commits twice.
    commits: BTreeSet<(String, String, u64)>,
    /// A continuation token issued at the current generation, with its
    /// tenant.
    token: Option<(String, String)>,
    /// The carried manifests whose canonical round trip has been checked.
    round_tripped: HashSet<DeploymentManifest>,
}

/// The instance fingerprint the checker's pages are issued under.
const INSTANCE: u64 = 0x5eed;

/// Decodes `bytes` as a manifest: never a panic, and an accepted manifest
/// re-decodes from its canonical bytes to itself (with the same canonical
/// bytes and revision).
pub fn check_manifest_decode(step: usize, bytes: &[u8]) -> Result<(), Violation> {
    let Ok(m) = DeploymentManifest::decode(bytes) else {
        return Ok(());
    };
    let canonical = m.canonical();
    match DeploymentManifest::decode(&canonical) {
        Ok(again) if again == m && again.canonical() == canonical => Ok(()),
        other => Err(violation(
            "an accepted manifest re-decodes from its canonical bytes",
            step,
            format!("{m:?} -> {other:?}"),
        )),
    }
}

/// The manifests a request carries.
fn carried(req: &Request) -> Vec<&DeploymentManifest> {
    match &req.mutation {
        Mutation::Apply { manifest, .. } => vec![manifest.as_ref()],
        Mutation::ApplyMany { manifests } => manifests.iter().collect(),
        Mutation::Delete { .. } | Mutation::PublishSnapshot => Vec::new(),
    }
}

/// The objects a published decision touched.
fn touched(receipt: &Receipt) -> Vec<&custos_core::deployment::state::VersionedDeployment> {
    match receipt {
        Receipt::Applied { deployments, .. } => deployments.iter().collect(),
        Receipt::Deleted { deployment, .. } => vec![deployment.as_ref()],
        Receipt::Published { .. } | Receipt::Unchanged { .. } => Vec::new(),
    }
}

/// The receipt holds exactly what `next` holds; nothing else changed.
fn check_receipt(
    step: usize,
    prev: &Catalog,
    next: &Catalog,
    receipt: &Receipt,
) -> Result<(), Violation> {
    let bad = |detail: String| {
        Err(violation(
            "a receipt equals what the next catalog holds",
            step,
            detail,
        ))
    };
    if receipt.catalog_generation() != next.generation {
        return bad(format!("{receipt:?} for generation {}", next.generation));
    }
    let mut rest_prev = prev.objects.clone();
    let mut rest_next = next.objects.clone();
    match receipt {
        Receipt::Applied { deployments, .. } => {
            if deployments.is_empty() {
                return bad("an apply receipt installed nothing".to_owned());
            }
            for d in deployments {
                if next.objects.get(&d.manifest.id) != Some(d) || d.generation != next.generation {
                    return bad(format!("{d:?} is not what the catalog holds"));
                }
                rest_prev.remove(&d.manifest.id);
                rest_next.remove(&d.manifest.id);
            }
        }
        Receipt::Deleted { deployment, .. } => {
            let id = &deployment.manifest.id;
            if prev.objects.get(id) != Some(deployment.as_ref()) || next.objects.contains_key(id) {
                return bad(format!("{deployment:?} was not the deleted record"));
            }
            rest_prev.remove(id);
        }
        Receipt::Published { .. } => {}
        Receipt::Unchanged { .. } => return bad("a published decision is unchanged".to_owned()),
    }
    if rest_prev != rest_next {
        return Err(violation(
            "objects outside a receipt are untouched",
            step,
            format!("{receipt:?}"),
        ));
    }
    Ok(())
}

/// A published decision honoured the request: its compiled generation,
/// its precondition and its tenant scope.
fn check_honoured(
    step: usize,
    prev: &Catalog,
    req: &Request,
    receipt: &Receipt,
) -> Result<(), Violation> {
    if req.compiled_at != prev.generation {
        return Err(violation(
            "a stale compilation never commits",
            step,
            format!("compiled at {} over {}", req.compiled_at, prev.generation),
        ));
    }
    let (id, expected) = match &req.mutation {
        Mutation::Apply { manifest, expected } => (manifest.id.as_str(), *expected),
        Mutation::Delete { id, expected } => (id.as_str(), *expected),
        Mutation::ApplyMany { .. } | Mutation::PublishSnapshot => ("", None),
    };
    if let Some(e) = expected {
        let live = prev.objects.get(id).map_or(0, |d| d.generation);
        if live != e {
            return Err(violation(
                "a stale precondition never commits",
                step,
                format!("{id}: expected {e}, live {live}"),
            ));
        }
    }
    if let Some(t) = &req.tenant {
        if let Some(d) = touched(receipt)
            .into_iter()
            .find(|d| d.manifest.tenant != *t)
        {
            return Err(violation(
                "a scoped request touches only its tenant",
                step,
                format!("{t} touched {:?}", d.manifest.id),
            ));
        }
    }
    Ok(())
}

/// The decision's own rules; returns the catalog after it.
fn check_decision(
    step: usize,
    prev: &Catalog,
    req: &Request,
    d: Decision,
    memory: &mut Memory,
) -> Result<Catalog, Violation> {
    let key = req
        .operation
        .as_ref()
        .map(|o| (o.actor.clone(), o.id.clone()));
    if d.replayed {
        let first = key.as_ref().and_then(|k| memory.receipts.get(k));
        if d.next.is_some() || first != Some(&d.receipt) {
            return Err(violation(
                "a replay returns the receipt the operation first got",
                step,
                format!("{req:?}: {:?} vs {first:?}", d.receipt),
            ));
        }
        return Ok(prev.clone());
    }
    let Some(next) = d.next else {
        let empty =
            matches!(&req.mutation, Mutation::ApplyMany { manifests } if manifests.is_empty());
        if !empty
            || d.receipt
                != (Receipt::Unchanged {
                    catalog_generation: prev.generation,
                })
        {
            return Err(violation(
                "only an empty batch publishes nothing",
                step,
                format!("{req:?}: {:?}", d.receipt),
            ));
        }
        return Ok(prev.clone());
    };
    if Some(next.generation) != prev.generation.checked_add(1) {
        return Err(violation(
            "a publication advances the generation by exactly one",
            step,
            format!("{} -> {}", prev.generation, next.generation),
        ));
    }
    if let Err(e) = next.check() {
        return Err(violation("Catalog::check holds", step, e.to_owned()));
    }
    check_receipt(step, prev, &next, &d.receipt)?;
    check_honoured(step, prev, req, &d.receipt)?;
    for (id, old) in &prev.objects {
        if next
            .objects
            .get(id)
            .is_some_and(|n| n.generation < old.generation)
        {
            return Err(violation("stamps only grow", step, id.clone()));
        }
    }
    if let Some(op) = &req.operation {
        let once = (op.actor.clone(), op.id.clone(), op.observed);
        if !memory.commits.insert(once) {
            return Err(violation(
                "a managed operation commits at most once",
                step,
                format!("{req:?}"),
            ));
        }
        memory
            .receipts
            .insert((op.actor.clone(), op.id.clone()), d.receipt);
    }
    Ok(next)
}

/// Compiling `catalog` succeeds or refuses with a typed error, fetching
/// each release at most once; a named route selects only its deployment,
/// a default route only a deployment of its scope.
fn check_compile(step: usize, catalog: &Catalog) -> Result<(), Violation> {
    let calls = RefCell::new(Vec::new());
    let source = |r: &Sha256| {
        calls.borrow_mut().push(*r);
        (0..RELEASES)
            .find(|i| release(*i) == *r)
            .map_or_else(|| Err("unknown release".to_owned()), facts_of)
            .map(Some)
    };
    let compiled = route::compile(catalog, &source);
    let mut fetched = calls.into_inner();
    let n = fetched.len();
    fetched.sort_unstable();
    fetched.dedup();
    if fetched.len() != n {
        return Err(violation(
            "each release is fetched at most once per compilation",
            step,
            format!("{n} fetches"),
        ));
    }
    let Ok(snapshot) = compiled else {
        return Ok(());
    };
    if snapshot.generation != catalog.generation || snapshot.records.len() != catalog.objects.len()
    {
        return Err(violation(
            "a snapshot compiles the whole catalog",
            step,
            format!("{}", snapshot.generation),
        ));
    }
    for d in catalog.objects.values() {
        check_routes(step, catalog, &snapshot, d)?;
    }
    Ok(())
}

/// A deployment's named and default routes resolve within their scope,
/// and only to releases of the route's tenant.
fn check_routes(
    step: usize,
    catalog: &Catalog,
    snapshot: &route::Snapshot,
    d: &custos_core::deployment::state::VersionedDeployment,
) -> Result<(), Violation> {
    let m = &d.manifest;
    for route in [None, Some(m.id.clone())] {
        let target = Target {
            tenant: m.tenant.clone(),
            service: m.service.clone(),
            route: route.clone(),
            contract: "kv".to_owned(),
            function: "get".to_owned(),
        };
        let resolved = match snapshot.resolve(&target, Some(m.id.as_str())) {
            Ok(r) => r,
            Err(DeploymentError::IncompatibleContract { .. }) => continue,
            Err(e) => {
                return Err(violation(
                    "an existing route resolves",
                    step,
                    format!("{target:?}: {e}"),
                ))
            }
        };
        let chosen = catalog.objects.get(&resolved.deployment_id);
        let ok = match (&route, chosen) {
            (Some(id), _) => resolved.deployment_id == *id && resolved.revision == m.revision_id(),
            (None, Some(c)) => {
                c.manifest.tenant == m.tenant
                    && c.manifest.service == m.service
                    && c.generation == resolved.generation
                    && c.manifest.release == resolved.release
            }
            (None, None) => false,
        };
        let own = (0..RELEASES)
            .find(|i| release(*i) == resolved.release)
            .is_some_and(|i| owner_of(i) == target.tenant);
        if !own {
            return Err(violation(
                "a route of tenant T resolves only to T's releases",
                step,
                format!("{target:?}: {resolved:?}"),
            ));
        }
        if !ok || resolved.catalog_generation != catalog.generation {
            return Err(violation(
                "a route selects only within its scope",
                step,
                format!("{target:?}: {resolved:?}"),
            ));
        }
    }
    Ok(())
}

/// Each tenant's pages list its ids in ascending order; a token of the
/// previous catalog is valid on the same generation and expired on a newer
/// one; remembers one token of this generation.
fn check_pages(
    step: usize,
    prev: &Catalog,
    catalog: &Catalog,
    memory: &mut Memory,
) -> Result<(), Violation> {
    let index = PageIndex::build(catalog);
    if let Some((tenant, token)) = memory.token.take() {
        let req = PageRequest {
            tenant,
            service: None,
            page_size: 1,
            page_token: Some(token),
        };
        let got = page::page(catalog, &index, &req, INSTANCE, MAX_PAGE_BYTES);
        let ok = if catalog.generation == prev.generation {
            got.is_ok()
        } else {
            got == Err(DeploymentError::PageTokenExpired)
        };
        if !ok {
            return Err(violation(
                "a token of an older generation never yields a page",
                step,
                format!("{got:?}"),
            ));
        }
    }
    let size = u32::try_from(step % 3).unwrap_or(0) + 1;
    for tenant in TENANTS {
        let want: Vec<&String> = catalog
            .objects
            .values()
            .filter(|d| d.manifest.tenant == tenant)
            .map(|d| &d.manifest.id)
            .collect();
        let mut got = Vec::new();
        let mut token = None;
        loop {
            let req = PageRequest {
                tenant: tenant.to_owned(),
                service: None,
                page_size: size,
                page_token: token,
            };
            let p = page::page(catalog, &index, &req, INSTANCE, MAX_PAGE_BYTES)
                .map_err(|e| violation("a listing pages to its end", step, e.to_string()))?;
            got.extend(p.deployments.into_iter().map(|d| d.manifest.id));
            token = p.next_page_token;
            match &token {
                Some(t) if got.len() < want.len() => {
                    memory
                        .token
                        .get_or_insert_with(|| (tenant.to_owned(), t.clone()));
                }
                _ => break,
            }
        }
        if got.iter().collect::<Vec<_>>() != want {
            return Err(violation(
                "pages list a tenant's ids in ascending order",
                step,
                format!("{got:?} vs {want:?}"),
            ));
        }
    }
    Ok(())
}

fn check_decode_op(step: usize, pick: &Pick, at: u16, byte: u8) -> Result<(), Violation> {
    let mut doc = serde_json::to_vec(&manifest(pick)).unwrap_or_default();
    let len = doc.len();
    if let Some(slot) = doc.get_mut(usize::from(at) % len.max(1)) {
        *slot = byte;
    }
    check_manifest_decode(step, &doc)
}

/// One step: decide, then every rule; returns the catalog after it.
fn check_step(
    decide: DeploymentDecide,
    step: usize,
    prev: &Catalog,
    op: &DeploymentOp,
    memory: &mut Memory,
) -> Result<Catalog, Violation> {
    let req = match (op, request(op, prev)) {
        (_, Some(req)) => req,
        (DeploymentOp::Jump { distance }, None) => {
            let mut next = prev.clone();
            next.generation = next.generation.max(u64::MAX - u64::from(distance % 4));
            check_pages(step, prev, &next, memory)?;
            return Ok(next);
        }
        (DeploymentOp::Decode { pick, at, byte }, None) => {
            check_decode_op(step, pick, *at, *byte)?;
            return Ok(prev.clone());
        }
        (_, None) => return Ok(prev.clone()),
    };
    // Each distinct manifest's round trip is checked once per stream: the
    // check is a pure function of the manifest, and the universe is small.
    if let Some(first) = carried(&req).first() {
        if memory.round_tripped.insert((*first).clone()) {
            if let Ok(valid) = (*first).clone().validate() {
                check_manifest_decode(step, &valid.canonical())?;
            }
        }
    }
    let next = match decide(prev, &req) {
        Ok(d) => check_decision(step, prev, &req, d, memory)?,
        Err(_) => prev.clone(),
    };
    // An unchanged catalog compiles and pages as before.
    if next != *prev {
        check_compile(step, &next)?;
        check_pages(step, prev, &next, memory)?;
    }
    Ok(next)
}

/// Runs `ops` from an empty catalog, checking every rule after every step.
pub fn check_deployment_stream(ops: &[DeploymentOp]) -> Result<(), Violation> {
    check_deployment_stream_with(decide, ops)
}

/// [`check_deployment_stream`] with another decision function.
pub fn check_deployment_stream_with(
    decide: DeploymentDecide,
    ops: &[DeploymentOp],
) -> Result<(), Violation> {
    let mut catalog = Catalog::default();
    let mut memory = Memory::default();
    for (step, op) in ops.iter().enumerate() {
        catalog = check_step(decide, step, &catalog, op, &mut memory)?;
    }
    Ok(())
}

/// Runs `data` through [`DeploymentManifest::decode`] (as one document;
/// see [`check_manifest_decode`]), then decodes it as an operation stream
/// (with `arbitrary`) and runs [`check_deployment_stream`]. Undecodable
/// tails are ignored.
#[cfg(feature = "arbitrary")]
pub fn check_deployment_bytes(data: &[u8]) -> Result<(), Violation> {
    /// Streams longer than this are truncated: bounded work per input.
    const MAX_OPS: usize = 64;
    check_manifest_decode(0, data)?;
    check_deployment_stream(&super::decode_ops::<DeploymentOp>(data, MAX_OPS))
}
