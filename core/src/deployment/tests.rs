//! Unit tests of the deployment catalog's rules: the versioned desired
//! state ([`state::decide`]), route compilation and resolution
//! ([`route::compile`], [`route::Snapshot::resolve`]) and pages
//! ([`page::page`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::manifest::DeploymentManifest;
use super::page::{self, PageIndex, PageRequest, PageToken, MAX_PAGE_BYTES};
use super::route::{self, PinnedRoutes, ReleaseFacts, ReleaseSource, Snapshot, Standing, Target};
use super::state::{
    decide, Catalog, Decision, Mutation, Operation, Receipt, Request, VersionedDeployment,
    RECEIPT_RING,
};
use super::DeploymentError;
use crate::release::contract::{Contract, Function, Interface, Param, ValType};
use crate::release::Sha256;

// ---------------------------------------------------------------- fixtures

fn release(n: u8) -> Sha256 {
    Sha256::of(&[b'r', n])
}

fn manifest(id: &str, tenant: &str, service: &str) -> DeploymentManifest {
    DeploymentManifest {
        tenant: tenant.into(),
        service: service.into(),
        release: release(1),
        ..super::manifest::tests::sample(id)
    }
}

fn m(id: &str) -> DeploymentManifest {
    manifest(id, "acme", "api")
}

fn request(tenant: Option<&str>, mutation: Mutation, compiled_at: u64) -> Request {
    Request {
        tenant: tenant.map(str::to_owned),
        mutation,
        compiled_at,
        operation: None,
    }
}

/// `mutation` decided against `c`, compiled at its live generation.
fn decide_live(
    c: &Catalog,
    tenant: Option<&str>,
    mutation: Mutation,
) -> Result<Decision, DeploymentError> {
    decide(c, &request(tenant, mutation, c.generation))
}

fn apply(
    c: &Catalog,
    tenant: Option<&str>,
    d: DeploymentManifest,
    expected: Option<u64>,
) -> Result<Decision, DeploymentError> {
    let manifest = Box::new(d);
    decide_live(c, tenant, Mutation::Apply { manifest, expected })
}

fn delete(
    c: &Catalog,
    tenant: Option<&str>,
    id: &str,
    expected: Option<u64>,
) -> Result<Decision, DeploymentError> {
    let id = id.into();
    decide_live(c, tenant, Mutation::Delete { id, expected })
}

fn batch(
    c: &Catalog,
    tenant: Option<&str>,
    manifests: Vec<DeploymentManifest>,
) -> Result<Decision, DeploymentError> {
    decide_live(c, tenant, Mutation::ApplyMany { manifests })
}

fn publish(c: &Catalog) -> Catalog {
    next(decide_live(c, None, Mutation::PublishSnapshot))
}

/// The catalog an unscoped batch of `manifests` publishes over an empty one.
fn catalog_of(manifests: Vec<DeploymentManifest>) -> Catalog {
    next(batch(&Catalog::default(), None, manifests))
}

/// The refusal of a write expecting generation `expected` of `id`.
fn conflict(id: &str, expected: u64, live: Option<u64>) -> DeploymentError {
    DeploymentError::GenerationConflict {
        id: id.into(),
        expected,
        live,
    }
}

/// The next catalog of a published decision, after checking it and its
/// receipt against it.
fn next(d: Result<Decision, DeploymentError>) -> Catalog {
    let d = d.unwrap();
    let next = d.next.clone().expect("a published decision");
    next.check().unwrap();
    receipt_matches(&d.receipt, &next);
    next
}

/// A receipt holds exactly what the catalog it produced holds.
fn receipt_matches(receipt: &Receipt, next: &Catalog) {
    assert_eq!(receipt.catalog_generation(), next.generation);
    match receipt {
        Receipt::Applied { deployments, .. } => {
            for d in deployments {
                assert_eq!(next.objects.get(&d.manifest.id), Some(d));
                assert_eq!(d.generation, next.generation);
            }
        }
        Receipt::Deleted { deployment, .. } => {
            assert!(!next.objects.contains_key(&deployment.manifest.id));
        }
        Receipt::Published { .. } | Receipt::Unchanged { .. } => {}
    }
}

/// acme/blue at 1, acme/green at 2, beta/red at 3.
fn three() -> Catalog {
    let c = next(apply(&Catalog::default(), Some("acme"), m("blue"), None));
    let c = next(apply(&c, Some("acme"), m("green"), None));
    next(apply(
        &c,
        Some("beta"),
        manifest("red", "beta", "api"),
        None,
    ))
}

fn gen_of(c: &Catalog, id: &str) -> u64 {
    c.objects[id].generation
}

// ------------------------------------------------- expected-generation table

#[test]
fn apply_expected_generation_table() {
    let c = three();
    assert_eq!(c.generation, 3);
    // None: unconditional upsert, existing or absent.
    let up = next(apply(&c, Some("acme"), m("blue"), None));
    assert_eq!(gen_of(&up, "blue"), 4);
    let created = next(apply(&c, Some("acme"), m("white"), None));
    assert_eq!(gen_of(&created, "white"), 4);
    // Some(0): require absence.
    let created = next(apply(&c, Some("acme"), m("white"), Some(0)));
    assert_eq!(gen_of(&created, "white"), 4);
    assert_eq!(
        apply(&c, Some("acme"), m("blue"), Some(0)).unwrap_err(),
        conflict("blue", 0, Some(1))
    );
    // Some(g): exactly g.
    assert_eq!(
        gen_of(&next(apply(&c, Some("acme"), m("green"), Some(2))), "green"),
        4
    );
    let e = apply(&c, Some("acme"), m("green"), Some(1)).unwrap_err();
    assert_eq!(e.reason(), "deployment-generation-conflict");
    assert!(e.retryable());
    assert_eq!(
        apply(&c, Some("acme"), m("white"), Some(2)).unwrap_err(),
        conflict("white", 2, None)
    );
}

#[test]
fn delete_expected_generation_table() {
    let c = three();
    // None: delete an existing object; absence is NotFound.
    let gone = next(delete(&c, Some("acme"), "blue", None));
    assert!(!gone.objects.contains_key("blue"));
    assert_eq!(gone.generation, 4);
    let e = delete(&c, Some("acme"), "white", None).unwrap_err();
    assert_eq!(e, DeploymentError::NotFound("white".into()));
    assert_eq!(e.reason(), "deployment-not-found");
    // Some(0): an existing object conflicts; absence is NotFound.
    assert_eq!(
        delete(&c, Some("acme"), "blue", Some(0)).unwrap_err(),
        conflict("blue", 0, Some(1))
    );
    assert_eq!(
        delete(&c, Some("acme"), "white", Some(0)).unwrap_err(),
        DeploymentError::NotFound("white".into())
    );
    // Some(g): exactly g.
    let gone = next(delete(&c, Some("acme"), "green", Some(2)));
    assert!(!gone.objects.contains_key("green"));
    assert!(matches!(
        delete(&c, Some("acme"), "green", Some(1)),
        Err(DeploymentError::GenerationConflict {
            expected: 1,
            live: Some(2),
            ..
        })
    ));
    assert_eq!(
        delete(&c, Some("acme"), "white", Some(7)).unwrap_err(),
        DeploymentError::NotFound("white".into())
    );
}

// ------------------------------------------------------------ tenant scope

