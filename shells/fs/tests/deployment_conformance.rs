//! The deployment conformance suite against the filesystem repository
//! (`custos_fs::deployment::DeploymentRepository` over `RealFs`, one fresh
//! temporary directory per catalog, over the suite's release catalog). The
//! repository implements core's port itself; [`Guarded`] only keeps its
//! directory alive.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use custos_conformance::deployment::{FixtureReleases, Guarded};
use custos_fs::deployment::DeploymentRepository;
use custos_fs::{Access, RealFs};

type FsDeployments = Guarded<DeploymentRepository<RealFs>, tempfile::TempDir>;

fn fresh() -> FsDeployments {
    let dir = tempfile::tempdir().unwrap();
    let catalog = DeploymentRepository::open(
        RealFs,
        &dir.path().join("deployments"),
        Arc::new(FixtureReleases),
        Access::Write,
    )
    .unwrap();
    Guarded {
        catalog,
        guard: dir,
    }
}

/// A catalog directory, opened afresh (owner lock, checksum and route
/// validation included) by every call.
fn place() -> impl Fn() -> DeploymentRepository<RealFs> {
    let dir = tempfile::tempdir().unwrap();
    move || {
        DeploymentRepository::open(
            RealFs,
            &dir.path().join("deployments"),
            Arc::new(FixtureReleases),
            Access::Write,
        )
        .unwrap()
    }
}

custos_conformance::deployment_suite!(fs_deployment, fresh, reopen: place);
