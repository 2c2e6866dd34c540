//! The deployment catalog's conformance suite: versioned
//! desired state (object generations stamped by the publication that
//! accepted them, the expected-generation tables of apply and delete,
//! atomic batches, snapshot-only publications), tenant scope and immutable
//! deployment scope, refusals that change nothing, default and named
//! routes that never fall back, deterministic weighted selection over
//! ascending revisions, owned resolutions and pinned generations, bounded
//! ascending pages whose tokens expire with any publication, managed
//! operations replayed exactly, and the release rules checked before a
//! publication.
//!
//! Core holds the rules as pure functions ([`decide`](custos_core::deployment::state::decide),
//! [`route::compile`], [`page`](custos_core::deployment::page::page)), the port a repository implements,
//! [`DeploymentCatalog`], and [`MemoryDeployments`], the reference built on
//! those functions ([`memory`] makes one). A backend is built over the
//! suite's release catalog, [`FixtureReleases`]. A case fails on a
//! backend's own failure as on a wrong answer: it expects rule refusals
//! only ([`rule`]).
//!
//! Cases panic (via `assert!`) on a violation: they are test bodies. A case
//! that needs two repository instances calls the factory twice.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::Place;
use std::sync::Arc;

use custos_core::deployment::manifest::{
    Availability, DeploymentManifest, Placement, ResourceBudgets, RevisionId,
};
use custos_core::deployment::page::{Page, PageRequest};
use custos_core::deployment::route::{
    self, PinnedRoutes, ReleaseFacts, ReleaseSource, ResolvedRevision, Standing, Target,
    ATTR_DEPLOYMENT,
};
use custos_core::deployment::state::{Mutation, Operation, Receipt, Request, VersionedDeployment};
use custos_core::deployment::DeploymentError;
use custos_core::release::contract::{Contract, Function, Interface};
use custos_core::release::Sha256;

// ------------------------------------------------------------------ the port

pub use custos_core::deployment::memory::MemoryDeployments;
pub use custos_core::deployment::{DeploymentCatalog, Refusal};

/// The contract every greeter release exports.
pub const GREETER: &str = "greeter";

/// The release digest of fixture release `n`.
pub fn release(n: u8) -> Sha256 {
    Sha256::of(&[b'r', n])
}

fn function(name: &str) -> Function {
    Function {
        name: name.into(),
        docs: None,
        params: Vec::new(),
        results: Vec::new(),
    }
}

/// Tenant `beta`'s copy of release `n` (the same contract as [`release`]
/// `n`, published under `beta`).
pub fn beta_release(n: u8) -> Sha256 {
    Sha256::of(&[b'b', n])
}

/// Release `n` as tenant `tenant` deploys it: `beta`'s own copy for
/// `beta`, [`release`] `n` (tenant `acme`'s) otherwise.
pub fn release_of(tenant: &str, n: u8) -> Sha256 {
    if tenant == "beta" {
        beta_release(n)
    } else {
        release(n)
    }
}

/// The trusted-local release (published without a tenant): a `greeter`.
pub const LOCAL_RELEASE: u8 = 7;
/// Release 8 (and `beta`'s 8) is revoked.
pub const REVOKED_RELEASE: u8 = 8;
/// Release 10 (and `beta`'s 10) is retired.
pub const RETIRED_RELEASE: u8 = 10;
/// No release 9 exists, for any tenant.
pub const ABSENT_RELEASE: u8 = 9;

/// The suite's release catalog. Tenant `acme` published releases 1 to 6,
/// 8 and 10 ([`release`]); tenant `beta` published a copy of each
/// ([`beta_release`]). Releases 1 to 4 export `greeter` (`hello`, `bye`);
/// release 5 exports a `greeter` with other documentation (another schema
/// for the same contract id); release 6 exports `counter` (`incr`);
/// [`REVOKED_RELEASE`] is revoked and [`RETIRED_RELEASE`] retired.
/// [`LOCAL_RELEASE`] is a trusted-local `greeter`; nothing else is in the
/// catalog.
#[derive(Clone, Copy, Debug, Default)]
pub struct FixtureReleases;

/// The contract of fixture release `n`, if it exports one.
fn fixture_contract(n: u8) -> Option<Contract> {
    let interface = match n {
        1..=4 | LOCAL_RELEASE | REVOKED_RELEASE | RETIRED_RELEASE => Interface {
            name: GREETER.into(),
            docs: None,
            functions: vec![function("hello"), function("bye")],
        },
        5 => Interface {
            name: GREETER.into(),
            docs: Some("another schema".into()),
            functions: vec![function("hello"), function("bye")],
        },
        6 => Interface {
            name: "counter".into(),
            docs: None,
            functions: vec![function("incr")],
        },
        _ => return None,
    };
    Some(Contract {
        interfaces: vec![interface],
    })
}

impl ReleaseSource for FixtureReleases {
    fn release(&self, r: &Sha256) -> Result<Option<ReleaseFacts>, String> {
        let found = (1..=10).find_map(|n| {
            if *r == release(n) {
                Some((n, Some("acme")))
            } else if *r == beta_release(n) {
                Some((n, Some("beta")))
            } else {
                None
            }
        });
        let Some((n, mut owner)) = found else {
            return Ok(None);
        };
        let Some(contract) = fixture_contract(n) else {
            return Ok(None);
        };
        if n == LOCAL_RELEASE {
            if owner == Some("beta") {
                return Ok(None);
            }
            owner = None;
        }
        let standing = match n {
            REVOKED_RELEASE => Standing::Revoked,
            RETIRED_RELEASE => Standing::Retired,
            _ => Standing::Eligible(contract),
        };
        Ok(Some(ReleaseFacts {
            owner: owner.map(str::to_owned),
            standing,
        }))
    }
}

// ------------------------------------------------------- the memory backend

