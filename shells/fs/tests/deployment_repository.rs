//! The deployment repository on real files over the real release
//! repository: open and ownership, the record and its verification at
//! reopen, the commit point, readers, and crash states of every mutation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_core::Class;
use std::path::Path;
use std::sync::Arc;

use custos_core::deployment::route::{ReleaseFacts, ReleaseSource, Target};
use custos_core::deployment::state::{Mutation, Receipt, Request};
use custos_core::release::contract::ValType;
use custos_core::release::Sha256;
use custos_core::root::MARKER_FILE;
use custos_fs::crash::{crash_states, image_of, materialize};
use custos_fs::deployment::{
    DeploymentRepoError, DeploymentRepository, CATALOG_FILE, PENDING_FILE,
};
use custos_fs::release::ReleaseRepository;
use custos_fs::{Access, RealFs, RecordingFs, ROOT_LOCKED};

mod support;
use support::{
    acme_page, apply_manifest, contract_returning, delete, manifest, names, open_releases_at,
    publish_two, source,
};

fn target() -> Target {
    Target {
        tenant: "acme".into(),
        service: "api".into(),
        route: None,
        contract: "api".into(),
        function: "run".into(),
    }
}

fn generation_of(r: &Receipt) -> u64 {
    match r {
        Receipt::Applied { deployments, .. } => deployments[0].generation,
        Receipt::Deleted { deployment, .. } => deployment.generation,
        other => other.catalog_generation(),
    }
}

#[test]
fn apply_resolve_reopen_and_the_three_fixed_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (rel, [r1, r2]) = publish_two(tmp.path());
    let root = tmp.path().join("a/b/deployments");
    let repo = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write).unwrap();
    assert_eq!(repo.generation().unwrap(), 0);
    let first = repo
        .mutate(apply_manifest(manifest("blue", r1, 3), Some(0)))
        .unwrap();
    assert_eq!(generation_of(&first), 1);
    let second = repo
        .mutate(apply_manifest(manifest("green", r2, 1), Some(0)))
        .unwrap();
    assert_eq!(second.catalog_generation(), 2);
    let resolved = repo.resolve(&target(), Some("user-7")).unwrap();
    assert!(["blue", "green"].contains(&resolved.deployment_id.as_str()));
    let named = repo
        .resolve(
            &Target {
                route: Some("green".into()),
                ..target()
            },
            None,
        )
        .unwrap();
    assert_eq!(named.release, r2);
    let pin = repo.pin().unwrap();
    // A stale precondition is refused and changes nothing on disk.
    let before = image_of(&root).unwrap();
    let err = repo
        .mutate(apply_manifest(manifest("blue", r2, 1), Some(7)))
        .unwrap_err();
    assert_eq!(err.reason(), "deployment-generation-conflict");
    assert_eq!(err.class(), Class::StateConflict);
    assert_eq!(image_of(&root).unwrap(), before);
    repo.mutate(delete("green", Some(2))).unwrap();
    // The pin still holds its generation.
    assert_eq!(pin.generation(), 2);
    assert_eq!(
        pin.resolve(
            &Target {
                route: Some("green".into()),
                ..target()
            },
            None
        )
        .unwrap()
        .release,
        r2
    );
    let page = repo.page(&acme_page(10)).unwrap();
    assert_eq!(page.deployments.len(), 1);
    assert_eq!(
        names(repo.root()),
        [".catalog.lock", MARKER_FILE, CATALOG_FILE]
    );
    // A second opener is refused.
    let err = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write)
        .err()
        .unwrap();
    assert_eq!(err.reason(), ROOT_LOCKED);
    drop(repo);
    let again = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write).unwrap();
    assert_eq!(again.generation().unwrap(), 3);
    assert_eq!(again.get("acme", "blue").unwrap().unwrap().generation, 1);
    assert_eq!(again.get("other", "blue").unwrap(), None);
    assert_eq!(
        again
            .resolve(&target(), Some("user-7"))
            .unwrap()
            .deployment_id,
        "blue"
    );
}

