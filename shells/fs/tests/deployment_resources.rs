//! Resource invariants of the deployment repository (routing metadata may
//! scale, runtime resources must not): a thousand dormant deployments
//! applied and resolved against the real release repository leave thread,
//! child-process, file-descriptor and socket counts unchanged and only the
//! three fixed files in the directory; a compilation fetches each distinct
//! release exactly once, however the deployment ids interleave.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::deployment::route::Target;
use custos_core::deployment::state::Mutation;
use custos_core::release::Sha256;
use custos_fs::deployment::DeploymentRepository;
use custos_fs::{Access, RealFs};

mod support;
use support::{apply_manifest, contract_of, names, open_releases_at, publish_app, request};

/// (threads, child processes, open fds, sockets) of this process.
fn resources() -> (usize, usize, usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    let mut children = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let c = std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        children += c.split_whitespace().count();
    }
    let mut fds = 0;
    let mut sockets = 0;
    for fd in std::fs::read_dir("/proc/self/fd").unwrap() {
        fds += 1;
        if let Ok(target) = std::fs::read_link(fd.unwrap().path()) {
            if target.to_string_lossy().starts_with("socket:") {
                sockets += 1;
            }
        }
    }
    (threads, children, fds, sockets)
}

fn manifest(id: &str, release: Sha256) -> DeploymentManifest {
    DeploymentManifest::decode(
        format!(
            r#"{{"id":"{id}","tenant":"acme","service":"s{}","release":"{release}","route_weight":1}}"#,
            id.len() % 3
        )
        .as_bytes(),
    )
    .unwrap()
}

#[test]
fn a_thousand_dormant_deployments_use_no_runtime_resources() {
    let tmp = tempfile::tempdir().unwrap();
    let releases = Arc::new(open_releases_at(&tmp.path().join("releases")));
    let digests: Vec<Sha256> = (0..4)
        .map(|n| publish_app(&releases, n, contract_of("api", vec![], vec![])))
        .collect();
    let source = support::source(&releases);
    let root = tmp.path().join("deployments");
    let before = resources();
    let repo = DeploymentRepository::open(RealFs, &root, source, Access::Write).unwrap();
    // Ids interleave across the four releases.
    let manifests: Vec<_> = (0..1000)
        .map(|i| manifest(&format!("d{i:04}"), digests[i % 4]))
        .collect();
    let fetches = releases.verification_snapshot().full_fetch_attempts;
    repo.mutate(request(Mutation::ApplyMany { manifests }))
        .unwrap();
    let per_compile = releases.verification_snapshot().full_fetch_attempts - fetches;
    assert_eq!(per_compile, 4, "one fetch per distinct release");
    // Ten single applies: still one fetch per distinct release each.
    for i in 0..10 {
        let f = releases.verification_snapshot().full_fetch_attempts;
        repo.mutate(apply_manifest(
            manifest(&format!("d{i:04}"), digests[(i + 1) % 4]),
            None,
        ))
        .unwrap();
        assert_eq!(releases.verification_snapshot().full_fetch_attempts - f, 4);
    }
    let fetches = releases.verification_snapshot().full_fetch_attempts;
    for i in 0..1000 {
        let id = format!("d{i:04}");
        let target = Target {
            tenant: "acme".into(),
            service: format!("s{}", id.len() % 3),
            route: Some(id.clone()),
            contract: "api".into(),
            function: "run".into(),
        };
        assert_eq!(repo.resolve(&target, Some("k")).unwrap().deployment_id, id);
    }
    assert_eq!(
        releases.verification_snapshot().full_fetch_attempts,
        fetches,
        "resolution fetches nothing"
    );
    let during = resources();
    drop(repo);
    let after = resources();
    // The open repository holds its lock file; nothing else.
    assert_eq!(
        (during.0, during.1, during.3),
        (before.0, before.1, before.3),
        "threads, children, sockets"
    );
    assert!(during.2 <= before.2 + 1, "fds {before:?} -> {during:?}");
    assert_eq!(after, before, "everything released on drop");
    assert_eq!(
        names(&root),
        [".catalog.lock", "INITIALIZED", "catalog.json"]
    );
    let size = std::fs::metadata(root.join("catalog.json")).unwrap().len();
    println!("1,000 deployments: catalog.json {size} bytes; resources {before:?} -> {during:?} -> {after:?}");
}