/// A catalog `catalog` with something that must live as long as it (its
/// temporary directory, its server): a factory returns one when the
/// catalog alone cannot own what it stands on. The port, by `catalog`'s.
#[derive(Debug)]
pub struct Guarded<D, G> {
    /// The catalog under test.
    pub catalog: D,
    /// Dropped after the catalog.
    pub guard: G,
}

impl<D: DeploymentCatalog, G> DeploymentCatalog for Guarded<D, G> {
    type Error = D::Error;

    fn mutate(&self, req: Request) -> Result<Receipt, D::Error> {
        self.catalog.mutate(req)
    }
    fn get(&self, tenant: &str, id: &str) -> Result<Option<VersionedDeployment>, D::Error> {
        self.catalog.get(tenant, id)
    }
    fn page(&self, req: &PageRequest) -> Result<Page, D::Error> {
        self.catalog.page(req)
    }
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, D::Error> {
        self.catalog.resolve(target, routing_key)
    }
    fn pin(&self) -> Result<PinnedRoutes, D::Error> {
        self.catalog.pin()
    }
    fn generation(&self) -> Result<u64, D::Error> {
        self.catalog.generation()
    }
}

/// The reference catalog, empty, over [`FixtureReleases`].
pub fn memory() -> MemoryDeployments {
    MemoryDeployments::over(Arc::new(FixtureReleases))
}

/// A place for the reference catalog: every open is
/// [`MemoryDeployments::reopen`] of the first (nothing in memory is
/// durable; the "reopen" keeps the installed catalog and is a new
/// instance, so earlier page tokens are foreign to it).
pub fn memory_place() -> impl Fn() -> MemoryDeployments {
    let first = memory();
    move || first.reopen()
}

// ------------------------------------------------------------------ helpers

/// A manifest of release 1, weight 1, no namespace.
pub fn manifest(id: &str, tenant: &str, service: &str) -> DeploymentManifest {
    DeploymentManifest {
        id: id.into(),
        tenant: tenant.into(),
        namespace: None,
        service: service.into(),
        release: release_of(tenant, 1),
        route_weight: 1,
        grants: Vec::new(),
        budgets: ResourceBudgets::default(),
        placement: Placement::default(),
        availability: Availability::default(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}

/// `manifest(id, "acme", "api")`.
pub fn acme(id: &str) -> DeploymentManifest {
    manifest(id, "acme", "api")
}

fn req(tenant: &str, mutation: Mutation) -> Request {
    Request {
        tenant: Some(tenant.into()),
        mutation,
        compiled_at: 0,
        operation: None,
    }
}

/// An apply of `m` scoped to its own tenant.
pub fn apply_req(m: DeploymentManifest, expected: Option<u64>) -> Request {
    let tenant = m.tenant.clone();
    req(
        &tenant,
        Mutation::Apply {
            manifest: Box::new(m),
            expected,
        },
    )
}

/// A delete of `id` scoped to `tenant`.
pub fn delete_req(tenant: &str, id: &str, expected: Option<u64>) -> Request {
    req(
        tenant,
        Mutation::Delete {
            id: id.into(),
            expected,
        },
    )
}

/// A batch apply scoped to `tenant`.
pub fn batch_req(tenant: &str, manifests: Vec<DeploymentManifest>) -> Request {
    req(tenant, Mutation::ApplyMany { manifests })
}

/// A snapshot-only publication.
pub fn publish_req() -> Request {
    Request {
        tenant: None,
        mutation: Mutation::PublishSnapshot,
        compiled_at: 0,
        operation: None,
    }
}

/// The receipt of an accepted mutation.
#[track_caller]
pub fn accepted<B: DeploymentCatalog>(b: &B, r: Request) -> Receipt {
    match b.mutate(r.clone()) {
        Ok(receipt) => receipt,
        Err(e) => panic!("{r:?} was refused: {e}"),
    }
}

/// The one record an accepted single apply installed.
#[track_caller]
pub fn applied<B: DeploymentCatalog>(b: &B, m: DeploymentManifest) -> VersionedDeployment {
    match accepted(b, apply_req(m, None)) {
        Receipt::Applied {
            mut deployments, ..
        } if deployments.len() == 1 => deployments.remove(0),
        other => panic!("an apply answered {other:?}"),
    }
}

/// The observable state of the tenants `tenants`: the generation and
/// every record, listed page by page.
#[track_caller]
pub fn observe<B: DeploymentCatalog>(b: &B, tenants: &[&str]) -> (u64, Vec<VersionedDeployment>) {
    let mut all = Vec::new();
    for t in tenants {
        all.extend(list(b, t, None, 1000));
    }
    (b.generation().unwrap(), all)
}

/// Every record of `tenant` (and `service`), following tokens.
#[track_caller]
pub fn list<B: DeploymentCatalog>(
    b: &B,
    tenant: &str,
    service: Option<&str>,
    page_size: u32,
) -> Vec<VersionedDeployment> {
    let mut out = Vec::new();
    let mut token = None;
    for _ in 0..1000 {
        let p = b
            .page(&page_req(tenant, service, page_size, token))
            .unwrap();
        out.extend(p.deployments);
        match p.next_page_token {
            Some(t) => token = Some(t),
            None => return out,
        }
    }
    panic!("a listing of {tenant} did not end");
}

/// A page request.
pub fn page_req(
    tenant: &str,
    service: Option<&str>,
    page_size: u32,
    page_token: Option<String>,
) -> PageRequest {
    PageRequest {
        tenant: tenant.into(),
        service: service.map(str::to_owned),
        page_size,
        page_token,
    }
}

/// Asserts `r` is refused with `reason` and changes nothing the tenants
/// `tenants` can observe.
#[track_caller]
pub fn refused<B: DeploymentCatalog>(b: &B, r: Request, reason: &str, tenants: &[&str]) {
    let before = observe(b, tenants);
    match b.mutate(r.clone()) {
        Ok(receipt) => panic!("{r:?} was accepted ({receipt:?}); want {reason}"),
        Err(e) => {
            let e = rule(e);
            assert_eq!(e.reason(), reason, "{r:?}: {e}");
        }
    }
    assert_eq!(observe(b, tenants), before, "a refusal changed the state");
}

/// The rule's refusal `e` is; a backend's own failure (an I/O error, an
/// uncertain commit) fails the case: the suite's cases fail only by rule.
#[track_caller]
pub fn rule<E: Refusal + std::fmt::Display>(e: E) -> DeploymentError {
    match e.refusal() {
        Some(r) => r.clone(),
        None => panic!("not a rule's refusal: {e}"),
    }
}

/// The reason of a refused read.
#[track_caller]
pub fn reason<T: std::fmt::Debug, E: Refusal + std::fmt::Display>(r: Result<T, E>) -> &'static str {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => rule(e).reason(),
    }
}