#[test]
fn damaged_missing_or_unverifiable_state_fails_the_open_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let (rel, [r1, _]) = publish_two(tmp.path());
    let root = tmp.path().join("deployments");
    let repo = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write).unwrap();
    repo.mutate(apply_manifest(manifest("blue", r1, 3), None))
        .unwrap();
    drop(repo);
    let record = root.join(CATALOG_FILE);
    let good = std::fs::read(&record).unwrap();

    // A flipped byte: the checksum catches it.
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x20;
    std::fs::write(&record, &bad).unwrap();
    let before = image_of(&root).unwrap();
    let err = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write)
        .err()
        .unwrap();
    assert_eq!(err.class(), Class::CorruptArtifact, "{err}");
    assert_eq!(
        image_of(&root).unwrap(),
        before,
        "a refused open changes nothing"
    );

    // A marker without its state.
    std::fs::remove_file(&record).unwrap();
    let err = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write)
        .err()
        .unwrap();
    assert_eq!(err.class(), Class::CorruptArtifact, "{err}");
    assert!(!record.exists(), "lost state is never re-created");
    std::fs::write(&record, &good).unwrap();

    // A release catalog that no longer has the release.
    let empty = Arc::new(open_releases_at(&tmp.path().join("other")));
    let err = DeploymentRepository::open(RealFs, &root, source(&empty), Access::Write)
        .err()
        .unwrap();
    assert_eq!(err.reason(), "release-unavailable", "{err}");

    // Changed contract metadata under the same digest: the rebuilt
    // snapshot differs from the persisted one.
    let changed: Arc<dyn ReleaseSource + Send + Sync> = Arc::new(|_: &Sha256| {
        Ok::<_, String>(Some(ReleaseFacts::eligible(
            "acme",
            contract_returning(ValType::U64),
        )))
    });
    let err = DeploymentRepository::open(RealFs, &root, changed, Access::Write)
        .err()
        .unwrap();
    assert_eq!(err.reason(), "deployment-snapshot-mismatch", "{err}");

    // And the good record still opens.
    assert!(DeploymentRepository::open(RealFs, &root, source(&rel), Access::Read).is_ok());
}

#[test]
fn a_user_directory_is_refused_and_an_interrupted_initialization_completed() {
    let tmp = tempfile::tempdir().unwrap();
    let (rel, _) = publish_two(tmp.path());
    let user = tmp.path().join("user");
    std::fs::create_dir(&user).unwrap();
    std::fs::write(user.join("catalog.json"), b"{\"mine\":true}").unwrap();
    let before = image_of(&user).unwrap();
    for access in [Access::Write, Access::Read] {
        let err = DeploymentRepository::open(RealFs, &user, source(&rel), access)
            .err()
            .unwrap();
        assert_eq!(err.class(), Class::InvalidArgument, "{err}");
    }
    assert_eq!(image_of(&user).unwrap(), before);

    // An initialization interrupted after the record, before the marker.
    let root = tmp.path().join("deployments");
    drop(DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write).unwrap());
    std::fs::remove_file(root.join(MARKER_FILE)).unwrap();
    assert!(DeploymentRepository::open(RealFs, &root, source(&rel), Access::Read).is_err());
    let repo = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Write).unwrap();
    assert!(root.join(MARKER_FILE).exists());
    drop(repo);
}

