//! Multi-process crash test of the deployment repository. The test binary
//! re-executes itself as a child (`CUSTOS_DEPLOY_KILL_ROOT=<dir>`) that
//! opens the deployment catalog over a real release catalog with
//! production syncs and applies and deletes deployments from a small pool
//! of ids in a loop — conditional and unconditional, plus deliberately
//! stale conditional applies that must be refused. Before each mutation it
//! appends `TRY …` to an ack file; after each acknowledged one it appends
//! the receipt (`ACK APPLY|DELETE id … object-generation
//! catalog-generation`) and fsyncs the file. The parent SIGKILLs the child
//! after a delay drawn from a per-iteration seed (deterministic: the base
//! seed is fixed unless `CUSTOS_SIGKILL_SEED` replays another run;
//! `CUSTOS_TORTURE_ITERATIONS` sets the count),
//! reopens the catalog — it must always open — and checks every
//! acknowledged receipt: the catalog generation is the last acknowledged
//! one (or one more, when a mutation was cut off after its commit point);
//! every acknowledged apply not acknowledged-deleted later is present with
//! its exact manifest fields and object generation (hence ≥ the acked
//! one); every acknowledged delete is absent unless re-applied later; the
//! one mutation cut off mid-way is wholly old or wholly new; nothing else
//! is listed; the routes resolve to a present deployment.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use custos_core::deployment::manifest::DeploymentManifest;
use custos_core::deployment::route::{ReleaseSource, Target};
use custos_core::deployment::state::{Mutation, Receipt};
use custos_core::release::bounds::Bounds;
use custos_core::release::contract::MagicOnly;
use custos_fs::deployment::{DeploymentRepository, ReleaseCatalog, PENDING_FILE};
use custos_fs::release::ReleaseRepository;
use custos_fs::{Access, RealFs};
use custos_torture::{self as torture, splitmix, xorshift, Replay};

mod support;
use support::{acme_page, digests, publish_two, request};

const ROOT_ENV: &str = "CUSTOS_DEPLOY_KILL_ROOT";
const ACK_ENV: &str = "CUSTOS_DEPLOY_KILL_ACKS";
const SEED_ENV: &str = "CUSTOS_DEPLOY_KILL_CHILD_SEED";
/// The default count, so that `cargo test` stays fast; `make torture` sets more.
const DEFAULT_ITERATIONS: u64 = 24;
const DEFAULT_SEED: u64 = 0x00C0_FFEE_D15E_A5E5;
const IDS: [&str; 5] = ["d0", "d1", "d2", "d3", "d4"];
/// A child that was never killed stops by itself after this long.
const CHILD_CAP: Duration = Duration::from_secs(20);

/// Publishes the two releases under `base/releases`.
fn publish_releases(base: &Path) {
    publish_two(base);
}

/// The release catalog, shared (read-only opens coexist).
fn releases(base: &Path) -> Arc<dyn ReleaseSource + Send + Sync> {
    let rel = ReleaseRepository::open_read_only(
        RealFs,
        &base.join("releases"),
        Bounds::default(),
        Arc::new(MagicOnly),
    )
    .unwrap();
    Arc::new(ReleaseCatalog(Arc::new(rel)))
}

fn manifest(id: &str, release: usize, weight: u32) -> DeploymentManifest {
    support::manifest(id, digests()[release], weight)
}

/// Appends one line to the ack file and fsyncs it.
fn record(ack: &mut File, line: &str) {
    ack.write_all(format!("{line}\n").as_bytes()).unwrap();
    ack.sync_data().unwrap();
}

/// Child mode: a no-op unless `CUSTOS_DEPLOY_KILL_ROOT` names a base.
#[test]
fn deployment_sigkill_child() {
    let Ok(base) = std::env::var(ROOT_ENV) else {
        return;
    };
    let base = PathBuf::from(base);
    let mut ack = OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::var(ACK_ENV).unwrap())
        .unwrap();
    let mut rng: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let repo = match DeploymentRepository::open(
        RealFs,
        &base.join("deployments"),
        releases(&base),
        Access::Write,
    ) {
        Ok(r) => r,
        Err(e) => {
            record(&mut ack, &format!("ERROR open: {e}"));
            panic!("open: {e}");
        }
    };
    record(&mut ack, &format!("OPEN {}", repo.generation().unwrap()));
    let started = Instant::now();
    while started.elapsed() < CHILD_CAP {
        if let Err(e) = child_step(&repo, &mut ack, &mut rng) {
            record(&mut ack, &format!("ERROR {e}"));
            panic!("{e}");
        }
    }
}