/// A target of `greeter.hello` in `tenant`/`service`, `route` (`None`:
/// default).
pub fn target(tenant: &str, service: &str, route: Option<&str>) -> Target {
    Target {
        tenant: tenant.into(),
        service: service.into(),
        route: route.map(str::to_owned),
        contract: GREETER.into(),
        function: "hello".into(),
    }
}

#[track_caller]
fn generation_of<B: DeploymentCatalog>(b: &B, tenant: &str, id: &str) -> u64 {
    b.get(tenant, id)
        .unwrap()
        .unwrap_or_else(|| panic!("{id} is absent"))
        .generation
}

#[track_caller]
fn revision(m: &DeploymentManifest) -> RevisionId {
    m.clone().validate().unwrap().revision_id()
}

// -------------------------------------------------------------------- cases

/// A fresh catalog is at generation 0, holds nothing, lists an empty page
/// without a token and resolves no route.
pub fn fresh_catalog_is_empty<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    assert_eq!(b.generation().unwrap(), 0);
    assert_eq!(b.get("acme", "blue").unwrap(), None);
    let p = b.page(&page_req("acme", None, 10, None)).unwrap();
    assert!(p.deployments.is_empty());
    assert_eq!(p.next_page_token, None);
    assert_eq!(p.catalog_generation, 0);
    assert_eq!(
        reason(b.resolve(&target("acme", "api", None), None)),
        "route-unavailable"
    );
    assert_eq!(b.pin().unwrap().generation(), 0);
}

/// Each accepted apply publishes once: its receipt is the exact normalized
/// record installed, stamped with the new catalog generation; an unrelated
/// apply leaves an object's stamp; an unchanged re-apply still advances it.
pub fn apply_stamps_each_accepted_apply<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    let mut blue = acme("blue");
    blue.grants = vec!["net".into(), "clock".into()];
    let r = accepted(&b, apply_req(blue.clone(), None));
    let normalized = blue.clone().validate().unwrap();
    let want = VersionedDeployment {
        manifest: normalized,
        generation: 1,
    };
    assert_eq!(
        r,
        Receipt::Applied {
            deployments: vec![want.clone()],
            catalog_generation: 1
        }
    );
    assert_eq!(b.get("acme", "blue").unwrap(), Some(want));
    assert_eq!(applied(&b, acme("green")).generation, 2);
    assert_eq!(generation_of(&b, "acme", "blue"), 1, "an unrelated apply");
    assert_eq!(applied(&b, blue).generation, 3, "an unchanged re-apply");
    assert_eq!(generation_of(&b, "acme", "blue"), 3);
    assert_eq!(generation_of(&b, "acme", "green"), 2);
    assert_eq!(b.generation().unwrap(), 3);
}

/// Apply under a precondition: `Some(0)` requires absence, `Some(g)` a live
/// object at exactly `g`; a stale caller gets a generation conflict and
/// nothing changes.
pub fn apply_expected_generation_table<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    applied(&b, acme("green"));
    let t = &["acme"];
    let conflict = "deployment-generation-conflict";
    refused(&b, apply_req(acme("blue"), Some(0)), conflict, t);
    refused(&b, apply_req(acme("green"), Some(1)), conflict, t);
    refused(&b, apply_req(acme("green"), Some(3)), conflict, t);
    refused(&b, apply_req(acme("white"), Some(2)), conflict, t);
    let e = rule(b.mutate(apply_req(acme("blue"), Some(0))).unwrap_err());
    assert_eq!(
        e,
        DeploymentError::GenerationConflict {
            id: "blue".into(),
            expected: 0,
            live: Some(1)
        }
    );
    assert!(e.retryable());
    accepted(&b, apply_req(acme("white"), Some(0)));
    assert_eq!(generation_of(&b, "acme", "white"), 3);
    accepted(&b, apply_req(acme("green"), Some(2)));
    assert_eq!(generation_of(&b, "acme", "green"), 4);
    assert_eq!(generation_of(&b, "acme", "blue"), 1);
}

/// Delete under a precondition: absence is not found whatever the
/// expectation, `Some(0)` on a live object conflicts, `Some(g)` needs
/// exactly `g`; the receipt carries the deleted record with its old stamp
/// and the generation that published the deletion; recreating the id gets
/// a newer stamp.
pub fn delete_expected_generation_table<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let green = applied(&b, acme("green"));
    let t = &["acme"];
    let conflict = "deployment-generation-conflict";
    refused(
        &b,
        delete_req("acme", "white", None),
        "deployment-not-found",
        t,
    );
    refused(
        &b,
        delete_req("acme", "white", Some(0)),
        "deployment-not-found",
        t,
    );
    refused(
        &b,
        delete_req("acme", "white", Some(7)),
        "deployment-not-found",
        t,
    );
    refused(&b, delete_req("acme", "blue", Some(0)), conflict, t);
    refused(&b, delete_req("acme", "green", Some(1)), conflict, t);
    let r = accepted(&b, delete_req("acme", "green", Some(2)));
    assert_eq!(
        r,
        Receipt::Deleted {
            deployment: Box::new(green),
            catalog_generation: 3
        }
    );
    assert_eq!(b.get("acme", "green").unwrap(), None);
    assert_eq!(b.generation().unwrap(), 3);
    refused(
        &b,
        delete_req("acme", "green", None),
        "deployment-not-found",
        t,
    );
    assert_eq!(applied(&b, acme("green")).generation, 4);
    accepted(&b, delete_req("acme", "blue", None));
    assert_eq!(list(&b, "acme", None, 10).len(), 1);
}