#[test]
fn tenant_scoping() {
    let c = three();
    assert!(c.get(Some("acme"), "red").is_none());
    assert!(c.get(Some("beta"), "red").is_some());
    assert!(c.get(None, "red").is_some());
    // An apply of another tenant's id, in the caller's own tenant.
    let e = apply(&c, Some("acme"), m("red"), None).unwrap_err();
    assert!(matches!(e, DeploymentError::TenantMismatch { ref id, .. } if id == "red"));
    assert_eq!(e.reason(), "deployment-tenant-mismatch");
    // A manifest naming another tenant than the caller's.
    let e = apply(&c, Some("beta"), m("white"), None).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::TenantMismatch {
            id: "white".into(),
            tenant: "beta".into()
        }
    );
    // Unscoped, the tenant of an existing id still cannot change.
    assert!(matches!(
        apply(&c, None, m("red"), None),
        Err(DeploymentError::TenantMismatch { .. })
    ));
    // Delete of another tenant's id: not found in the caller's scope.
    assert_eq!(
        delete(&c, Some("acme"), "red", None).unwrap_err(),
        DeploymentError::NotFound("red".into())
    );
    assert_eq!(
        delete(&c, Some("acme"), "red", Some(3)).unwrap_err(),
        DeploymentError::NotFound("red".into())
    );
    // A batch with one foreign manifest is refused whole.
    assert!(batch(&c, Some("acme"), vec![m("white"), m("red")]).is_err());
}

#[test]
fn scope_change_is_refused() {
    let c = three();
    let mut moved = m("blue");
    moved.service = "web".into();
    let e = apply(&c, Some("acme"), moved.clone(), None).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::ScopeChange {
            id: "blue".into(),
            field: "service"
        }
    );
    assert_eq!(e.reason(), "deployment-scope-immutable");
    let mut ns = m("blue");
    ns.namespace = Some("prod".into());
    assert_eq!(
        apply(&c, None, ns.clone(), None).unwrap_err(),
        DeploymentError::ScopeChange {
            id: "blue".into(),
            field: "namespace"
        }
    );
    assert!(matches!(
        batch(&c, Some("acme"), vec![m("white"), moved]),
        Err(DeploymentError::ScopeChange { .. })
    ));
}

// ------------------------------------------------------------------ batches

#[test]
fn batch_rules() {
    let c = three();
    let e = batch(&c, Some("acme"), vec![m("white"), m("blue"), m("white")]).unwrap_err();
    assert_eq!(e, DeploymentError::DuplicateId("white".into()));
    assert_eq!(e.reason(), "duplicate-deployment-id");
    // Empty: a no-op.
    let d = batch(&c, Some("acme"), vec![]).unwrap();
    assert_eq!(d.next, None);
    assert_eq!(
        d.receipt,
        Receipt::Unchanged {
            catalog_generation: 3
        }
    );
    // One stamp for the batch; untouched objects keep theirs.
    let d = batch(&c, Some("acme"), vec![m("white"), m("blue")]).unwrap();
    let n = d.next.clone().unwrap();
    n.check().unwrap();
    assert_eq!(n.generation, 4);
    assert_eq!(gen_of(&n, "blue"), 4);
    assert_eq!(gen_of(&n, "white"), 4);
    assert_eq!(gen_of(&n, "green"), 2);
    assert_eq!(gen_of(&n, "red"), 3);
    let Receipt::Applied {
        deployments,
        catalog_generation,
    } = &d.receipt
    else {
        panic!("{:?}", d.receipt)
    };
    assert_eq!(*catalog_generation, 4);
    let ids: Vec<&str> = deployments.iter().map(|d| d.manifest.id.as_str()).collect();
    assert_eq!(ids, ["blue", "white"], "receipt in id order");
    receipt_matches(&d.receipt, &n);
}

#[test]
fn unchanged_apply_advances_and_recreate_is_newer() {
    let c = three();
    let again = next(apply(&c, Some("acme"), m("blue"), Some(1)));
    assert_eq!(again.objects["blue"].manifest, c.objects["blue"].manifest);
    assert_eq!(gen_of(&again, "blue"), 4);
    assert_eq!(again.generation, 4);
    // A conditional retry with the old version conflicts after the update.
    assert!(apply(&again, Some("acme"), m("blue"), Some(1)).is_err());
    // Snapshot-only publications and unrelated writes leave stamps alone.
    let p = publish(&again);
    assert_eq!(p.generation, 5);
    assert_eq!(gen_of(&p, "blue"), 4);
    // Delete, then recreate: a newer stamp, no tombstone.
    let gone = next(delete(&p, Some("acme"), "blue", Some(4)));
    assert_eq!(gone.generation, 6);
    let back = next(apply(&gone, Some("acme"), m("blue"), Some(0)));
    assert_eq!(gen_of(&back, "blue"), 7);
    assert!(gen_of(&back, "blue") > gen_of(&p, "blue"));
}

#[test]
fn delete_receipt_is_the_old_record() {
    let c = three();
    let d = delete(&c, Some("acme"), "green", Some(2)).unwrap();
    let n = d.next.clone().unwrap();
    assert_eq!(
        d.receipt,
        Receipt::Deleted {
            deployment: Box::new(c.objects["green"].clone()),
            catalog_generation: 4
        }
    );
    let detail = d.receipt.mutation_detail().unwrap();
    assert_eq!(
        (
            detail.deployment_id.as_str(),
            detail.object_generation,
            detail.catalog_generation,
            detail.operation,
            detail.committed
        ),
        ("green", 2, 4, "delete", true)
    );
    receipt_matches(&d.receipt, &n);
}

// ------------------------------------------------------- route generation

#[test]
fn stale_route_generation_then_recompile() {
    let c = three();
    // The caller read blue at 1 and compiled at 3; an unrelated write moves on.
    let moved = next(apply(&c, Some("acme"), m("green"), None));
    assert_eq!(moved.generation, 4);
    let stale = request(
        Some("acme"),
        Mutation::Apply {
            manifest: Box::new(m("blue")),
            expected: Some(1),
        },
        3,
    );
    let e = decide(&moved, &stale).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::StaleRouteGeneration {
            compiled: 3,
            live: 4
        }
    );
    assert_eq!(e.reason(), "stale-route-generation");
    assert!(e.retryable());
    // Recompiled at the live generation with the original precondition.
    let fresh = Request {
        compiled_at: moved.generation,
        ..stale.clone()
    };
    let n = next(decide(&moved, &fresh));
    assert_eq!(gen_of(&n, "blue"), 5);
    // A future compiled_at is stale too.
    let future = Request {
        compiled_at: 9,
        ..stale
    };
    assert!(matches!(
        decide(&moved, &future),
        Err(DeploymentError::StaleRouteGeneration {
            compiled: 9,
            live: 4
        })
    ));
}

#[test]
fn generation_exhaustion() {
    let mut c = three();
    c.generation = u64::MAX;
    c.check().unwrap();
    let e = apply(&c, Some("acme"), m("white"), None).unwrap_err();
    assert_eq!(e, DeploymentError::GenerationExhausted);
    assert_eq!(e.reason(), "deployment-generation-exhausted");
    assert_eq!(
        delete(&c, Some("acme"), "blue", None).unwrap_err(),
        DeploymentError::GenerationExhausted
    );
    assert_eq!(
        batch(&c, None, vec![m("white")]).unwrap_err(),
        DeploymentError::GenerationExhausted
    );
    assert_eq!(
        decide(&c, &request(None, Mutation::PublishSnapshot, u64::MAX)).unwrap_err(),
        DeploymentError::GenerationExhausted
    );
    // One below: the last publication is u64::MAX, never a wrap.
    c.generation = u64::MAX - 1;
    let n = next(apply(&c, Some("acme"), m("white"), None));
    assert_eq!(n.generation, u64::MAX);
}