/// One random mutation of the child, acknowledged in `ack`.
fn child_step(
    repo: &DeploymentRepository<RealFs>,
    ack: &mut File,
    rng: &mut u64,
) -> Result<(), String> {
    let id = IDS[usize::try_from(xorshift(rng) % 5).unwrap()];
    let choice = xorshift(rng) % 10;
    let live = repo.get("acme", id).map_err(|e| e.to_string())?;
    let live_gen = live.as_ref().map(|d| d.generation);
    if choice == 9 {
        // A stale conditional apply: refused, nothing changes.
        let stale = live_gen.unwrap_or(0) + 3;
        let err = repo
            .mutate(request(Mutation::Apply {
                manifest: Box::new(manifest(id, 0, 1)),
                expected: Some(stale),
            }))
            .err()
            .ok_or("a stale apply was accepted")?;
        if err.reason() != "deployment-generation-conflict" {
            return Err(format!("stale apply: {err}"));
        }
        record(ack, &format!("STALE {id}"));
        return Ok(());
    }
    let conditional = choice % 2 == 0;
    if choice < 3 && live.is_some() {
        let expected = if conditional { live_gen } else { None };
        record(ack, &format!("TRY DELETE {id}"));
        let r = repo
            .mutate(request(Mutation::Delete {
                id: id.into(),
                expected,
            }))
            .map_err(|e| format!("delete {id}: {e}"))?;
        let Receipt::Deleted {
            deployment,
            catalog_generation,
        } = r
        else {
            return Err(format!("delete receipt {r:?}"));
        };
        let c = u8::from(conditional);
        let g = deployment.generation;
        record(
            ack,
            &format!("ACK DELETE {id} {c} {g} {catalog_generation}"),
        );
        return Ok(());
    }
    let weight = 1 + u32::try_from(xorshift(rng) % 9).unwrap();
    let rel = usize::try_from(xorshift(rng) % 2).unwrap();
    let expected = conditional.then_some(live_gen.unwrap_or(0));
    record(ack, &format!("TRY APPLY {id} {weight} {rel}"));
    let r = repo
        .mutate(request(Mutation::Apply {
            manifest: Box::new(manifest(id, rel, weight)),
            expected,
        }))
        .map_err(|e| format!("apply {id}: {e}"))?;
    let Receipt::Applied {
        deployments,
        catalog_generation,
    } = r
    else {
        return Err(format!("apply receipt {r:?}"));
    };
    let [d] = deployments.as_slice() else {
        return Err("an apply installed several records".into());
    };
    let c = u8::from(conditional);
    let g = d.generation;
    record(
        ack,
        &format!("ACK APPLY {id} {weight} {rel} {c} {g} {catalog_generation}"),
    );
    Ok(())
}

/// Runs one child for `delay`, SIGKILLs it; returns the complete lines of
/// its ack file (a torn last line is not acknowledged).
fn run_child(base: &Path, iteration: u64, seed: u64, delay: Duration) -> Vec<String> {
    let ack_path = base.join(format!("acks-{iteration}.log"));
    let mut cmd = torture::child("deployment_sigkill_child");
    cmd.env(ROOT_ENV, base)
        .env(ACK_ENV, &ack_path)
        .env(SEED_ENV, seed.to_string());
    let killed = torture::Running::spawn(cmd).kill_after(delay);
    let text = std::fs::read_to_string(&ack_path).unwrap_or_default();
    assert!(
        killed.exited_early.is_none(),
        "iteration {iteration}: the child exited by itself ({:?}):\n{text}",
        killed.exited_early
    );
    let lines = torture::complete_lines(&text);
    if let Some(e) = lines.iter().find(|l| l.starts_with("ERROR")) {
        panic!("iteration {iteration}: the child failed: {e}");
    }
    lines
}

/// What the parent knows of one id: weight, release index, object
/// generation (`None`: absent).
type Model = BTreeMap<String, Option<(u32, usize, u64)>>;

/// A mutation begun and not acknowledged: the id and what it would leave.
type InFlight = Option<(String, Option<(u32, usize)>)>;

#[derive(Default)]
struct Tally {
    applies: u64,
    deletes: u64,
    conditional: u64,
    stale: u64,
    cut_committed: u64,
    cut_lost: u64,
    killed_with_acks: u64,
    /// Acknowledged state found missing or changed after a kill.
    lost: u64,
}

/// Folds one child's ack lines into `model`; returns the last
/// acknowledged catalog generation and the mutation cut off, if any.
fn fold(lines: &[String], model: &mut Model, mut last: u64, tally: &mut Tally) -> (u64, InFlight) {
    let mut pending: InFlight = None;
    let mut acks = 0;
    for line in lines {
        let w: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> u64 { w[i].parse().unwrap() };
        match w.as_slice() {
            ["OPEN", g] => assert_eq!(g.parse::<u64>().unwrap(), last, "child opened {line}"),
            ["TRY", "APPLY", id, weight, rel] => {
                pending = Some((
                    (*id).into(),
                    Some((weight.parse().unwrap(), rel.parse().unwrap())),
                ));
            }
            ["TRY", "DELETE", id] => pending = Some(((*id).into(), None)),
            ["ACK", "APPLY", id, ..] => {
                let (g, c) = (num(6), num(7));
                assert_eq!(pending.take().map(|p| p.0).as_deref(), Some(*id));
                assert!(c == last + 1 && g == c, "apply receipt {line} after {last}");
                model.insert((*id).into(), Some((num(3) as u32, num(4) as usize, g)));
                tally.applies += 1;
                tally.conditional += num(5);
                last = c;
                acks += 1;
            }
            ["ACK", "DELETE", id, ..] => {
                let (g, c) = (num(4), num(5));
                assert_eq!(pending.take().map(|p| p.0).as_deref(), Some(*id));
                let had = model.get(*id).copied().flatten().map(|m| m.2);
                assert_eq!(had, Some(g), "delete receipt {line}: the deleted version");
                assert_eq!(c, last + 1, "delete receipt {line} after {last}");
                model.insert((*id).into(), None);
                tally.deletes += 1;
                tally.conditional += num(3);
                last = c;
                acks += 1;
            }
            ["STALE", _] => tally.stale += 1,
            _ => panic!("unexpected ack line {line:?}"),
        }
    }
    if acks > 0 {
        tally.killed_with_acks += 1;
    }
    (last, pending)
}

