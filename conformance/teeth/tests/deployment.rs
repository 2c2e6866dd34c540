//! The deployment suite has teeth: broken backends — wrappers over the
//! memory reference, each with one bug a repository author might write —
//! must each fail at least one case, and the honest wrapper none.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use custos_conformance::deployment::{
    deployment_cases, deployment_reopen_cases, release, DeploymentCatalog, FixtureReleases,
    MemoryDeployments,
};
use custos_core::deployment::page::{Page, PageRequest, PageToken, MAX_PAGE_SIZE};
use custos_core::deployment::route::{
    self, PinnedRoutes, ReleaseFacts, ReleaseSource, ResolvedRevision, Standing, Target,
};
use custos_core::deployment::state::{Mutation, Receipt, Request, VersionedDeployment};
use custos_core::deployment::DeploymentError;
use custos_core::release::Sha256;
use custos_teeth::{
    assert_reopen_caught, failing_cases, reopen_failing_cases, Disk, Verdicts,
    HONEST_WITHOUT_RECOVERY, LOSSES,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// An apply identical to the stored manifest is skipped as a no-op:
    /// the stale object stamp is kept and nothing is published.
    UnchangedApplyKeepsItsStamp,
    /// An expected generation of 0 is read as "no precondition".
    ExpectedZeroMeansUnconditional,
    /// A delete looks the id up without the caller's tenant.
    DeleteLooksUpUnscoped,
    /// A batch is applied member by member: a refused member leaves the
    /// members before it applied.
    BatchAppliesMemberByMember,
    /// The delete receipt is built after the commit and stamps the deleted
    /// record with the new catalog generation.
    DeleteReceiptRestamped,
    /// The adapter drops the managed operation id: every retry runs again.
    OperationIdDropped,
    /// An unknown named route falls back to the service's default route.
    UnknownRouteFallsBack,
    /// The routing key is not passed to the selection hash.
    RoutingKeyDropped,
    /// Default-route candidates are weighted in deployment-id order, not
    /// ascending revision order.
    CandidatesInIdOrder,
    /// A continuation resumes at the last returned record (an inclusive
    /// cursor): each later page repeats it.
    CursorRepeatsLastRow,
    /// A page size above the maximum is clamped instead of refused.
    OversizedPageClamped,
    /// The token is not bound to the catalog generation: it survives a
    /// publication.
    TokenNotBoundToGeneration,
    /// The release lookup checks only that a release exists: it reports
    /// every release as the deploying tenant's own.
    ReleaseOwnerIgnored,
    /// The release lookup ignores the lifecycle: a revoked or retired
    /// release is reported eligible.
    RevokedReleaseAdmitted,
    /// Another tenant's release is refused with its own answer (a
    /// permission refusal), an oracle for that tenant's digests.
    ForeignReleaseRefusedDifferently,
    /// Pages list records in apply order (by object generation, a
    /// table's insertion order), not id order, with a cursor of its own.
    PagesInApplyOrder,
}

const BUGS: [Bug; 16] = [
    Bug::PagesInApplyOrder,
    Bug::UnchangedApplyKeepsItsStamp,
    Bug::ExpectedZeroMeansUnconditional,
    Bug::DeleteLooksUpUnscoped,
    Bug::BatchAppliesMemberByMember,
    Bug::DeleteReceiptRestamped,
    Bug::OperationIdDropped,
    Bug::UnknownRouteFallsBack,
    Bug::RoutingKeyDropped,
    Bug::CandidatesInIdOrder,
    Bug::CursorRepeatsLastRow,
    Bug::OversizedPageClamped,
    Bug::TokenNotBoundToGeneration,
    Bug::ReleaseOwnerIgnored,
    Bug::RevokedReleaseAdmitted,
    Bug::ForeignReleaseRefusedDifferently,
];

/// The suite's release catalog as a broken backend looks it up.
struct BrokenSource {
    bug: Option<Bug>,
    /// The tenant of the request being decided.
    asker: Arc<Mutex<Option<String>>>,
}

impl ReleaseSource for BrokenSource {
    fn release(&self, r: &Sha256) -> Result<Option<ReleaseFacts>, String> {
        let Some(mut facts) = FixtureReleases.release(r)? else {
            return Ok(None);
        };
        match self.bug {
            Some(Bug::ReleaseOwnerIgnored) => {
                if let Some(asker) = self.asker.lock().unwrap().clone() {
                    facts.owner = Some(asker);
                }
            }
            Some(Bug::RevokedReleaseAdmitted) => {
                if matches!(facts.standing, Standing::Revoked | Standing::Retired) {
                    let greeter = FixtureReleases.release(&release(1))?;
                    if let Some(ReleaseFacts { standing, .. }) = greeter {
                        facts.standing = standing;
                    }
                }
            }
            _ => {}
        }
        Ok(Some(facts))
    }
}

struct Broken {
    bug: Option<Bug>,
    inner: MemoryDeployments,
    asker: Arc<Mutex<Option<String>>>,
    /// The last record of each page that issued a token.
    last_of: Mutex<HashMap<String, VersionedDeployment>>,
}

