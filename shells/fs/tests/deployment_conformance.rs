//! The deployment conformance suite against the filesystem repository
//! (`custos_fs::deployment::DeploymentRepository` over `RealFs`, one fresh
//! temporary directory per catalog, over the suite's release catalog).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use custos_conformance::deployment::{DeploymentBackend, FixtureReleases};
use custos_core::deployment::page::{Page, PageRequest};
use custos_core::deployment::route::{PinnedRoutes, ResolvedRevision, Target};
use custos_core::deployment::state::{Receipt, Request, VersionedDeployment};
use custos_core::deployment::DeploymentError;
use custos_fs::deployment::{DeploymentRepoError, DeploymentRepository};
use custos_fs::{Access, RealFs};

/// A repository in its own temporary directory.
struct FsDeployments {
    repo: DeploymentRepository<RealFs>,
    _dir: tempfile::TempDir,
}

fn fresh() -> FsDeployments {
    let dir = tempfile::tempdir().unwrap();
    let repo = DeploymentRepository::open(
        RealFs,
        &dir.path().join("deployments"),
        Arc::new(FixtureReleases),
        Access::Write,
    )
    .unwrap();
    FsDeployments { repo, _dir: dir }
}

/// A rule's refusal is the suite's answer; anything else (a filesystem
/// failure, an uncertain commit) fails the case loudly.
fn rule<T>(r: Result<T, DeploymentRepoError>) -> Result<T, DeploymentError> {
    r.map_err(|e| match e {
        DeploymentRepoError::Rule(e) => e,
        other => panic!("not a rule refusal: {other}"),
    })
}

impl DeploymentBackend for FsDeployments {
    fn mutate(&self, req: Request) -> Result<Receipt, DeploymentError> {
        rule(self.repo.mutate(req))
    }
    fn get(&self, tenant: &str, id: &str) -> Result<Option<VersionedDeployment>, DeploymentError> {
        rule(self.repo.get(tenant, id))
    }
    fn page(&self, req: &PageRequest) -> Result<Page, DeploymentError> {
        rule(self.repo.page(req))
    }
    fn resolve(
        &self,
        target: &Target,
        routing_key: Option<&str>,
    ) -> Result<ResolvedRevision, DeploymentError> {
        rule(self.repo.resolve(target, routing_key))
    }
    fn pin(&self) -> Result<PinnedRoutes, DeploymentError> {
        rule(self.repo.pin())
    }
    fn generation(&self) -> Result<u64, DeploymentError> {
        rule(self.repo.generation())
    }
}

custos_conformance::deployment_suite!(fs_deployment, fresh);