// -------------------------------------------------------- managed operations

fn managed(c: &Catalog, op: &str, observed: u64, mutation: Mutation) -> Request {
    Request {
        tenant: Some("acme".into()),
        mutation,
        compiled_at: c.generation,
        operation: Some(Operation {
            actor: "alice".into(),
            id: op.into(),
            observed,
        }),
    }
}

fn create(id: &str) -> Mutation {
    Mutation::Apply {
        manifest: Box::new(m(id)),
        expected: Some(0),
    }
}

#[test]
fn managed_replay_and_conflict() {
    let c = three();
    let req = managed(&c, "op-1", 3, create("white"));
    let first = decide(&c, &req).unwrap();
    assert!(!first.replayed);
    let n = first.next.clone().unwrap();
    n.check().unwrap();
    receipt_matches(&first.receipt, &n);
    // A later unrelated write; the replay returns the stored receipt.
    let later = next(apply(&n, Some("acme"), m("green"), None));
    let again = Request {
        compiled_at: later.generation,
        ..req.clone()
    };
    let replay = decide(&later, &again).unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.next, None);
    assert_eq!(replay.receipt, first.receipt);
    // Even at a stale compiled generation: replay precedes the CAS.
    let replay = decide(&later, &req).unwrap();
    assert_eq!(
        (replay.replayed, replay.receipt),
        (true, first.receipt.clone())
    );
    // The same id for another request.
    let other = managed(&later, "op-1", 3, create("black"));
    let e = decide(&later, &other).unwrap_err();
    assert_eq!(e, DeploymentError::OperationConflict("op-1".into()));
    assert_eq!(e.reason(), "deployment-operation-conflict");
    // Another actor may use the same op id.
    let mut bob = managed(&later, "op-1", later.generation, create("black"));
    bob.operation.as_mut().unwrap().actor = "bob".into();
    assert!(!decide(&later, &bob).unwrap().replayed);
    // The normalized request is what is compared: grant order is spelling.
    let mut g = m("grants");
    g.grants = vec!["kv:write".into(), "kv:read".into()];
    let spelled = managed(
        &later,
        "op-2",
        later.generation,
        Mutation::Apply {
            manifest: Box::new(g.clone()),
            expected: None,
        },
    );
    let n2 = next(decide(&later, &spelled));
    g.grants.reverse();
    let respelled = managed(
        &n2,
        "op-2",
        later.generation,
        Mutation::Apply {
            manifest: Box::new(g),
            expected: None,
        },
    );
    assert!(decide(&n2, &respelled).unwrap().replayed);
}

#[test]
fn evicted_create_after_delete_never_runs_again() {
    let c = three();
    let req = managed(&c, "create-white", 3, create("white"));
    let created = next(decide(&c, &req));
    // A later delete, then enough managed operations to evict the create.
    let mut cur = next(delete(&created, Some("acme"), "white", None));
    for i in 0..RECEIPT_RING {
        let r = managed(
            &cur,
            &format!("fill-{i}"),
            cur.generation,
            Mutation::PublishSnapshot,
        );
        cur = next(decide(&cur, &r));
    }
    assert_eq!(cur.receipts.entries.len(), RECEIPT_RING);
    assert!(cur.receipts.entries.iter().all(|r| r.id != "create-white"));
    assert!(cur.receipts.floor >= 4);
    let retry = Request {
        compiled_at: cur.generation,
        ..req
    };
    let e = decide(&cur, &retry).unwrap_err();
    assert_eq!(e, DeploymentError::OperationExpired("create-white".into()));
    assert_eq!(e.reason(), "deployment-operation-expired");
    assert!(!cur.objects.contains_key("white"));
    // A fresh operation observed at the live generation still runs.
    let fresh = managed(&cur, "create-white-2", cur.generation, create("white"));
    assert!(next(decide(&cur, &fresh)).objects.contains_key("white"));
    // An observed generation in the future is refused too.
    let future = managed(&cur, "future", cur.generation + 1, create("black"));
    assert!(matches!(
        decide(&cur, &future),
        Err(DeploymentError::OperationExpired(_))
    ));
}

#[test]
fn a_replay_with_another_observed_version_is_a_conflict() {
    // Managed operations bind the actor, operation id, normalized request,
    // expected object generation *and expected combined state version*. Retained keeps no `observed`,
    // so the same op id with another observed version replays.
    let c = three();
    let req = managed(&c, "op-1", 3, create("white"));
    let n = next(decide(&c, &req));
    let mut other = req.clone();
    other.operation.as_mut().unwrap().observed = 1;
    assert_eq!(
        decide(&n, &other).unwrap_err(),
        DeploymentError::OperationConflict("op-1".into())
    );
}

#[test]
fn every_decided_state_checks() {
    let mut c = Catalog::default();
    let ids = ["blue", "green", "red"];
    for round in 0u64..30 {
        let id = ids[(round % 3) as usize];
        let d = match round % 5 {
            0 | 1 => apply(&c, Some("acme"), m(id), None),
            2 => delete(&c, Some("acme"), id, None),
            3 => batch(&c, None, vec![m("blue"), m("green")]),
            _ => decide(&c, &request(None, Mutation::PublishSnapshot, c.generation)),
        };
        if let Ok(d) = d {
            if let Some(n) = d.next {
                n.check().unwrap();
                receipt_matches(&d.receipt, &n);
                assert_eq!(n.generation, c.generation + 1);
                c = n;
            }
        }
    }
    assert!(c.generation >= 20);
}

// ----------------------------------------------------------------- routes

fn function(name: &str, ty: ValType) -> Function {
    Function {
        docs: None,
        name: name.into(),
        params: vec![Param {
            name: "key".into(),
            ty,
        }],
        results: vec![ValType::U64],
    }
}

fn interface(name: &str, functions: &[&str]) -> Interface {
    Interface {
        docs: None,
        name: name.into(),
        functions: functions
            .iter()
            .map(|f| function(f, ValType::String))
            .collect(),
    }
}

fn contract(interfaces: Vec<Interface>) -> Contract {
    Contract { interfaces }
}

/// Tenant `beta`'s copy of release `n` is release `BETA + n`.
const BETA: u8 = 100;

/// Releases 1..=3 export `kv` {get, put}; release 4 exports `kv` with
/// another schema for `get`; release 5 exports `blob`. Releases 1..=5 are
/// tenant `acme`'s; `BETA + n` is tenant `beta`'s copy of release `n`.
fn source() -> BTreeMap<Sha256, ReleaseFacts> {
    contracts()
        .into_iter()
        .flat_map(|(n, c)| {
            [
                (release(n), ReleaseFacts::eligible("acme", c.clone())),
                (release(BETA + n), ReleaseFacts::eligible("beta", c)),
            ]
        })
        .collect()
}

fn contracts() -> BTreeMap<u8, Contract> {
    let kv = || interface("kv", &["get", "put"]);
    let mut map = BTreeMap::new();
    for n in 1..=3 {
        map.insert(n, contract(vec![kv()]));
    }
    map.insert(
        4,
        contract(vec![Interface {
            docs: None,
            name: "kv".into(),
            functions: vec![
                function("get", ValType::U32),
                function("put", ValType::String),
            ],
        }]),
    );
    map.insert(5, contract(vec![interface("blob", &["read"])]));
    map
}