/// Checks the reopened catalog against the acknowledged receipts; returns
/// the model as found (the base of the next child).
fn check(
    repo: &DeploymentRepository<RealFs>,
    iteration: u64,
    model: &Model,
    last: u64,
    pending: &InFlight,
    tally: &mut Tally,
) -> (Model, u64) {
    let g = repo.generation().unwrap();
    assert!(
        g >= last,
        "iteration {iteration}: generation {g} < acked {last}"
    );
    let committed = g == last + 1;
    assert!(
        g == last || (committed && pending.is_some()),
        "iteration {iteration}: generation {g}, last acked {last}, in flight {pending:?}"
    );
    if pending.is_some() {
        if committed {
            tally.cut_committed += 1;
        } else {
            tally.cut_lost += 1;
        }
    }
    let mut found = Model::new();
    for id in IDS {
        let mut want = model.get(id).copied().flatten();
        if let (true, Some((p, after))) = (committed, pending) {
            if p == id {
                want = after.map(|(w, r)| (w, r, g));
            }
        }
        let got = repo.get("acme", id).unwrap().map(|d| {
            let r = digests()
                .iter()
                .position(|x| *x == d.manifest.release)
                .unwrap();
            (d.manifest.route_weight, r, d.generation)
        });
        if got != want {
            tally.lost += 1;
            eprintln!(
                "iteration {iteration}: {id} is {got:?}, acknowledged {want:?} (last acked {last})"
            );
        }
        found.insert(id.into(), got);
    }
    let page = repo.page(&acme_page(100)).unwrap();
    let present = found.values().filter(|v| v.is_some()).count();
    assert_eq!(
        page.deployments.len(),
        present,
        "iteration {iteration}: listing"
    );
    assert_eq!(page.catalog_generation, g);
    let target = Target {
        tenant: "acme".into(),
        service: "api".into(),
        route: None,
        contract: "api".into(),
        function: "run".into(),
    };
    if present > 0 {
        let r = repo.resolve(&target, Some("user-1")).unwrap();
        assert!(found[&r.deployment_id].is_some());
        assert_eq!(r.catalog_generation, g);
    }
    (found, g)
}

#[test]
fn sigkilled_deployer_loses_no_acknowledged_mutation() {
    if std::env::var(ROOT_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    publish_releases(&base);
    let source = releases(&base);
    let seed = torture::seed("deployment", Some(DEFAULT_SEED));
    let iterations = torture::iterations(DEFAULT_ITERATIONS);
    let started = Instant::now();
    let mut model = Model::new();
    let mut last = 0u64;
    let mut tally = Tally::default();
    for iteration in 0..iterations {
        let _replay = Replay {
            store: "deployment",
            seed,
            iteration,
        };
        let s = splitmix(seed ^ iteration);
        let delay = Duration::from_millis(20 + s % 150);
        let lines = run_child(&base, iteration, splitmix(s), delay);
        let (acked, pending) = fold(&lines, &mut model, last, &mut tally);
        let repo = DeploymentRepository::open(
            RealFs,
            &base.join("deployments"),
            Arc::clone(&source),
            Access::Write,
        )
        .unwrap_or_else(|e| panic!("iteration {iteration}: reopen after SIGKILL: {e}"));
        assert!(!repo.root().join(PENDING_FILE).exists());
        (model, last) = check(&repo, iteration, &model, acked, &pending, &mut tally);
    }
    let t = &tally;
    println!(
        "torture deployment: {iterations} SIGKILLs, {} acknowledged operations checked, {} lost; \
         {} kills landed after at least one ack; {} applies and {} deletes ({} conditional), {} \
         stale applies refused; {} mutations cut off ({} found committed, {} not); final catalog \
         generation {last}; seed {seed}; {:.1}s",
        t.applies + t.deletes + t.stale,
        t.lost,
        t.killed_with_acks,
        t.applies,
        t.deletes,
        t.conditional,
        t.stale,
        t.cut_committed + t.cut_lost,
        t.cut_committed,
        t.cut_lost,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(t.lost, 0, "acknowledged mutations lost (seed {seed})");
    assert!(
        t.killed_with_acks >= iterations / 2,
        "the child rarely got to mutate"
    );
    assert!(t.deletes > 0 && t.applies > 0);
}
