//! The deployment repository's memory regression: 32 real persisted
//! releases, each carrying 3 MiB of interface documentation, published, applied and reopened by three fresh
//! subprocesses. Two shapes catch two leaks independently:
//!
//! * `distinct` — 32 distinct releases deployed in one scope (one tenant and
//!   service; their contracts are equal, so compatible): aggregate retention
//!   of fetched releases or their metadata would hold 32 × 3 MiB;
//! * `shared` — one release deployed in 32 distinct scopes (services of its
//!   tenant: a tenant deploys only its own releases): retention of a
//!   canonical contract tree per scope would.
//!
//! Each catalog must stay under 512 KiB (routes keep fingerprints, never
//! documentation) and the peak resident growth of the apply and of the
//! reopen process under 64 MiB — test headroom, not a heap quota. Growth is
//! measured from `/proc/self/status` over the whole child process: its peak
//! (`VmHWM`, reset through `/proc/self/clear_refs` when the child starts)
//! minus its resident size at that start, so the release catalog's own open
//! (which verifies all 32 releases) counts too. The measured step's growth
//! alone (peak reset again just before it) is printed beside it.
//!
//! The instrument is shown able to fail: a `retaining` run wraps the release
//! source in one that keeps every fetched contract (the leak the regression
//! exists for) and must exceed the allowance.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::deployment::route::{ReleaseFacts, ReleaseSource, Standing, Target};
use custos_core::deployment::state::Mutation;
use custos_core::release::contract::{Contract, Function, Interface};
use custos_core::release::Sha256;
use custos_fs::deployment::{DeploymentRepository, ReleaseCatalog};
use custos_fs::release::ReleaseRepository;
use custos_fs::{Access, RealFs};

mod support;
use support::{apply_manifest, component, open_releases_at, publish_app, request, status_kib};

const RELEASES: u32 = 32;
const DOC_BYTES: usize = 3 * 1024 * 1024;
const GROWTH_ALLOWANCE_KIB: u64 = 64 * 1024;
const CATALOG_LIMIT: u64 = 512 * 1024;

const PHASE_ENV: &str = "CUSTOS_MEMORY_PHASE";
const ROOT_ENV: &str = "CUSTOS_MEMORY_ROOT";
const SHAPE_ENV: &str = "CUSTOS_MEMORY_SHAPE";

/// Resets the peak resident size to the current one; returns the current.
fn reset_peak() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM via /proc/self/clear_refs");
    status_kib("VmRSS:")
}

/// Peak resident growth of one process, in KiB: of the whole process from
/// its start (before any repository is opened), and of the measured step
/// alone (from just before it).
#[derive(Clone, Copy, Debug)]
struct Growth {
    process: u64,
    step: u64,
}

/// A process's meter: started first thing in the child.
struct Meter {
    start: u64,
    before_step: u64,
    base: u64,
}

impl Meter {
    fn start() -> Self {
        Meter {
            start: reset_peak(),
            before_step: 0,
            base: 0,
        }
    }

    /// Marks the start of the measured step.
    fn step(&mut self) {
        self.before_step = status_kib("VmHWM:");
        self.base = reset_peak();
    }

    fn stop(&self) -> Growth {
        let peak = status_kib("VmHWM:");
        Growth {
            process: peak.max(self.before_step).saturating_sub(self.start),
            step: peak.saturating_sub(self.base),
        }
    }
}

/// 3 MiB of documentation. Equal in every release (so the 32 releases of one
/// scope stay compatible), but each release's copy is decoded from its own
/// metadata file: nothing shares it.
fn docs() -> String {
    let line = "Adds two numbers; saturates at the type's bounds. ";
    line.repeat(DOC_BYTES / line.len() + 1)[..DOC_BYTES].to_owned()
}

fn contract() -> Contract {
    Contract {
        interfaces: vec![Interface {
            name: "api".into(),
            docs: Some(docs()),
            functions: vec![Function {
                name: "run".into(),
                docs: Some("Runs.".into()),
                params: vec![],
                results: vec![],
            }],
        }],
    }
}

fn open_releases(root: &Path) -> Arc<ReleaseRepository<RealFs>> {
    Arc::new(open_releases_at(&root.join("releases")))
}