/// Invalid manifests and scope changes are refused and change nothing:
/// a weight outside 1..=10,000, the reserved id `default`, and an update
/// moving an existing id to another namespace or service.
pub fn refused_applies_leave_state_untouched<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let t = &["acme"];
    for w in [0, 10_001] {
        let mut m = acme("green");
        m.route_weight = w;
        refused(&b, apply_req(m, None), "invalid-route-weight", t);
    }
    refused(
        &b,
        apply_req(acme("default"), None),
        "reserved-deployment-id",
        t,
    );
    let mut moved = acme("blue");
    moved.namespace = Some("ns".into());
    refused(&b, apply_req(moved, None), "deployment-scope-immutable", t);
    let moved = manifest("blue", "acme", "web");
    refused(&b, apply_req(moved, None), "deployment-scope-immutable", t);
    assert_eq!(
        b.get("acme", "blue").unwrap().unwrap().manifest,
        acme("blue")
    );
    assert_eq!(b.get("acme", "green").unwrap(), None);
}

/// A batch installs every member under one new stamp (its receipt in id
/// order) and leaves untouched objects' stamps; an empty batch publishes
/// nothing; a batch naming one id twice is refused.
pub fn batch_applies_under_one_stamp<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let r = accepted(
        &b,
        batch_req("acme", vec![acme("teal"), acme("amber"), acme("green")]),
    );
    let Receipt::Applied {
        deployments,
        catalog_generation,
    } = r
    else {
        panic!("a batch answered {r:?}");
    };
    assert_eq!(catalog_generation, 2);
    let ids: Vec<_> = deployments.iter().map(|d| d.manifest.id.as_str()).collect();
    assert_eq!(ids, ["amber", "green", "teal"]);
    assert!(deployments.iter().all(|d| d.generation == 2));
    for d in &deployments {
        assert_eq!(b.get("acme", &d.manifest.id).unwrap().as_ref(), Some(d));
    }
    assert_eq!(generation_of(&b, "acme", "blue"), 1);
    assert_eq!(
        accepted(&b, batch_req("acme", Vec::new())),
        Receipt::Unchanged {
            catalog_generation: 2
        }
    );
    assert_eq!(b.generation().unwrap(), 2);
    refused(
        &b,
        batch_req("acme", vec![acme("white"), acme("white")]),
        "duplicate-deployment-id",
        &["acme"],
    );
}

/// A batch refused for any member — an invalid weight, a scope change, an
/// unreadable release — installs none of them, not even the valid members
/// before it.
pub fn a_refused_batch_applies_no_member<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let t = &["acme"];
    let mut heavy = acme("white");
    heavy.route_weight = 0;
    refused(
        &b,
        batch_req("acme", vec![acme("amber"), heavy]),
        "invalid-route-weight",
        t,
    );
    refused(
        &b,
        batch_req("acme", vec![acme("amber"), manifest("blue", "acme", "web")]),
        "deployment-scope-immutable",
        t,
    );
    let mut missing = acme("white");
    missing.release = release(ABSENT_RELEASE);
    refused(
        &b,
        batch_req("acme", vec![acme("amber"), missing]),
        "release-not-found",
        t,
    );
    assert_eq!(b.get("acme", "amber").unwrap(), None);
    assert_eq!(b.generation().unwrap(), 1);
}

/// The caller's tenant scopes every operation: a scoped get finds no other
/// tenant's record, a delete of it is not found, and an apply naming
/// another tenant's id or another tenant's manifest is refused.
pub fn tenant_scopes_reads_and_writes<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let red = applied(&b, manifest("red", "beta", "api"));
    let t = &["acme", "beta"];
    assert_eq!(b.get("acme", "red").unwrap(), None);
    assert_eq!(b.get("beta", "red").unwrap(), Some(red));
    refused(
        &b,
        delete_req("acme", "red", None),
        "deployment-not-found",
        t,
    );
    refused(
        &b,
        delete_req("acme", "red", Some(2)),
        "deployment-not-found",
        t,
    );
    refused(
        &b,
        apply_req(acme("red"), None),
        "deployment-tenant-mismatch",
        t,
    );
    let mut foreign = apply_req(acme("white"), None);
    foreign.tenant = Some("beta".into());
    refused(&b, foreign, "deployment-tenant-mismatch", t);
    assert!(list(&b, "beta", None, 10)
        .iter()
        .all(|d| d.manifest.tenant == "beta"));
}

/// A snapshot-only publication advances the catalog generation once and no
/// object's stamp; resolutions report the new catalog generation.
pub fn snapshot_publication_advances_only_the_catalog<B: DeploymentCatalog, F: Fn() -> B>(
    factory: F,
) {
    let b = factory();
    applied(&b, acme("blue"));
    assert_eq!(
        accepted(&b, publish_req()),
        Receipt::Published {
            catalog_generation: 2
        }
    );
    assert_eq!(b.generation().unwrap(), 2);
    assert_eq!(generation_of(&b, "acme", "blue"), 1);
    let r = b.resolve(&target("acme", "api", None), None).unwrap();
    assert_eq!((r.generation, r.catalog_generation), (1, 2));
    assert_eq!(b.pin().unwrap().generation(), 2);
}

