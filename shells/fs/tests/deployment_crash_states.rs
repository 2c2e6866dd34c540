//! Crash-state enumeration of the deployment repository: the
//! recorded traces of real operations — the first open of a nonexistent
//! root, applies (a create, a second create, a conditional reweight), a
//! conditional apply with a stale generation (refused: no write), a
//! delete, and a reopen — are replayed by [`crash_states_with`] into the
//! crash states of every prefix (unsynced entries lost, unsynced data
//! empty or torn at sector granularity, renames absent or half-done, where
//! POSIX allows). Each distinct state is written into a fresh directory and
//! reopened with [`DeploymentRepository::open`], which must succeed, and
//! then:
//!
//! - every mutation acknowledged before the crash is visible (generation
//!   and every deployment record exactly as acknowledged);
//! - the mutation in flight shows its old or its new state, never anything
//!   else, and the new one once it returned; the pending file is gone;
//! - an interrupted mutation redone on the reopened repository lands, and
//!   stays after another reopen.
//!
//! CI (default): the bounded sample of [`Options::ci`]. Deep
//! (`CUSTOS_CRASH_DEEP=1`, `make crash-deep`): every combination and every
//! torn boundary, over a longer history (a batch of 48 deployments, then
//! four rounds of conditional reweights of each and a delete of each), so
//! the record is many sectors long.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use custos_core::deployment::state::{Mutation, Request, VersionedDeployment};
use custos_core::release::Sha256;
use custos_fs::crash::{
    crash_states_with, digest, image_of, materialize, Distinct, Image, NoSync, Options,
};
use custos_fs::deployment::{DeploymentRepository, PENDING_FILE};
use custos_fs::{Access, Fs, RealFs, Recorded, RecordingFs, LOCK_FILE};

mod support;
use support::{apply, delete, manifest, releases, request, Source};

/// The protocols whose distinct crash states are counted.
const MUTATION: &str = "deployment mutation";
/// The first open and a reopen.
const OPEN: &str = "deployment open";

/// What a reader sees: the catalog generation and each known deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    generation: u64,
    records: BTreeMap<String, Option<VersionedDeployment>>,
}

fn state<F: Fs>(repo: &DeploymentRepository<F>, ids: &[String]) -> State {
    State {
        generation: repo.generation().unwrap(),
        records: ids
            .iter()
            .map(|id| (id.clone(), repo.get("acme", id).unwrap()))
            .collect(),
    }
}

/// One traced step: a mutation (`None`: a reopen) and the states around it.
struct Step<'a> {
    name: String,
    protocol: &'static str,
    req: Option<&'a Request>,
    before: State,
    after: State,
}

/// Per-step counts.
#[derive(Debug, Default)]
struct Tally {
    states: usize,
    checked: usize,
    old: usize,
    new: usize,
    retried: usize,
}

/// What every step of one history shares.
struct Ctx<'a> {
    /// The directory holding the root.
    parent: &'a Path,
    /// The root's name in it.
    name: &'a str,
    source: &'a Source,
    /// Every deployment id the history uses.
    ids: &'a [String],
    options: Options,
}

/// Reopens every distinct crash state of `trace` (from `initial`, the image
/// of `cx.parent`) and checks it against `step`.
fn check_step(
    cx: &Ctx<'_>,
    initial: &Image,
    trace: &[Recorded],
    step: &Step<'_>,
    distinct: &mut Distinct,
) -> Tally {
    let Ctx {
        parent,
        name,
        source,
        ids,
        options,
    } = cx;
    let mut tally = Tally::default();
    let mut seen = HashSet::new();
    for (n, s) in crash_states_with(initial, trace, options).enumerate() {
        tally.states += 1;
        let d = digest(&s.image);
        distinct.insert_digest(d, s.torn > 0);
        let acknowledged = s.prefix == trace.len();
        if !seen.insert((d, acknowledged)) {
            continue;
        }
        tally.checked += 1;
        let ctx = format!(
            "{}: state {n} (prefix {} of {})",
            step.name,
            s.prefix,
            trace.len()
        );
        let scratch = tempfile::tempdir().unwrap();
        materialize(&s.image, parent, scratch.path()).unwrap();
        let root = scratch.path().join(name);
        let repo = DeploymentRepository::open(NoSync, &root, Arc::clone(source), Access::Write)
            .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        assert!(
            !root.join(PENDING_FILE).exists(),
            "{ctx}: pending debris kept"
        );
        let seen_state = state(&repo, ids);
        if acknowledged {
            assert_eq!(seen_state, step.after, "{ctx}: acknowledged state lost");
        } else {
            assert!(
                seen_state == step.before || seen_state == step.after,
                "{ctx}: {seen_state:?} is neither old {:?} nor new {:?}",
                step.before,
                step.after
            );
        }
        if seen_state == step.after && step.before != step.after {
            tally.new += 1;
            continue;
        }
        tally.old += 1;
        // Redo the interrupted mutation: it lands, and stays.
        if let (Some(req), true) = (step.req, step.before != step.after) {
            repo.mutate(req.clone())
                .unwrap_or_else(|e| panic!("{ctx}: retry failed: {e}"));
            assert_eq!(state(&repo, ids), step.after, "{ctx}: retry did not land");
            drop(repo);
            let again =
                DeploymentRepository::open(NoSync, &root, Arc::clone(source), Access::Write)
                    .unwrap_or_else(|e| panic!("{ctx}: reopen after retry: {e}"));
            assert_eq!(state(&again, ids), step.after, "{ctx}: retry not durable");
            tally.retried += 1;
        }
    }
    tally
}