/// Publishes the releases, each with its own component (distinct bytes per
/// release, [`component`]).
fn publish_all(root: &Path) {
    let repo = open_releases(root);
    for n in 0..RELEASES {
        publish_app(&repo, n, contract());
    }
}

fn digests(repo: &ReleaseRepository<RealFs>) -> Vec<Sha256> {
    (0..RELEASES)
        .map(|n| {
            // A release's digest is its component's.
            let d = Sha256::of(&component(n));
            assert!(repo.membership(&d).is_some(), "release {n} published");
            d
        })
        .collect()
}

/// The deployments of one shape, all tenant `acme`'s: service, id and
/// release of each.
fn deployments(shape: &str, digests: &[Sha256]) -> Vec<(String, String, Sha256)> {
    (0..RELEASES as usize)
        .map(|i| match shape {
            "shared" => (format!("s{i:02}"), format!("d{i:02}"), digests[0]),
            _ => ("calc".to_owned(), format!("d{i:02}"), digests[i]),
        })
        .collect()
}

fn manifest(service: &str, id: &str, release: Sha256) -> DeploymentManifest {
    DeploymentManifest::decode(
        format!(
            r#"{{"id":"{id}","tenant":"acme","service":"{service}","release":"{release}","route_weight":1}}"#
        )
        .as_bytes(),
    )
    .unwrap()
}

/// A release source that keeps every contract it fetched: the leak the
/// regression exists to catch.
struct Retaining {
    inner: ReleaseCatalog<RealFs>,
    kept: Mutex<Vec<Contract>>,
}

impl ReleaseSource for Retaining {
    fn release(&self, release: &Sha256) -> Result<Option<ReleaseFacts>, String> {
        let facts = self.inner.release(release)?;
        if let Some(ReleaseFacts {
            standing: Standing::Eligible(c),
            ..
        }) = &facts
        {
            self.kept.lock().unwrap().push(c.clone());
        }
        Ok(facts)
    }
}

fn source(
    releases: &Arc<ReleaseRepository<RealFs>>,
    retaining: bool,
) -> Arc<dyn ReleaseSource + Send + Sync> {
    let inner = ReleaseCatalog(Arc::clone(releases));
    if retaining {
        Arc::new(Retaining {
            inner,
            kept: Mutex::new(Vec::new()),
        })
    } else {
        Arc::new(inner)
    }
}

/// Every deployment resolves to its own release.
fn check_resolves(repo: &DeploymentRepository<RealFs>, deps: &[(String, String, Sha256)]) {
    for (service, id, release) in deps {
        let target = Target {
            tenant: "acme".into(),
            service: service.clone(),
            route: Some(id.clone()),
            contract: "api".into(),
            function: "run".into(),
        };
        let r = repo.resolve(&target, None).unwrap();
        assert_eq!((&r.deployment_id, r.release), (id, *release));
    }
}

/// The apply process: a batch of the 32 deployments, then one reweighting
/// apply, which recompiles the whole desired state again.
fn apply_phase(root: &Path, shape: &str, retaining: bool) -> Growth {
    let mut meter = Meter::start();
    let releases = open_releases(root);
    let deps = deployments(shape, &digests(&releases));
    let repo = DeploymentRepository::open(
        RealFs,
        &root.join("deployments"),
        source(&releases, retaining),
        Access::Write,
    )
    .unwrap();
    meter.step();
    let manifests = deps.iter().map(|(s, id, r)| manifest(s, id, *r)).collect();
    repo.mutate(request(Mutation::ApplyMany { manifests }))
        .unwrap();
    let (service, id, r) = &deps[0];
    let mut m = manifest(service, id, *r);
    m.route_weight = 2;
    repo.mutate(apply_manifest(m, None)).unwrap();
    let growth = meter.stop();
    check_resolves(&repo, &deps);
    growth
}