/// Every deployment is in its service's default route and in the named
/// route of its id; a named route selects only that deployment; an unknown
/// route, another tenant's route and a route without the endpoint are
/// refused, never answered from another route or tenant.
pub fn routes_default_named_and_never_fall_back<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    let blue = applied(&b, acme("blue"));
    applied(&b, acme("green"));
    applied(&b, manifest("red", "beta", "api"));
    for k in 0..16 {
        let key = format!("key-{k}");
        let r = b
            .resolve(&target("acme", "api", Some("blue")), Some(&key))
            .unwrap();
        assert_eq!(r.deployment_id, "blue");
        let d = b.resolve(&target("acme", "api", None), Some(&key)).unwrap();
        assert!(["blue", "green"].contains(&d.deployment_id.as_str()));
    }
    let r = b
        .resolve(&target("acme", "api", Some("blue")), None)
        .unwrap();
    assert_eq!(r.revision, revision(&blue.manifest));
    assert_eq!((r.generation, r.catalog_generation), (1, 3));
    assert_eq!(r.release, release(1));
    assert_eq!(
        r.attributes.get(ATTR_DEPLOYMENT).map(String::as_bytes),
        Some(blue.manifest.canonical().as_slice())
    );
    let unavailable = "route-unavailable";
    for t in [
        target("acme", "api", Some("nope")),
        target("acme", "api", Some("red")),
        target("acme", "web", None),
        target("gamma", "api", None),
    ] {
        assert_eq!(reason(b.resolve(&t, None)), unavailable, "{t:?}");
    }
    let mut other = target("acme", "api", Some("blue"));
    other.function = "nope".into();
    assert_eq!(reason(b.resolve(&other, None)), "incompatible-contract");
    other.contract = "counter".into();
    other.function = "incr".into();
    assert_eq!(reason(b.resolve(&other, None)), "incompatible-contract");
}

/// Default-route selection is the deterministic weighted pick over the
/// candidates in ascending revision order, keyed by the routing key (an
/// absent key is the empty one).
pub fn weighted_selection_is_deterministic_over_revisions<B: DeploymentCatalog, F: Fn() -> B>(
    factory: F,
) {
    let b = factory();
    let mut candidates = Vec::new();
    let mut by_revision = BTreeMap::new();
    for (id, w, rel) in [
        ("blue", 1, 1),
        ("green", 2, 2),
        ("teal", 3, 3),
        ("amber", 4, 4),
    ] {
        let mut m = acme(id);
        m.route_weight = w;
        m.release = release(rel);
        candidates.push((revision(&m), w));
        by_revision.insert(revision(&m), id);
        applied(&b, m);
    }
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..64 {
        let key = format!("user-{k}");
        let want = route::select(
            &candidates,
            ["acme", "api", "default", GREETER, "hello", &key],
        )
        .unwrap();
        let got = b.resolve(&target("acme", "api", None), Some(&key)).unwrap();
        assert_eq!(got.deployment_id, by_revision[&want], "routing key {key}");
        assert_eq!(
            b.resolve(&target("acme", "api", None), Some(&key))
                .unwrap()
                .deployment_id,
            got.deployment_id,
            "selection is not deterministic"
        );
        seen.insert(got.deployment_id);
    }
    assert!(seen.len() > 1, "every key selected one deployment");
    let want = route::select(
        &candidates,
        ["acme", "api", "default", GREETER, "hello", ""],
    );
    let got = b.resolve(&target("acme", "api", None), None).unwrap();
    assert_eq!(got.deployment_id, by_revision[&want.unwrap()]);
}

/// A revision ignores the weight and follows every other setting; a
/// returned resolution is owned and a pin keeps its whole generation after
/// the deployment is reweighted and deleted.
pub fn revisions_ignore_the_weight_and_pins_hold<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    let blue = applied(&b, acme("blue"));
    let named = target("acme", "api", Some("blue"));
    let first = b.resolve(&named, None).unwrap();
    assert_eq!(first.revision, revision(&blue.manifest));
    let pin = b.pin().unwrap();
    let mut heavier = acme("blue");
    heavier.route_weight = 5;
    applied(&b, heavier);
    let again = b.resolve(&named, None).unwrap();
    assert_eq!(
        again.revision, first.revision,
        "a reweight is a new revision"
    );
    assert_eq!(again.generation, 2);
    let mut granted = acme("blue");
    granted.grants = vec!["net".into()];
    applied(&b, granted.clone());
    let third = b.resolve(&named, None).unwrap();
    assert_eq!(third.revision, revision(&granted));
    assert_ne!(third.revision, first.revision);
    accepted(&b, delete_req("acme", "blue", None));
    assert_eq!(reason(b.resolve(&named, None)), "route-unavailable");
    assert_eq!(pin.generation(), 1);
    assert_eq!(pin.resolve(&named, None).unwrap(), first);
    assert_eq!(first.generation, 1, "a returned resolution changed");
}

/// Pages list one tenant (or one tenant's service) in ascending id order,
/// at most `page_size` records, with a token while more follow; the page
/// size may change between continuations.
pub fn pages_are_ascending_bounded_and_continue<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    for (id, service) in [
        ("a5", "api"),
        ("a2", "web"),
        ("a1", "api"),
        ("a4", "web"),
        ("a3", "api"),
    ] {
        applied(&b, manifest(id, "acme", service));
    }
    applied(&b, manifest("b1", "beta", "api"));
    let ids = |p: &Page| -> Vec<String> {
        p.deployments
            .iter()
            .map(|d| d.manifest.id.clone())
            .collect()
    };
    let p1 = b.page(&page_req("acme", None, 2, None)).unwrap();
    assert_eq!(ids(&p1), ["a1", "a2"]);
    assert_eq!(p1.catalog_generation, 6);
    let p2 = b
        .page(&page_req("acme", None, 2, p1.next_page_token.clone()))
        .unwrap();
    assert_eq!(ids(&p2), ["a3", "a4"]);
    let p3 = b
        .page(&page_req("acme", None, 2, p2.next_page_token.clone()))
        .unwrap();
    assert_eq!(ids(&p3), ["a5"]);
    assert_eq!(p3.next_page_token, None);
    let q1 = b.page(&page_req("acme", Some("api"), 1, None)).unwrap();
    assert_eq!(ids(&q1), ["a1"]);
    let q2 = b
        .page(&page_req("acme", Some("api"), 10, q1.next_page_token))
        .unwrap();
    assert_eq!(ids(&q2), ["a3", "a5"]);
    assert_eq!(q2.next_page_token, None);
    let exact = b.page(&page_req("acme", Some("web"), 2, None)).unwrap();
    assert_eq!(ids(&exact), ["a2", "a4"]);
    assert_eq!(exact.next_page_token, None, "no token past the last record");
    let beta = list(&b, "beta", None, 1);
    assert_eq!(beta.len(), 1);
    assert_eq!(beta[0], b.get("beta", "b1").unwrap().unwrap());
}