#[test]
fn a_failed_directory_sync_after_the_rename_is_uncertain_but_installed() {
    let tmp = tempfile::tempdir().unwrap();
    let (rel, [r1, _]) = publish_two(tmp.path());
    let root = tmp.path().join("deployments");
    let fs = RecordingFs::new(RealFs);
    let repo = DeploymentRepository::open(fs.clone(), &root, source(&rel), Access::Write).unwrap();
    // Find the root sync after the rename of one apply, then fail it.
    fs.clear_trace();
    repo.mutate(apply_manifest(manifest("blue", r1, 1), None))
        .unwrap();
    let trace = fs.trace();
    let rename = trace
        .iter()
        .position(|r| matches!(r.op, custos_fs::Op::Rename { .. }))
        .unwrap();
    let sync = rename
        + trace[rename..]
            .iter()
            .position(|r| matches!(r.op, custos_fs::Op::SyncDir { .. }))
            .unwrap();
    fs.fail_at(sync);
    let err = repo
        .mutate(apply_manifest(manifest("blue", r1, 2), Some(1)))
        .unwrap_err();
    let DeploymentRepoError::Uncertain(u) = &err else {
        panic!("{err}");
    };
    let detail = u.detail().unwrap();
    assert_eq!(detail.deployment_id, "blue");
    assert_eq!(detail.object_generation, 2);
    assert_eq!(detail.catalog_generation, 2);
    assert_eq!(detail.operation, "apply");
    assert!(detail.committed);
    assert_eq!(err.reason(), "commit-durability-uncertain");
    // Installed: readers see it.
    assert_eq!(repo.get("acme", "blue").unwrap().unwrap().generation, 2);
    drop(repo);
    let reopened = DeploymentRepository::open(RealFs, &root, source(&rel), Access::Read).unwrap();
    assert_eq!(reopened.generation().unwrap(), 2);
}

/// Every crash state of every mutation: after recovery the catalog holds
/// every acknowledged mutation and nothing unacknowledged; open never fails
/// on crash debris.
#[test]
fn every_crash_state_of_every_mutation_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let (rel, [r1, r2]) = publish_two(tmp.path());
    let root = tmp.path().join("d");
    let fs = RecordingFs::new(RealFs);
    let steps: Vec<Request> = vec![
        apply_manifest(manifest("blue", r1, 1), Some(0)),
        Request {
            tenant: Some("acme".into()),
            mutation: Mutation::ApplyMany {
                manifests: vec![manifest("blue", r1, 2), manifest("green", r2, 1)],
            },
            compiled_at: 0,
            operation: None,
        },
        apply_manifest(manifest("blue", r2, 1), Some(1)), // stale: refused
        delete("green", Some(2)),
    ];
    let mut checked = 0usize;
    // First open: initialization.
    let initial = custos_fs::crash::Image::new();
    let repo = DeploymentRepository::open(fs.clone(), &root, source(&rel), Access::Write).unwrap();
    let root = repo.root().to_path_buf();
    checked += check_states(&initial, &fs.trace(), &root, &rel, &[], 0);
    let mut acked: Vec<u64> = vec![0];
    for req in steps {
        let before = image_of(&root).unwrap();
        fs.clear_trace();
        let result = repo.mutate(req);
        let prev = *acked.last().unwrap();
        let now = match &result {
            Ok(r) => r.catalog_generation(),
            Err(_) => prev,
        };
        checked += check_states(&before, &fs.trace(), &root, &rel, &acked, now);
        acked.push(now);
    }
    assert!(checked > 20, "only {checked} crash states");
    println!("deployment crash states checked: {checked}");
}

/// Reopens every crash state of `trace` (from `before`) in a scratch copy:
/// the generation found is the previous acknowledged one or the new one
/// (`now`, once the operation returned it must be `now`).
fn check_states(
    before: &custos_fs::crash::Image,
    trace: &[custos_fs::Recorded],
    root: &Path,
    rel: &Arc<ReleaseRepository<RealFs>>,
    acked: &[u64],
    now: u64,
) -> usize {
    let states = crash_states(before, trace);
    let prev = acked.last().copied();
    for (k, image) in &states {
        let scratch = tempfile::tempdir().unwrap();
        let copy = scratch.path().join("d");
        std::fs::create_dir_all(&copy).unwrap();
        materialize(image, root, &copy).unwrap();
        let opened = DeploymentRepository::open(RealFs, &copy, source(rel), Access::Write);
        let g = match opened {
            Ok(r) => r.generation().unwrap(),
            Err(e) => panic!("crash state after {k} ops does not open: {e}"),
        };
        let complete = *k == trace.len();
        let ok = match prev {
            None => g == 0,
            Some(p) if complete => g == now || (now == p && g == p),
            Some(p) => g == p || g == now,
        };
        assert!(
            ok,
            "after {k}/{} ops: generation {g}, acked {prev:?}, now {now}",
            trace.len()
        );
        assert!(!copy.join(PENDING_FILE).exists(), "pending debris removed");
    }
    states.len()
}