fn compile_with(
    c: &Catalog,
    map: &BTreeMap<Sha256, ReleaseFacts>,
) -> Result<Snapshot, DeploymentError> {
    let src = |r: &Sha256| Ok(map.get(r).cloned());
    route::compile(c, &src)
}

fn target(tenant: &str, route: Option<&str>, contract: &str, function: &str) -> Target {
    Target {
        tenant: tenant.into(),
        service: "api".into(),
        route: route.map(str::to_owned),
        contract: contract.into(),
        function: function.into(),
    }
}

/// `d` using release `n` of its own tenant (tenant `beta`'s release `n` is
/// [`BETA`]` + n`: a tenant deploys only its own releases).
fn with_release(mut d: DeploymentManifest, n: u8, weight: u32) -> DeploymentManifest {
    d.release = release(if d.tenant == "beta" { BETA + n } else { n });
    d.route_weight = weight;
    d
}

#[test]
fn default_and_named_routes() {
    let c = Catalog::default();
    let c = next(batch(
        &c,
        None,
        vec![
            with_release(m("blue"), 1, 3),
            with_release(m("green"), 2, 7),
        ],
    ));
    let snap = compile_with(&c, &source()).unwrap();
    assert_eq!(snap.generation, c.generation);
    assert_eq!(snap.records.len(), 2);
    let named = snap
        .resolve(&target("acme", Some("green"), "kv", "get"), None)
        .unwrap();
    assert_eq!(named.deployment_id, "green");
    assert_eq!(named.revision, c.objects["green"].manifest.revision_id());
    assert_eq!(named.release, release(2));
    assert_eq!(named.generation, 1);
    assert_eq!(named.catalog_generation, 1);
    assert_eq!(
        named.attributes[route::ATTR_DEPLOYMENT],
        String::from_utf8(c.objects["green"].manifest.canonical()).unwrap()
    );
    assert!(named.attributes[route::ATTR_EXPORTS].contains("\"kv\""));
    // The default route picks by weighted selection over both.
    let candidates: Vec<_> = c
        .objects
        .values()
        .map(|d| (d.manifest.revision_id(), d.manifest.route_weight))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for key in 0..64 {
        let key = format!("user-{key}");
        let got = snap
            .resolve(&target("acme", None, "kv", "put"), Some(&key))
            .unwrap();
        let want =
            route::select(&candidates, ["acme", "api", "default", "kv", "put", &key]).unwrap();
        assert_eq!(got.revision, want);
        seen.insert(got.deployment_id);
    }
    assert_eq!(seen.len(), 2, "both weights are reachable over 64 keys");
    // An explicit "default" is the default route.
    let a = snap
        .resolve(&target("acme", None, "kv", "get"), Some("k"))
        .unwrap();
    let b = snap
        .resolve(&target("acme", Some("default"), "kv", "get"), Some("k"))
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn unknown_routes_and_endpoints() {
    let c = catalog_of(vec![
        with_release(m("blue"), 1, 1),
        with_release(manifest("red", "beta", "web"), 5, 1),
    ]);
    let snap = compile_with(&c, &source()).unwrap();
    let e = snap
        .resolve(&target("acme", Some("nope"), "kv", "get"), None)
        .unwrap_err();
    assert_eq!(
        e,
        DeploymentError::RouteUnavailable {
            tenant: "acme".into(),
            service: "api".into(),
            route: "nope".into()
        }
    );
    assert_eq!(e.reason(), "route-unavailable");
    // Another tenant's route name, or another tenant entirely.
    assert!(matches!(
        snap.resolve(&target("acme", Some("red"), "blob", "read"), None),
        Err(DeploymentError::RouteUnavailable { .. })
    ));
    assert!(matches!(
        snap.resolve(&target("beta", None, "kv", "get"), None),
        Err(DeploymentError::RouteUnavailable { .. })
    ));
    // An existing route without the endpoint.
    let e = snap
        .resolve(&target("acme", None, "kv", "delete"), None)
        .unwrap_err();
    assert_eq!(
        e,
        DeploymentError::IncompatibleContract {
            route: "default".into(),
            contract: "kv".into(),
            function: "delete".into()
        }
    );
    assert_eq!(e.reason(), "incompatible-contract");
    assert!(matches!(
        snap.resolve(&target("acme", Some("blue"), "blob", "read"), None),
        Err(DeploymentError::IncompatibleContract { .. })
    ));
    // Bounds on the target.
    assert!(matches!(
        snap.resolve(&target("acme", Some(""), "kv", "get"), None),
        Err(DeploymentError::InvalidTarget { .. })
    ));
    let long = "k".repeat(route::MAX_ROUTING_KEY_BYTES + 1);
    assert!(matches!(
        snap.resolve(&target("acme", None, "kv", "get"), Some(&long)),
        Err(DeploymentError::InvalidTarget { .. })
    ));
}

#[test]
fn ambiguous_namespace() {
    let mut prod = with_release(m("green"), 1, 1);
    prod.namespace = Some("prod".into());
    let c = catalog_of(vec![with_release(m("blue"), 1, 1), prod.clone()]);
    let e = compile_with(&c, &source()).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::AmbiguousNamespace {
            tenant: "acme".into(),
            service: "api".into()
        }
    );
    assert_eq!(e.reason(), "ambiguous-deployment-namespace");
    // Another tenant may use another namespace for the same service.
    let mut other = with_release(manifest("red", "beta", "api"), 1, 1);
    other.namespace = Some("prod".into());
    let c = catalog_of(vec![with_release(m("blue"), 1, 1), other]);
    compile_with(&c, &source()).unwrap();
}

#[test]
fn schema_conflict_within_a_scope_only() {
    let c = catalog_of(vec![
        with_release(m("blue"), 1, 1),
        with_release(m("green"), 4, 1),
    ]);
    let e = compile_with(&c, &source()).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::SchemaConflict {
            tenant: "acme".into(),
            service: "api".into(),
            contract: "kv".into()
        }
    );
    assert_eq!(e.reason(), "contract-schema-conflict");
    // Across tenants, or across services, the same contract id may differ.
    let c = catalog_of(vec![
        with_release(m("blue"), 1, 1),
        with_release(manifest("red", "beta", "api"), 4, 1),
        with_release(manifest("white", "acme", "web"), 4, 1),
    ]);
    compile_with(&c, &source()).unwrap();
    // Equal metadata from two releases is no conflict.
    let c = catalog_of(vec![
        with_release(m("blue"), 1, 1),
        with_release(m("green"), 2, 1),
    ]);
    compile_with(&c, &source()).unwrap();
}

/// Compatibility compares the full canonical metadata: documentation alone
/// differing (equal types, equal names) is a schema conflict in one scope,
/// at the interface or at a function.
#[test]
fn documentation_is_part_of_the_schema_fingerprint() {
    let c = catalog_of(vec![
        with_release(m("blue"), 1, 1),
        with_release(m("green"), 2, 1),
    ]);
    let documented = |interface_docs: Option<&str>, function_docs: Option<&str>| {
        let mut map = source();
        let mut kv = interface("kv", &["get", "put"]);
        kv.docs = interface_docs.map(str::to_owned);
        kv.functions[0].docs = function_docs.map(str::to_owned);
        map.insert(
            release(2),
            ReleaseFacts::eligible("acme", contract(vec![kv])),
        );
        map
    };
    for (i, f) in [(Some("A store."), None), (None, Some("Reads."))] {
        let e = compile_with(&c, &documented(i, f)).unwrap_err();
        assert_eq!(e.reason(), "contract-schema-conflict", "{i:?} {f:?}");
    }
    // Empty documentation is documentation: not the same as none.
    let e = compile_with(&c, &documented(Some(""), None)).unwrap_err();
    assert_eq!(e.reason(), "contract-schema-conflict");
    compile_with(&c, &documented(None, None)).unwrap();
    assert!(
        contract(vec![interface("kv", &["get"])]).same_types(&contract(vec![{
            let mut kv = interface("kv", &["get"]);
            kv.docs = Some("A store.".into());
            kv
        }]))
    );
    assert!(!contract(vec![interface("kv", &["get"])])
        .same_types(&contract(vec![interface("kv", &["put"])])));
}