/// A page size outside 1..=1,000, a tenant or service that is not an
/// identifier, a damaged token, another scope's token and another
/// instance's token are each refused with their own reason.
pub fn page_refusals_are_typed<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    for id in ["a1", "a2", "a3"] {
        applied(&b, acme(id));
    }
    applied(&b, manifest("a9", "acme", "web"));
    for size in [0, 1001] {
        let r = b.page(&page_req("acme", None, size, None));
        assert_eq!(reason(r), "invalid-deployment-page-size", "size {size}");
    }
    assert_eq!(
        b.page(&page_req("acme", None, 1000, None))
            .unwrap()
            .deployments
            .len(),
        4
    );
    let scope = "invalid-deployment-page-scope";
    assert_eq!(reason(b.page(&page_req("", None, 1, None))), scope);
    assert_eq!(
        reason(b.page(&page_req("acme", Some("a b"), 1, None))),
        scope
    );
    let token = b
        .page(&page_req("acme", None, 1, None))
        .unwrap()
        .next_page_token
        .unwrap();
    let bad = "invalid-deployment-page-token";
    let damaged = format!("{}0", &token[..token.len() - 1]);
    let damaged = if damaged == token {
        format!("{}1", &token[..token.len() - 1])
    } else {
        damaged
    };
    for (t, s) in [
        (damaged, None),
        ("zz".to_owned(), None),
        (token.clone(), Some("api")),
    ] {
        assert_eq!(reason(b.page(&page_req("acme", s, 1, Some(t)))), bad);
    }
    assert_eq!(
        reason(b.page(&page_req("beta", None, 1, Some(token.clone())))),
        bad
    );
    let other = factory();
    for id in ["a1", "a2", "a3"] {
        applied(&other, acme(id));
    }
    applied(&other, manifest("a9", "acme", "web"));
    assert_eq!(
        reason(other.page(&page_req("acme", None, 1, Some(token)))),
        bad,
        "another instance's token"
    );
}

/// Any publication — an unrelated tenant's apply, a snapshot-only
/// publication — expires every older token of this instance; a listing
/// then restarts from the first page.
pub fn page_tokens_expire_with_any_publication<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    for id in ["a1", "a2", "a3"] {
        applied(&b, acme(id));
    }
    let expired = "expired-deployment-page-token";
    let token = b
        .page(&page_req("acme", None, 1, None))
        .unwrap()
        .next_page_token
        .unwrap();
    applied(&b, manifest("b1", "beta", "api"));
    assert_eq!(
        reason(b.page(&page_req("acme", None, 1, Some(token)))),
        expired
    );
    let token = b
        .page(&page_req("acme", None, 1, None))
        .unwrap()
        .next_page_token
        .unwrap();
    assert!(b
        .page(&page_req("acme", None, 1, Some(token.clone())))
        .is_ok());
    accepted(&b, publish_req());
    assert_eq!(
        reason(b.page(&page_req("acme", None, 1, Some(token)))),
        expired
    );
    assert_eq!(list(&b, "acme", None, 1).len(), 3);
}

fn managed(r: Request, actor: &str, id: &str, observed: u64) -> Request {
    Request {
        operation: Some(Operation {
            actor: actor.into(),
            id: id.into(),
            observed,
        }),
        ..r
    }
}

/// A managed operation retried with the same request is answered its
/// first receipt and publishes nothing; the same operation id for another
/// request is refused; another actor's id is its own.
pub fn managed_operations_replay_exactly<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let op = managed(apply_req(acme("green"), None), "ops", "op-1", 1);
    let first = accepted(&b, op.clone());
    assert_eq!(first.catalog_generation(), 2);
    assert_eq!(accepted(&b, op.clone()), first, "a retry ran again");
    assert_eq!(b.generation().unwrap(), 2);
    assert_eq!(generation_of(&b, "acme", "green"), 2);
    let reused = managed(apply_req(acme("teal"), None), "ops", "op-1", 1);
    refused(&b, reused, "deployment-operation-conflict", &["acme"]);
    let theirs = managed(apply_req(acme("teal"), None), "dev", "op-1", 2);
    assert_eq!(accepted(&b, theirs).catalog_generation(), 3);
    let del = managed(delete_req("acme", "blue", Some(1)), "ops", "op-2", 3);
    let gone = accepted(&b, del.clone());
    assert_eq!(accepted(&b, del), gone);
    assert_eq!(b.generation().unwrap(), 4);
}