/// The restart process: the release catalog opened, then the deployment
/// catalog reopened (every release fetched, routes rebuilt and compared).
fn reopen_phase(root: &Path, shape: &str, retaining: bool) -> Growth {
    let mut meter = Meter::start();
    let releases = open_releases(root);
    let deps = deployments(shape, &digests(&releases));
    let src = source(&releases, retaining);
    meter.step();
    let repo =
        DeploymentRepository::open(RealFs, &root.join("deployments"), src, Access::Write).unwrap();
    let growth = meter.stop();
    check_resolves(&repo, &deps);
    growth
}

/// The child entry point: one phase, its growth printed for the parent.
#[test]
fn memory_child() {
    let (Ok(phase), Ok(root)) = (std::env::var(PHASE_ENV), std::env::var(ROOT_ENV)) else {
        return;
    };
    let root = Path::new(&root);
    let shape = std::env::var(SHAPE_ENV).unwrap();
    let retaining = phase.ends_with("-retaining");
    let growth = match phase.trim_end_matches("-retaining") {
        "publish" => {
            publish_all(root);
            Growth {
                process: 0,
                step: 0,
            }
        }
        "apply" => apply_phase(root, &shape, retaining),
        "reopen" => reopen_phase(root, &shape, retaining),
        other => panic!("unknown phase {other}"),
    };
    println!("GROWTH_KIB={} STEP_KIB={}", growth.process, growth.step);
}

/// Runs one phase in a fresh process; returns its peak resident growth.
fn run(root: &Path, phase: &str, shape: &str) -> Growth {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "memory_child", "--nocapture", "--test-threads=1"])
        .env(PHASE_ENV, phase)
        .env(ROOT_ENV, root)
        .env(SHAPE_ENV, shape)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{phase} ({shape}) failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| -> u64 {
        stdout
            .split(name)
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{phase} ({shape}) printed no {name}: {stdout}"))
    };
    Growth {
        process: field("GROWTH_KIB="),
        step: field("STEP_KIB="),
    }
}

fn regression(shape: &str) {
    let tmp = tempfile::tempdir().unwrap();
    run(tmp.path(), "publish", shape);
    let apply = run(tmp.path(), "apply", shape);
    let size = std::fs::metadata(tmp.path().join("deployments/catalog.json"))
        .unwrap()
        .len();
    let reopen = run(tmp.path(), "reopen", shape);
    println!(
        "{shape}: {RELEASES} releases x {DOC_BYTES} B of documentation: peak RSS growth \
         apply process +{} KiB (apply step +{} KiB), reopen process +{} KiB (open step +{} KiB), \
         catalog {size} B",
        apply.process, apply.step, reopen.process, reopen.step
    );
    assert!(size < CATALOG_LIMIT, "{shape}: catalog {size} B");
    // The whole process from its start: stricter than the step alone.
    assert!(
        apply.process < GROWTH_ALLOWANCE_KIB,
        "{shape}: apply {apply:?} KiB"
    );
    assert!(
        reopen.process < GROWTH_ALLOWANCE_KIB,
        "{shape}: reopen {reopen:?} KiB"
    );
}

#[test]
fn distinct_releases_in_one_scope_stay_within_the_allowance() {
    if std::env::var(PHASE_ENV).is_ok() {
        return;
    }
    regression("distinct");
}

#[test]
fn one_release_across_scopes_stays_within_the_allowance() {
    if std::env::var(PHASE_ENV).is_ok() {
        return;
    }
    regression("shared");
}

/// The instrument can fail: a source that keeps every fetched contract
/// exceeds the allowance in both the apply and the reopen process.
#[test]
fn a_retaining_release_source_exceeds_the_allowance() {
    if std::env::var(PHASE_ENV).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    run(tmp.path(), "publish", "distinct");
    let apply = run(tmp.path(), "apply-retaining", "distinct");
    let reopen = run(tmp.path(), "reopen-retaining", "distinct");
    println!("retaining source: peak RSS growth apply {apply:?} KiB, reopen {reopen:?} KiB");
    // Even the step alone, measured after the opens' freed heap is reused.
    assert!(
        apply.step > GROWTH_ALLOWANCE_KIB,
        "apply grew only {apply:?} KiB"
    );
    assert!(
        reopen.step > GROWTH_ALLOWANCE_KIB,
        "reopen grew only {reopen:?} KiB"
    );
}