#[test]
fn malformed_contracts_and_unreadable_releases() {
    let c = next(apply(
        &Catalog::default(),
        None,
        with_release(m("blue"), 9, 1),
        None,
    ));
    let mut map = source();
    map.insert(
        release(9),
        ReleaseFacts::eligible(
            "acme",
            contract(vec![interface("kv", &["get"]), interface("kv", &["put"])]),
        ),
    );
    let e = compile_with(&c, &map).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::DuplicateContract {
            release: release(9),
            contract: "kv".into()
        }
    );
    assert_eq!(e.reason(), "duplicate-contract-id");
    map.insert(
        release(9),
        ReleaseFacts::eligible(
            "acme",
            contract(vec![interface("kv", &["get", "put", "get"])]),
        ),
    );
    let e = compile_with(&c, &map).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::DuplicateFunction {
            release: release(9),
            contract: "kv".into(),
            function: "get".into()
        }
    );
    assert_eq!(e.reason(), "duplicate-function-id");
    map.insert(
        release(9),
        ReleaseFacts::eligible(
            "acme",
            contract(vec![interface("kv", &["get"]), interface("empty", &[])]),
        ),
    );
    let e = compile_with(&c, &map).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::IncompleteContract {
            release: release(9),
            contract: "empty".into()
        }
    );
    assert_eq!(e.reason(), "incomplete-contract-metadata");
    map.remove(&release(9));
    let e = compile_with(&c, &map).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::ReleaseUnavailable {
            release: release(9),
            detail: "not in the release catalog".into()
        }
    );
    assert_eq!(e.reason(), "release-unavailable");
    assert!(e.retryable());
    map.insert(
        release(9),
        ReleaseFacts {
            owner: Some("acme".into()),
            standing: Standing::Unreadable("disk".into()),
        },
    );
    let e = compile_with(&c, &map).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::ReleaseUnavailable {
            release: release(9),
            detail: "disk".into()
        }
    );
}

#[test]
fn a_compilation_refused_at_a_release_asks_no_further() {
    // Deployments on three releases; the port cannot read the first (in
    // digest order): the refusal comes after one question, not three, and
    // the pure compilation over answers gathered beforehand refuses alike.
    let c = catalog_of(vec![
        with_release(m("a"), 1, 1),
        with_release(m("b"), 2, 1),
        with_release(manifest("e", "beta", "api"), 1, 1),
    ]);
    let map = source();
    let mut order = [release(1), release(2), release(BETA + 1)];
    order.sort();
    let first = order[0];
    let calls = RefCell::new(Vec::new());
    let src = |r: &Sha256| {
        calls.borrow_mut().push(*r);
        if *r == first {
            Err("unreadable".to_owned())
        } else {
            Ok(map.get(r).cloned())
        }
    };
    let e = route::compile(&c, &src).unwrap_err();
    assert!(
        matches!(&e, DeploymentError::ReleaseUnavailable { release, .. } if *release == first),
        "{e:?}"
    );
    assert_eq!(
        *calls.borrow(),
        vec![first],
        "one question, then the refusal"
    );
    calls.borrow_mut().clear();
    let gathered = route::gather(&c, &src);
    assert_eq!(calls.borrow().len(), 3, "gather asks every release");
    assert_eq!(
        route::compile_gathered(&c, &gathered, &BTreeSet::new()).unwrap_err(),
        e
    );
}

#[test]
fn each_release_is_fetched_once_per_compile() {
    // Interleaved ids: a and c on release 1, b and d on release 2.
    let c = catalog_of(vec![
        with_release(m("a"), 1, 1),
        with_release(m("b"), 2, 1),
        with_release(m("c"), 1, 1),
        with_release(m("d"), 2, 1),
        with_release(manifest("e", "beta", "api"), 1, 1),
    ]);
    let map = source();
    let calls = RefCell::new(Vec::new());
    let src = |r: &Sha256| {
        calls.borrow_mut().push(*r);
        Ok(map.get(r).cloned())
    };
    let snap = route::compile(&c, &src).unwrap();
    let mut want = vec![release(1), release(2), release(BETA + 1)];
    want.sort();
    assert_eq!(
        *calls.borrow(),
        want,
        "one fetch per release, in digest order"
    );
    // Again after an unchanged apply: again once each.
    let c = next(apply(&c, None, with_release(m("a"), 1, 1), None));
    calls.borrow_mut().clear();
    route::compile(&c, &src as &dyn ReleaseSource).unwrap();
    assert_eq!(*calls.borrow(), want);
    assert_eq!(
        snap.records
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e"]
    );
}

#[test]
fn pinned_routes_survive_later_generations() {
    let c = catalog_of(vec![
        with_release(m("blue"), 1, 1),
        with_release(m("green"), 2, 1),
    ]);
    let snap = Arc::new(compile_with(&c, &source()).unwrap());
    let pin = PinnedRoutes::pin(&snap);
    drop(snap);
    let before = pin
        .resolve(&target("acme", Some("blue"), "kv", "get"), None)
        .unwrap();
    let c2 = next(delete(&c, None, "blue", None));
    let c3 = next(apply(&c2, None, with_release(m("green"), 3, 9), None));
    let now = compile_with(&c3, &source()).unwrap();
    assert!(matches!(
        now.resolve(&target("acme", Some("blue"), "kv", "get"), None),
        Err(DeploymentError::RouteUnavailable { .. })
    ));
    assert_eq!(
        now.resolve(&target("acme", Some("green"), "kv", "get"), None)
            .unwrap()
            .release,
        release(3)
    );
    assert_eq!(pin.generation(), 1);
    let after = pin
        .resolve(&target("acme", Some("blue"), "kv", "get"), None)
        .unwrap();
    assert_eq!(before, after);
    assert_eq!(
        pin.resolve(&target("acme", Some("green"), "kv", "get"), None)
            .unwrap()
            .release,
        release(2)
    );
}

#[test]
fn empty_catalog_compiles_to_no_routes() {
    let snap = compile_with(&Catalog::default(), &source()).unwrap();
    assert_eq!(snap, Snapshot::empty(0));
    assert_eq!(snap.endpoint_entries(), 0);
    assert!(matches!(
        snap.resolve(&target("acme", None, "kv", "get"), None),
        Err(DeploymentError::RouteUnavailable { .. })
    ));
}

// ------------------------------------------------------------------ pages

const INSTANCE: u64 = 0x00c0_ffee;

/// acme: a, b, c, d, e on api (b, d on web); beta: x.
fn paged() -> Catalog {
    let mut list = Vec::new();
    for id in ["e", "b", "a", "d", "c"] {
        let service = if matches!(id, "b" | "d") {
            "web"
        } else {
            "api"
        };
        list.push(manifest(id, "acme", service));
    }
    list.push(manifest("x", "beta", "api"));
    catalog_of(list)
}