/// The release rules are checked before anything is published: an
/// unreadable release, another schema for a contract the service already
/// exports, and a second namespace for one tenant and service are each
/// refused and change nothing; another tenant may use the namespace.
pub fn release_rules_refuse_before_publication<B: DeploymentCatalog, F: Fn() -> B>(factory: F) {
    let b = factory();
    applied(&b, acme("blue"));
    let t = &["acme", "beta"];
    let mut missing = acme("green");
    missing.release = release(ABSENT_RELEASE);
    refused(&b, apply_req(missing, None), "release-not-found", t);
    let mut other_schema = acme("green");
    other_schema.release = release(5);
    refused(
        &b,
        apply_req(other_schema, None),
        "contract-schema-conflict",
        t,
    );
    let mut spaced = acme("green");
    spaced.namespace = Some("ns".into());
    refused(
        &b,
        apply_req(spaced, None),
        "ambiguous-deployment-namespace",
        t,
    );
    let mut elsewhere = manifest("red", "beta", "api");
    elsewhere.namespace = Some("ns".into());
    elsewhere.release = beta_release(5);
    applied(&b, elsewhere);
    let mut counter = acme("green");
    counter.release = release(6);
    applied(&b, counter);
    assert_eq!(b.generation().unwrap(), 3);
}

/// The seam between the release and the deployment catalogs: a deployment
/// may use only a release its own tenant published, and only while it is
/// eligible. Another tenant's release, a trusted-local one and one that
/// does not exist are refused with one answer (`release-not-found`, the
/// same text but for the digest the caller sent: no oracle for another
/// tenant's digests); a visible revoked or retired release has its own
/// reason; a batch with one such member applies none; each tenant's
/// routes resolve only to its own releases.
pub fn a_deployment_uses_only_its_tenants_eligible_releases<B: DeploymentCatalog, F: Fn() -> B>(
    factory: F,
) {
    let b = factory();
    let t = &["acme", "beta"];
    applied(&b, acme("blue"));
    let with = |tenant: &str, id: &str, r: Sha256| {
        let mut m = manifest(id, tenant, "api");
        m.release = r;
        m
    };
    let text_of = |m: DeploymentManifest| {
        let r = m.release;
        match b.mutate(apply_req(m, None)) {
            Ok(receipt) => panic!("an apply of {r} was accepted: {receipt:?}"),
            Err(e) => rule(e).to_string().replace(&r.to_string(), "<digest>"),
        }
    };
    // Another tenant's, a trusted-local and an absent release: one answer.
    for r in [
        release(1),
        release(LOCAL_RELEASE),
        release(ABSENT_RELEASE),
        release(REVOKED_RELEASE),
    ] {
        refused(
            &b,
            apply_req(with("beta", "steal", r), None),
            "release-not-found",
            t,
        );
    }
    let absent = text_of(with("beta", "steal", release(ABSENT_RELEASE)));
    assert_eq!(text_of(with("beta", "steal", release(1))), absent);
    assert_eq!(
        text_of(with("beta", "steal", release(LOCAL_RELEASE))),
        absent
    );
    assert!(!absent.contains("acme"), "{absent}");
    // Nobody deploys a trusted-local release.
    refused(
        &b,
        apply_req(with("acme", "local", release(LOCAL_RELEASE)), None),
        "release-not-found",
        t,
    );
    // A visible release that was revoked or retired: its own reason.
    for (tenant, r, reason) in [
        ("acme", release(REVOKED_RELEASE), "release-revoked"),
        ("acme", release(RETIRED_RELEASE), "release-retired"),
        ("beta", beta_release(REVOKED_RELEASE), "release-revoked"),
    ] {
        refused(&b, apply_req(with(tenant, "old", r), None), reason, t);
    }
    // A batch with one foreign member applies none.
    refused(
        &b,
        batch_req(
            "beta",
            vec![
                with("beta", "ok", beta_release(1)),
                with("beta", "steal", release(2)),
            ],
        ),
        "release-not-found",
        t,
    );
    // Each tenant's own release resolves, on its own routes only.
    applied(&b, with("beta", "red", beta_release(1)));
    let r = b.resolve(&target("beta", "api", None), Some("k")).unwrap();
    assert_eq!(
        (r.deployment_id.as_str(), r.release),
        ("red", beta_release(1))
    );
    let r = b.resolve(&target("acme", "api", None), Some("k")).unwrap();
    assert_eq!((r.deployment_id.as_str(), r.release), ("blue", release(1)));
    assert_eq!(b.generation().unwrap(), 2);
}

// ---------------------------------------------------------------- the table

/// Pages are in byte order of the deployment id, across continuations (not
/// apply order, its reverse, a collation or a numeric-aware order: the
/// ids `b`, `a-2`, `a10`, `a2`, `a.1`, applied in that order, list as
/// `a-2`, `a.1`, `a10`, `a2`, `b`).
pub fn pages_are_in_byte_order_not_collation_or_apply_order<B: DeploymentCatalog, F: Fn() -> B>(
    factory: F,
) {
    let b = factory();
    for id in ["b", "a-2", "a10", "a2", "a.1"] {
        applied(&b, acme(id));
    }
    let ids: Vec<String> = list(&b, "acme", None, 2)
        .into_iter()
        .map(|d| d.manifest.id)
        .collect();
    assert_eq!(ids, ["a-2", "a.1", "a10", "a2", "b"]);
}

// ------------------------------------------------------------ reopen cases

const REOPEN_TENANTS: &[&str] = &["acme", "beta"];

/// Everything the port shows of the catalogs the reopen cases write: the
/// generation, every record of both tenants page by page, and each
/// service's default resolution.
fn seen<B: DeploymentCatalog>(b: &B) -> (u64, Vec<VersionedDeployment>, Vec<String>) {
    let (generation, records) = observe(b, REOPEN_TENANTS);
    let routes = REOPEN_TENANTS
        .iter()
        .map(|t| format!("{:?}", b.resolve(&target(t, "api", None), Some("key")).ok()))
        .collect();
    (generation, records, routes)
}