/// The requests of the deep run's longer history.
fn deep_history(r: [Sha256; 2]) -> Vec<(String, Request)> {
    let ids: Vec<String> = (0..48).map(|i| format!("svc-{i:02}")).collect();
    let mut out = vec![(
        "batch of 48".to_string(),
        request(Mutation::ApplyMany {
            manifests: ids
                .iter()
                .enumerate()
                .map(|(i, id)| manifest(id, r[i % 2], 1))
                .collect(),
        }),
    )];
    // Object generations are tracked by the caller's model: expected None
    // (unconditional) keeps the history independent of stamps.
    for round in 0..4u32 {
        for (i, id) in ids.iter().enumerate() {
            out.push((
                format!("reweight {id} round {round}"),
                apply(id, r[i % 2], round + 2, None),
            ));
        }
    }
    for id in &ids {
        out.push((format!("delete {id}"), delete(id, None)));
    }
    out
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one history of one catalog in order: each step is traced from the disk the previous one left"
)]
fn every_crash_state_of_every_deployment_operation_recovers() {
    let options = Options::from_env().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (source, r) = releases(&base);
    let parent = base.join("dep");
    std::fs::create_dir(&parent).unwrap();
    let name = "d";
    let root = parent.join(name);
    let fs = RecordingFs::new(RealFs);
    let mut ids: Vec<String> = vec!["blue".into(), "green".into()];
    let mut requests: Vec<(String, Request)> = vec![
        ("apply blue".into(), apply("blue", r[0], 1, Some(0))),
        ("apply green".into(), apply("green", r[1], 1, Some(0))),
        (
            "conditional apply blue".into(),
            apply("blue", r[1], 3, Some(1)),
        ),
        (
            "stale conditional apply".into(),
            apply("green", r[0], 5, Some(1)),
        ),
        ("delete green".into(), delete("green", Some(2))),
    ];
    if options.is_deep() {
        let deep = deep_history(r);
        for (_, req) in &deep {
            if let Mutation::ApplyMany { manifests } = &req.mutation {
                ids.extend(manifests.iter().map(|m| m.id.clone()));
            }
        }
        requests.extend(deep);
    }
    let cx = Ctx {
        parent: &parent,
        name,
        source: &source,
        ids: &ids,
        options,
    };
    let mut protocols: BTreeMap<&'static str, Distinct> = BTreeMap::new();
    let mut total = Tally::default();
    let mut run = |initial: &Image, trace: &[Recorded], step: Step<'_>| {
        let distinct = protocols.entry(step.protocol).or_default();
        let t = check_step(&cx, initial, trace, &step, distinct);
        total.states += t.states;
        total.checked += t.checked;
        total.old += t.old;
        total.new += t.new;
        total.retried += t.retried;
        if step.before != step.after {
            assert!(t.new > 0, "{}: the new state is never reached", step.name);
        }
    };
    let snapshot = |p: &Path| {
        let mut image = image_of(p).unwrap();
        image.retain(|p, _| p.file_name().is_none_or(|n| n != LOCK_FILE));
        image
    };

    // The first open of a nonexistent root.
    let initial = snapshot(&parent);
    let empty = State {
        generation: 0,
        records: ids.iter().map(|id| (id.clone(), None)).collect(),
    };
    let repo =
        DeploymentRepository::open(fs.clone(), &root, Arc::clone(&source), Access::Write).unwrap();
    assert_eq!(state(&repo, &ids), empty);
    run(
        &initial,
        &fs.trace(),
        Step {
            name: "first open".into(),
            protocol: OPEN,
            req: None,
            before: empty.clone(),
            after: empty,
        },
    );

    // The mutations, each from the disk the previous one left.
    for (label, req) in &requests {
        let before = state(&repo, &ids);
        let initial = snapshot(&parent);
        fs.clear_trace();
        let result = repo.mutate(req.clone());
        let after = state(&repo, &ids);
        if label.starts_with("stale") {
            let e = result.unwrap_err();
            assert_eq!(e.reason(), "deployment-generation-conflict", "{e}");
            assert_eq!(after, before);
        } else {
            result.unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_ne!(after, before, "{label} changed nothing");
        }
        run(
            &initial,
            &fs.trace(),
            Step {
                name: label.clone(),
                protocol: MUTATION,
                req: Some(req),
                before,
                after,
            },
        );
    }

    // A reopen of the settled catalog.
    let settled = state(&repo, &ids);
    drop(repo);
    let initial = snapshot(&parent);
    fs.clear_trace();
    let repo =
        DeploymentRepository::open(fs.clone(), &root, Arc::clone(&source), Access::Write).unwrap();
    assert_eq!(state(&repo, &ids), settled);
    run(
        &initial,
        &fs.trace(),
        Step {
            name: "reopen".into(),
            protocol: OPEN,
            req: None,
            before: settled.clone(),
            after: settled,
        },
    );
    eprintln!(
        "deployment crash states: {} enumerated, {} checked ({} old, {} new, {} retried) over {} traces",
        total.states,
        total.checked,
        total.old,
        total.new,
        total.retried,
        requests.len() + 2
    );
    for (protocol, distinct) in &protocols {
        println!(
            "crash states {protocol}: {} distinct ({} torn), all recovered",
            distinct.len(),
            distinct.torn()
        );
    }
    let mutation = protocols.get(MUTATION).unwrap();
    assert!(mutation.torn() > 0, "no torn record state");
    if options.is_deep() {
        assert!(
            mutation.len() >= 10_000,
            "deep: {} distinct",
            mutation.len()
        );
    }
}