fn preq(tenant: &str, service: Option<&str>, size: u32, token: Option<String>) -> PageRequest {
    PageRequest {
        tenant: tenant.into(),
        service: service.map(str::to_owned),
        page_size: size,
        page_token: token,
    }
}

/// The page of `req` over `c`, as this instance with the full byte budget.
fn page_at(c: &Catalog, idx: &PageIndex, req: PageRequest) -> Result<page::Page, DeploymentError> {
    page::page(c, idx, &req, INSTANCE, MAX_PAGE_BYTES)
}

fn ids(p: &page::Page) -> Vec<&str> {
    p.deployments
        .iter()
        .map(|d| d.manifest.id.as_str())
        .collect()
}

/// Every id of a scope, page after page: `fetch` reads the page a
/// continuation (none at first) asks for, `check` vets each continuation.
fn drain(mut fetch: impl FnMut(Option<String>) -> page::Page, check: impl Fn(&str)) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let p = fetch(token);
        out.extend(ids(&p).into_iter().map(str::to_owned));
        match p.next_page_token {
            Some(t) => {
                check(&t);
                token = Some(t);
            }
            None => return out,
        }
    }
}

fn list_all(c: &Catalog, tenant: &str, service: Option<&str>, size: u32) -> Vec<String> {
    let idx = PageIndex::build(c);
    drain(
        |token| {
            let p = page_at(c, &idx, preq(tenant, service, size, token)).unwrap();
            assert_eq!(p.catalog_generation, c.generation);
            p
        },
        |t| assert_eq!(t.len(), page::TOKEN_LEN),
    )
}

#[test]
fn pages_are_ascending_with_continuation() {
    let c = paged();
    for size in [1, 2, 3, 5, 1000] {
        assert_eq!(list_all(&c, "acme", None, size), ["a", "b", "c", "d", "e"]);
        assert_eq!(list_all(&c, "acme", Some("api"), size), ["a", "c", "e"]);
        assert_eq!(list_all(&c, "acme", Some("web"), size), ["b", "d"]);
        assert_eq!(list_all(&c, "beta", None, size), ["x"]);
        assert!(list_all(&c, "gamma", None, size).is_empty());
        assert!(list_all(&c, "beta", Some("web"), size).is_empty());
    }
    // Page size may change between continuations.
    let idx = PageIndex::build(&c);
    let p = page_at(&c, &idx, preq("acme", None, 2, None)).unwrap();
    assert_eq!(ids(&p), ["a", "b"]);
    let p = page_at(&c, &idx, preq("acme", None, 3, p.next_page_token)).unwrap();
    assert_eq!(ids(&p), ["c", "d", "e"]);
    assert_eq!(p.next_page_token, None);
    // The records are the catalog's own.
    assert_eq!(p.deployments[0], c.objects["c"]);
}

#[test]
fn page_size_and_scope_are_checked() {
    let c = paged();
    let idx = PageIndex::build(&c);
    for size in [0, 1001] {
        let e = page_at(&c, &idx, preq("acme", None, size, None)).unwrap_err();
        assert_eq!(e, DeploymentError::PageSize(size));
        assert_eq!(e.reason(), "invalid-deployment-page-size");
        assert_eq!(e.class(), super::Class::InvalidArgument);
    }
    assert!(page_at(&c, &idx, preq("acme", None, 1000, None)).is_ok());
    for (tenant, service) in [
        ("", None),
        ("-acme", None),
        ("acme", Some("")),
        ("acme", Some("a b")),
    ] {
        let e = page_at(&c, &idx, preq(tenant, service, 10, None)).unwrap_err();
        assert_eq!(e, DeploymentError::PageScope);
        assert_eq!(e.reason(), "invalid-deployment-page-scope");
    }
    // An index of another generation is refused.
    let later = publish(&c);
    assert_eq!(
        page_at(&later, &idx, preq("acme", None, 1, None)).unwrap_err(),
        DeploymentError::StaleSnapshot
    );
}

fn first_token(c: &Catalog, service: Option<&str>) -> String {
    let idx = PageIndex::build(c);
    page_at(c, &idx, preq("acme", service, 1, None))
        .unwrap()
        .next_page_token
        .unwrap()
}

#[test]
fn bad_tokens_are_invalid() {
    let c = paged();
    let idx = PageIndex::build(&c);
    let token = first_token(&c, None);
    let try_token = |tenant: &str, service: Option<&str>, t: String, instance: u64| {
        page::page(
            &c,
            &idx,
            &preq(tenant, service, 1, Some(t)),
            instance,
            MAX_PAGE_BYTES,
        )
    };
    assert!(try_token("acme", None, token.clone(), INSTANCE).is_ok());
    let invalid = |r: Result<page::Page, DeploymentError>| {
        let e = r.unwrap_err();
        assert_eq!(e, DeploymentError::PageToken);
        assert_eq!(e.reason(), "invalid-deployment-page-token");
    };
    // Other scope (tenant, or service), other instance.
    invalid(try_token("beta", None, token.clone(), INSTANCE));
    invalid(try_token("acme", Some("api"), token.clone(), INSTANCE));
    invalid(try_token(
        "acme",
        None,
        first_token(&c, Some("api")),
        INSTANCE,
    ));
    invalid(try_token("acme", None, token.clone(), INSTANCE + 1));
    // Damaged: truncated, extended, uppercase, a non-hex digit, the wrong
    // version, a position moved, the last-id tag altered.
    invalid(try_token(
        "acme",
        None,
        token[..token.len() - 2].to_owned(),
        INSTANCE,
    ));
    invalid(try_token("acme", None, format!("{token}00"), INSTANCE));
    invalid(try_token("acme", None, token.to_uppercase(), INSTANCE));
    invalid(try_token(
        "acme",
        None,
        format!("{}g", &token[..token.len() - 1]),
        INSTANCE,
    ));
    invalid(try_token(
        "acme",
        None,
        format!("02{}", &token[2..]),
        INSTANCE,
    ));
    invalid(try_token("acme", None, String::new(), INSTANCE));
    let mut t = PageToken::decode(&token).unwrap();
    assert_eq!(t.position, 1);
    t.position = 2;
    invalid(try_token("acme", None, t.encode(), INSTANCE));
    t.position = 0;
    invalid(try_token("acme", None, t.encode(), INSTANCE));
    t.position = u64::MAX;
    invalid(try_token("acme", None, t.encode(), INSTANCE));
    let mut t = PageToken::decode(&token).unwrap();
    t.last[0] ^= 1;
    invalid(try_token("acme", None, t.encode(), INSTANCE));
    // A future generation of this instance.
    let mut t = PageToken::decode(&token).unwrap();
    t.generation += 1;
    invalid(try_token("acme", None, t.encode(), INSTANCE));
    // The raw bound is checked before parsing.
    invalid(try_token("acme", None, "0".repeat(7000), INSTANCE));
    invalid(try_token(
        "acme",
        None,
        "z".repeat(page::MAX_TOKEN_BYTES + 1),
        INSTANCE,
    ));
    assert_eq!(
        PageToken::decode(&"0".repeat(7000)),
        Err(DeploymentError::PageToken)
    );
    // Round trip.
    assert_eq!(PageToken::decode(&token).unwrap().encode(), token);
}