impl Broken {
    fn new(bug: Option<Bug>) -> Self {
        let asker = Arc::new(Mutex::new(None));
        let source = BrokenSource {
            bug,
            asker: Arc::clone(&asker),
        };
        Broken {
            bug,
            inner: MemoryDeployments::over(Arc::new(source)),
            asker,
            last_of: Mutex::new(HashMap::new()),
        }
    }

    /// Every record of the request's scope in apply order, paged by an
    /// offset token of this backend's own.
    fn page_in_apply_order(&self, req: &PageRequest) -> Result<Page, DeploymentError> {
        let mut all = Vec::new();
        let mut token = None;
        loop {
            let page = self.inner.page(&PageRequest {
                page_size: MAX_PAGE_SIZE,
                page_token: token,
                ..req.clone()
            })?;
            all.extend(page.deployments);
            token = page.next_page_token;
            if token.is_none() {
                break;
            }
        }
        all.sort_by_key(|d| d.generation);
        let start: usize = req
            .page_token
            .as_deref()
            .and_then(|t| t.strip_prefix("apply-order:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let end = (start + req.page_size as usize).min(all.len());
        Ok(Page {
            deployments: all[start.min(end)..end].to_vec(),
            next_page_token: (end < all.len()).then(|| format!("apply-order:{end}")),
            catalog_generation: self.inner.generation()?,
        })
    }

    fn apply_one(&self, mut req: Request) -> Result<Receipt, DeploymentError> {
        let Mutation::Apply { manifest, expected } = &mut req.mutation else {
            return self.inner.mutate(req);
        };
        match self.bug {
            Some(Bug::ExpectedZeroMeansUnconditional) if *expected == Some(0) => *expected = None,
            Some(Bug::UnchangedApplyKeepsItsStamp) => {
                let stored = self.inner.get(&manifest.tenant, &manifest.id)?;
                let normalized = manifest.as_ref().clone().validate()?;
                if let Some(d) = stored.filter(|d| d.manifest == normalized) {
                    return Ok(Receipt::Applied {
                        deployments: vec![d],
                        catalog_generation: self.inner.generation()?,
                    });
                }
            }
            _ => {}
        }
        self.inner.mutate(req)
    }

    fn mutate_inner(&self, mut req: Request) -> Result<Receipt, DeploymentError> {
        if self.bug == Some(Bug::OperationIdDropped) {
            req.operation = None;
        }
        match (&mut req.mutation, self.bug) {
            (Mutation::Apply { .. }, _) => return self.apply_one(req),
            (Mutation::Delete { expected, .. }, Some(Bug::ExpectedZeroMeansUnconditional))
                if *expected == Some(0) =>
            {
                *expected = None;
            }
            (Mutation::Delete { .. }, Some(Bug::DeleteLooksUpUnscoped)) => req.tenant = None,
            (Mutation::ApplyMany { manifests }, Some(Bug::BatchAppliesMemberByMember)) => {
                let mut deployments = Vec::new();
                let mut catalog_generation = self.inner.generation()?;
                for m in std::mem::take(manifests) {
                    let one = Request {
                        tenant: req.tenant.clone(),
                        mutation: Mutation::Apply {
                            manifest: Box::new(m),
                            expected: None,
                        },
                        compiled_at: 0,
                        operation: None,
                    };
                    if let Receipt::Applied {
                        deployments: d,
                        catalog_generation: g,
                    } = self.inner.mutate(one)?
                    {
                        deployments.extend(d);
                        catalog_generation = g;
                    }
                }
                if deployments.is_empty() {
                    return Ok(Receipt::Unchanged { catalog_generation });
                }
                deployments.sort_by(|a, b| a.manifest.id.cmp(&b.manifest.id));
                return Ok(Receipt::Applied {
                    deployments,
                    catalog_generation,
                });
            }
            _ => {}
        }
        let mut receipt = self.inner.mutate(req)?;
        if let (
            Receipt::Deleted {
                deployment,
                catalog_generation,
            },
            Some(Bug::DeleteReceiptRestamped),
        ) = (&mut receipt, self.bug)
        {
            deployment.generation = *catalog_generation;
        }
        Ok(receipt)
    }

    /// The default-route pick over candidates in id order.
    fn pick_in_id_order(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        let page = self.inner.page(&PageRequest {
            tenant: target.tenant.clone(),
            service: Some(target.service.clone()),
            page_size: MAX_PAGE_SIZE,
            page_token: None,
        })?;
        let mut total = 0;
        let mut cumulative = Vec::new();
        for d in &page.deployments {
            total += u64::from(d.manifest.route_weight);
            cumulative.push(total);
        }
        let hash = route::selection_hash([
            &target.tenant,
            &target.service,
            "default",
            &target.contract,
            &target.function,
            routing_key.unwrap_or(""),
        ]);
        match route::pick(&cumulative, hash).and_then(|i| page.deployments.get(i)) {
            Some(d) => {
                let mut named = target.clone();
                named.route = Some(d.manifest.id.clone());
                self.inner.resolve(&named, routing_key)
            }
            None => self.inner.resolve(target, routing_key),
        }
    }
}

impl DeploymentCatalog for Broken {
    type Error = DeploymentError;

    fn mutate(&self, req: Request) -> Result<Receipt, DeploymentError> {
        *self.asker.lock().unwrap() = req.tenant.clone();
        let result = self.mutate_inner(req);
        match (result, self.bug) {
            (
                Err(DeploymentError::ReleaseNotFound { release: r }),
                Some(Bug::ForeignReleaseRefusedDifferently),
            ) if FixtureReleases.release(&r).ok().flatten().is_some() => {
                Err(DeploymentError::TenantMismatch {
                    id: r.to_string(),
                    tenant: "another tenant".into(),
                })
            }
            (result, _) => result,
        }
    }
    fn get(&self, tenant: &str, id: &str) -> Result<Option<VersionedDeployment>, DeploymentError> {
        self.inner.get(tenant, id)
    }
    fn page(&self, req: &PageRequest) -> Result<Page, DeploymentError> {
        if self.bug == Some(Bug::PagesInApplyOrder) {
            return self.page_in_apply_order(req);
        }
        let mut req = req.clone();
        match self.bug {
            Some(Bug::OversizedPageClamped) => req.page_size = req.page_size.min(MAX_PAGE_SIZE),
            Some(Bug::TokenNotBoundToGeneration) => {
                if let Some(t) = &req.page_token {
                    if let Ok(mut token) = PageToken::decode(t) {
                        token.generation = self.inner.generation()?;
                        req.page_token = Some(token.encode());
                    }
                }
            }
            _ => {}
        }
        let mut page = self.inner.page(&req)?;
        if self.bug == Some(Bug::CursorRepeatsLastRow) {
            let mut last_of = self.last_of.lock().unwrap();
            if let Some(prev) = req.page_token.as_ref().and_then(|t| last_of.get(t)) {
                page.deployments.insert(0, prev.clone());
            }
            if let (Some(t), Some(last)) = (&page.next_page_token, page.deployments.last()) {
                last_of.insert(t.clone(), last.clone());
            }
        }
        Ok(page)
    }
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        match self.bug {
            Some(Bug::RoutingKeyDropped) => self.inner.resolve(target, None),
            Some(Bug::CandidatesInIdOrder) if target.route.is_none() => {
                self.pick_in_id_order(target, routing_key)
            }
            Some(Bug::UnknownRouteFallsBack) => match self.inner.resolve(target, routing_key) {
                Err(DeploymentError::RouteUnavailable { .. }) if target.route.is_some() => {
                    let mut default = target.clone();
                    default.route = None;
                    self.inner.resolve(&default, routing_key)
                }
                other => other,
            },
            _ => self.inner.resolve(target, routing_key),
        }
    }
    fn pin(&self) -> Result<PinnedRoutes, DeploymentError> {
        self.inner.pin()
    }
    fn generation(&self) -> Result<u64, DeploymentError> {
        self.inner.generation()
    }
}

#[test]
fn every_broken_deployment_backend_fails_a_case() {
    let cases = deployment_cases::<Broken>();
    let honest = failing_cases(&cases, &|| Broken::new(None));
    assert!(honest.is_empty(), "the honest wrapper fails {honest:?}");
    let failures = |bug| failing_cases(&cases, &move || Broken::new(Some(bug)));
    Verdicts::of("deployment", BUGS, failures).assert_all_caught(8);
}

/// A deployment catalog over a [`Disk`] of acknowledged mutations: each
/// open replays the disk into a fresh memory catalog, as the mode allows.
struct Durable {
    inner: MemoryDeployments,
    disk: Arc<Disk<Request>>,
}

impl Durable {
    fn open(disk: &Arc<Disk<Request>>) -> Self {
        let inner = MemoryDeployments::over(Arc::new(FixtureReleases));
        for r in disk.replay() {
            let _ = inner.mutate(r);
        }
        Durable {
            inner,
            disk: Arc::clone(disk),
        }
    }
}

impl DeploymentCatalog for Durable {
    type Error = DeploymentError;

    fn mutate(&self, req: Request) -> Result<Receipt, DeploymentError> {
        let receipt = self.inner.mutate(req.clone())?;
        self.disk.record(req);
        Ok(receipt)
    }
    fn get(&self, tenant: &str, id: &str) -> Result<Option<VersionedDeployment>, DeploymentError> {
        self.inner.get(tenant, id)
    }
    fn page(&self, req: &PageRequest) -> Result<Page, DeploymentError> {
        self.inner.page(req)
    }
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        self.inner.resolve(target, routing_key)
    }
    fn pin(&self) -> Result<PinnedRoutes, DeploymentError> {
        self.inner.pin()
    }
    fn generation(&self) -> Result<u64, DeploymentError> {
        self.inner.generation()
    }
}

#[test]
fn every_deployment_catalog_that_loses_durability_fails_a_reopen_case() {
    // A memory replay has no publication association to recover.
    let cases = deployment_reopen_cases();
    assert_reopen_caught(
        "deployment reopen",
        HONEST_WITHOUT_RECOVERY,
        LOSSES,
        |mode| reopen_failing_cases(&cases, mode, Durable::open),
    );
}