/// Acknowledged mutations of every kind: applies in two tenants, an update,
/// a delete, a batch, a managed operation, a snapshot publication, and last
/// of all one more apply (the write a store that loses its tail would
/// lose). Returns the managed operation and its receipt.
fn acknowledged_history<B: DeploymentCatalog>(b: &B) -> (Request, Receipt) {
    applied(b, acme("blue"));
    applied(b, acme("green"));
    applied(b, manifest("red", "beta", "api"));
    let mut heavier = acme("blue");
    heavier.route_weight = 3;
    applied(b, heavier);
    accepted(b, delete_req("acme", "green", None));
    accepted(
        b,
        batch_req(
            "beta",
            vec![manifest("r2", "beta", "api"), manifest("r3", "beta", "api")],
        ),
    );
    let op = managed(
        apply_req(acme("teal"), None),
        "ops",
        "op-1",
        b.generation().unwrap(),
    );
    let receipt = accepted(b, op.clone());
    accepted(b, publish_req());
    applied(b, acme("last"));
    (op, receipt)
}

/// Everything acknowledged survives a drop and a reopen, the last apply
/// included; a managed operation retried after the reopen is answered its
/// first receipt and publishes nothing; a page token issued before the
/// reopen is refused as another instance's (never answered with a page of
/// the new instance); the generation never steps back.
pub fn acknowledged_mutations_survive_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: DeploymentCatalog,
{
    let place = f();
    let (b, (op, receipt), before) = crate::open_with_history(&place, acknowledged_history, seen);
    assert!(b.get("acme", "last").unwrap().is_some());
    let token = b
        .page(&page_req("acme", None, 1, None))
        .unwrap()
        .next_page_token
        .expect("acme has three records");
    drop(b);
    let b = place.open();
    assert_eq!(seen(&b), before, "the reopened catalog differs");
    assert_eq!(
        accepted(&b, op),
        receipt,
        "a retry after a reopen ran again"
    );
    assert_eq!(b.generation().unwrap(), before.0);
    assert_eq!(
        reason(b.page(&page_req("acme", None, 1, Some(token)))),
        "invalid-deployment-page-token"
    );
    let next = accepted(&b, apply_req(acme("after"), None));
    assert!(next.catalog_generation() > before.0);
}

/// A refusal leaves the stored state unchanged across a reopen: a stale
/// expected generation, another tenant's record, a delete of nothing and
/// a batch with one bad member change nothing a later handle sees.
pub fn a_refusal_leaves_the_store_unchanged_across_a_reopen<P: Place>(f: impl Fn() -> P)
where
    P::Store: DeploymentCatalog,
{
    let place = f();
    let (b, _, before) = crate::open_with_history(&place, acknowledged_history, seen);
    assert!(b.mutate(apply_req(acme("blue"), Some(1))).is_err());
    assert!(b.mutate(delete_req("acme", "red", None)).is_err());
    assert!(b.mutate(delete_req("acme", "nothing", None)).is_err());
    assert!(b
        .mutate(batch_req(
            "beta",
            vec![manifest("r4", "beta", "api"), acme("stray")]
        ))
        .is_err());
    drop(b);
    let b = place.open();
    assert_eq!(seen(&b), before, "a refusal changed the stored state");
}

/// Every deployment case, by name, in suite order.
pub const DEPLOYMENT_CASES: &[&str] = &crate::__with_deployment_cases!(__emit_names!());

/// A deployment case runnable at run time, for a backend type `B`.
pub type DeploymentCase<B> = (&'static str, fn(&dyn Fn() -> B));

/// Every case as `(name, function)`, for runners that report per case
/// (run each under `std::panic::catch_unwind`).
pub fn deployment_cases<B: DeploymentCatalog>() -> Vec<DeploymentCase<B>> {
    crate::__with_deployment_cases!(__emit_table!(deployment, B))
}

/// Every reopen case, by name, in suite order.
pub const DEPLOYMENT_REOPEN_CASES: &[&str] =
    &crate::__with_deployment_reopen_cases!(__emit_names!());

/// Every reopen case as `(name, function)`; each takes a factory of places.
pub fn deployment_reopen_cases<P: Place>() -> Vec<DeploymentCase<P>>
where
    P::Store: DeploymentCatalog,
{
    crate::__with_deployment_reopen_cases!(__emit_table!(deployment, P))
}

/// Invokes `$crate::$callback! { ($args) case, … }` with every deployment
/// reopen case.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_deployment_reopen_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            acknowledged_mutations_survive_a_reopen,
            a_refusal_leaves_the_store_unchanged_across_a_reopen,
        }
    };
}

/// Emits `mod $name { #[test] fn <case>() … }`: one test per deployment
/// conformance case, each calling the case with `$factory` (an expression
/// of a type implementing `Fn() -> B` with `B: DeploymentCatalog`, built
/// over [`FixtureReleases`]; every call a fresh, empty catalog), and one
/// per reopen case, each calling it with `$places` (`Fn() -> P`,
/// `P: `[`crate::Place`] opening a catalog over [`FixtureReleases`]: a
/// fresh store per call, opened again by every [`crate::Place::open`]).
#[macro_export]
macro_rules! deployment_suite {
    ($name:ident, $factory:expr, reopen: $places:expr $(,)?) => {
        $crate::__suite!(
            __with_deployment_cases,
            __with_deployment_reopen_cases,
            deployment,
            $name,
            $factory,
            $places
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_deployment_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            fresh_catalog_is_empty,
            apply_stamps_each_accepted_apply,
            apply_expected_generation_table,
            delete_expected_generation_table,
            refused_applies_leave_state_untouched,
            batch_applies_under_one_stamp,
            a_refused_batch_applies_no_member,
            tenant_scopes_reads_and_writes,
            snapshot_publication_advances_only_the_catalog,
            routes_default_named_and_never_fall_back,
            weighted_selection_is_deterministic_over_revisions,
            revisions_ignore_the_weight_and_pins_hold,
            pages_are_ascending_bounded_and_continue,
            page_refusals_are_typed,
            page_tokens_expire_with_any_publication,
            managed_operations_replay_exactly,
            release_rules_refuse_before_publication,
            a_deployment_uses_only_its_tenants_eligible_releases,
            pages_are_in_byte_order_not_collation_or_apply_order,
        }
    };
}