#[test]
fn older_tokens_expire_on_any_publication() {
    let c = paged();
    let token = first_token(&c, None);
    let expired = |later: &Catalog| {
        let idx = PageIndex::build(later);
        let e = page_at(later, &idx, preq("acme", None, 1, Some(token.clone()))).unwrap_err();
        assert_eq!(e, DeploymentError::PageTokenExpired);
        assert_eq!(e.reason(), "expired-deployment-page-token");
        assert!(e.retryable());
    };
    // A snapshot-only publication.
    expired(&publish(&c));
    // An unrelated write (another tenant).
    expired(&next(apply(
        &c,
        Some("beta"),
        manifest("y", "beta", "api"),
        None,
    )));
    // Two publications later, still expired (not invalid).
    expired(&publish(&publish(&c)));
    // A foreign instance's old token is invalid, not expired.
    let later = publish(&c);
    let idx = PageIndex::build(&later);
    assert_eq!(
        page::page(
            &later,
            &idx,
            &preq("acme", None, 1, Some(token.clone())),
            INSTANCE + 1,
            MAX_PAGE_BYTES
        )
        .unwrap_err(),
        DeploymentError::PageToken
    );
}

fn record_len(d: &VersionedDeployment) -> u64 {
    let canonical = String::from_utf8(d.manifest.canonical()).unwrap();
    format!(
        r#"{{"manifest":{canonical},"generation":{}}}"#,
        d.generation
    )
    .len() as u64
}

#[test]
fn the_byte_budget() {
    let c = paged();
    let idx = PageIndex::build(&c);
    let sizes: Vec<u64> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| record_len(&c.objects[*id]))
        .collect();
    for (id, size) in ["a", "b", "c", "d", "e"].iter().zip(&sizes) {
        assert_eq!(page::record_size(&c.objects[*id]), *size);
    }
    let get = |budget: u64, token: Option<String>| {
        page::page(&c, &idx, &preq("acme", None, 1000, token), INSTANCE, budget)
    };
    // Exact fit of two records: two, then a continuation after the second.
    let two = sizes[0] + sizes[1];
    let p = get(two, None).unwrap();
    assert_eq!(ids(&p), ["a", "b"]);
    let rest = get(MAX_PAGE_BYTES, p.next_page_token.clone()).unwrap();
    assert_eq!(ids(&rest), ["c", "d", "e"]);
    // One byte short of two: one record.
    let p = get(two - 1, None).unwrap();
    assert_eq!(ids(&p), ["a"]);
    let p = get(sizes[1] + sizes[2], p.next_page_token).unwrap();
    assert_eq!(ids(&p), ["b", "c"]);
    // Everything fits exactly: no continuation.
    let all: u64 = sizes.iter().sum();
    let p = get(all, None).unwrap();
    assert_eq!(p.deployments.len(), 5);
    assert_eq!(p.next_page_token, None);
    // The first record alone is too large.
    let e = get(sizes[0] - 1, None).unwrap_err();
    assert_eq!(
        e,
        DeploymentError::PageByteLimit {
            len: sizes[0],
            limit: sizes[0] - 1
        }
    );
    assert_eq!(e.reason(), "deployment-page-byte-limit");
    // ... also when it is the first of a continuation.
    let p = get(sizes[0], None).unwrap();
    assert!(matches!(
        get(sizes[1] - 1, p.next_page_token),
        Err(DeploymentError::PageByteLimit { .. })
    ));
}

#[test]
fn record_size_counts_stamp_digits() {
    let c = paged();
    let mut d = c.objects["a"].clone();
    let base = page::record_size(&d);
    d.generation = 1_000_000;
    assert_eq!(page::record_size(&d), base + 6);
    assert_eq!(page::record_size(&d), record_len(&d));
}

// ------------------------------------------------------------ the codec

/// A document just under the decoder's bound that omits every defaulted
/// collection: its canonical form adds them back.
fn near_bound_document() -> String {
    let head = format!(
        r#"{{"id":"blue","tenant":"acme","service":"api","release":"{}","route_weight":1,"annotations":{{"#,
        release(1)
    );
    let mut doc = head;
    let mut i = 0;
    loop {
        let entry = format!(r#""k{i}":"{}""#, "v".repeat(4000));
        if doc.len() + entry.len() + 3 > super::manifest::MAX_MANIFEST_BYTES {
            break;
        }
        if i > 0 {
            doc.push(',');
        }
        doc.push_str(&entry);
        i += 1;
    }
    let remaining = super::manifest::MAX_MANIFEST_BYTES - doc.len() - 2;
    let pad = remaining.saturating_sub(r#","p":"""#.len()).min(4096);
    doc.push_str(&format!(r#","p":"{}""#, "v".repeat(pad)));
    doc.push_str("}}");
    doc
}

/// Whatever the decoder accepts has canonical bytes it accepts again: a
/// document near the bound whose canonical form (defaults spelled out)
/// would pass it is refused up front, typed.
#[test]
fn an_accepted_manifest_redecodes_from_its_canonical_bytes() {
    let doc = near_bound_document();
    assert!(doc.len() <= super::manifest::MAX_MANIFEST_BYTES);
    match DeploymentManifest::decode(doc.as_bytes()) {
        Ok(m) => {
            let canonical = m.canonical();
            assert_eq!(DeploymentManifest::decode(&canonical), Ok(m));
        }
        Err(e) => assert!(
            matches!(e, DeploymentError::ManifestTooLarge { len, .. } if len > super::manifest::MAX_MANIFEST_BYTES as u64),
            "{e}"
        ),
    }
    // Below the bound by the defaults' length, it is accepted and round-trips.
    let m = DeploymentManifest::decode(doc.replacen("vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv", "", 1).as_bytes()).unwrap();
    assert_eq!(DeploymentManifest::decode(&m.canonical()), Ok(m));
}

/// The seam between the two catalogs: a deployment uses only a release its
/// own tenant published and that is still eligible. Another tenant's
/// release and a trusted-local one are refused exactly as a release that
/// does not exist; a revoked or retired one has its own reason; a stored
/// row that no longer passes stays listed and never resolves.
#[test]
fn a_tenant_deploys_only_its_own_eligible_releases() {
    let mut map = source();
    let kv = || contract(vec![interface("kv", &["get", "put"])]);
    map.insert(
        release(60),
        ReleaseFacts {
            owner: None,
            standing: Standing::Eligible(kv()),
        },
    );
    for (n, standing) in [(61, Standing::Revoked), (62, Standing::Retired)] {
        for (owner, n) in [("acme", n), ("beta", BETA + n)] {
            map.insert(
                release(n),
                ReleaseFacts {
                    owner: Some(owner.into()),
                    standing: standing.clone(),
                },
            );
        }
    }
    let src = |r: &Sha256| Ok(map.get(r).cloned());
    let admit = |tenant: &str, n: u8| {
        let mut d = manifest("x", tenant, "api");
        d.release = release(n);
        let decision = apply(&Catalog::default(), Some(tenant), d, None).unwrap();
        let next = decision.next.clone().unwrap();
        route::compile_admitting(&next, &src, &decision.applied())
    };
    // acme's own release resolves; beta's copy is beta's.
    admit("acme", 1).unwrap();
    admit("beta", BETA + 1).unwrap();
    // beta asking for acme's digest, for a trusted-local one and for one
    // that exists nowhere: the same answer, naming only what beta sent.
    let foreign = admit("beta", 1).unwrap_err();
    let local = admit("beta", 60).unwrap_err();
    let absent = admit("beta", 77).unwrap_err();
    for (e, n) in [(&foreign, 1), (&local, 60), (&absent, 77)] {
        assert_eq!(
            e,
            &DeploymentError::ReleaseNotFound {
                release: release(n)
            }
        );
        assert_eq!(e.reason(), "release-not-found");
        assert_eq!(e.class(), super::Class::NotFound);
        assert!(!e.retryable());
        assert_eq!(
            e.to_string().replace(&release(n).to_string(), "D"),
            absent.to_string().replace(&release(77).to_string(), "D"),
        );
    }
    // Nobody deploys a trusted-local release, acme included.
    assert_eq!(admit("acme", 60).unwrap_err().reason(), "release-not-found");
    // A visible revoked or retired release has its own reason; another
    // tenant's revoked release is still not found.
    let revoked = admit("acme", 61).unwrap_err();
    assert_eq!(
        revoked,
        DeploymentError::ReleaseRevoked {
            release: release(61)
        }
    );
    assert_eq!(revoked.reason(), "release-revoked");
    assert_eq!(revoked.class(), super::Class::FailedPrecondition);
    assert_eq!(admit("acme", 62).unwrap_err().reason(), "release-retired");
    assert_eq!(admit("beta", 61).unwrap_err().reason(), "release-not-found");
    assert_eq!(
        admit("beta", BETA + 62).unwrap_err().reason(),
        "release-retired"
    );
    // A stored generation holding beta's deployment of acme's release (a
    // catalog written before the rule): it opens, the row stays listed,
    // and beta's route never resolves to acme's code.
    let mut stolen = manifest("steal", "beta", "api");
    stolen.release = release(1);
    let c = catalog_of(vec![with_release(m("blue"), 1, 1), stolen]);
    let snap = route::compile(&c, &src).unwrap();
    assert_eq!(snap.records.len(), 2);
    snap.resolve(&target("acme", None, "kv", "get"), None)
        .unwrap();
    assert!(matches!(
        snap.resolve(&target("beta", None, "kv", "get"), None),
        Err(DeploymentError::IncompatibleContract { .. })
    ));
    // An untouched row of a revoked release does not refuse another
    // tenant's unrelated apply, but re-applying it does.
    let mut old = manifest("old", "acme", "web");
    old.release = release(61);
    let c = next(batch(&Catalog::default(), None, vec![old.clone()]));
    let d = apply(
        &c,
        Some("beta"),
        with_release(manifest("new", "beta", "api"), 1, 1),
        None,
    )
    .unwrap();
    route::compile_admitting(d.next.as_ref().unwrap(), &src, &d.applied()).unwrap();
    let d = apply(&c, Some("acme"), old, None).unwrap();
    assert_eq!(
        route::compile_admitting(d.next.as_ref().unwrap(), &src, &d.applied())
            .unwrap_err()
            .reason(),
        "release-revoked"
    );
}

/// Only a mutation that adds content may create or initialize a root.
#[test]
fn only_an_apply_may_initialize_a_root() {
    use crate::root::Access;
    let apply = Mutation::Apply {
        manifest: Box::new(m("blue")),
        expected: None,
    };
    let many = Mutation::ApplyMany {
        manifests: vec![m("blue")],
    };
    let delete = Mutation::Delete {
        id: "blue".into(),
        expected: None,
    };
    assert_eq!(apply.access(), Access::Write);
    assert_eq!(many.access(), Access::Write);
    assert_eq!(delete.access(), Access::Modify);
    assert_eq!(Mutation::PublishSnapshot.access(), Access::Modify);
}

// ------------------------------------------------------ durable cursors

/// Every page by cursor, each read through a freshly built index (as a
/// process that reopens the catalog for every page would).
fn list_by_cursor(c: &Catalog, tenant: &str, service: Option<&str>, size: u32) -> Vec<String> {
    drain(
        |cursor| {
            let idx = PageIndex::build(c);
            let req = preq(tenant, service, size, cursor);
            page::page_by_cursor(c, &idx, &req, MAX_PAGE_BYTES).unwrap()
        },
        |t| assert!(t.starts_with(page::CURSOR_PREFIX), "{t}"),
    )
}

#[test]
fn cursors_continue_across_reopens_with_every_id_once() {
    let c = paged();
    for size in [1, 2, 3, 5, 1000] {
        assert_eq!(
            list_by_cursor(&c, "acme", None, size),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(
            list_by_cursor(&c, "acme", Some("api"), size),
            ["a", "c", "e"]
        );
        assert_eq!(list_by_cursor(&c, "acme", Some("web"), size), ["b", "d"]);
        assert!(list_by_cursor(&c, "gamma", None, size).is_empty());
    }
    let many: Vec<DeploymentManifest> = (0..2_500).map(|i| m(&format!("d{i}"))).collect();
    let big = catalog_of(many);
    let listed = list_by_cursor(&big, "acme", None, 97);
    let mut want: Vec<String> = (0..2_500).map(|i| format!("d{i}")).collect();
    want.sort();
    assert_eq!(listed, want, "every id exactly once, in id order");
}

#[test]
fn a_cursor_expires_with_any_publication_and_names_only_its_catalog() {
    let c = paged();
    let idx = PageIndex::build(&c);
    let first =
        page::page_by_cursor(&c, &idx, &preq("acme", None, 2, None), MAX_PAGE_BYTES).unwrap();
    let cursor = first.next_page_token.unwrap();
    let again = |c: &Catalog, req: PageRequest| {
        page::page_by_cursor(c, &PageIndex::build(c), &req, MAX_PAGE_BYTES)
    };
    // A publication since: expired, never a page of the new catalog.
    let later = publish(&c);
    assert_eq!(
        again(&later, preq("acme", None, 2, Some(cursor.clone()))),
        Err(DeploymentError::PageTokenExpired)
    );
    // Another catalog at the same generation, with other content.
    let mut other_list: Vec<DeploymentManifest> =
        ["a", "b", "c", "d", "e"].iter().map(|id| m(id)).collect();
    other_list[4].route_weight = 9;
    other_list.push(manifest("x", "beta", "api"));
    let other = catalog_of(other_list);
    assert_eq!(other.generation, c.generation);
    assert_eq!(
        again(&other, preq("acme", None, 2, Some(cursor.clone()))),
        Err(DeploymentError::PageToken)
    );
    // Another scope, a damaged text, a future generation, an id the
    // scope does not hold: invalid, before any record is selected.
    assert_eq!(
        again(&c, preq("acme", Some("api"), 2, Some(cursor.clone()))),
        Err(DeploymentError::PageToken)
    );
    let parsed = page::Cursor::decode(&cursor).unwrap();
    assert_eq!(parsed.last, "b");
    for bad in [
        String::new(),
        "c1-".into(),
        cursor.replace("c1-", "c2-"),
        format!("{cursor}0"),
        cursor.to_uppercase(),
        page::Cursor {
            generation: c.generation + 1,
            ..parsed.clone()
        }
        .encode(),
        page::Cursor {
            last: "bb".into(),
            ..parsed.clone()
        }
        .encode(),
        page::Cursor {
            last: "x".into(),
            ..parsed.clone()
        }
        .encode(),
        "c1-".to_owned() + &"0".repeat(page::MAX_TOKEN_BYTES),
    ] {
        assert_eq!(
            again(&c, preq("acme", None, 2, Some(bad.clone()))),
            Err(DeploymentError::PageToken),
            "{bad:?}"
        );
    }
    // The cursor itself still continues its own catalog.
    let rest = again(&c, preq("acme", None, 2, Some(cursor))).unwrap();
    assert_eq!(ids(&rest), ["c", "d"]);
}

proptest::proptest! {
    /// The cursor decoder is total: any text is a cursor or a refusal.
    #[test]
    fn the_cursor_decoder_is_total(text in "(c1-)?[0-9a-f-]{0,80}") {
        let _ = page::Cursor::decode(&text);
    }
}
